"""Issue 16, second round: hostile inputs that still broke the error contract (exit 2, one line)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ft(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    import os

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "fasttrack", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("kind", ["toml-deep-array", "toml-deep-table"])
def test_a_toml_bomb_policy_is_bad_input_not_a_bug(kind: str, tmp_path: Path) -> None:
    """Attack: a policy (or manifest) of deeply nested arrays/inline tables; tomllib recurses until
    RecursionError, which was reported as an internal error (exit 3)."""
    bomb = tmp_path / "policy.toml"
    n = 50_000
    body = "[" * n + "]" * n if kind == "toml-deep-array" else "{a=" * n + "1" + "}" * n
    bomb.write_text(f"a = {body}\n", encoding="utf-8")
    proc = _ft("verify", "--policy", str(bomb))
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "policy.toml" in proc.stderr, proc.stderr


def test_a_deeply_nested_json_input_is_bad_input(tmp_path: Path) -> None:
    from fasttrack.errors import InputError
    from fasttrack.loading import load_json_model
    from fasttrack.verdict import Verdict

    deep = tmp_path / "v.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(InputError, match="nest"):
        load_json_model(deep, Verdict, "verdict")
