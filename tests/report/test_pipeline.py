"""End to end on CPU: a real signed evidence bundle (the evidence tests' factory), judged by every rule,
summarised by fasttrack.evidence.summary, rendered by the dashboard."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "evidence"))

from bundle_factory import HAVE_SSH_KEYGEN, new_fixture
from report_fixtures import Doc

from fasttrack.commands.verify import judge
from fasttrack.report.site import Source, build_site


def test_bundle_to_dashboard(tmp_path: Path) -> None:
    fx = new_fixture(tmp_path / "fx")
    (fx.policies / "vllm.toml").write_text(
        "# the fixture's policy is built in code; judge() digests this file\n"
    )
    verdict = judge(fx.context())
    ev = verdict.evidence
    assert ev is not None and ev.present and ev.fresh
    site = build_site([Source(verdict, "bundle_factory")], tmp_path / "site")
    (c,) = site.views
    assert (
        c.grid is not None and c.grid.counts["passed"] == c.grid.total == 6
    )  # batches 1, 2, 4 x contexts 1, 128
    doc = Doc((tmp_path / "site" / f"{c.slug}.html").read_text())
    assert len(doc.find("td", data_status="passed")) == 6
    plots = doc.find("svg", data_plot="speedup")
    assert len(plots) == 1  # the factory benchmarks context 128 only
    assert doc.find("g", data_series="fused over stock") and doc.find(
        "g", data_series="fused over torch.compile"
    )
    text = doc.plain
    assert "2.00× [" in text  # fused over stock, with the CI the evidence rules recomputed
    assert "1.60× [" in text and "(no CI)" not in text  # over compile, with its recomputed CI too
    assert "fused-vs-stock-b1" in text and "✓ holds" in text
    assert "logit_max_abs_diff" in text and "synccheck" in text
    if HAVE_SSH_KEYGEN:
        assert "alice@example.com" in text and "✓ verified" in text
