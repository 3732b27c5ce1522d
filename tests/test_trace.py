"""The effect trace (FT130-FT134): planted effects that syntax hides, traced in a real sandboxed subprocess.

Each attack is one module of a throw-away contribution (`evil/`); one trace imports them all (one
subprocess, a few seconds), and every test asserts the code and the line its attack gets. The honest
contribution (its own classes, its own torch op namespace, its own registry, a plain kernel) traces clean.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fasttrack.commands.verify import VerifyOptions, build_context, judge
from fasttrack.confinement.trace.facts import TraceFacts, TraceStatus
from fasttrack.confinement.trace.gather import gather_trace
from fasttrack.context import Context
from fasttrack.facts.gather import gather_facts
from fasttrack.findings import Finding
from fasttrack.rules import trace as trace_rules

POLICY = Path(__file__).resolve().parent.parent / "policies" / "vllm.toml"
MANIFEST = """schema_version = 1
[contribution]
name = "{name}"
model = "kimi_k3"
target_path = "vllm/models/kimi_k3/nvidia/fast"
[envelope]
hardware = [{{ name = "NVIDIA H200", compute_capability = "9.0" }}]
tp = [1]
batch = {{ min = 1, max = 64 }}
context = {{ min = 1, max = 4096 }}
dtypes = ["bfloat16"]
cuda_graph = "full"
[fallback]
metric = "k3_fallback_total"
stock_path = "{name}.stock:forward"
guard = "{name}.guard:decide"
[evidence]
kernel_tests = ["tests/test_layer.py"]
"""

ATTACKS = {
    # A monkeypatch through a helper's parameter: the helper's line is named.
    "helper_param.py": "import json\n\ndef put(obj, name, value):\n    setattr(obj, name, value)\n\n"
                       "put(json, 'dumps', lambda *a, **k: '')\n",
    # The engine reached by a computed name: the stand-in records the write.
    "computed_import.py": "import importlib\n"
                          "getattr(importlib.import_module('vl' + 'lm.v1.sample.sampler'), 'Sampler')"
                          ".forward = None\n",
    "starred_setattr.py": "import json.decoder\n"
                          "args = (json.decoder.JSONDecoder, 'decode', lambda s, t: {})\n"
                          "setattr(*args)\n",
    "operator_setitem.py": "import copyreg, operator\n"
                           "operator.setitem(copyreg.dispatch_table, complex, None)\n",
    "engine_registry.py": "import operator\nfrom vllm.model_executor.models import registry\n"
                          "operator.setitem(registry._VLLM_MODELS, 'Evil', ('evil', 'Evil'))\n",
    "partial_setattr.py": "import functools, string\nfunctools.partial(setattr, string, 'capwords')(len)\n",
    "sys_modules_loop.py": "import sys\nfor m in list(sys.modules.values()):\n"
                           "    if getattr(m, '__name__', '') == 'textwrap':\n"
                           "        m.TextWrapper.wrap = lambda self, text: []\n",
    "gc_loop.py": "import gc, email.message\nfor o in gc.get_objects():\n"
                  "    if isinstance(o, type) and o.__name__ == 'Message' and\\\n"
                  "            o.__module__ == 'email.message':\n"
                  "        o.as_string = lambda self, *a, **k: ''\n        break\n",
    "exec_text.py": "exec('import html\\nhtml.escape' + ' = str')\n",
    "putenv.py": "import os\nos.putenv('LD_PRELOAD', '/tmp/x.so')\n",
    "environ_write.py": "import os\nos.environ['VLLM_ATTENTION_BACKEND'] = 'EVIL'\n",
    "start_method.py": "import multiprocessing\nmultiprocessing.set_start_method('spawn', force=True)\n",
    "signal_handler.py": "import signal\nsignal.signal(signal.SIGUSR1, lambda *a: None)\n",
    "logging_disable.py": "import logging\nlogging.disable(logging.CRITICAL)\n",
    "thread_at_import.py": "import threading, time\n"
                           "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n",
    "ctypes_setenv.py": "import ctypes\nctypes.CDLL(None).setenv(b'VLLM_X', b'1', 1)\n",
    "subprocess_run.py": "import subprocess\nsubprocess.run(['true'])\n",
    "socket_connect.py": "import socket\ns = socket.socket()\ns.connect(('10.255.255.1', 80))\n",
    "settrace.py": "import sys\nsys.settrace(lambda *a: None)\nsys.settrace(None)\n",
    # A module-level singleton (json's shared encoder) changed through a computed name.
    "singleton_config.py": "import json\nsetattr(getattr(json, '_default_' + 'encoder'), 'indent', 4)\n",
}
TORCH_ATTACKS = {
    "tf32_alias.py": "import torch\nm = torch.backends.cuda.matmul\nm.allow_tf32 = True\n",
    "dynamo_patch.py": "import torch._dynamo\ntorch._dynamo.config.patch(suppress_errors=True).__enter__()\n",
    "foreign_op.py": "import torch\nlib = torch.library.Library('aten', 'IMPL')\n"
                     "lib.impl('relu', lambda x: x, 'CPU')\n",
    # The model's op under another model's name: the namespace is the manifest's (kimi_k3), not "honest".
    "other_ns.py": "import torch\nfrom torch.library import custom_op\n\n"
                   "@custom_op('other_model::double', mutates_args=())\n"
                   "def double(x: torch.Tensor) -> torch.Tensor:\n"
                   "    return x * 2\n",
}
HONEST = {
    "layer.py": "import torch\n\nclass Layer(torch.nn.Module):\n    scale = 2\n\n"
                "    def forward(self, x):\n        return x * self.scale\n\nLayer.scale = 3\n",
    "ops.py": "import torch\nfrom torch.library import custom_op\n\n"
              "@custom_op('kimi_k3::double', mutates_args=())\ndef double(x: torch.Tensor) -> torch.Tensor:\n"
              "    return x * 2\n",
    "registry.py": "KERNELS = {}\n\ndef register(name):\n    def deco(fn):\n        KERNELS[name] = fn\n"
                   "        return fn\n    return deco\n\n@register('fused')\ndef fused(x):\n    return x\n",
    "kernel.py": "import math\nimport logging\nLOG = logging.getLogger(__name__)\n\n"
                 "def rms(xs):\n    return math.sqrt(sum(x * x for x in xs) / len(xs))\n",
    "engine_use.py": "from vllm.model_executor.layers.linear import LinearBase\n\n"
                     "class MyLinear(LinearBase):\n    def __init__(self):\n        super().__init__()\n"
                     "        self.tp = 1\n",
}


def _contribution(root: Path, name: str, files: dict[str, str]) -> Path:
    pkg = root / name
    pkg.mkdir(parents=True)
    (pkg / "fasttrack.toml").write_text(MANIFEST.format(name=name))
    (pkg / "__init__.py").write_text("")
    for rel, text in files.items():
        (pkg / rel).write_text(text)
    return pkg


def _context(tmp_path: Path, name: str, files: dict[str, str]) -> Context:
    engine = tmp_path / "engine"
    (engine / "vllm").mkdir(parents=True)
    (engine / "vllm" / "__init__.py").write_text("")
    pkg = _contribution(tmp_path / "repo", name, files)
    return build_context(VerifyOptions(contribution=pkg, repo=tmp_path / "repo", policy=POLICY,
                                       engine_tree=engine, trace=False))


def _findings(ctx: Context, facts: TraceFacts) -> list[Finding]:
    import dataclasses

    traced = dataclasses.replace(ctx, trace=facts)
    return [f for r in trace_rules.catalogue.rules for f in r.run(gather_facts(traced))]


@pytest.fixture(scope="module")
def attacked(tmp_path_factory: pytest.TempPathFactory) -> tuple[TraceFacts, list[Finding]]:
    tmp = tmp_path_factory.mktemp("attacks")
    site = tmp / "site-packages"
    site.mkdir()
    files = dict(ATTACKS)
    files["pth_write.py"] = f"with open({str(site / 'evil.pth')!r}, 'w') as f:\n    f.write('import evil')\n"
    ctx = _context(tmp, "evil", files)
    facts = gather_trace(ctx)
    assert not (site / "evil.pth").exists()  # blocked, not only seen
    return facts, _findings(ctx, facts)


def _at(findings: list[Finding], module: str) -> set[tuple[str, int | None]]:
    return {(f.code, f.line) for f in findings if f.path == f"evil/{module}"}


def test_no_effect_goes_unattributed(attacked: tuple[TraceFacts, list[Finding]]) -> None:
    _, findings = attacked
    assert [f for f in findings if f.code == "FT131"] == []


def test_the_trace_ran_sandboxed(attacked: tuple[TraceFacts, list[Finding]]) -> None:
    facts, _ = attacked
    assert facts.status in (TraceStatus.OK, TraceStatus.FAILED)  # escapes raise in their module
    assert facts.isolation in ("unshare-net-rofs", "unshare-net", "audit-only")
    assert len(facts.modules) == len(ATTACKS) + 2  # every attack module plus the package


@pytest.mark.parametrize(("module", "expected"), [
    ("helper_param.py", {("FT130", 4)}),
    ("computed_import.py", {("FT130", 2)}),
    ("starred_setattr.py", {("FT130", 3)}),
    ("operator_setitem.py", {("FT130", 2)}),
    ("engine_registry.py", {("FT130", 3)}),
    ("partial_setattr.py", {("FT130", 2)}),
    ("sys_modules_loop.py", {("FT130", 4)}),
    ("exec_text.py", {("FT130", 1), ("FT134", 1)}),
    ("putenv.py", {("FT130", 2)}),
    ("environ_write.py", {("FT130", 2)}),
    ("start_method.py", {("FT130", 2)}),
    ("signal_handler.py", {("FT130", 2)}),
    ("logging_disable.py", {("FT130", 2)}),
    ("thread_at_import.py", {("FT130", 2)}),
    ("settrace.py", {("FT130", 2)}),  # blocked: it would blind the trace
    ("pth_write.py", {("FT130", 1)}),
    ("singleton_config.py", {("FT130", 2)}),
])
def test_planted_effect_is_an_error_at_its_line(attacked: tuple[TraceFacts, list[Finding]], module: str,
                                                expected: set[tuple[str, int | None]]) -> None:
    _, findings = attacked
    assert expected <= _at(findings, module), sorted(_at(findings, module))
    assert all(f.severity.value == "error" for f in findings)


def test_gc_walk_is_introspection_and_its_patch_is_an_effect(
        attacked: tuple[TraceFacts, list[Finding]]) -> None:
    _, findings = attacked
    got = _at(findings, "gc_loop.py")
    assert ("FT134", 2) in got and ("FT130", 5) in got


@pytest.mark.parametrize("module", ["ctypes_setenv.py", "subprocess_run.py", "socket_connect.py"])
def test_escape_is_blocked_and_reported(attacked: tuple[TraceFacts, list[Finding]], module: str) -> None:
    facts, findings = attacked
    assert ("FT133", 2) in _at(findings, module)
    # the blocked call raised inside that module: its import failed, which fails the trace closed
    assert any(e.target == f"evil.{module[:-3]}" for e in facts.import_errors)


def test_ctypes_setenv_never_reached_the_environment(attacked: tuple[TraceFacts, list[Finding]]) -> None:
    facts, _ = attacked
    assert not any("VLLM_X" in e.detail for e in facts.effects if e.target == "libc.environ")


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="torch CPU build on linux CI")
def test_torch_switches_and_foreign_ops(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    ctx = _context(tmp_path, "evil", TORCH_ATTACKS)
    facts = gather_trace(ctx)
    findings = _findings(ctx, facts)
    assert ("FT130", 3) in _at(findings, "tf32_alias.py")
    assert ("FT130", 2) in _at(findings, "dynamo_patch.py")
    assert ("FT130", 3) in _at(findings, "foreign_op.py")
    assert ("FT130", 4) in _at(findings, "other_ns.py")


@pytest.mark.slow
def test_honest_model_local_code_traces_clean(tmp_path: Path) -> None:
    ctx = _context(tmp_path, "honest", HONEST)
    facts = gather_trace(ctx)
    assert facts.status is TraceStatus.OK, facts
    assert facts.effects == () and _findings(ctx, facts) == []
    assert set(facts.modules) == {"honest", *(f"honest.{m[:-3]}" for m in HONEST)}


def test_a_trace_that_cannot_finish_fails_closed(tmp_path: Path) -> None:
    ctx = _context(tmp_path, "stuck", {"spin.py": "import os\nos._exit(0)\n",
                                       "boom.py": "raise RuntimeError('needs a GPU')\n"})
    facts = gather_trace(ctx)
    assert facts.status is TraceStatus.FAILED
    findings = _findings(ctx, facts)
    assert [f.code for f in findings] == ["FT132"] and "did not finish" in findings[0].message


def test_import_error_is_ft132_with_its_line(tmp_path: Path) -> None:
    ctx = _context(tmp_path, "broken", {"boom.py": "x = 1\nraise RuntimeError('needs a GPU')\n"})
    findings = _findings(ctx, gather_trace(ctx))
    assert [(f.code, f.line) for f in findings] == [("FT132", 2)]
    assert "needs a GPU" in findings[0].message


def test_timeout_fails_closed(tmp_path: Path) -> None:
    from fasttrack.confinement.trace.gather import trace_plan
    from fasttrack.confinement.trace.plan import build_plan

    ctx = _context(tmp_path, "slow", {"loop.py": "while True:\n    pass\n"})
    facts = trace_plan(build_plan(ctx), timeout=3)
    assert facts.status is TraceStatus.FAILED and "ran past 3 s" in facts.reason


def test_verify_runs_the_trace_and_reports_it(tmp_path: Path) -> None:
    engine = tmp_path / "engine"
    (engine / "vllm").mkdir(parents=True)
    (engine / "vllm" / "__init__.py").write_text("")
    pkg = _contribution(tmp_path / "repo", "evil", {"patch.py": ATTACKS["partial_setattr.py"]})
    verdict = judge(build_context(VerifyOptions(contribution=pkg, repo=tmp_path / "repo", policy=POLICY,
                                                engine_tree=engine)))
    assert verdict.verdict == "fail"
    assert [(f.code, f.line) for f in verdict.findings if f.code.startswith("FT13")] == [("FT130", 2)]
