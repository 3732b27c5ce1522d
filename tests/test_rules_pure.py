"""Rules are pure functions of the facts (issue 17 item 2): every read is done by the facts stage.

Two guards, each with its attack:
- at run time, every rule runs over both inputs of its fixture pair (`test_rule_pairs.PAIRS`) with file
  reads, stats, directory listings, process starts and sockets patched to raise: no rule may call one,
  and each says exactly what it said with I/O allowed. A rule that reads the head tree itself is caught.
- statically, the import contract "rules do no I/O" (pyproject.toml, `lint-imports`) forbids the rules
  package to import os, pathlib, subprocess, ... and the loaders; a rule module importing subprocess
  breaks it.
"""

from __future__ import annotations

import builtins
import io
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import test_rule_pairs as rp

from fasttrack.facts.gather import gather_facts
from fasttrack.facts.model import Facts
from fasttrack.findings import Finding
from fasttrack.rules.base import Rule

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

# (module, attribute) of every call that reads or lists the disk, starts a process or opens a socket.
IO_CALLS = [(builtins, "open"), (io, "open"), (os, "open"), (os, "stat"), (os, "lstat"), (os, "scandir"),
            (os, "listdir"), (os, "readlink"), (os, "access"), (os, "posix_spawn"), (os, "fork"),
            (os, "system"), (subprocess, "Popen"), (socket, "socket")]

# The one known reader below the rules: `fasttrack.evidence.analysis.rel` resolves an evidence path
# (lstat on its components) to label findings; evidence/ is the digest-bound harness, not edited here.
KNOWN = (("rel", f"fasttrack{os.sep}evidence{os.sep}analysis.py"),)


class RuleDidIO(OSError):
    pass


def _known(frame: FrameType | None) -> bool:
    while frame is not None:
        code = frame.f_code
        if any(code.co_name == name and code.co_filename.endswith(path) for name, path in KNOWN):
            return True
        frame = frame.f_back
    return False


@contextmanager
def no_io(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Patch every I/O call to record itself and raise (the known reader above passes through)."""
    calls: list[str] = []

    def guard(name: str, real: Any) -> Any:
        def patched(*args: object, **kwargs: object) -> object:
            if _known(sys._getframe(1)):
                return real(*args, **kwargs)
            calls.append(f"{name}{args[:1]!r}")
            raise RuleDidIO(f"a rule called {name}")
        return patched

    with monkeypatch.context() as m:
        for module, attr in IO_CALLS:
            if hasattr(module, attr):
                m.setattr(module, attr, guard(f"{module.__name__}.{attr}", getattr(module, attr)))
        yield calls


def _key(found: list[Finding]) -> list[tuple[object, ...]]:
    return [(f.code, f.severity, f.path, f.line, f.message, f.fix) for f in found]


def _pure_run(rule: Rule, facts: Facts, monkeypatch: pytest.MonkeyPatch) -> None:
    allowed = rule.run(facts)
    with no_io(monkeypatch) as calls:
        patched = rule.run(facts)
    assert calls == [], f"{rule.code} did I/O while judging: {calls}"
    assert _key(patched) == _key(allowed), f"{rule.code} says something else without I/O"


CODES = sorted(c for c in rp.PAIRS if c in rp.RULES)


@pytest.mark.parametrize("code", CODES)
def test_every_rule_judges_its_fixture_pair_without_io(code: str, tmp_path: Path, isolated_cache: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pair = rp.PAIRS[code]
    if pair.needs_ssh_keygen and not rp.HAVE_SSH_KEYGEN:
        pytest.skip("needs ssh-keygen (openssh-client)")
    for side, build in (("pass", pair.passing), ("fail", pair.failing)):
        facts = gather_facts(build(tmp_path / side))
        _pure_run(rp.RULES[code], facts, monkeypatch)


def test_a_rule_that_reads_the_head_tree_is_caught(tmp_path: Path, isolated_cache: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: a rule reading a changed file from disk itself instead of from the facts."""
    def reads_itself(ctx: Facts) -> Iterator[Finding]:
        for c in ctx.changes:
            if (ctx.head_dir / c.path).read_text() == "":
                yield Finding.error("FT999", f"{c.path} is empty")

    facts = gather_facts(rp.PAIRS["FT101"].failing(tmp_path))
    sneaky = Rule(code="FT999", summary="reads the disk", check=reads_itself)
    with no_io(monkeypatch) as calls:
        found = sneaky.run(facts)
    assert calls and "open" in calls[0]
    assert [f.message for f in found] == [f.message for f in found if "crashed" in f.message] != []


def test_the_same_rule_reading_the_facts_is_pure(tmp_path: Path, isolated_cache: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The honest twin: the same check through `Facts.head_text`."""
    def reads_facts(ctx: Facts) -> Iterator[Finding]:
        for c in ctx.changes:
            if ctx.head_text(c.path) == "":
                yield Finding.error("FT999", f"{c.path} is empty")

    facts = gather_facts(rp.PAIRS["FT101"].failing(tmp_path))
    _pure_run(Rule(code="FT999", summary="reads the facts", check=reads_facts), facts, monkeypatch)


def test_a_head_file_the_facts_stage_did_not_read_fails_closed(tmp_path: Path, isolated_cache: Path) -> None:
    """A rule asking for a path no loader read crashes (an error finding), never reads it as absent."""
    facts = gather_facts(rp.PAIRS["FT101"].failing(tmp_path))
    rule = Rule(code="FT999", summary="asks for an ungathered path",
                check=lambda ctx: [Finding.error("FT999", "x")] if ctx.head_text("no/such.py") is None
                else [])
    (found,) = rule.run(facts)
    assert "crashed" in found.message and "did not read" in found.message


def test_rules_read_facts_not_a_bare_context(tmp_path: Path, isolated_cache: Path) -> None:
    ctx = rp.PAIRS["FT101"].failing(tmp_path)
    with pytest.raises(TypeError, match="reads Facts"):
        rp.RULES["FT101"].run(ctx)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ the import contract

def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--contract", "rules-no-io"], cwd=root,
                          env=env, capture_output=True, text=True, check=False, timeout=300)


needs_lint_imports = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="needs import-linter")


@needs_lint_imports
def test_the_rules_import_contract_holds() -> None:
    proc = _lint_imports(REPO)
    assert proc.returncode == 0 and "rules do no I/O KEPT" in proc.stdout, proc.stdout[-2000:]


@needs_lint_imports
def test_a_rule_importing_subprocess_breaks_the_contract(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    shutil.copytree(REPO / "fasttrack", root / "fasttrack", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    trace = root / "fasttrack" / "rules" / "trace.py"
    trace.write_text(trace.read_text() + "\nimport subprocess  # noqa: E402\n")
    proc = _lint_imports(root)
    assert proc.returncode != 0 and "fasttrack.rules.trace -> subprocess" in proc.stdout, proc.stdout[-2000:]
