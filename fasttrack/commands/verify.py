"""`fasttrack verify`: the command line over the verify pipeline (`fasttrack.pipeline`): options, the
renderer table, writing the report, exit codes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fasttrack.changes.git import WORKTREE
from fasttrack.commands.renderers import render_text, renderers
from fasttrack.confinement.trace.sandbox import Warm
from fasttrack.errors import EXIT_PASS, EXIT_POLICY_FAILURE, InputError
from fasttrack.pipeline.build import build_context
from fasttrack.pipeline.inputs import resolve_policy_path
from fasttrack.pipeline.judge import judge, run_verify
from fasttrack.pipeline.options import TRACE_ENV, VerifyOptions
from fasttrack.render.output import encodable_line, stdout_document, write_report
from fasttrack.verdict import Verdict

# The pipeline's API, also importable from here (fasttrack.report.cli, fasttrack.github.cli, the tests).
__all__ = ["VERIFY_EPILOG", "VerifyOptions", "build_context", "encodable_line", "evidence_dirs", "exit_code",
           "judge", "refuse_output_in_evidence", "resolve_policy_path", "run_verify", "stdout_document",
           "verify_command", "write_report"]


def exit_code(verdict: Verdict) -> int:
    return EXIT_PASS if verdict.verdict == "pass" else EXIT_POLICY_FAILURE


VERIFY_EPILOG = """Examples:

  fasttrack verify                                  the reference contribution (kernels/kimi_k3)

  fasttrack verify kernels/kimi_k3 -f json -o verdict.json

  fasttrack verify --repo ../vllm --base origin/main --head HEAD -f markdown

Exit codes: 0 pass, 1 policy failure (a finding is an error), 2 bad input or an unusable path, \
3 a bug in fasttrack (run with --debug for the traceback)."""


def verify_command(
    ctx: typer.Context,
    directory: Annotated[Path | None, typer.Argument(
        metavar="[DIR]", show_default=False,
        help="Contribution directory (holds fasttrack.toml; default kernels/kimi_k3).")] = None,
    repo: Annotated[Path | None, typer.Option("--repo", help="A git checkout (a path).")] = None,
    base: Annotated[str | None, typer.Option(
        "--base", help="Base commit (the PR's target branch); selects range mode. The diff is taken from "
                       "the merge base of --base and --head.")] = None,
    head: Annotated[str | None, typer.Option(
        "--head", help=f"Head commit (default HEAD; {WORKTREE} for the working tree).")] = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", help="Policy TOML (default policies/vllm.toml).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Target model (default: inferred).")] = None,
    contribution: Annotated[Path | None, typer.Option(
        "--contribution", help="Contribution directory (the same as DIR).")] = None,
    evidence: Annotated[Path | None, typer.Option("--evidence", help="Evidence bundle directory.")] = None,
    engine_tree: Annotated[Path | None, typer.Option(
        "--engine-tree", help="Engine source tree for contribution mode's blast radius.")] = None,
    fmt: Annotated[str, typer.Option("-f", "--format", help="text | json | markdown | sarif.")] = "text",
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Write the report here instead of stdout.")] = None,
    pr: Annotated[int | None, typer.Option("--pr", help="PR number, recorded in the verdict.")] = None,
    trusted_ref: Annotated[str | None, typer.Option(
        "--trusted-ref", help="Contribution mode: read the policy and allowed signers from this revision "
                              "(default: the merge base of HEAD with the default branch).")] = None,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Print only the one-line verdict.")] = False,
    verbose: Annotated[bool, typer.Option(
        "-v", "--verbose", help="Text: every changed file and where it lands, every fix line.")] = False,
    trace: Annotated[bool | None, typer.Option(
        "--trace/--no-trace", help=f"Run the effect trace (default: yes, unless ${TRACE_ENV}=0).")] = None,
) -> None:
    """Verify a contribution directory (default kernels/kimi_k3) or a PR given as a git range."""
    table = renderers()
    if fmt not in table:
        raise InputError(f"unknown format {fmt!r}", field="--format", fix=f"use one of {', '.join(table)}")
    if directory is not None and contribution is not None and directory != contribution:
        raise InputError("DIR and --contribution name different directories", field="--contribution",
                         fix="pass the contribution once")
    if (directory or contribution) is not None and (base is not None or head is not None):
        raise InputError("a contribution directory and a git range were both given", field="DIR",
                         fix="pass DIR (contribution mode) or --base/--head (range mode), not both")
    if output is not None and not output.parent.is_dir():
        raise InputError("the output directory does not exist", path=output.parent, field="--output",
                         fix="create the directory first")
    if output is not None and output.is_dir():
        raise InputError("is a directory", path=output, field="--output",
                         fix="pass a file path (e.g. verdict.json), not a directory")
    if output is not None and evidence is not None:
        refuse_output_in_evidence(output, [evidence])
    opts = VerifyOptions(repo=repo, base=base, head=head, policy=policy, model=model,
                         contribution=directory or contribution, evidence=evidence, format=fmt, output=output,
                         pr=pr, engine_tree=engine_tree, trusted_ref=trusted_ref, trace=trace)
    from fasttrack.render.encoding import safe_verdict
    from fasttrack.render.headline import headline

    # The trace child `cli._run` started before this module loaded (prestart.prestart_for_verify_args).
    warm = ctx.obj if isinstance(ctx.obj, Warm) else None
    verdict = safe_verdict(run_verify(opts, warm=warm))  # renderable whatever file names it quotes

    if output is not None:
        refuse_output_in_evidence(output, evidence_dirs(verdict))
        text = table[fmt](verdict) if fmt != "text" else render_text(verdict, verbose=verbose)
        write_report(output, text)
        if not quiet:
            typer.echo(encodable_line(f"{headline(verdict)} (report: {output})"))
    elif quiet:
        typer.echo(headline(verdict))
    elif fmt == "text":
        from rich.console import Console

        from fasttrack.render.text import print_verdict

        print_verdict(verdict, Console(highlight=False, soft_wrap=True), verbose=verbose)
    else:
        typer.echo(stdout_document(table[fmt](verdict), fmt), nl=False)
    raise typer.Exit(exit_code(verdict))


def evidence_dirs(verdict: Verdict) -> list[Path]:
    """The evidence bundle the verdict judged, as a path (its `bundle_path` is relative to the repo)."""
    ev = verdict.evidence
    if ev is None or not ev.bundle_path:
        return []
    p = Path(ev.bundle_path)
    return [p if p.is_absolute() or not verdict.repo else Path(verdict.repo) / p]


def refuse_output_in_evidence(output: Path, dirs: list[Path]) -> None:
    """`--output` may not land inside an evidence bundle (through a symlink neither): writing the verdict
    there would overwrite or add to the signed evidence it judges."""
    try:
        target = output.resolve()
    except OSError:
        return  # write_report names the problem
    for d in dirs:
        try:
            bundle = d.resolve()
        except OSError:
            continue
        if target == bundle or bundle in target.parents:
            raise InputError("is inside the evidence bundle the verdict judges", path=output,
                             field="--output",
                             fix=f"write the verdict outside {d} (it holds only collected, signed evidence)")
