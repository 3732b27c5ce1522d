"""`fasttrack collect`: run the evidence suite on this machine and write one signed bundle.

Phases (each resumable; results are kept in a work directory until the bundle is written):

* environment: the machine, read-only (in a worker subprocess, see `bench_worker`);
* tests: the manifest's `kernel_tests` in a pytest subprocess with fasttrack's plugin over the grid;
* bench: the manifest's `benchmark` entry point, one BenchmarkCase per point, through `timing`'s protocol
  (a worker subprocess; one result file per point, so a resumed run starts at the next point);
* evals: the manifest's `evals` entry point, plus the lm-evaluation-harness result files it lists;
* sanitizer: compute-sanitizer memcheck / racecheck / synccheck over `sanitizer_tests`, where it exists.

The grid is the manifest's envelope (`Envelope.points()`: batch 1, 2 and the maximum are always in it)
restricted to the hardware present: points for other hardware, and points at tp = n on a machine with fewer
than n GPUs, are written as "not collected here", never measured by proxy. Points at tp = n > 1 run as n
ranks under torchrun (`fasttrack.evidence.ranks`): the kernel tests that take `envelope_point` in one pytest
per TP size, the benchmarks in one bench worker per TP size; each rank writes its own results and the
collector merges them. Evals and the sanitizer run at tp 1 only.

Nothing is fabricated: a phase that failed or did not run leaves its section empty or
says why (`not_run`, `ran: false`, `rejected`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from typing import Protocol as TypingProtocol

from pydantic import ValidationError

from fasttrack import __version__
from fasttrack.errors import InputError
from fasttrack.evidence import isolation, reaper
from fasttrack.evidence import sanitizer as san
from fasttrack.evidence.backends import identify
from fasttrack.evidence.bundle import (
    STOCK_VARIANT,
    BaselineRecord,
    Benchmark,
    Collector,
    Environment,
    Eval,
    KernelTest,
    Predicate,
    Sanitizer,
    Statement,
    new_statement,
    utc_now_iso,
)
from fasttrack.evidence.digest import ContentDigest, contribution_digest, sha256_file
from fasttrack.evidence.harness import engine_base_commit, harness_digest
from fasttrack.evidence.ranks import (
    is_rank_path,
    merge_case_results,
    merge_test_lines,
    rank_path,
    torchrun_argv,
)
from fasttrack.evidence.stream import StreamServer
from fasttrack.manifest import Envelope, EnvelopePoint, Manifest, load_manifest
from fasttrack.policy import BaselineSpec, Policy, StageBackends, load_policy

PHASES = ("tests", "bench", "evals", "sanitizer")
LOG_FILES = {"tests": "pytest.log", "bench": "bench.log", "evals": "evals.log", "sanitizer": "sanitizer.log"}
WORKER = "fasttrack.evidence.bench_worker"
PLUGIN = "fasttrack.evidence.pytest_plugin"
STATE_VERSION = 1
DEFAULT_BUNDLE_NAME = "statement"  # statement.json, statement.json.sig, pytest.log, ...
BUNDLE_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@dataclass
class CollectOptions:
    contribution: Path
    out: Path | None = None
    phases: tuple[str, ...] = PHASES
    points_limit: int | None = None
    iterations: int = 30
    warmup: int = 3
    sign_key: Path | None = None
    principal: str | None = None
    resume: bool = True
    work_dir: Path | None = None
    sanitizer_timeout_s: float = 1800.0
    measure_bandwidth: bool = True
    command: str = ""
    flush_bytes: int | None = None
    # Run nothing: write the bundle from what earlier (possibly interrupted) runs recorded in the work dir.
    assemble_only: bool = False
    # Collect only the points at these TP sizes (empty: all); the others are recorded as collected in another
    # bundle (part). A part's files are named after `bundle_name` (default: statement.tp<sizes>).
    tp: tuple[int, ...] = ()
    # NAME.json, NAME.json.sig and NAME.<log> (None: statement.json and plain log names for a full bundle,
    # statement.tp<sizes> for a --tp part).
    bundle_name: str | None = None
    # The engine side (docs/baseline-contract.md): the policy naming the model's baseline, and the root the
    # baseline package is imported from. None: the installed fasttrack's own (never the contribution's).
    policy: Path | None = None
    engine_root: Path | None = None
    # Only these envelope points (keys `gpu|tp<n>|b<batch>|c<context>|dtype`; empty: all). `fasttrack audit`
    # re-runs a subset this way; the rest are recorded as left out.
    only_points: tuple[str, ...] = ()
    # Seconds each phase may run ({phase: seconds}; a phase not named has no limit). A phase that reaches its
    # limit is interrupted (SIGINT, then SIGKILL after a grace period) and keeps what it finished: the one
    # collection run stays bounded without being split into several runs (whose results would be resumed
    # across contribution code: FT349).
    phase_limits: dict[str, float] = field(default_factory=dict)


def part_suffix(tp: Iterable[int]) -> str:
    """`tp1`, `tp2`, `tp1-2`: how a --tp filter names its part and its work dir."""
    return "tp" + "-".join(str(n) for n in sorted(set(tp)))


def bundle_files(name: str) -> tuple[str, str, dict[str, str]]:
    """(statement file, signature file, {phase: log file}) for a bundle (part) named `name`: the default
    name keeps statement.json and the plain log names; any other prefixes its logs, so two parts can sit in
    one evidence directory without clobbering each other's files."""
    statement = f"{name}.json"
    logs = dict(LOG_FILES)
    if name != DEFAULT_BUNDLE_NAME:
        logs = {k: f"{name}.{v}" for k, v in logs.items()}
    return statement, statement + ".sig", logs


def resolve_bundle_name(opts: CollectOptions, envelope_tp: Iterable[int]) -> str:
    """The bundle (part) name: --bundle-name, else `statement` for a full bundle, `statement.tp<sizes>` for a
    --tp part (a filter that keeps every envelope TP size is a full bundle)."""
    name = opts.bundle_name
    if name is not None:
        name = name.strip()
        if name.endswith(".json"):
            name = name[: -len(".json")]
        if (not name or name.startswith(".") or not set(name) <= BUNDLE_NAME_CHARS or len(name) > 100
                or name.endswith(".sig")):
            raise InputError(f"{opts.bundle_name!r} is not a bundle name: use letters, digits, '.', '_' and "
                             "'-' (e.g. statement.tp2)", field="--bundle-name")
        return name
    if opts.tp and set(opts.tp) != set(envelope_tp):
        return f"{DEFAULT_BUNDLE_NAME}.{part_suffix(opts.tp)}"
    return DEFAULT_BUNDLE_NAME


@dataclass
class PhaseReport:
    phase: str
    status: str  # "ran", "resumed", "skipped", "failed"
    detail: str = ""


@dataclass
class CollectResult:
    bundle_dir: Path
    statement_path: Path
    signature_path: Path | None
    reports: list[PhaseReport] = field(default_factory=list)
    allowed_signers_line: str | None = None


class Progress(TypingProtocol):
    """What the phases report to: a rich progress display on a terminal (`collect_cli.RichProgress`)."""

    def start(self, phase: str, total: int | None, description: str) -> None: ...

    def advance(self, phase: str, completed: int, total: int | None = None, note: str = "") -> None: ...

    def finish(self, phase: str, note: str = "") -> None: ...

    def message(self, text: str) -> None: ...


