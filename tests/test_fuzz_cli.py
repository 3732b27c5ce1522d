"""Hypothesis over everything a hostile contributor controls, through the real entry point in-process:
manifests, policies, evidence statements, verdicts, file names and trees (symlinks anywhere, FIFOs, huge
sparse files, bytes that are not UTF-8, names with controls).

The contract, for every example: exit 0, 1 or 2 (never 3, a bug; never anything else), no traceback, an
exit 2 is one line, no hang (each example is cut off by SIGALRM after EXAMPLE_SECONDS) and memory stays
bounded (the process's peak RSS grows by less than MAX_RSS_GROWTH_MIB over a whole campaign).

CI runs few examples (the `fasttrack-ci` profile, about 40 s for the file); set FASTTRACK_FUZZ_EXAMPLES for
a longer local campaign, e.g. `FASTTRACK_FUZZ_EXAMPLES=500 pytest tests/test_fuzz_cli.py`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from git_helpers import k3_manifest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fasttrack import cli

EXAMPLES = int(os.environ.get("FASTTRACK_FUZZ_EXAMPLES", "12"))
EXAMPLE_SECONDS = 20
MAX_RSS_GROWTH_MIB = 512
settings.register_profile("fasttrack-ci", max_examples=EXAMPLES, deadline=None, derandomize=False,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SETTINGS = settings.get_profile("fasttrack-ci")

REPO = Path(__file__).resolve().parent.parent
POLICY = REPO / "policies" / "vllm.toml"
MANIFEST = k3_manifest('kimi_k3')
ENGINE = {"vllm/__init__.py": "", "vllm/models/__init__.py": "", "vllm/models/kimi_k3/__init__.py": "",
          "vllm/v1/__init__.py": "", "vllm/v1/sampler.py": "def sample():\n    return 0\n"}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("FASTTRACK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FASTTRACK_ENGINE_TREE", raising=False)
    monkeypatch.delenv("FASTTRACK_DEBUG", raising=False)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    yield
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown < MAX_RSS_GROWTH_MIB, f"peak RSS grew by {grown:.0f} MiB"


def _expired(signum: int, frame: object) -> None:
    raise TimeoutError(f"an example ran over {EXAMPLE_SECONDS} s (a read blocked or never ended)")


@contextlib.contextmanager
def alarm() -> Iterator[None]:
    """Cut off whatever runs inside after EXAMPLE_SECONDS with a TimeoutError (SIGALRM)."""
    old = signal.signal(signal.SIGALRM, _expired)
    signal.alarm(EXAMPLE_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run(*args: str, ok: tuple[int, ...] = (0, 1, 2)) -> tuple[int, str]:
    """`fasttrack ARGS` in-process under the contract: (exit code, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with alarm(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli._run(list(args), debug=False)
    text = err.getvalue()
    assert code in ok, f"exit {code} for {args}: {text}"
    assert "Traceback" not in text, text
    if code == 2:
        assert len(text.strip().splitlines()) == 1, text
        assert text.startswith("fasttrack: error: "), text
    return code, text


def contribution(root: Path, manifest: str = MANIFEST) -> Path:
    contrib = root / "kimi_k3"
    contrib.mkdir(parents=True)
    (contrib / "fasttrack.toml").write_text(manifest, encoding="utf-8", errors="surrogateescape")
    (contrib / "layer.py").write_text("def fused():\n    return 1\n")
    return contrib


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="ft-fuzz-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _engine(root: Path) -> Path:
    tree = root / "engine"
    for rel, text in ENGINE.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    return tree


# ------------------------------------------------------------------------------------------ strategies

toml_values = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str), st.floats(allow_nan=True).map(repr),
    st.text(max_size=30).map(json.dumps), st.sampled_from(["true", "[]", "{}", "[1, 2]", '"x"', "inf", "nan",
                                                            "1979-05-27", "{ min = 9, max = 1 }"]),
)


def _mutated(text: str, data: st.DataObject) -> str:
    """A line of `text` replaced, deleted, duplicated, or given a new value; or raw text appended."""
    lines = text.splitlines()
    i = data.draw(st.integers(0, len(lines) - 1))
    how = data.draw(st.sampled_from(["value", "delete", "dup", "raw", "key"]))
    if how == "value" and "=" in lines[i]:
        lines[i] = lines[i].split("=", 1)[0] + "= " + data.draw(toml_values)
    elif how == "delete":
        del lines[i]
    elif how == "dup":
        lines.insert(i, lines[i])
    elif how == "key":
        key = data.draw(st.from_regex(r"[a-z_]{1,12}", fullmatch=True))
        lines.insert(i, f"{key} = {data.draw(toml_values)}")
    else:
        lines.insert(i, data.draw(st.text(max_size=40)))
    return "\n".join(lines) + "\n"


names = st.one_of(
    st.text(st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)), min_size=1, max_size=24),
    st.binary(min_size=1, max_size=24).filter(lambda b: b"/" not in b and b"\0" not in b),
).filter(lambda n: n not in (".", "..", b".", b"..", "fasttrack.toml", b"fasttrack.toml"))
kinds = st.sampled_from(["text", "bytes", "sparse", "fifo", "link-dev", "link-out", "link-loop", "link-in",
                         "dir"])


