"""Build the static review site: index.html (the queue), one page per contribution or PR, the verdict JSON
beside each page, and report.md (the same content in Markdown).

Everything is rendered at build time with jinja2 (autoescape on, strict undefined): no JavaScript, no
network, no server. The pages carry a Content-Security-Policy that forbids scripts and remote loads, so even
a rendering bug could not make a verdict's text run.
"""

from __future__ import annotations

import functools
import json
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import fasttrack
from fasttrack.errors import InputError
from fasttrack.loading import load_json_model
from fasttrack.report.facts import parse_time
from fasttrack.report.model import (
    BAR_PX,
    BAR_SCALE,
    STATUS_LABEL,
    STATUS_MEANING,
    STATUS_ORDER,
    STATUS_SYMBOL,
    ContributionView,
    build_view,
    identity,
    queue_order,
    slugify,
    worst,
)
from fasttrack.report.risk import HIGH_FROM, LOW_BELOW, RISK_RULES
from fasttrack.verdict import Verdict

if TYPE_CHECKING:
    import jinja2

MARKER = ".fasttrack-report"  # lists the files a previous build wrote, so a rebuild can replace them
DEFAULT_MAX_AGE_DAYS = 90
MAX_VERDICT_FILES = 5000


@dataclass(frozen=True)
class Source:
    verdict: Verdict
    origin: str  # the file it came from, or how it was made


@dataclass(frozen=True)
class Site:
    views: tuple[ContributionView, ...]  # in queue order
    built_at: datetime
    max_age_days: int
    files: tuple[str, ...]  # what was written, relative to the output directory


# ----------------------------------------------------------------------------------------------- inputs


def load_verdict_files(files: Sequence[Path], dirs: Sequence[Path]) -> list[Source]:
    """Verdict JSON from the files given and every *.json directly inside the directories given."""
    paths: list[Path] = list(files)
    for d in dirs:
        if not d.is_dir():
            raise InputError(
                "not a directory",
                path=d,
                field="--verdicts-dir",
                fix="pass a directory holding verdict JSON files",
            )
        found = sorted(p for p in d.glob("*.json") if p.is_file())
        if not found:
            raise InputError(
                "no *.json verdict files in the directory",
                path=d,
                field="--verdicts-dir",
                fix="write verdicts with `fasttrack verify --format json --output DIR/NAME.json`",
            )
        paths += found
    if len(paths) > MAX_VERDICT_FILES:
        raise InputError(
            f"{len(paths)} verdict files, over the limit of {MAX_VERDICT_FILES}",
            field="--verdict",
            fix="build the report from fewer verdicts",
        )
    return [Source(load_json_model(p, Verdict, "verdict"), str(p)) for p in paths]


def dedupe(sources: Iterable[Source]) -> list[tuple[Source, int]]:
    """One source per PR or contribution: the newest verdict, with how many older ones it supersedes."""
    by_key: dict[str, list[Source]] = {}
    for s in sources:
        by_key.setdefault(identity(s.verdict)[0], []).append(s)
    out = []
    epoch = datetime.min.replace(tzinfo=UTC)
    for group in by_key.values():
        newest = max(group, key=lambda s: parse_time(s.verdict.generated_at) or epoch)
        out.append((newest, len(group) - 1))
    return out


def build_views(sources: Iterable[Source], *, now: datetime, max_age_days: int) -> list[ContributionView]:
    views = []
    used: set[str] = set()
    for src, superseded in dedupe(sources):
        v = src.verdict
        base = slugify(f"pr-{v.pr}" if v.pr is not None else identity(v)[1])
        slug, n = base, 2
        while slug in used or slug == "index":
            slug, n = f"{base}-{n}", n + 1
        used.add(slug)
        views.append(
            build_view(
                v, slug=slug, origin=src.origin, now=now, max_age_days=max_age_days, superseded=superseded
            )
        )
    return queue_order(views)


# -------------------------------------------------------------------------------------------- rendering


def _ratio(x: float | None) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.2f}×"


def _pct(x: float | None, digits: int = 0) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f}%"


def _rate(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    for unit, scale in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6)):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} B/s"


def _age(days: float | None) -> str:
    if days is None:
        return "unknown age"
    if days < 1 / 24:
        return "less than an hour old"
    if days < 1:
        return f"{days * 24:.0f} hours old"
    return f"{days:.0f} day{'s' if round(days) != 1 else ''} old"


def _num(x: float | int | None) -> str:
    if x is None:
        return "–"
    if isinstance(x, int):
        return str(x)
    return f"{x:.4g}" if math.isfinite(x) else str(x)