class NullProgress:
    """Reports nowhere, except messages, which it keeps (tests read them)."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def start(self, phase: str, total: int | None, description: str) -> None:
        return None

    def advance(self, phase: str, completed: int, total: int | None = None, note: str = "") -> None:
        return None

    def finish(self, phase: str, note: str = "") -> None:
        return None

    def message(self, text: str) -> None:
        self.messages.append(text)


# ------------------------------------------------------------------------------------------- the grid
def point_dict(p: EnvelopePoint) -> dict[str, Any]:
    return {"gpu": p.gpu, "tp": p.tp, "batch": p.batch, "context": p.context, "dtype": p.dtype}


def point_key(p: dict[str, Any]) -> str:
    return f"{p['gpu']}|tp{p['tp']}|b{p['batch']}|c{p['context']}|{p['dtype']}"


def _priority(env: Envelope, p: EnvelopePoint) -> tuple[int, int, int]:
    required = {b for b in (1, 2) if env.batch.contains(b)} | {env.batch.max}
    return (0 if p.batch in required else 1, p.context, p.batch)


@dataclass
class Grid:
    here: list[dict[str, Any]]
    elsewhere: list[tuple[dict[str, Any], str]]  # point, why it is not collected here
    other_parts_tp: frozenset[int] = frozenset()  # envelope TP sizes the --tp filter leaves to other parts


def build_grid(manifest: Manifest, hw_name: str, hw_cc: str, points_limit: int | None,
               gpu_count: int | None = None, tp_filter: Iterable[int] | None = None) -> Grid:
    """The envelope's points for the hardware present; the rest with the reason they are not collected.

    A point at tp = n > 1 needs n GPUs of the kind (one rank per GPU): with `gpu_count` < n it is recorded as
    not collected here, with that reason. tp = 1 always fits (the CPU backend has no GPU at all). With
    `tp_filter` (`--tp`), a point at a TP size not in it is recorded as collected in another bundle.
    """
    wanted = set(tp_filter or ())
    env = manifest.envelope
    other_parts = frozenset(n for n in env.tp if wanted and n not in wanted)
    kinds = {h.name.lower(): h.compute_capability for h in env.hardware}
    here: list[EnvelopePoint] = []
    elsewhere: list[tuple[dict[str, Any], str]] = []
    for p in env.points():
        cc = kinds.get(p.gpu.lower())
        if p.gpu.lower() != hw_name.lower() or cc != hw_cc:
            why = f"needs {p.gpu} (sm {cc}); this machine has {hw_name} (sm {hw_cc}): not collected here"
            elsewhere.append((point_dict(p), why))
        elif wanted and p.tp not in wanted:
            sizes = ",".join(str(n) for n in sorted(wanted))
            why = f"tp={p.tp}: collected in another bundle (--tp filter: this part has tp {sizes})"
            elsewhere.append((point_dict(p), why))
        elif p.tp > 1 and gpu_count is not None and gpu_count < p.tp:
            why = (f"needs {p.tp} x {p.gpu} (tp={p.tp}, one GPU per rank); this machine has {gpu_count}: "
                   "not collected here")
            elsewhere.append((point_dict(p), why))
        else:
            here.append(p)
    if points_limit is not None and len(here) > points_limit:
        ranked = sorted(here, key=lambda p: _priority(env, p))
        keep = {p.key() for p in ranked[:points_limit]}
        for p in here:
            if p.key() not in keep:
                elsewhere.append((point_dict(p), f"left out by --points-limit {points_limit}: not collected"))
        here = [p for p in here if p.key() in keep]
    return Grid(here=[point_dict(p) for p in here], elsewhere=elsewhere, other_parts_tp=other_parts)


def tp_sizes(points: list[dict[str, Any]]) -> list[int]:
    """The TP sizes present in `points`, ascending."""
    return sorted({int(p["tp"]) for p in points})


def sanitizer_points(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per dtype at tp 1: the smallest batch and context (the sanitizers are 10-100x slower, and
    compute-sanitizer runs one process: tp > 1 points are not sanitized)."""
    best: dict[str, dict[str, Any]] = {}
    for p in points:
        if int(p["tp"]) != 1:
            continue
        k = str(p["dtype"])
        if k not in best or (p["batch"], p["context"]) < (best[k]["batch"], best[k]["context"]):
            best[k] = p
    return list(best.values())


