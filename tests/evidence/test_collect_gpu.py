"""`fasttrack collect` on a real GPU over the toy contribution: every phase, compute-sanitizer included.

Skipped without CUDA (a skip is not a pass). With FASTTRACK_GPU_OUT set, the bundle is copied there.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from collect_toy import make_toy  # noqa: E402

from fasttrack.evidence.collect import CollectOptions, NullProgress, collect  # noqa: E402
from fasttrack.evidence.loader import load_evidence  # noqa: E402
from fasttrack.evidence.sanitizer import find_sanitizer  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_collect_on_this_gpu(tmp_path: Path) -> None:
    name = torch.cuda.get_device_name(0)
    major, minor = torch.cuda.get_device_capability(0)
    toy = make_toy(tmp_path, name, f"{major}.{minor}")
    timeout = float(os.environ.get("FASTTRACK_SANITIZER_TIMEOUT", "120"))
    opts = CollectOptions(contribution=toy, out=tmp_path / "evidence" / "toy", work_dir=tmp_path / "work",
                          iterations=10, warmup=2, sanitizer_timeout_s=timeout, points_limit=3,
                          command="pytest tests/evidence/test_collect_gpu.py")
    result = collect(opts, NullProgress())
    export = os.environ.get("FASTTRACK_GPU_OUT")
    if export:
        shutil.copytree(result.bundle_dir, Path(export) / "bundle", dirs_exist_ok=True)
    loaded = load_evidence(result.bundle_dir)
    assert loaded is not None and loaded.statement is not None
    assert loaded.problems == (), [p.message for p in loaded.problems]
    pred = loaded.statement.predicate
    assert pred.environment is not None and pred.environment.gpu_name == name
    assert pred.environment.copy_bandwidth_bytes_per_s and pred.environment.copy_bandwidth_bytes_per_s > 1e11
    here = [b for b in pred.benchmarks
            if b.point.gpu == name and "--points-limit" not in (b.not_run or "")]
    assert len(here) == 3 and all(b.not_run is None and b.rejected == [] for b in here), [
        (b.not_run, b.rejected) for b in here]
    assert all(b.protocol is not None and b.protocol.graph_replay and b.protocol.persisting_l2_reset
               for b in here)
    assert all(v.kernels_per_step is not None and v.kernels_per_step >= 1
               for b in here for v in b.variants.values())
    assert [t.outcome for t in pred.kernel_tests if t.point is not None] == ["passed"] * 3
    statuses = {r.phase: r.status for r in result.reports}
    assert statuses["tests"] == statuses["bench"] == statuses["evals"] == "ran"
    if find_sanitizer() is None:
        assert all(not s.ran for s in pred.sanitizer)
    else:
        assert {s.tool for s in pred.sanitizer} == {"memcheck", "racecheck", "synccheck"}
        for s in pred.sanitizer:  # either a parsed summary or an explicit reason, never a silent pass
            assert (s.ran and s.errors is not None) or (not s.ran and s.reason)