def _add_entry(contrib: Path, name: str | bytes, kind: str, payload: bytes) -> None:
    raw = os.fsencode(contrib) + b"/" + (name if isinstance(name, bytes) else os.fsencode(name))
    if os.path.lexists(raw):
        return  # a name drawn twice: never open what is there (writing to a FIFO blocks the test itself)
    try:
        if kind == "text":
            with open(raw, "wb") as fh:
                fh.write(payload.decode("latin-1").encode("utf-8"))
        elif kind == "bytes":
            with open(raw, "wb") as fh:
                fh.write(payload)
        elif kind == "sparse":
            with open(raw, "wb") as fh:
                fh.truncate(1 << 28)  # 256 MiB of holes (tests/test_hostile_input.py has 3 GiB)
        elif kind == "fifo":
            os.mkfifo(raw)
        elif kind == "link-dev":
            os.symlink(b"/dev/zero", raw)
        elif kind == "link-out":
            os.symlink(b"../../../../etc/passwd", raw)
        elif kind == "link-loop":
            os.symlink(raw, raw)
        elif kind == "link-in":
            os.symlink(b"layer.py", raw)
        else:
            os.mkdir(raw)
    except (FileExistsError, OSError):
        pass  # a name the file system refuses (too long, taken): the tree is what it is


# ----------------------------------------------------------------------------------------- campaigns


@SETTINGS
@given(data=st.data())
def test_fuzz_manifests(data: st.DataObject) -> None:
    text = data.draw(st.one_of(st.text(max_size=200), st.just(MANIFEST).map(lambda t: t)))
    if data.draw(st.booleans()):
        text = _mutated(MANIFEST, data)
    with scratch() as root:
        run("verify", str(contribution(root, text)), "--policy", str(POLICY), "-f", "json", "-o",
            str(root / "v.json"))


@SETTINGS
@given(data=st.data())
def test_fuzz_policies(data: st.DataObject) -> None:
    policy_text = POLICY.read_text()
    text = _mutated(policy_text, data) if data.draw(st.booleans()) else data.draw(st.text(max_size=200))
    with scratch() as root:
        policy = root / "policy.toml"
        policy.write_text(text, encoding="utf-8", errors="surrogateescape")
        run("verify", str(contribution(root)), "--policy", str(policy), "-q")


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
    lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=10), c, max_size=4)),
    max_leaves=20,
)


@SETTINGS
@given(doc=st.one_of(json_values.map(json.dumps), st.binary(max_size=300).map(lambda b: b.decode("latin-1"))),
       name=st.sampled_from(["statement.json", "statement.tp2.json", "other.json", "statement.json.sig"]))
def test_fuzz_statements(doc: str, name: str) -> None:
    with scratch() as root:
        contrib = contribution(root)
        bundle = root / "evidence"
        bundle.mkdir()
        (bundle / name).write_text(doc, encoding="utf-8", errors="surrogateescape")
        run("verify", str(contrib), "--policy", str(POLICY), "--evidence", str(bundle), "-f", "markdown")


@SETTINGS
@given(data=st.data())
def test_fuzz_verdicts(data: st.DataObject) -> None:
    good = {"tool_version": "0", "verdict": "pass", "mode": "contribution", "generated_at": "2026-01-01",
            "model": "kimi_k3", "contribution": "kimi_k3", "findings": [], "changed_files": []}
    doc: object = dict(good)
    assert isinstance(doc, dict)
    for _ in range(data.draw(st.integers(0, 3))):
        doc[data.draw(st.sampled_from([*good, "findings", "changed_files", "evidence", "x"]))] = \
            data.draw(json_values)
    if data.draw(st.booleans()):
        doc["findings"] = [{"code": "FT101", "severity": "error", "message": data.draw(st.text(max_size=20)),
                            "path": data.draw(st.text(max_size=20))}]
    with scratch() as root:
        verdict = root / "v.json"
        verdict.write_text(json.dumps(doc), encoding="utf-8")
        code, _ = run("report", "--verdict", str(verdict), "-o", str(root / "site"), ok=(0, 2))
        if code == 0:
            assert (root / "site" / "index.html").is_file()


@SETTINGS
@given(entries=st.lists(st.tuples(names, kinds, st.binary(max_size=64)), min_size=1, max_size=4),
       fmt=st.sampled_from(["text", "json", "markdown", "sarif"]))
def test_fuzz_trees(entries: list[tuple[str | bytes, str, bytes]], fmt: str) -> None:
    with scratch() as root:
        contrib = contribution(root)
        with alarm():  # the set-up too: a hang there is the harness's, and must not stall CI either
            for name, kind, payload in entries:
                _add_entry(contrib, name, kind, payload)
        code, _ = run("verify", str(contrib), "--policy", str(POLICY), "--engine-tree", str(_engine(root)),
                      "-f", fmt, "-o", str(root / "out"))
        if code in (0, 1):
            text = (root / "out").read_bytes().decode("utf-8")  # always written, always valid UTF-8
            if fmt in ("json", "sarif"):
                json.loads(text)
