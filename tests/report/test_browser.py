"""A real browser loads the built site from disk: headless Chromium (Debian's `chromium`, which .ci/run
installs) dumps the DOM, takes screenshots and prints a page to PDF. The screenshots and the PDF are CI
artifacts under out/screenshots/ (or $FASTTRACK_ARTIFACTS/screenshots/)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
import report_fixtures as rf
from report_fixtures import Doc

from fasttrack.report.site import Site, Source, build_site

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("FASTTRACK_ARTIFACTS", REPO / "out")) / "screenshots"
WINDOW = (1400, 2200)


def find_chromium() -> str | None:
    given = os.environ.get("FASTTRACK_CHROMIUM")
    if given:
        return given
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


CHROMIUM = find_chromium()
if CHROMIUM is None:
    pytest.skip(
        "headless Chromium is not installed (apt-get install -y chromium; .ci/run does it), so the "
        "browser checks did not run",
        allow_module_level=True,
    )


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    assert CHROMIUM is not None
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-extensions",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--user-data-dir={profile}",
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    return proc


def dom(tmp: Path, page: Path) -> Doc:
    proc = chromium(tmp, "--dump-dom", page.as_uri())
    return Doc(proc.stdout.decode("utf-8"))


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Site, Path]:
    out = tmp_path_factory.mktemp("browser") / "site"
    verdicts = [
        rf.passing(),
        rf.failing(pr=4242),
        rf.stale(name="kimi_k3_stale"),
        rf.missing(name="no_bundle"),
        rf.huge(name="huge_pr"),
        rf.wide(),
        rf.hostile(),
    ]
    return build_site([Source(v, f"fixture {i}") for i, v in enumerate(verdicts)], out, now=rf.NOW), out


def test_dom_has_the_queue_the_grid_and_the_plot(site: tuple[Site, Path], tmp_path: Path) -> None:
    built, out = site
    index = dom(tmp_path, out / "index.html")
    rows = [a["data-slug"] for t, a in index.tags if t == "tr" and "data-slug" in a]
    assert rows == [v.slug for v in built.views] and rows[0] == "kimi_k3"

    page = dom(tmp_path, out / "kimi_k3.html")
    assert len(page.find("table", data_grid="envelope")) == 1
    assert len(page.find("td", data_status="passed")) == 15
    plots = page.find("svg", data_plot="speedup")
    assert len(plots) == 3
    assert len(page.find("line", **{"class": "ci"})) == 30  # whiskers: 3 plots x 2 series x 5 batch sizes
    assert page.find("g", data_series="fused over torch.compile")
    assert not page.find("script")

    failing = dom(tmp_path, out / "pr-4242.html")
    assert failing.find("div", data_blocker="FT311") and len(failing.find("td", data_status="failed")) == 1


def test_hostile_text_stays_text_in_the_browser(site: tuple[Site, Path], tmp_path: Path) -> None:
    built, out = site
    (evil,) = [v for v in built.views if v.verdict.contribution and "<script>" in v.verdict.contribution]
    page = dom(tmp_path, out / f"{evil.slug}.html")
    assert not page.find("script") and not page.find("img")  # the parser made no elements of them
    assert not [a for _, a in page.tags if any(k.startswith("on") for k in a)]
    assert rf.HOSTILE in page.plain  # shown as text instead


def test_screenshots_and_print(site: tuple[Site, Path], tmp_path: Path) -> None:
    _, out = site
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for name in ("index", "kimi_k3", "pr-4242", "kimi_k3_wide"):
        shot = ARTIFACTS / f"{name}.png"
        shot.unlink(missing_ok=True)
        chromium(
            tmp_path,
            f"--screenshot={shot}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            (out / f"{name}.html").as_uri(),
        )
        assert png_size(shot) == WINDOW
        assert shot.stat().st_size > 50_000, f"{shot} looks blank"
    pdf = ARTIFACTS / "kimi_k3.pdf"
    pdf.unlink(missing_ok=True)
    chromium(tmp_path, f"--print-to-pdf={pdf}", "--no-pdf-header-footer", (out / "kimi_k3.html").as_uri())
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF-")
    pages = data.count(b"/Type /Page") - data.count(b"/Type /Pages")
    assert 2 <= pages <= 12, pages  # the page paginates in print, without running to dozens of sheets