# ------------------------------------------------------------------------------------------ work dir
class WorkDir:
    """Per-phase results of one collection, so an interrupted run resumes where it stopped."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def prepare(self, state: dict[str, Any], resume: bool, progress: Progress) -> bool:
        """Make the work dir ready; True if earlier results are reused."""
        state_file = self.path("state.json")
        if resume and state_file.is_file():
            try:
                old = json.loads(state_file.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                old = None
            if old == state:
                return True
            progress.message(f"work dir {self.root} holds results for other code or settings: starting fresh")
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        self.path("bench").mkdir()
        _write_json(state_file, state)
        return False

    def done(self, phase: str) -> bool:
        return self.path(f"{phase}.done.json").is_file()

    def mark_done(self, phase: str, info: dict[str, Any]) -> None:
        _write_json(self.path(f"{phase}.done.json"), info)

    def done_info(self, phase: str) -> dict[str, Any]:
        data = _read_json(self.path(f"{phase}.done.json"))
        return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def default_work_dir(name: str, tp: Iterable[int] = ()) -> Path:
    """`.cache/fasttrack/collect/<name>/`, or `<name>.tp2/` for a --tp part (parts never share one)."""
    sizes = tuple(tp)
    leaf = f"{name}.{part_suffix(sizes)}" if sizes else name
    return Path.cwd() / ".cache" / "fasttrack" / "collect" / leaf


# --------------------------------------------------------------------------------------- subprocesses
def installed_root() -> Path:
    """The installed fasttrack's checkout: where its policies/ and the engine's baselines/ live."""
    return Path(__file__).resolve().parents[2]


# Environment variables that would change how pytest runs the kernel tests (the harness decides that).
PYTEST_ENV = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD_EXCEPT")


def _subprocess_env(contribution: Path, engine_root: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PYTEST_ENV}
    fasttrack_root = str(Path(__file__).resolve().parents[2])
    paths = [str(contribution.resolve().parent), fasttrack_root]
    if engine_root is not None and str(engine_root) != fasttrack_root:
        paths.insert(1, str(engine_root))
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    # The contribution's processes run with the contribution as their working directory, and `python -m`
    # (and `python -c`) would put it first on sys.path: a module there named like a standard-library module
    # the harness imports (json.py beside the kernels: FT136 spares it, the directory has an __init__.py)
    # would run in the bench worker before its timer snapshot, its clock and its result stream exist.
    # PYTHONSAFEPATH (3.11) keeps the working directory off sys.path, in torchrun's ranks too; the
    # contribution is imported as a package from its parent (PYTHONPATH), never by its modules' bare names.
    env["PYTHONSAFEPATH"] = "1"
    # Bytecode goes to (and is read from) a cache outside the tree: no in-tree __pycache__ can stand in for
    # the sources the digest binds.
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "fasttrack-pycache")
    return env


def engine_env(env: dict[str, str], contribution: Path, pycache: Path, import_root: Path | None = None,
               cache: Path | None = None, surface: dict[str, dict[str, str]] | None = None) -> dict[str, str]:
    """The engine pass's environment: the contribution's directory is not on its path and its bytecode
    cache is a fresh directory no contribution process has seen (a poisoned .pyc of an engine module, left
    in the shared cache by contribution code, would otherwise be loaded as the engine's). With
    `import_root` (what the collector passes: `isolation.import_root`) that directory is its whole
    `PYTHONPATH` (no checkout root), followed by the library directories `surface` recorded outside the
    checkout (`isolation.engine_pythonpath`); with `cache`, the user site is off and the
    kernel caches are fresh directories under it (`isolation.engine_cache_env`)."""
    parent = contribution.resolve().parent
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                        if p and Path(p).resolve() != parent)
    if import_root is not None:
        out["PYTHONPATH"] = isolation.engine_pythonpath(import_root, surface or {})
    if cache is not None:
        out.update(isolation.engine_cache_env(cache))
    out["PYTHONPYCACHEPREFIX"] = str(pycache)
    return out


def plugin_args() -> list[str]:
    """`-p` for the plugin unless the pytest11 entry point already loads it (loading it twice fails)."""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return ["-p", PLUGIN]
    try:
        eps = metadata.entry_points(group="pytest11")
    except Exception:  # pragma: no cover - broken metadata
        return ["-p", PLUGIN]
    return [] if any(ep.value == PLUGIN for ep in eps) else ["-p", PLUGIN]


def worker_argv(mode: str, spec_path: Path, nproc: int = 1) -> list[str]:
    """The worker's command line: one process, or `nproc` ranks under torchrun (tensor parallel)."""
    if nproc > 1:
        return torchrun_argv(nproc, WORKER, [mode, str(spec_path)])
    return [sys.executable, "-m", WORKER, mode, str(spec_path)]


PYTEST_INI = "[pytest]\n# written by fasttrack collect: the kernel tests run under the harness's settings\n"


def pytest_argv(tests: list[str], grid_path: Path, results: Path | None, nproc: int = 1,
                contribution: Path | None = None) -> list[str]:
    """The kernel-test command line. At tp = nproc > 1: pytest under torchrun as nproc ranks, only the tests
    that take `envelope_point` (the others ran in the tp-1 run); each rank writes its own results file.

    With `contribution`: `--confcutdir` there and an explicit, empty ini (`-c`, written beside the grid) with
    the contribution as rootdir, so no conftest.py, pytest.ini, tox.ini, setup.cfg or pyproject.toml
    elsewhere in the repository can change how the tests run (only the contribution's own, digested files)."""
    args = ["-p", "no:cacheprovider", *plugin_args()]
    if contribution is not None:
        ini = grid_path.with_name("pytest.ini")
        ini.write_text(PYTEST_INI, encoding="utf-8")
        args += ["-c", str(ini), "--rootdir", str(contribution), "--confcutdir", str(contribution)]
    args += [*tests, "--fasttrack-grid", str(grid_path)]
    if results is not None:
        args += ["--fasttrack-results", str(results)]
    if nproc > 1:
        return torchrun_argv(nproc, "pytest", [*args, "--fasttrack-envelope-only"])
    return [sys.executable, "-m", "pytest", *args]


INTERRUPT_GRACE_S = 20.0


class Deadline:
    """Interrupts a phase's process when the phase's time is up: SIGINT (the workers and pytest record what
    they finished), then SIGKILL after `INTERRUPT_GRACE_S`. `at` is a `time.monotonic()` value (None: no
    limit)."""

    def __init__(self, at: float | None, log: Any) -> None:
        self.at = at
        self.log = log
        self.hit = False
        self._timers: list[threading.Timer] = []

    def remaining(self) -> float | None:
        return None if self.at is None else max(0.0, self.at - time.monotonic())

    def watch(self, proc: subprocess.Popen[bytes]) -> None:
        left = self.remaining()
        if left is None:
            return

        def interrupt() -> None:
            if proc.poll() is None:
                self.hit = True
                self.log.write(b"\n===== collector: the phase's time limit was reached: interrupted\n")
                proc.send_signal(signal.SIGINT)

        def kill() -> None:
            if proc.poll() is None:
                proc.kill()

        for delay, fn in ((left, interrupt), (left + INTERRUPT_GRACE_S, kill)):
            t = threading.Timer(delay, fn)
            t.daemon = True
            t.start()
            self._timers.append(t)

    def cancel(self) -> None:
        for t in self._timers:
            t.cancel()
        self._timers.clear()


def _run_worker(mode: str, spec: dict[str, Any], spec_path: Path, env: dict[str, str], cwd: Path,
                log_path: Path, on_event: Callable[[dict[str, Any]], None] | None = None,
                nproc: int = 1, deadline_at: float | None = None) -> int:
    _write_json(spec_path, spec)
    argv = worker_argv(mode, spec_path, nproc)
    with log_path.open("ab") as log:
        log.write(f"\n===== {mode}: {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=log)
        guard = Deadline(deadline_at, log)
        guard.watch(proc)
        assert proc.stdout is not None
        try:
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace")
                if line.startswith("FTPROGRESS ") and on_event is not None:
                    try:
                        on_event(json.loads(line[len("FTPROGRESS "):]))
                    except json.JSONDecodeError:
                        log.write(raw)
                else:
                    log.write(raw)
            return proc.wait()
        finally:
            guard.cancel()


# ------------------------------------------------------------------------------------------- yardstick
@dataclass(frozen=True)
class Yardstick:
    """The engine side of a collection: the model's baseline from the policy, its digest, the tolerance
    caps, the harness that runs (docs/baseline-contract.md)."""

    spec: BaselineSpec
    engine_root: Path
    digest: ContentDigest
    caps: dict[str, dict[str, float]]
    harness_digest: str
    engine_base_commit: str | None
    # What the engine pass imports and runs at start-up, as it was when the collection started
    # (`isolation.surface`): checked again before every engine pass.
    surface: dict[str, dict[str, str]] = field(default_factory=dict)

    def record(self, model: str) -> BaselineRecord:
        return BaselineRecord(model=model, root=self.spec.root, case=self.spec.case,
                              digest=self.digest.sha256, files=self.digest.files)


def resolve_yardstick(opts: CollectOptions, manifest: Manifest) -> Yardstick:
    """The policy's baseline for the manifest's model, from the engine root (never the contribution)."""
    engine_root = (opts.engine_root or installed_root()).resolve()
    policy_path = (opts.policy or engine_root / "policies" / "vllm.toml").resolve()
    policy: Policy = load_policy(policy_path)
    model = manifest.contribution.model
    spec = policy.baselines.get(model)
    if spec is None:
        raise InputError(f"the policy has no baseline for model {model!r}", path=policy_path,
                         field=f"baselines.{model}",
                         fix="the engine side must provide one (baselines/<engine>/<model>/): a contribution "
                             "is never measured against a stock path of its own")
    root = (engine_root / spec.root).resolve()
    if not root.is_dir():
        raise InputError(f"the baseline directory {spec.root} does not exist under {engine_root}",
                         path=policy_path, field=f"baselines.{model}.root")
    caps = {k: {"atol": c.atol, "rtol": c.rtol, "record": c.record}
            for k, c in policy.evidence.tolerance_caps.items()}
    return Yardstick(spec=spec, engine_root=engine_root, digest=contribution_digest(root), caps=caps,
                     harness_digest=harness_digest(), engine_base_commit=engine_base_commit(engine_root),
                     surface=isolation.surface(engine_root, spec.case, os.environ.get("PYTHONPATH", "")))


# ---------------------------------------------------------------------------------------------- phases
@dataclass
class Run:
    opts: CollectOptions
    manifest: Manifest
    contribution: Path
    work: WorkDir
    env: dict[str, str]
    progress: Progress
    backend: str
    grid: Grid
    yardstick: Yardstick | None = None
    reports: list[PhaseReport] = field(default_factory=list)
    # Processes the collector had before any phase ran: not a phase's leftovers (see `reaper`).
    keep_pids: frozenset[int] = frozenset()
    subreaper: bool = False
    # The bench passes' results as read right after each pass (`_run_pass`): {result file: CaseResult JSON}.
    # The statement's engine figures come only from `engine_results` (never from disk).
    engine_results: dict[str, Any] = field(default_factory=dict)
    case_results: dict[str, Any] = field(default_factory=dict)
    # Every other phase's results, read right after the phase (and what it left running) ended, before any
    # other contribution code ran (`take_custody`): the statement is built from these, never from the work
    # dir at the end. `custody` says, per part, whether this run produced it or resumed it from disk.
    kernel_tests: list[KernelTest] = field(default_factory=list)
    evals: tuple[list[Eval], list[str]] = field(default_factory=lambda: ([], []))
    sanitizer: list[Sanitizer] = field(default_factory=list)
    custody: dict[str, str] = field(default_factory=dict)
    # When the running phase's time is up (`time.monotonic()`; None: no limit).
    deadline_at: float | None = None
    # Whether this run resumed an earlier run's work dir (`WorkDir.prepare`). In a fresh work dir any
    # result a phase finds on disk before it wrote its own was planted by contribution code of this run.
    resumed_work: bool = False

    def log(self, phase: str) -> Path:
        return self.work.path(LOG_FILES[phase])

    def report(self, phase: str, status: str, detail: str = "") -> None:
        self.reports.append(PhaseReport(phase, status, detail))
        self.progress.finish(phase, f"{status}{': ' + detail if detail else ''}")


def _write_grid(path: Path, points: list[dict[str, Any]], run: Run, hw_count: int,
                world_size: int = 1) -> None:
    _write_json(path, {"points": points, "contribution": run.manifest.contribution.name,
                       "backend": run.backend, "gpu_count": hw_count, "world_size": world_size})


def phase_tests(run: Run, hw_count: int) -> None:
    if run.work.done("tests"):
        run.report("tests", "resumed", run.work.done_info("tests").get("detail", ""))
        return
    tests = run.manifest.evidence.kernel_tests
    results = run.work.path("tests.jsonl")
    results.unlink(missing_ok=True)
    sizes = [n for n in tp_sizes(run.grid.here) if n > 1]
    run.progress.start("tests", None, f"kernel tests over {len(run.grid.here)} point(s)")
    # TP 1 (one process): every test; the envelope tests over the tp-1 points only. A part whose --tp filter
    # leaves tp 1 to another part skips it: the tests that take no envelope point run in that part.
    codes: dict[int, int] = {}
    if 1 not in run.grid.other_parts_tp:
        grid_path = run.work.path("grid.json")
        _write_grid(grid_path, [p for p in run.grid.here if p["tp"] == 1], run, hw_count)
        codes[1] = _run_pytest(run, pytest_argv(tests, grid_path, results, contribution=run.contribution),
                               results)
    # TP n > 1 (n ranks under torchrun): the envelope tests over the tp-n points; the ranks' files merged.
    for n in sizes:
        grid_n = run.work.path(f"grid.tp{n}.json")
        _write_grid(grid_n, [p for p in run.grid.here if p["tp"] == n], run, hw_count, world_size=n)
        raw = run.work.path(f"tests.tp{n}.jsonl")
        for r in range(n):
            rank_path(raw, r).unlink(missing_ok=True)
        codes[n] = _run_pytest(run, pytest_argv(tests, grid_n, raw, nproc=n, contribution=run.contribution),
                               rank_path(raw, 0))
        merged = merge_test_lines([_read_lines(rank_path(raw, r)) for r in range(n)])
        with results.open("a", encoding="utf-8") as fh:
            for line in merged:
                fh.write(json.dumps(line, sort_keys=True) + "\n")
    lines = _count_lines(results)
    run.progress.advance("tests", lines, lines)
    one = (f", pytest exit code {codes[1]}" if 1 in codes
           else ", tp 1 and the tests without an envelope point left to the tp-1 part")
    detail = f"{lines} result(s){one}" + "".join(
        f", tp={n} (torchrun, {n} ranks) exit code {codes[n]}" for n in sizes)
    # 0: all passed, 1: some failed; anything else: pytest itself failed. Under torchrun a failing test
    # exits 1 too (torchrun reports any rank's non-zero exit as 1): the merged lines say what happened.
    failed = [n for n, rc in codes.items() if rc not in (0, 1)]
    if failed:
        run.report("tests", "failed", detail + f" (see {LOG_FILES['tests']})")
        return
    run.work.mark_done("tests", {"returncode": max(codes.values(), default=0),
                                 "returncodes": {str(k): v for k, v in codes.items()}, "detail": detail})
    run.report("tests", "ran", detail)


def _run_pytest(run: Run, base: list[str], watch: Path) -> int:
    with run.log("tests").open("ab") as fh:
        fh.write(f"\n===== tests: {' '.join(base)}\n".encode())
        fh.flush()
        proc = subprocess.Popen([*base, "-q", "-rfEs"], cwd=run.contribution, env=run.env, stdout=fh,
                                stderr=subprocess.STDOUT)
        guard = Deadline(run.deadline_at, fh)
        guard.watch(proc)
        try:
            while proc.poll() is None:
                time.sleep(0.5)
                run.progress.advance("tests", _count_lines(watch), None, "results so far")
        finally:
            guard.cancel()
    return proc.returncode


def _read_lines(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return out
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(line, dict) and "nodeid" in line:
            out.append(line)
    return out


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


def phase_bench(run: Run) -> None:
    entry = run.manifest.evidence.benchmark
    if entry is None:
        run.report("bench", "skipped", "the manifest names no benchmark entry point")
        return
    jobs: list[dict[str, Any]] = []
    engine_jobs: list[dict[str, Any]] = []
    for i, p in enumerate(run.grid.here):
        out = run.work.path("bench", f"{i:04d}-{hashlib.sha256(point_key(p).encode()).hexdigest()[:12]}.json")
        # The engine's figures are never taken from disk: contribution code of this run or an earlier one
        # could have planted or rewritten a result file there. Every point's engine pass runs in this run
        # and its result is read back right after it, before contribution code runs again (`_run_pass`).
        engine_jobs.append({"index": i, "point": p, "out": str(engine_result_path(out))})
        # Nor the contribution pass's: a resumed file could have been rewritten by contribution code of a
        # later phase of the earlier run (its evals, its sanitizer tests), and both passes of a point must
        # come from this run to be compared. The bench phase always runs whole.
        jobs.append({"index": i, "point": p, "out": str(out)})
    total = len(run.grid.here)
    run.progress.start("bench", total, f"benchmarks at {total} point(s)")
    run.progress.advance("bench", total - len(jobs), total)
    done = total - len(jobs)

    def on_event(ev: dict[str, Any]) -> None:
        nonlocal done
        if ev.get("event") == "done":
            done += 1
            run.progress.advance("bench", done, total, f"point {ev.get('index')}: {ev.get('status')}")
        elif ev.get("event") == "step":
            run.progress.advance("bench", done, total, f"replay {ev.get('done')}/{ev.get('total')}")

    codes: dict[str, int] = {}
    yard = run.yardstick
    assert yard is not None  # resolved before any phase runs
    for n in tp_sizes([j["point"] for j in engine_jobs]):  # one worker (n ranks under torchrun) per TP size
        group = [j for j in jobs if j["point"]["tp"] == n]
        baseline_spec = {"case": yard.spec.case, "search_dir": str(yard.engine_root), "caps": yard.caps}
        spec = {"backend": run.backend, "entry": entry, "search_dir": str(run.contribution.resolve().parent),
                "iterations": run.opts.iterations, "warmup": run.opts.warmup,
                "flush_bytes": run.opts.flush_bytes, "world_size": n,
                "baseline": baseline_spec}
        # First the engine's own pass: stock and the engine's extra variants alone, in a process that never
        # imports the contribution, started after every earlier phase's processes are gone and from files
        # checked against the digests recorded at the start (docs/baseline-contract.md). Its stock is the
        # one the statement's ratios use; the contribution's pass that follows times stock again beside the
        # candidates, and the two must agree (FT347).
        engine_group = [j for j in engine_jobs if j["point"]["tp"] == n]
        if engine_group:
            problem = _engine_pass_problem(run)
            if problem is not None:
                with run.log("bench").open("a", encoding="utf-8") as fh:
                    fh.write(f"\n===== collector: the engine pass did not start: {problem}\n")
                run.report("bench", "failed", problem)
                return
            engine_spec = {**spec, "engine_only": True, "points": engine_group,
                           "baseline": {**baseline_spec, "search_dir": str(run.work.path("engine-path"))}}
            codes[f"engine tp={n}"] = _run_pass(run, engine_spec,
                                                f"bench.engine{'' if n == 1 else f'.tp{n}'}.spec.json",
                                                engine_group, n, None, engine=True)
        codes[f"tp={n}"] = _run_pass(run, {**spec, "points": group},
                                     "bench.spec.json" if n == 1 else f"bench.tp{n}.spec.json", group, n,
                                     on_event, engine=False)
    rc = max(codes.values(), default=0)
    missing = [j for j in jobs if j["out"] not in run.case_results]
    missing += [j for j in engine_jobs if j["out"] not in run.engine_results]
    if rc != 0 or missing:
        exits = ", ".join(f"{n}: {c}" for n, c in codes.items())
        run.report("bench", "failed", f"worker exit code(s) {exits}; {len(missing)} point(s) without a "
                                      f"result (see {LOG_FILES['bench']}; run again to resume)")
        return
    run.report("bench", "ran", f"{len(jobs)} point(s) measured (the engine's pass and the contribution's)")


def engine_result_path(out: Path) -> Path:
    """Where the engine pass writes a point's result: `bench/engine/<the point's file name>`."""
    return out.parent / "engine" / out.name


def _engine_pass_problem(run: Run) -> str | None:
    """Why the engine pass may not start now, or None: a process an earlier phase left running is killed
    first, and the baseline and the harness on disk must still be the ones recorded at the start (contribution
    code ran in the earlier phases and could have edited them, to be restored before the end)."""
    reap_after(run, "earlier")
    yard = run.yardstick
    assert yard is not None
    base_root = yard.engine_root / yard.spec.root
    if contribution_digest(base_root).sha256 != yard.digest.sha256:
        return (f"the engine's baseline ({yard.spec.root}) changed on disk after the collection started "
                "(contribution code ran in an earlier phase): nothing is measured against an edited "
                "yardstick")
    if harness_digest() != yard.harness_digest:
        return ("fasttrack's evidence harness changed on disk after the collection started (contribution "
                "code ran in an earlier phase): re-install fasttrack and collect again")
    # What the engine process imports is a copy of the checked trees, made now (no contribution code runs
    # until the pass has ended): an edit made after this check is not seen by the pass.
    return isolation.import_root(run.work.path("engine-path"), yard.engine_root, yard.spec.case, yard.surface)


def reap_after(run: Run, phase: str) -> None:
    """Kill what a phase left running; say so in the bench log and on the progress display."""
    reaped = reaper.reap(run.keep_pids)
    problem = reaped.problem(phase)
    if problem is not None:
        with run.log("bench").open("a", encoding="utf-8") as fh:
            fh.write(f"\n===== collector: {problem}; the collection is refused\n")
        raise InputError(problem, path=run.work.root,
                         fix="a contribution's processes must end with their phase: nothing it starts may "
                             "keep running (or re-spawning) after it")
    note = reaped.note(phase)
    if note is None:
        return
    run.progress.message(note)
    with run.log("bench").open("a", encoding="utf-8") as fh:
        fh.write(f"\n===== collector: {note}\n")


def _run_pass(run: Run, spec: dict[str, Any], spec_name: str, group: list[dict[str, Any]], n: int,
              on_event: Callable[[dict[str, Any]], None] | None, engine: bool) -> int:
    """One bench pass (n ranks under torchrun when n > 1) over `group`; returns the worker's exit code.

    Its results are what the worker streamed to the collector during the pass (`fasttrack.evidence.stream`:
    a socket the collector listens on, a nonce it generated, point and variant ids it assigned; every sample
    as it is measured, each point's record after it), taken into the collector's custody
    (`Run.engine_results`, `Run.case_results`) once the pass and what it left running are gone. Nothing the
    worker wrote to disk is read back: its files stay in the work dir as a record, but an exit hook of
    contribution code that rewrites them, or a later pass, phase or detached process that does, changes
    nothing; a record rewritten in the worker's memory no longer matches its streamed samples and is
    rejected. At tp = n > 1 the ranks' streamed records are merged here."""
    if not group:
        return 0
    for j in group:  # never leave a file of an earlier run that looks like this pass's record
        Path(j["out"]).unlink(missing_ok=True)
    if n > 1:
        for j in group:  # stale rank files of an interrupted run must not mix with this one's
            for r in range(n):
                rank_path(Path(j["out"]), r).unlink(missing_ok=True)
    env, cwd = run.env, run.contribution
    if engine:
        cwd = run.work.path("engine-cwd")
        pycache = run.work.path("engine-pycache")
        cache = run.work.path("engine-cache")
        for d in (cwd, pycache, cache):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        yard = run.yardstick
        env = engine_env(run.env, run.contribution, pycache, run.work.path("engine-path"), cache,
                         yard.surface if yard is not None else None)
        for j in group:
            Path(j["out"]).parent.mkdir(parents=True, exist_ok=True)
    server = StreamServer(n, "engine" if engine else "contribution", [j["out"] for j in group],
                          points={j["out"]: dict(j["point"]) for j in group})
    spec = {**spec, "points": [{**j, "id": server.point_ids[j["out"]]} for j in spec["points"]]}
    try:
        code = _run_worker("bench", spec, run.work.path(spec_name), {**env, **server.env()}, cwd,
                           run.log("bench"), on_event, nproc=n, deadline_at=run.deadline_at)
    finally:
        server.finish()
    notes = server.notes()
    if notes:
        with run.log("bench").open("a", encoding="utf-8") as fh:
            for note in notes:
                fh.write(f"\n===== collector: {'engine' if engine else 'contribution'} pass stream: {note}\n")
    reap_after(run, "engine bench pass" if engine else "bench")
    custody = run.engine_results if engine else run.case_results
    for j in group:
        per_rank = server.records(j["out"])
        if any(r is None for r in per_rank):
            continue  # a rank streamed no usable record: the point did not finish in this pass
        data: Any = per_rank[0] if n == 1 else merge_case_results(per_rank, j["point"])
        if _valid_case_data(data):
            custody[j["out"]] = data
            _write_json(Path(j["out"]), data)  # the work dir's record of what the statement is built from
    return code


def merge_rank_files(outs: list[Path], points: list[dict[str, Any]], world: int) -> int:
    """Merge each point's per-rank result files into its result file; returns how many were merged. A point
    for which some rank wrote nothing (the run stopped there) is left unmerged, so a resumed run redoes it."""
    merged = 0
    for out, point in zip(outs, points, strict=True):
        per_rank = [_read_json(rank_path(out, r)) for r in range(world)]
        if any(not isinstance(x, dict) for x in per_rank):
            continue
        _write_json(out, merge_case_results(per_rank, point))
        merged += 1
    return merged


def bench_case_files(bench_dir: Path) -> list[Path]:
    """The points' result files in the bench work dir. A tp > 1 point's rank files (`<out>.rank<r>.json`)
    are not results (only their merge is), and one whose merge is missing is a point that did not finish."""
    return [p for p in sorted(bench_dir.glob("*.json")) if not is_rank_path(p)]


def _valid_case_data(data: Any) -> bool:
    from fasttrack.evidence.measurement import Measurement

    if data is None:
        return False
    try:
        Measurement.model_validate(data)
    except ValidationError:
        return False
    return True


def phase_evals(run: Run) -> None:
    entry = run.manifest.evidence.evals
    out = run.work.path("evals.json")
    if entry is None:
        run.report("evals", "skipped", "the manifest names no evals entry point")
        return
    if run.work.done("evals") and out.is_file():
        run.report("evals", "resumed")
        return
    run.progress.start("evals", 1, "model-level evals")
    spec = {"entry": entry, "search_dir": str(run.contribution.resolve().parent), "out": str(out),
            "device": "cuda" if run.backend == "cuda" else "cpu"}
    rc = _run_worker("evals", spec, run.work.path("evals.spec.json"), run.env, run.contribution,
                     run.log("evals"), deadline_at=run.deadline_at)
    if rc != 0 or not out.is_file():
        run.report("evals", "failed",
                   f"the evals entry point failed (exit code {rc}; see {LOG_FILES['evals']})")
        return
    run.work.mark_done("evals", {"returncode": rc})
    run.progress.advance("evals", 1, 1)
    run.report("evals", "ran")


def phase_sanitizer(run: Run, hw_count: int) -> None:
    tests = run.manifest.evidence.sanitizer_tests
    out = run.work.path("sanitizer.json")
    if not tests:
        run.report("sanitizer", "skipped", "the manifest names no sanitizer tests")
        return
    if run.work.done("sanitizer") and out.is_file():
        run.report("sanitizer", "resumed")
        return
    run.progress.start("sanitizer", len(san.TOOLS), "compute-sanitizer")
    results: list[san.SanitizerRun]
    reused: list[str] = []  # tools whose result was taken from a resumed work dir
    tool = san.find_sanitizer()
    points = sanitizer_points(run.grid.here)
    if run.backend != "cuda":
        results = san.not_run("no CUDA GPU on this machine", tests)
    elif not points:
        results = san.not_run("no tp-1 point for this machine: the sanitizer runs at tp 1 only", tests)
    elif tool is None:
        results = san.not_run("compute-sanitizer is not installed (not on PATH, not under CUDA_HOME)", tests)
    else:
        grid_path = run.work.path("grid.sanitizer.json")
        _write_grid(grid_path, points, run, hw_count)
        # The same isolation as the kernel tests: no conftest or ini outside the contribution takes part.
        argv = pytest_argv(tests, grid_path, None, contribution=run.contribution)
        argv = [*argv[:3], "-q", *argv[3:]]
        # Each tool's result is written as soon as it finishes (a phase cut short keeps what ran, and a
        # resumed phase runs only the tools still missing); the rest read "not run" until they have run.
        # Only a resumed work dir holds results of an earlier run; in a fresh one, a sanitizer.json there
        # was written by contribution code of an earlier phase of this run (its kernel tests can write the
        # work dir) and is never taken as a tool that ran. What is reused is custody "resumed" (FT349).
        earlier = (_read_json(out) or []) if run.resumed_work else []
        done = {str(d.get("tool")): d for d in earlier if isinstance(d, dict) and d.get("ran")}
        reused = [name for name in san.TOOLS if name in done]
        results = []
        for i, name in enumerate(san.TOOLS):
            run.progress.advance("sanitizer", i, len(san.TOOLS), name)
            if name in done:
                results.append(san.SanitizerRun(**{k: v for k, v in done[name].items() if k != "tp"}))
                continue
            pending = san.not_run("the sanitizer phase stopped before this tool finished", tests)
            _write_json(out, [{**r.__dict__, "tp": 1} for r in
                              [*results, *[p for p in pending if p.tool not in {r.tool for r in results}]]])
            left = None if run.deadline_at is None else run.deadline_at - time.monotonic()
            if left is not None and left < 1:
                results.extend(p for p in pending if p.tool not in {r.tool for r in results})
                break
            cap = run.opts.sanitizer_timeout_s
            timeout_s = cap if left is None else min(cap, left)
            results.append(san.run_tool(name, tool, argv, tests, run.contribution, run.env,
                                        run.log("sanitizer"), timeout_s))
    _write_json(out, [{**r.__dict__, "tp": 1} for r in results])  # compute-sanitizer runs one process: tp 1
    run.work.mark_done("sanitizer", {})
    run.progress.advance("sanitizer", len(san.TOOLS), len(san.TOOLS))
    ran = [r for r in results if r.ran]
    status = "resumed" if reused else ("ran" if ran else "skipped")
    run.report("sanitizer", status,
               ", ".join(f"{r.tool}: {r.errors} error(s)" if r.ran else f"{r.tool}: not run ({r.reason})"
                         for r in results))


# ---------------------------------------------------------------------------------------- the bundle
def _kernel_tests(path: Path) -> list[KernelTest]:
    out: list[KernelTest] = []
    if not path.is_file():
        return out
    for raw in path.read_text(encoding="utf-8").splitlines():
        if not raw.strip():
            continue
        line = json.loads(raw)
        extra = {str(k): (v if v is None or isinstance(v, str | int | float | bool) else json.dumps(v))
                 for k, v in (line.get("extra") or {}).items()}
        max_error = line.get("max_error")
        if not isinstance(max_error, int | float) or not math.isfinite(max_error) or max_error < 0:
            if max_error is not None:
                extra["max_error_raw"] = str(max_error)
            max_error = None
        extra = {k: v for k, v in extra.items() if not (isinstance(v, float) and not math.isfinite(v))}
        out.append(KernelTest(
            nodeid=line["nodeid"], point=line.get("point"), outcome=line["outcome"], max_error=max_error,
            tolerance=line.get("tolerance"), duration_s=line.get("duration_s"),
            message=(line.get("message") or None), extra=extra,
        ))
    return out


def benchmark_entry(case: dict[str, Any], alone: dict[str, Any] | None = None) -> Benchmark:
    """A point's two passes in the bundle's Benchmark shape: `case`, the contribution's pass (stock beside
    the candidates), and `alone`, the engine's own pass (stock and the engine's variants in a process that
    never imported the contribution). The engine-origin variants, their oracle checks and their accuracy
    come from `alone`; stock as timed beside the candidates is kept as `stock_beside` (FT347 compares the
    two). Without `alone` (a collection that ran no engine pass) the point carries no separation record."""
    own = _single_pass_entry(case)
    if alone is None:
        return own
    engine = _single_pass_entry(alone)
    if engine.not_run is not None:
        why = f"the engine's own pass: {engine.not_run}"
        return Benchmark(point=own.point, not_run=why[:4096], not_run_by=engine.not_run_by or "engine",
                         world_size=engine.world_size)
    if own.not_run is not None:
        return own
    engine_names = [n for n, v in engine.variants.items() if v.origin == "engine"]
    variants = {n: v for n, v in own.variants.items() if n not in engine_names}
    variants = {**{n: engine.variants[n] for n in engine_names}, **variants}
    accuracy = {n: a for n, a in own.accuracy.items() if n not in engine_names}
    accuracy.update({n: engine.accuracy[n] for n in engine_names if n in engine.accuracy})
    oracle = {n: o for n, o in own.oracle.items() if n not in engine_names}
    oracle.update({n: engine.oracle[n] for n in engine_names if n in engine.oracle})
    rejected = [*own.rejected, *(f"the engine's own pass: {r}" for r in engine.rejected)]
    return own.model_copy(update={
        "variants": variants, "accuracy": accuracy, "oracle": oracle, "rejected": rejected[:256],
        "stock_beside": own.variants.get(STOCK_VARIANT), "separation": "engine-process",
    })


def _single_pass_entry(case: dict[str, Any]) -> Benchmark:
    """One pass's record of a point (`Measurement`, as streamed and merged) as the bundle's Benchmark.

    The protocol, variants, accuracy, oracle checks and ranks are the record's own models (one schema from
    the worker to the bundle: `fasttrack.evidence.measurement`); only the point-level status becomes the
    bundle's `not_run` (a point not measured) or `rejected` (a measured point a check failed)."""
    from fasttrack.evidence.measurement import Measurement

    res = Measurement.model_validate(case)
    point = {k: res.point[k] for k in ("gpu", "tp", "batch", "context", "dtype")}
    if res.status == "not_run" or res.protocol is None:
        why = "; ".join(res.reasons) or "not run"
        if res.status == "rejected" and res.not_run_by is None:
            why = f"rejected by the timing protocol: {why}"
        return Benchmark(point=point, not_run=why[:4096], not_run_by=res.not_run_by,
                         world_size=res.world_size if res.world_size > 1 else None)
    accuracy = {name: a for name, a in res.accuracy.items() if a.checked or not a.ok}
    return Benchmark(point=point, protocol=res.protocol, variants=res.variants, accuracy=accuracy,
                     layers=res.layers or 1, rejected=res.reasons[:256], world_size=res.world_size,
                     ranks=res.ranks, oracle=res.oracle, not_run_by=res.not_run_by)


def with_backends(bench: Benchmark, stages: list[StageBackends]) -> Benchmark:
    """`bench` with the backend of each policy stage read off stock's profiled kernel names."""
    stock = bench.variants.get(STOCK_VARIANT)
    if bench.not_run is not None or stock is None or not stages:
        return bench
    names = list((stock.kernel_times_us or {}).keys())
    found: dict[str, str | None] = {s.stage: identify(s, names).accepted for s in stages}
    return bench.model_copy(update={"backends": found})


def _eval_entries(path: Path) -> tuple[list[Eval], list[str]]:
    data = _read_json(path)
    if not isinstance(data, list):
        return [], [] if data is None else ["the evals entry point did not return a list"]
    evals, problems = [], []
    for i, item in enumerate(data):
        if isinstance(item, dict):
            item = {**item, "tp": 1}  # the evals run in one process, on one GPU: tp 1
        try:
            evals.append(Eval.model_validate(item))
        except ValidationError as exc:
            problems.append(f"eval [{i}] is invalid: {exc.errors()[0].get('msg')}")
    return evals, problems


def _finite_only(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite_only(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_only(v) for v in value]
    return value


def lm_eval_entries(contribution: Path, files: Iterable[str]) -> list[dict[str, Any]]:
    """Metrics from lm-evaluation-harness result files (the files themselves are in the subject digest)."""
    out: list[dict[str, Any]] = []
    for rel in files:
        path = contribution / rel
        if not path.is_file():
            raise InputError("lm-evaluation-harness result file not found", path=path,
                             field="evidence.lm_eval_results", fix="list files relative to the contribution")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"not a JSON file: {exc}", path=path, field="evidence.lm_eval_results") from None
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, dict):
            raise InputError("not an lm-evaluation-harness result file (no 'results' object)", path=path,
                             field="evidence.lm_eval_results")
        metrics = {
            str(task): {str(k): v for k, v in m.items()
                        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}
            for task, m in results.items() if isinstance(m, dict)
        }
        cfg = data.get("config") if isinstance(data.get("config"), dict) else {}
        out.append(_finite_only({
            "file": rel, "sha256": sha256_file(path), "metrics": metrics,
            "model": cfg.get("model"), "model_args": cfg.get("model_args"),
            "versions": data.get("versions", {}), "n-shot": data.get("n-shot", {}),
            "task_hashes": data.get("task_hashes", {}),
        }))
    return out


def build_statement(run: Run, digest: ContentDigest, environment: dict[str, Any],
                    logs: dict[str, str]) -> Statement:
    stages = (run.yardstick.spec.stages_for(str(environment.get("compute_capability")))
              if run.yardstick else [])
    # A point's two passes from the collector's custody (see `_run_pass`); an assemble-only run has no
    # engine figures of its own, so its points carry no engine pass (FT347 says so).
    files = [Path(p) for p in sorted(run.case_results)]
    alone = run.engine_results
    benchmarks = [with_backends(benchmark_entry(run.case_results[str(p)],
                                                alone.get(str(engine_result_path(p)))), stages)
                  for p in files]
    measured = {point_key(b.point.as_dict()) for b in benchmarks}
    for p, why in run.grid.elsewhere:
        if point_key(p) not in measured:
            benchmarks.append(Benchmark(point=p, not_run=why))
    if "bench" in run.opts.phases and run.manifest.evidence.benchmark is not None:
        for p in run.grid.here:
            if point_key(p) not in measured:
                why = "the benchmark phase did not finish for this point"
                benchmarks.append(Benchmark(point=p, not_run=why))
    evals, problems = run.evals
    for prob in problems:
        run.progress.message(f"evals: {prob}")
    sanitizer = run.sanitizer
    env_model = Environment.model_validate({
        k: environment.get(k) for k in Environment.model_fields if k in environment
    })
    manifest_path = run.contribution / "fasttrack.toml"
    predicate = Predicate(
        contribution=run.manifest.contribution.name, model=run.manifest.contribution.model,
        manifest_sha256=sha256_file(manifest_path), files=digest.files,
        collected_at=utc_now_iso(),
        collector=Collector(fasttrack_version=__version__, command=run.opts.command[:4096],
                            hostname=socket.gethostname()[:256],
                            harness_digest=run.yardstick.harness_digest if run.yardstick else None,
                            engine_base_commit=run.yardstick.engine_base_commit if run.yardstick else None,
                            custody=dict(sorted(run.custody.items())) or None),
        environment=env_model,
        kernel_tests=run.kernel_tests if "tests" in run.opts.phases else [],
        benchmarks=benchmarks if "bench" in run.opts.phases else [],
        evals=evals if "evals" in run.opts.phases else [],
        lm_eval=lm_eval_entries(run.contribution, run.manifest.evidence.lm_eval_results)
        if "evals" in run.opts.phases else [],
        sanitizer=sanitizer if "sanitizer" in run.opts.phases else [],
        logs=logs,
        baseline=run.yardstick.record(run.manifest.contribution.model) if run.yardstick else None,
    )
    return new_statement(contribution=run.manifest.contribution.name, subject_sha256=digest.sha256,
                         predicate=predicate)


# ------------------------------------------------------------------------------------------- driver
def collect(opts: CollectOptions, progress: Progress | None = None) -> CollectResult:
    progress = progress if progress is not None else NullProgress()
    contribution = opts.contribution.resolve()
    manifest = load_manifest(contribution)
    unknown = [p for p in opts.phases if p not in PHASES]
    if unknown:
        raise InputError(f"unknown phase(s) {', '.join(unknown)}", field="--phases",
                         fix=f"choose from {','.join(PHASES)}")
    if opts.iterations < 2:
        raise InputError("must be at least 2 (both orders)", field="--iterations")
    if opts.points_limit is not None and opts.points_limit < 1:
        raise InputError("must be at least 1", field="--points-limit")
    bad_tp = sorted({n for n in opts.tp if n not in manifest.envelope.tp})
    if bad_tp:
        raise InputError(f"tp {', '.join(map(str, bad_tp))} is not in the envelope's tp "
                         f"{list(manifest.envelope.tp)}", field="--tp",
                         fix="pass TP sizes the manifest's [envelope].tp declares")
    bundle_name = resolve_bundle_name(opts, manifest.envelope.tp)
    tp_filter = tuple(sorted(set(opts.tp))) if opts.tp and set(opts.tp) != set(manifest.envelope.tp) else ()
    if (opts.sign_key is None) != (opts.principal is None):
        raise InputError("--sign-key and --principal go together", field="--sign-key",
                         fix="pass both (the principal is the name in the allowed-signers file) or neither")
    name = manifest.contribution.name
    out = (opts.out or Path("evidence") / name).resolve()
    inside = out == contribution or contribution in out.parents
    if inside and not (out == contribution / "evidence" or (contribution / "evidence") in out.parents):
        raise InputError("the bundle may not be written inside the contribution (it would change its digest)",
                         field="--out", fix=f"use evidence/{name}/ at the repository root")
    digest = contribution_digest(contribution)
    if digest.unhashed:
        first = digest.unhashed[0]
        raise InputError(f"{len(digest.unhashed)} file(s) Python could import are not bound by the content "
                         f"digest, e.g. {first.path} ({first.reason})", path=contribution,
                         fix="delete them (caches, stray bytecode) or move them out of the contribution")
    yardstick = resolve_yardstick(opts, manifest)
    env = _subprocess_env(contribution, yardstick.engine_root)
    # Orphans of the processes the phases start are re-parented here, so each phase's leftovers are killed.
    subreaper = reaper.become_subreaper()
    # Processes the collector had before it started any: never a phase's leftovers (see `reaper`).
    keep_pids = frozenset(pid for pid, _name in reaper.children(os.getpid()))
    work = WorkDir((opts.work_dir or default_work_dir(name, tp_filter)).resolve())
    # Results are reused only for the same code, settings, TP filter and machine (the environment is read
    # once).
    state = {"version": STATE_VERSION, "fasttrack": __version__, "digest": digest.sha256,
             "iterations": opts.iterations, "warmup": opts.warmup, "points_limit": opts.points_limit,
             "flush_bytes": opts.flush_bytes, "hostname": socket.gethostname(), "tp": list(tp_filter),
             "baseline": yardstick.digest.sha256, "harness": yardstick.harness_digest,
             "only": sorted(opts.only_points)}
    resumed = work.prepare(state, opts.resume, progress)
    if resumed:
        progress.message(f"resuming from {work.root}")

    # The environment first (a worker subprocess: the collector itself never imports torch).
    env_file = work.path("environment.json")
    env_custody = "resumed" if resumed and env_file.is_file() else "this-run"
    if env_custody == "this-run":
        progress.start("environment", 1, "environment")
        # The collector's own reading of the machine: from an empty working directory (`python -m` puts
        # the working directory first on sys.path, and the contribution's would let a module of it named
        # like one the probe imports run in the probe), without the contribution's parent on its path
        # (PYTHONSAFEPATH too) and with a fresh bytecode cache.
        probe_cwd = work.path("env-cwd")
        shutil.rmtree(probe_cwd, ignore_errors=True)
        probe_cwd.mkdir(parents=True)
        probe_env = {**engine_env(env, contribution, work.path("env-pycache")), "PYTHONSAFEPATH": "1"}
        rc = _run_worker("env", {"out": str(env_file), "measure_bandwidth": opts.measure_bandwidth},
                         work.path("env.spec.json"), probe_env, probe_cwd, work.path("bench.log"))
        if rc != 0 or not env_file.is_file():
            raise InputError(f"could not read this machine's environment (worker exit code {rc})",
                             path=work.path("bench.log"), fix="see the log; is torch installed?")
        progress.finish("environment")
    environment = _read_json(env_file)
    # The backend follows the hardware: CUDA wherever a GPU is present (the CPU backend would time
    # asynchronous GPU work by its launch cost), the CPU backend only on a machine without one.
    backend_kind = "cuda" if environment.get("extra", {}).get("backend") == "cuda" else "cpu"
    hw_count = int(environment.get("gpu_count") or 0)
    grid = build_grid(manifest, environment["gpu_name"], environment["compute_capability"], opts.points_limit,
                      gpu_count=hw_count, tp_filter=tp_filter)
    if opts.only_points:
        wanted = set(opts.only_points)
        grid.elsewhere += [(p, "left out by the point selection: not collected") for p in grid.here
                           if point_key(p) not in wanted]
        grid.here = [p for p in grid.here if point_key(p) in wanted]
    if not grid.here:
        progress.message(f"no envelope point is for this machine's hardware ({environment['gpu_name']}, "
                         f"sm {environment['compute_capability']}): every point is recorded as not collected")
    run = Run(opts=opts, manifest=manifest, contribution=contribution, work=work, env=env, progress=progress,
              backend=backend_kind, grid=grid, yardstick=yardstick, subreaper=subreaper,
              keep_pids=keep_pids, resumed_work=resumed)
    reap_after(run, "environment")  # the probe imports torch: nothing it started may stay
    run.custody["environment"] = env_custody
    nothing_here = f"no envelope point for this machine's hardware ({environment['gpu_name']})"
    for phase in PHASES:
        if phase not in opts.phases:
            continue
        if opts.assemble_only:
            run.report(phase, "resumed" if work.done(phase) else "skipped",
                       "assembled from what the work dir recorded (nothing was run)")
            take_custody(run, phase, resumed=True)
            continue
        limit = opts.phase_limits.get(phase)
        run.deadline_at = None if limit is None else time.monotonic() + limit
        if phase == "evals":
            phase_evals(run)
        elif not grid.here:
            if phase == "sanitizer":
                skipped = san.not_run(nothing_here, run.manifest.evidence.sanitizer_tests)
                _write_json(work.path("sanitizer.json"), [{**r.__dict__, "tp": 1} for r in skipped])
            run.report(phase, "skipped", nothing_here)
        elif phase == "tests":
            phase_tests(run, hw_count)
        elif phase == "bench":
            phase_bench(run)
        else:
            phase_sanitizer(run, hw_count)
        reap_after(run, phase)
        run.deadline_at = None
        take_custody(run, phase, resumed=bool(run.reports) and run.reports[-1].phase == phase
                     and run.reports[-1].status == "resumed")
    return write_bundle(run, digest, environment, out, bundle_name)


def take_custody(run: Run, phase: str, resumed: bool) -> None:
    """Read a phase's results into the run right after it (and what it left running) ended, before any other
    contribution code runs; the statement is built from what was read here. Bench results are taken by
    `_run_pass` (per pass), so only their provenance is recorded here."""
    work = run.work
    try:
        if phase == "tests":
            run.kernel_tests = _kernel_tests(work.path("tests.jsonl"))
        elif phase == "evals":
            run.evals = _eval_entries(work.path("evals.json"))
        elif phase == "sanitizer":
            raw = _read_json(work.path("sanitizer.json")) or []
            run.sanitizer = [Sanitizer.model_validate(d) for d in raw]
    except (ValidationError, json.JSONDecodeError, TypeError, AttributeError) as exc:
        raise InputError(f"the {phase} phase's results do not fit the bundle schema: {exc}"[:600],
                         path=work.root, fix="this is a fasttrack bug; report it with the work dir") from None
    run.custody[phase] = "resumed" if resumed else "this-run"


def write_bundle(run: Run, digest: ContentDigest, environment: dict[str, Any], out: Path,
                 bundle_name: str = DEFAULT_BUNDLE_NAME) -> CollectResult:
    from fasttrack.evidence.digest import contribution_digest as redigest

    again = redigest(run.contribution)
    if again.sha256 != digest.sha256:
        raise InputError("the contribution's files changed while evidence was being collected",
                         path=run.contribution, fix="run collect again on an unchanged tree")
    if run.yardstick is not None:
        base_root = run.yardstick.engine_root / run.yardstick.spec.root
        if redigest(base_root).sha256 != run.yardstick.digest.sha256:
            raise InputError("the engine's baseline changed while evidence was being collected",
                             path=base_root, fix="run collect again on an unchanged tree")
    out.mkdir(parents=True, exist_ok=True)
    statement_name, signature_name, log_names = bundle_files(bundle_name)
    # Only this part's own files are replaced; other parts beside it are left alone (and named).
    ours = [statement_name, signature_name, *log_names.values()]
    for stale in (out / f for f in ours):
        stale.unlink(missing_ok=True)
    others = sorted(p.name for p in out.glob("*.json") if p.name != statement_name)
    if others:
        run.progress.message(f"{out} also holds {', '.join(others)}: verification judges every statement "
                             "there together (each point must come from exactly one of them)")
    logs: dict[str, str] = {}
    for phase, fname in LOG_FILES.items():
        src = run.work.path(fname)
        if phase in run.opts.phases and src.is_file():
            dest = log_names[phase]
            shutil.copyfile(src, out / dest)
            logs[dest] = sha256_file(out / dest)
    try:
        statement = build_statement(run, digest, environment, logs)
    except ValidationError as exc:
        raise InputError(f"the collected results do not fit the bundle schema: {exc.errors()[0]}",
                         path=run.work.root,
                         fix="this is a fasttrack bug; report it with the work dir") from None
    statement_path = out / statement_name
    tmp = statement_path.with_name(statement_name + ".tmp")
    tmp.write_bytes(statement.to_json_bytes())
    os.replace(tmp, statement_path)
    result = CollectResult(bundle_dir=out, statement_path=statement_path, signature_path=None,
                           reports=run.reports)
    if run.opts.sign_key is not None:
        from fasttrack.evidence.signing import parse_signature, sign_file

        result.signature_path = sign_file(statement_path, run.opts.sign_key)
        try:
            sig = parse_signature(result.signature_path.read_bytes())
            result.allowed_signers_line = sig.allowed_signers_line(run.opts.principal or "")
        except ValueError:
            result.allowed_signers_line = None
    return result
