"""Hostile review of the confinement, round 7: in a file `fasttrack collect` runs (the contribution's
benchmark, tests, evals), ways of reaching the evidence harness's records that the escape scan could not
follow: frames read through `.f_locals`, `inspect.stack()`, a module handed to a helper (`f(gc)`), names
picked at run time (`importlib.import_module(name)`, `operator.methodcaller(...)`), `sys.modules` walked.
Each attack marks the line its error must point at with `# <-`; honest twins stay clean."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from test_escapes import POLICY, make_ctx, run_all

from fasttrack.findings import Severity
from fasttrack.policy import Policy, load_policy

BENCH = "vllm/models/kimi_k3/benchmarks/bench.py"
ROOT = "vllm/models/kimi_k3"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(POLICY)

ATTACKS: list[tuple[str, str]] = [
    ("caller-frame-locals", """
import sys
def candidates(baseline, point):
    for obj in sys._getframe(1).f_locals.values():  # <-
        obj.samples_us = []
"""),
    ("inspect-stack", """
import inspect
def candidates(baseline, point):
    for fr in inspect.stack():  # <-
        fr.frame.f_locals["result"].samples_us = []
"""),
    ("traceback-frame", """
def candidates(baseline, point):
    try:
        raise RuntimeError
    except RuntimeError as e:
        e.__traceback__.tb_frame.f_back.f_locals["result"].fused = 0  # <-
"""),
    ("module-handed-to-a-helper", """
import gc
def _walk(m):
    return m.get_objects()
def candidates(baseline, point):
    for obj in _walk(gc):  # <-
        obj.samples_us = []
"""),
    ("computed-import-module", """
import importlib
def candidates(baseline, point):
    for obj in importlib.import_module("g" + "c").get_objects():  # <-
        obj.samples_us = []
"""),
    ("computed-dunder-import", """
def candidates(baseline, point):
    for obj in __import__("".join(["g", "c"])).get_objects():  # <-
        obj.samples_us = []
"""),
    ("methodcaller", """
import gc, operator
def candidates(baseline, point):
    for obj in operator.methodcaller("get_" + "objects")(gc):  # <-
        obj.samples_us = []
"""),
    ("sys-modules-walk", """
import sys
def candidates(baseline, point):
    for m in list(sys.modules.values()):  # <-
        if m.__name__ == "g" + "c":
            m.callbacks.append(print)
"""),
    ("gc-garbage", """
import gc
def candidates(baseline, point):
    for obj in gc.garbage:  # <-
        obj.samples_us = []
"""),
    ("computed-getattr-on-gc", """
import gc
N = "get_" + "obj" + "ects"
def candidates(baseline, point):
    for obj in getattr(gc, N)():  # <-
        obj.samples_us = []
"""),
]


def _errors(tmp_path: Path, policy: Policy, src: str, path: str = BENCH) -> list[tuple[str, int]]:
    ctx = make_ctx(tmp_path, policy, {path: src}, contribution_dir=ROOT)
    return [(f.code, f.line or 0) for f in run_all(ctx) if f.path == path and f.severity == Severity.ERROR]


@pytest.mark.parametrize(("name", "src"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_reaching_the_harness_in_a_collected_file_is_an_error(
        tmp_path: Path, policy: Policy, name: str, src: str) -> None:
    text = textwrap.dedent(src)
    want = [i for i, line in enumerate(text.splitlines(), start=1) if "# <-" in line]
    errors = _errors(tmp_path, policy, text)
    assert {line for _, line in errors} >= set(want), (name, errors)
    assert any(code in ("FT120", "FT146") for code, _ in errors)


HONEST = """
import gc
import importlib
import inspect
import sys
import torch

STOCK = [importlib.import_module(f"baselines.vllm.kimi_k3.stock_ops.{m}") for m in ("norms", "moe")]
JSON = importlib.import_module("json")
HAVE_TRITON = "triton" in sys.modules
TRITON = sys.modules.get("triton")


def candidates(baseline, point, names):
    gc.collect()
    gc.disable()
    try:
        params = inspect.signature(baseline).parameters
        out = {n: getattr(point, n) for n in names}
        return torch.stack([torch.zeros(1)]), params, out
    finally:
        gc.enable()
"""


def test_honest_benchmark_calls_stay_clean(tmp_path: Path, policy: Policy) -> None:
    # Honest twin: the collector's switches, a signature, a literal or package-fixed import, a named lookup
    # in sys.modules and a getattr on its own object reach nothing of the harness.
    assert _errors(tmp_path, policy, HONEST) == []


def test_a_test_file_fasttrack_does_not_collect_is_not_raised(tmp_path: Path, policy: Policy) -> None:
    # Honest twin: outside the contribution's directory the harness does not run the file: a module handed
    # to a helper is no finding there.
    other = "tests/models/kimi_k3/test_gc.py"
    src = "import gc\n\ndef test_walk():\n    assert isinstance(len(vars(gc)), int)\n"
    assert _errors(tmp_path, policy, src, path=other) == []
