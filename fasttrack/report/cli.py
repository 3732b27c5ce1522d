"""`fasttrack report`: build the maintainer review dashboard (static HTML + Markdown) from Verdict JSON.

With no verdicts given it runs `fasttrack verify` itself on each `--contribution` (default: the reference
contribution, contribution mode) and reports that, so `make verify` shows the reference contribution.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fasttrack.errors import InputError

if TYPE_CHECKING:
    from fasttrack.report.site import Source

DEFAULT_OUT = Path("site")


def _max_age_days(policy: Path | None, given: int | None) -> int:
    """--max-age-days, else the policy's evidence.max_age_days (when a policy is at hand), else 90."""
    from fasttrack.report.site import DEFAULT_MAX_AGE_DAYS

    if given is not None:
        if given < 1:
            raise InputError("must be at least 1", field="--max-age-days", fix="pass a number of days")
        return given
    from fasttrack.pipeline.inputs import resolve_policy_path
    from fasttrack.pipeline.options import VerifyOptions
    from fasttrack.policy import load_policy

    try:
        path = resolve_policy_path(VerifyOptions(policy=policy), Path.cwd())
    except InputError:
        return DEFAULT_MAX_AGE_DAYS
    return load_policy(path).evidence.max_age_days


REPORT_EPILOG = """Examples:

  fasttrack report                                  verify the reference contribution, build site/

  fasttrack report --verdict verdict.json -o site

Exit codes: 0 the site was written, 2 bad input (a verdict that does not parse, or whose verdict \
field disagrees with its findings) or an unusable path, 3 a bug in fasttrack."""


def refuse_inconsistent(sources: list[Source]) -> None:
    """A verdict whose `verdict` field disagrees with its findings (a "pass" holding an error: edited or
    broken) is never shown as ready: the report refuses it, naming the file."""
    from fasttrack.verdict import inconsistency

    for src in sources:
        why = inconsistency(src.verdict)
        if why is not None:
            raise InputError(why, path=src.origin, field="verdict",
                             fix="re-run `fasttrack verify --format json` and report its output unedited")


def report_command(
    verdict: Annotated[
        list[Path] | None,
        typer.Option(
            "--verdict",
            metavar="FILE",
            help="A Verdict JSON file (`fasttrack verify --format json`); repeatable.",
        ),
    ] = None,
    verdicts_dir: Annotated[
        list[Path] | None,
        typer.Option(
            "--verdicts-dir", metavar="DIR", help="A directory of Verdict JSON files (*.json); repeatable."
        ),
    ] = None,
    contribution: Annotated[
        list[Path] | None,
        typer.Option(
            "--contribution",
            metavar="DIR",
            help="Verify this contribution directory and report it; repeatable. "
            "Default when no verdict is given: the reference contribution.",
        ),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option("--policy", help="Policy for --contribution runs and the evidence age limit."),
    ] = None,
    out: Annotated[Path, typer.Option(
        "-o", "--output", "--out", help="Output directory for the site.")] = DEFAULT_OUT,
    max_age_days: Annotated[
        int | None,
        typer.Option(
            "--max-age-days", help="Evidence older than this counts as old (default: the policy's)."
        ),
    ] = None,
) -> None:
    """Build the maintainer review dashboard: index.html (the queue), a page per contribution, report.md."""
    from fasttrack.report.site import Source, build_site, load_verdict_files

    age_limit = _max_age_days(policy, max_age_days)
    sources = load_verdict_files(verdict or [], verdicts_dir or [])
    refuse_inconsistent(sources)
    targets: list[Path | None] = list(contribution or [])
    if not sources and not targets:
        targets = [None]  # the reference contribution (fasttrack verify's default)
    if targets:
        from fasttrack.pipeline.judge import run_verify
        from fasttrack.pipeline.options import VerifyOptions

        for target in targets:
            v = run_verify(VerifyOptions(contribution=target, policy=policy))
            what = (
                f"fasttrack verify --contribution {target}"
                if target is not None
                else "fasttrack verify (the reference contribution)"
            )
            sources.append(Source(v, what))
    site = build_site(sources, out, max_age_days=age_limit)
    ready = sum(1 for v in site.views if v.ready)
    typer.echo(
        f"report: {len(site.views)} contribution(s), {ready} ready, {len(site.views) - ready} blocked "
        f"-> {out / 'index.html'} and {out / 'report.md'}"
    )
