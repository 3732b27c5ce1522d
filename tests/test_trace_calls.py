"""The trace calls the manifest's entry points (issue 15): `[trace] smoke` and the guard at envelope points.

A patch made only when a function runs is invisible to a trace that only imports: the attack contribution
patches inside its smoke callable (FT130 at that line), raises there afterwards (FT138 at the raise) and
ships a guard that answers fused everywhere (FT138 for every point outside the envelope). The honest twin
(a smoke that computes, a guard that follows the envelope) traces clean. FT212: a manifest without
`[trace]` is a finding (fail closed), one with it is not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fasttrack.commands.verify import VerifyOptions, build_context
from fasttrack.confinement.trace.facts import TraceFacts
from fasttrack.confinement.trace.gather import gather_trace
from fasttrack.context import Context
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Finding
from fasttrack.rules import envelope
from tests.escape_marks import marked_lines
from tests.test_trace import MANIFEST, POLICY, _findings

TRACE_TABLE = '[trace]\nsmoke = "{name}.smoke:run"\nguard_input = "{name}.smoke:meta"\n'

ATTACK = {
    "smoke.py": "import json\n\n\ndef run():\n    json.dumps = repr  # <-\n    helper()\n\n\n"
                "def helper():\n    raise RuntimeError('boom')  # <-\n\n\n"
                "def meta(point):\n    return dict(point)\n",
    # a guard that says fused everywhere: outside the envelope the stock path never runs
    "guard.py": "def decide(meta, fused_available=True):\n    return (True, None)\n",
}
HONEST = {
    "smoke.py": "import json\n\n\ndef run():\n"
                "    out = json.dumps({'rows': [sum(range(n)) for n in range(8)]})\n"
                "    assert json.loads(out)['rows'][3] == 3\n\n\n"
                "def meta(point):\n    return dict(point)\n",
    "guard.py": "from typing import NamedTuple\n\n\nclass Decision(NamedTuple):\n    use_fused: bool\n"
                "    reason: str | None\n\n\n"
                "def decide(meta, fused_available=True):\n"
                "    inside = meta['tp'] == 1 and 1 <= meta['batch'] <= 64 and 1 <= meta['context'] <= 4096\n"
                "    return Decision(inside, None if inside else 'envelope')\n",
}


def _ctx(tmp: Path, name: str, files: dict[str, str], trace_table: bool = True) -> Context:
    engine = tmp / "engine"
    (engine / "vllm").mkdir(parents=True)
    (engine / "vllm" / "__init__.py").write_text("")
    pkg = tmp / "repo" / name
    pkg.mkdir(parents=True)
    manifest = MANIFEST.format(name=name) + (TRACE_TABLE.format(name=name) if trace_table else "")
    (pkg / "fasttrack.toml").write_text(manifest)
    (pkg / "__init__.py").write_text("")
    for rel, text in files.items():
        (pkg / rel).write_text(text)
    return build_context(VerifyOptions(contribution=pkg, repo=tmp / "repo", policy=POLICY, engine_tree=engine,
                                       trace=False))


@pytest.fixture(scope="module")
def attacked(tmp_path_factory: pytest.TempPathFactory) -> tuple[TraceFacts, list[Finding]]:
    ctx = _ctx(tmp_path_factory.mktemp("calls-attack"), "evilc", ATTACK)
    facts = gather_trace(ctx)
    return facts, _findings(ctx, facts)


@pytest.mark.slow
def test_a_patch_made_only_when_called_is_an_error(attacked: tuple[TraceFacts, list[Finding]]) -> None:
    _, findings = attacked
    patch = marked_lines(ATTACK["smoke.py"])[0]
    assert ("FT130", patch) in {(f.code, f.line) for f in findings if f.path == "evilc/smoke.py"}, findings


@pytest.mark.slow
def test_a_smoke_that_raises_is_ft138_at_its_line(attacked: tuple[TraceFacts, list[Finding]]) -> None:
    _, findings = attacked
    raised = marked_lines(ATTACK["smoke.py"])[1]
    assert ("FT138", "evilc/smoke.py", raised) in {(f.code, f.path, f.line) for f in findings}, findings


@pytest.mark.slow
def test_a_guard_that_answers_fused_outside_is_ft138(attacked: tuple[TraceFacts, list[Finding]]) -> None:
    facts, findings = attacked
    wrong = {c.name for c in facts.calls if not c.ok}
    assert {"guard outside (batch)", "guard outside (context)", "guard outside (tp)"} <= wrong, facts.calls
    assert "guard inside" not in wrong
    assert sum(f.code == "FT138" and "guard outside" in f.message for f in findings) == 3


@pytest.mark.slow
def test_honest_calls_trace_clean(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, "honestc", HONEST)
    facts = gather_trace(ctx)
    assert [c.name for c in facts.calls] == ["smoke", "guard inside", "guard outside (batch)",
                                             "guard outside (context)", "guard outside (tp)"]
    assert all(c.ok for c in facts.calls), facts.calls
    assert _findings(ctx, facts) == []


def test_a_manifest_without_trace_calls_is_ft212(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path / "a", "nocalls", HONEST, trace_table=False)
    assert [f.code for f in envelope.trace_calls(gather_facts(ctx))] == ["FT212"]
    ctx = _ctx(tmp_path / "b", "calls", HONEST)
    assert list(envelope.trace_calls(gather_facts(ctx))) == []
    # a [trace] that names a callable the module does not define
    ctx = _ctx(tmp_path / "c", "norun", {**HONEST, "smoke.py": "def meta(point):\n    return point\n"})
    assert [f.code for f in envelope.trace_calls(gather_facts(ctx))] == ["FT212"]
