"""`fasttrack collect`: run the evidence suite on this machine's GPUs and write (and sign) one bundle.

The heavy lifting is in `fasttrack.evidence.collect`, imported only when the command runs, so that
`import fasttrack.cli` stays light.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from fasttrack.evidence.collect import CollectResult

DEFAULT_CONTRIBUTION = Path("kernels/kimi_k3")
NO_GPU_EXIT = 2
COLLECT_EPILOG = """Examples:

  fasttrack collect kernels/kimi_k3 --out evidence/kimi_k3

  fasttrack collect kernels/kimi_k3 --tp 2 --phases tests,bench --bundle-name statement.tp2

Exit codes: 0 every phase ran, 1 a phase failed, 2 bad input or a machine that cannot produce the \
evidence (no CUDA device for a GPU envelope: nothing is written), 3 a bug in fasttrack."""


def cuda_device_visible() -> bool:
    """Whether this machine shows a CUDA device, without importing torch: the NVIDIA driver's device
    nodes or its /proc entries, unless CUDA_VISIBLE_DEVICES hides every device."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return False
    try:
        if any(True for _ in os.scandir("/proc/driver/nvidia/gpus")):
            return True
    except OSError:
        pass
    try:
        return any(re.fullmatch(r"nvidia\d+", e.name) for e in os.scandir("/dev"))
    except OSError:
        return False


def cannot_collect_here(contribution: Path) -> str | None:
    """Why no phase could produce evidence on this machine (None when one can): the envelope names only
    GPUs and no CUDA device is visible. A manifest that cannot be read is left to the collector to report."""
    if cuda_device_visible():
        return None
    from fasttrack.errors import InputError
    from fasttrack.evidence.environment import CPU_NAME
    from fasttrack.manifest import MANIFEST_FILE, load_manifest

    try:
        manifest = load_manifest(contribution / MANIFEST_FILE)
    except InputError:
        return None
    if any(h.name.lower() == CPU_NAME for h in manifest.envelope.hardware):
        return None
    names = ", ".join(sorted({h.name for h in manifest.envelope.hardware}))
    return (f"this machine has no CUDA device and the envelope needs {names}: no phase can produce evidence "
            "here, nothing was written")


def collect_command(
    contribution: Annotated[Path, typer.Argument(
        help="The contribution directory (holds fasttrack.toml).")] = DEFAULT_CONTRIBUTION,
    out: Annotated[Path | None, typer.Option(
        "-o", "--output", "--out", help="Bundle directory (default: evidence/<name>/).")] = None,
    phases: Annotated[str, typer.Option(
        "--phases", help="Comma-separated: tests, bench, evals, sanitizer.")] = "tests,bench,evals,sanitizer",
    points_limit: Annotated[int | None, typer.Option(
        "--points-limit", help="Collect at most N points (batch 1, 2 and max first).")] = None,
    iterations: Annotated[int, typer.Option(
        "--iterations", help="Timed replays per variant per point.")] = 30,
    warmup: Annotated[int, typer.Option(
        "--warmup", help="Untimed replays per variant before timing.")] = 3,
    sign_key: Annotated[Path | None, typer.Option(
        "--sign-key", help="SSH private key to sign with.")] = None,
    principal: Annotated[str | None, typer.Option(
        "--principal", help="Your name in the allowed-signers file.")] = None,
    resume: Annotated[bool, typer.Option(
        "--resume/--fresh", help="Reuse results of an interrupted run.")] = True,
    work_dir: Annotated[Path | None, typer.Option(
        "--work-dir", help="Per-phase results (default .cache/fasttrack/collect/<name>).")] = None,
    sanitizer_timeout: Annotated[float, typer.Option(
        "--sanitizer-timeout", help="Seconds per sanitizer tool.")] = 1800.0,
    assemble_only: Annotated[bool, typer.Option(
        "--assemble-only", help="Run nothing: write the bundle from what earlier (possibly interrupted) "
        "runs recorded in the work dir.")] = False,
    tp: Annotated[list[int] | None, typer.Option(
        "--tp", help="Collect only the points at this TP size (repeatable): a part of the evidence; the "
        "other points are recorded as collected in another bundle. Default: every TP size.")] = None,
    bundle_name: Annotated[str | None, typer.Option(
        "--bundle-name", help="Write NAME.json, NAME.json.sig and NAME.<log> (default: statement.json and "
        "plain log names; statement.tp<N> for a --tp part).")] = None,
    policy: Annotated[Path | None, typer.Option(
        "--policy", help="The engine policy naming the model's baseline (default: the installed fasttrack's "
        "policies/vllm.toml). The baseline is never the contribution's.")] = None,
    engine_root: Annotated[Path | None, typer.Option(
        "--engine-root", help="Where the policy's baselines/ are imported from (default: the installed "
        "fasttrack's checkout).")] = None,
    phase_limit: Annotated[list[str] | None, typer.Option(
        "--phase-limit", help="PHASE=SECONDS (repeatable): interrupt that phase after SECONDS and keep what "
        "it finished, so one run stays bounded (evidence must come from one run: results resumed from an "
        "earlier run are FT349).")] = None,
    allow_cpu: Annotated[bool, typer.Option(
        "--allow-cpu", help="Run even without a CUDA device (CPU toy contributions and tests; the GPU points "
        "are recorded as not collected).")] = False,
) -> None:
    """Collect evidence for a contribution on this machine's GPUs and write evidence/<name>/."""
    if not assemble_only and not allow_cpu:
        why = cannot_collect_here(contribution)
        if why is not None:
            from fasttrack.errors import InputError

            raise InputError(why, path=contribution, field="--allow-cpu",
                             fix="run `fasttrack collect` on the GPU machine the envelope names")
    from fasttrack.evidence.collect import CollectOptions, collect

    chosen = tuple(p.strip() for p in phases.split(",") if p.strip())
    limits = parse_phase_limits(phase_limit or [])
    opts = CollectOptions(
        contribution=contribution, out=out, phases=chosen, points_limit=points_limit, iterations=iterations,
        warmup=warmup, sign_key=sign_key, principal=principal, resume=resume, work_dir=work_dir,
        sanitizer_timeout_s=sanitizer_timeout, assemble_only=assemble_only, tp=tuple(tp or ()),
        bundle_name=bundle_name, policy=policy, engine_root=engine_root, phase_limits=limits,
        command=" ".join(shlex.quote(a) for a in ["fasttrack", *sys.argv[1:]]),
    )
    with RichProgress() as progress:
        result = collect(opts, progress)
    _summary(result)
    if any(r.status == "failed" for r in result.reports):
        raise typer.Exit(1)