def _short(text: str | None, n: int = 12) -> str:
    if not text:
        return "–"
    head, sep, rest = text.partition(":")
    if sep and len(head) < 10:
        return f"{head}:{rest[:n]}"
    return text[:n]


@functools.cache
def environment() -> jinja2.Environment:
    """The templates' environment (compiled templates are cached on it, so build it once)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("fasttrack", "templates/report"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(ratio=_ratio, pct=_pct, rate=_rate, age=_age, num=_num, short=_short)
    env.globals.update(
        STATUS_ORDER=STATUS_ORDER,
        STATUS_LABEL=STATUS_LABEL,
        STATUS_SYMBOL=STATUS_SYMBOL,
        STATUS_MEANING=STATUS_MEANING,
        worst=worst,
        BAR_PX=BAR_PX,
        BAR_SCALE=BAR_SCALE,
        RISK_RULES=RISK_RULES,
        LOW_BELOW=LOW_BELOW,
        HIGH_FROM=HIGH_FROM,
        tool_version=fasttrack.__version__,
    )
    return env


def render_index(
    env: jinja2.Environment, views: Sequence[ContributionView], built_at: datetime, max_age_days: int
) -> str:
    return env.get_template("index.html.j2").render(
        views=views,
        built_at=built_at.isoformat(timespec="seconds"),
        max_age_days=max_age_days,
        ready=sum(1 for v in views if v.ready),
        blocked=sum(1 for v in views if not v.ready),
    )


def render_page(
    env: jinja2.Environment,
    view: ContributionView,
    built_at: datetime,
    rank: int,
    total: int,
    max_age_days: int,
) -> str:
    return env.get_template("contribution.html.j2").render(
        c=view,
        v=view.verdict,
        ev=view.verdict.evidence,
        built_at=built_at.isoformat(timespec="seconds"),
        rank=rank,
        total=total,
        max_age_days=max_age_days,
    )


# ---------------------------------------------------------------------------------------------- output


def _prepare_out(out: Path) -> list[str]:
    """Make `out` ready; return the files a previous build wrote there (to remove the ones not rewritten)."""
    if out.exists() and not out.is_dir():
        raise InputError(
            "the output path exists and is not a directory",
            path=out,
            field="--out",
            fix="pass a directory (it is created if missing)",
        )
    if not out.exists():
        try:
            out.mkdir(parents=True)
        except OSError as exc:
            raise InputError(
                f"cannot create the output directory: {exc.strerror}", path=out, field="--out"
            ) from None
        return []
    marker = out / MARKER
    if marker.is_file():
        try:
            listed = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            listed = []
        return [str(x) for x in listed if isinstance(x, str)] if isinstance(listed, list) else []
    if any(out.iterdir()):
        raise InputError(
            "the output directory is not empty and was not made by `fasttrack report`",
            path=out,
            field="--out",
            fix="pass a new or empty directory (e.g. --out site)",
        )
    return []


def _write(path: Path, text: str) -> None:
    """Write atomically (a reader never sees half a page)."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a web server (GitHub Pages, nginx) must read the page
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_site(
    sources: Sequence[Source],
    out: Path,
    *,
    now: datetime | None = None,
    max_age_days: int = DEFAULT_MAX_AGE_DAYS,
) -> Site:
    """Render every source into `out` and return what was built."""
    from fasttrack.report.markdown import render_markdown

    if not sources:
        raise InputError(
            "no verdicts to report on",
            field="--verdict",
            fix="pass --verdict FILE or --verdicts-dir DIR, or run without them for the "
            "reference contribution",
        )
    built_at = (now or datetime.now(UTC)).replace(microsecond=0)
    views = build_views(sources, now=built_at, max_age_days=max_age_days)
    previous = _prepare_out(out)
    env = environment()
    written: dict[str, str] = {"index.html": render_index(env, views, built_at, max_age_days)}
    for rank, view in enumerate(views, start=1):
        written[f"{view.slug}.html"] = render_page(env, view, built_at, rank, len(views), max_age_days)
        written[f"{view.slug}.verdict.json"] = view.verdict.model_dump_json(indent=2) + "\n"
    written["report.md"] = render_markdown(views, built_at=built_at, max_age_days=max_age_days)
    written[".nojekyll"] = ""  # GitHub Pages: serve the files as they are
    for name, text in written.items():
        _write(out / name, text)
    for name in previous:
        if name not in written and "/" not in name and not name.startswith(".") and name != MARKER:
            (out / name).unlink(missing_ok=True)
    _write(out / MARKER, json.dumps(sorted(written), indent=1) + "\n")
    return Site(
        views=tuple(views), built_at=built_at, max_age_days=max_age_days, files=tuple(sorted(written))
    )