def parse_phase_limits(raw: list[str]) -> dict[str, float]:
    """`["tests=130", "bench=280"]` -> {phase: seconds}; bad input is an InputError naming the option."""
    import math

    from fasttrack.errors import InputError
    from fasttrack.evidence.collect import PHASES

    out: dict[str, float] = {}
    for item in raw:
        phase, sep, value = item.partition("=")
        phase = phase.strip()
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not sep or phase not in PHASES or not math.isfinite(seconds) or seconds <= 0:
            raise InputError(f"{item!r} is not PHASE=SECONDS", field="--phase-limit",
                             fix=f"e.g. --phase-limit bench=280 (phases: {', '.join(PHASES)}; seconds > 0)")
        out[phase] = seconds
    return out


def _summary(result: CollectResult) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True)
    table = Table(title="fasttrack collect", show_lines=False)
    table.add_column("phase")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    for r in result.reports:
        style = {"failed": "red", "ran": "green", "resumed": "green"}.get(r.status, "yellow")
        table.add_row(r.phase, f"[{style}]{r.status}[/{style}]", r.detail)
    console.print(table)
    console.print(f"bundle: {result.statement_path}")
    if result.signature_path is not None:
        console.print(f"signature: {result.signature_path}")
    if result.allowed_signers_line:
        console.print("allowed-signers line for this key (maintainers add it to the policy's file):")
        console.print(result.allowed_signers_line, markup=False, highlight=False, soft_wrap=True)


class RichProgress:  # implements fasttrack.evidence.collect.Progress
    """A rich progress display: one bar per phase."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(TextColumn("{task.description:<34}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TextColumn("{task.fields[note]}"),
                                  transient=False, redirect_stdout=False, redirect_stderr=False)
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> RichProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def start(self, phase: str, total: int | None, description: str) -> None:
        if phase not in self._tasks:
            self._tasks[phase] = self._progress.add_task(description, total=total, note="")

    def advance(self, phase: str, completed: int, total: int | None = None, note: str = "") -> None:
        if phase not in self._tasks:
            self.start(phase, total, phase)
        kwargs: dict[str, Any] = {"completed": completed, "note": note}
        if total is not None:
            kwargs["total"] = total
        self._progress.update(self._tasks[phase], **kwargs)

    def finish(self, phase: str, note: str = "") -> None:
        if phase not in self._tasks:
            self.start(phase, 1, phase)
        task = self._tasks[phase]
        total = self._progress.tasks[[t.id for t in self._progress.tasks].index(task)].total or 1
        self._progress.update(task, completed=total, total=total, note=note[:80])

    def message(self, text: str) -> None:
        self._progress.console.print(text, markup=False, highlight=False)
