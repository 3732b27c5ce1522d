"""Run the traced child: a fresh temp directory, an empty environment, no network, rlimits, a timeout.

Layout of the sandbox (one `mkdtemp`, removed afterwards):

    tool/_fasttrack_trace/   the child's own modules (child, snapshot, *_state, standins), read-only
    src/                     the contribution's files, read-only (the checkout itself is never opened)
    home/ work/ tmp/         HOME, the working directory and TMPDIR: the only places it may write

The child runs as `python -I -B` (no PYTHON* variables, no user site, no bytecode written) under
`unshare -rnm` where the kernel allows it: a user, network and mount namespace in which every mount is
remounted read-only but the sandbox's home/work/tmp (`isolation = "unshare-net-rofs"`: a write outside them
fails whatever makes it, C++ writers such as `torch.save` included). Where only `unshare -rn` works
(`"unshare-net"`) or none (`"audit-only"`, the audit hook's socket ban is then the network barrier), the
file system is checked instead: the places a write would persist (temp dirs, HOME, the working directory,
site-packages) are scanned before and after the child and a new or changed file is an `fs-write` event.
Events arrive on a pipe, one JSON line each, as they happen.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import resource
import secrets
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from fasttrack.confinement.trace.stack import MAX_FILE_BYTES
from fasttrack.safe_read import NotRegular, read_regular

if TYPE_CHECKING:  # the plan's module imports pydantic and the Context: not needed to start a child
    from fasttrack.confinement.trace.plan import TracePlan

CHILD_MODULES = ("__init__.py", "child.py", "snapshot.py", "standins.py", "stdlib_state.py", "torch_state.py")
WRITABLE = ("home", "work", "tmp")
TIMEOUT_S = 120.0
MEMORY_BYTES = 16 * 1024**3
FILE_BYTES = 64 * 1024**2
MAX_EVENT_BYTES = 16 * 1024**2
BOOTSTRAP = ("import sys; sys.path.insert(0, sys.argv[1]); import _fasttrack_trace.child as c; "
             "c.main(sys.argv[2])")


class TraceFailure(Exception):
    """The trace could not run to its end; the message says why, `fix` what to do."""

    def __init__(self, message: str, fix: str, events: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.fix = fix
        self.events = events or []  # an authenticated report's events (the tracer's objects were changed)


# Run by /bin/sh inside the new mount namespace: every mount read-only (/proc and /sys aside), then the
# directories named before `--` writable again, then the command after `--`.
_READ_ONLY_FS = """
while read -r _ t _; do
  case "$t" in /proc|/proc/*|/sys|/sys/*) continue;; esac
  mount -o remount,bind,ro "$t" 2>/dev/null
done < /proc/self/mounts
while [ "$1" != "--" ]; do
  mount --bind "$1" "$1" && mount -o remount,bind,rw "$1" || exit 97
  shift
done
shift
exec "$@"
"""
ROFS = "unshare-net-rofs"
# Inside the namespace: the probe's directory is writable, the directory beside it is not, and no mount but
# /proc, /sys and the probe's own is left writable (a mount the script could not remount fails the probe;
# of mounts stacked at one place only the top one can be reached).
_PROBE = """
import os, sys
ok, outside = sys.argv[1], sys.argv[2]
open(os.path.join(ok, "ok"), "w").close()
try:
    open(outside, "w").close()
    sys.exit(1)
except OSError:
    pass
top = {}
for line in open("/proc/self/mounts"):  # a later line is mounted over an earlier one at the same place
    top[line.split()[1]] = line.split()[3].split(",")
for target, opts in top.items():
    if "ro" not in opts and not target.startswith(("/proc", "/sys")) and target != ok:
        sys.exit(2)
"""


def _run_ok(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@lru_cache(maxsize=1)
def unshare_prefix() -> tuple[str, ...]:
    """`unshare -rnm -- /bin/sh -c <read-only fs> sh` when this kernel lets an unprivileged user make a user,
    network and mount namespace and remount there (checked: a write to the probe's own directory works, one
    beside it fails); else `unshare -rn --` when a network namespace is allowed; else ()."""
    exe = shutil.which("unshare")
    if exe is None:
        return ()
    rofs = (exe, "-rnm", "--", "/bin/sh", "-c", _READ_ONLY_FS, "sh")
    probe = Path(tempfile.mkdtemp(prefix="fasttrack-rofs-"))
    outside = probe.parent / f"{probe.name}-outside"
    try:
        if _run_ok([*rofs, str(probe), "--", sys.executable, "-I", "-c", _PROBE, str(probe), str(outside)]) \
                and (probe / "ok").exists() and not outside.exists():
            return rofs
    finally:
        shutil.rmtree(probe, ignore_errors=True)
        if outside.exists():
            outside.unlink()
    return (exe, "-rn", "--") if _run_ok([exe, "-rn", "--", "true"]) else ()


def isolation_of(prefix: tuple[str, ...]) -> str:
    return ROFS if "-rnm" in prefix else "unshare-net" if prefix else "audit-only"


def _limits(timeout: float) -> None:  # runs in the forked child before exec
    cpu = int(timeout) + 5
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_BYTES, FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.setsid()


def _read_only(root: Path) -> None:
    for dirpath, _dirs, filenames in os.walk(root, topdown=False):
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), stat.S_IRUSR | stat.S_IRGRP)
        os.chmod(dirpath, stat.S_IRUSR | stat.S_IXUSR)


def _writable_again(root: Path) -> None:
    for dirpath, _dirs, _files in os.walk(root):
        os.chmod(dirpath, stat.S_IRWXU)


def _new_box() -> Path:
    """A fresh sandbox with the child's own modules (read-only) and its writable directories; no `src/`."""
    # The temp module's own default naming (`/tmp/tmpXXXXXXXX`): no path the traced code can read (cwd, HOME,
    # TMPDIR, its files' names) says fasttrack or trace. Hiding is not the defence (code that finds the
    # sandbox another way and patches only outside it is left to the static scan, docs/verify.md): it only
    # keeps the cheapest test for "am I traced?" from working.
    box = Path(tempfile.mkdtemp())
    tool = box / "tool" / "_fasttrack_trace"
    tool.mkdir(parents=True)
    here = Path(__file__).resolve().parent
    for name in CHILD_MODULES:
        shutil.copyfile(here / name, tool / name)
    for d in WRITABLE:
        (box / d).mkdir()
    _read_only(box / "tool")
    return box


def _lay_out_src(plan: TracePlan, box: Path) -> dict[str, str | None]:
    """Copy the contribution's files into `src/` (read-only); returns the SHA-256 of each file as copied
    (None: copied without reading it whole, over MAX_FILE_BYTES or not a regular file: such a trace is never
    cached)."""
    src = box / "src"
    src.mkdir()
    copied: dict[str, str | None] = {}
    for rel, source in plan.files.items():
        dest = src / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            data = read_regular(source, MAX_FILE_BYTES)
        except (NotRegular, OSError):
            data = None
        if data is None:
            shutil.copyfile(source, dest)
            copied[rel] = None
        else:
            dest.write_bytes(data)
            copied[rel] = hashlib.sha256(data).hexdigest()
    _read_only(src)
    return copied


def _env(box: Path) -> dict[str, str]:
    """Nothing of the caller's environment: a temp HOME, and the compiler caches torch and Triton would
    otherwise set up (and write into os.environ) on first use pointed into the sandbox up front."""
    return {"HOME": str(box / "home"), "TMPDIR": str(box / "tmp"), "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "TORCHINDUCTOR_CACHE_DIR": str(box / "tmp" / "inductor"),
            "TRITON_CACHE_DIR": str(box / "tmp" / "triton"), "CUDA_VISIBLE_DEVICES": ""}


@dataclass
class _Child:
    """A started child: its process, the read end of its event pipe, its log, when it started."""

    proc: subprocess.Popen[bytes]
    read_fd: int
    log: BinaryIO
    started: float
    prefix: tuple[str, ...]
    child_fd: int  # the event pipe's number in the child (pass_fds keeps the parent's number)


def _spawn(box: Path, spec: dict[str, Any], timeout: float, *, go: bool) -> _Child:
    """Start `python -I -B` in the sandbox on `spec` (written to tmp/spec.json, which the child removes).
    With `go`, its stdin is a pipe on which it waits for the word to read its full spec (a child started
    before its plan); else /dev/null."""
    read_fd, write_fd = os.pipe()
    spec = {**spec, "fd": write_fd}
    spec_path = box / "tmp" / "spec.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    prefix = unshare_prefix()
    tool_dir = str((box / "tool").resolve())
    writable = [str((box / d).resolve()) for d in WRITABLE] + ["--"] if isolation_of(prefix) == ROFS else []
    cmd = [*prefix, *writable, sys.executable, "-I", "-B", "-c", BOOTSTRAP, tool_dir, str(spec_path)]
    log = open(box / "tmp" / "stdout", "wb")  # noqa: SIM115 - closed by run_child or Warm.close
    started = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, cwd=box / "work", env=_env(box),
                                stdin=subprocess.PIPE if go else subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, pass_fds=(write_fd,),
                                preexec_fn=lambda: _limits(timeout))
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        log.close()
        raise TraceFailure(f"the trace sandbox could not start: {exc}",
                           "run fasttrack where it can start a Python subprocess") from None
    os.close(write_fd)
    return _Child(proc=proc, read_fd=read_fd, log=log, started=started, prefix=prefix, child_fd=write_fd)


class Warm:
    """A child started before its plan is known (`prestart`): the sandbox laid out but for `src/`, the engine
    stack (`stack`) imported while the caller builds the plan. `run_child(plan, warm=...)` hands it the plan
    when the plan's pre-imports begin with exactly that stack; `close()` kills it unused. It has run nothing
    but the stack's imports until then, in the same sandbox, interpreter, environment and limits as a child
    started with its plan."""

    def __init__(self, box: Path, child: _Child, stack: tuple[str, ...]) -> None:
        self.box = box
        self.child: _Child | None = child
        self.stack = stack

    def take(self) -> _Child:
        if self.child is None:
            raise ValueError("this warm child was already used or closed")
        child, self.child = self.child, None
        return child

    def close(self) -> None:
        """Kill the child if it was not used, and remove its sandbox (idempotent)."""
        if self.child is not None:
            child, self.child = self.child, None
            _kill(child.proc)
            os.close(child.read_fd)
            child.log.close()
            _cleanup(self.box)


def prestart(stack: tuple[str, ...], *, timeout: float = TIMEOUT_S) -> Warm | None:
    """Start a child that imports `stack` now and waits for its plan (None when it cannot start: the
    caller then starts one with its plan, which reports the failure)."""
    box = _new_box()
    try:
        child = _spawn(box, {"prestart": list(stack)}, timeout, go=True)
    except TraceFailure:
        _cleanup(box)
        return None
    return Warm(box, child, stack)


def _cleanup(box: Path) -> None:
    _writable_again(box)
    shutil.rmtree(box, ignore_errors=True)


@dataclass(frozen=True)
class Pass:
    """One pass of the child: its events, the isolation it ran under, the digests of the files it saw."""

    events: list[dict[str, Any]]
    isolation: str
    copied: dict[str, str | None]


def run_child(plan: TracePlan, *, locate: list[str] | None = None, timeout: float = TIMEOUT_S,
              cancel: threading.Event | None = None, warm: Warm | None = None) -> Pass:
    """Run one pass. TraceFailure when it does not finish cleanly (or `cancel` is set: the child is
    killed, the caller no longer wants its result). `warm`: a prestarted child to run it in, used only when
    the plan's pre-imports begin with exactly its stack (else it is closed and a fresh child runs); it is
    consumed either way."""
    if warm is not None and tuple(plan.preimport[:len(warm.stack)]) != warm.stack:
        warm.close()
        warm = None
    box = warm.box if warm is not None else _new_box()
    child: _Child | None = None
    token = secrets.token_bytes(32)  # the report's key: in the spec the child reads and deletes
    try:
        copied = _lay_out_src(plan, box)
        src = (box / "src").resolve()
        spec: dict[str, Any] = {
            "tool_dir": str((box / "tool").resolve()),
            "contribution_files": {str(src / rel): shown for rel, shown in plan.display.items()
                                   if rel.endswith(".py")},
            "own_files": {name: str(src / rel) for name, rel in plan.own_files.items()},
            "own_dirs": {name: str(src / rel) for name, rel in plan.own_dirs.items()},
            "own_prefixes": list(plan.own_prefixes),
            "engine_roots": list(plan.engine_roots),
            "targets": list(plan.targets),
            "preimport": list(plan.preimport),
            "writable": [str((box / d).resolve()) for d in WRITABLE],
            "locate": locate or [],
            "calls": {"smoke": plan.smoke, "guard": plan.guard, "guard_input": plan.guard_input,
                      "points": [[name, dict(point)] for name, _, point in plan.guard_points]},
            "token": token.hex(),
        }
        scan = isolation_of(unshare_prefix()) != ROFS
        before = persist_scan(box) if scan else PersistScan({}, {})
        if warm is not None:
            child = warm.take()
            spec["fd"] = child.child_fd
            (box / "tmp" / "plan.json").write_text(json.dumps(spec), encoding="utf-8")
            _go(child)
        else:
            child = _spawn(box, spec, timeout, go=False)
        try:
            data = _collect(child.proc, child.read_fd, child.started, timeout, cancel)
        finally:
            child.log.close()
        log = (box / "tmp" / "stdout").read_bytes()[-2000:].decode("utf-8", "replace")
        proc = child.proc
        events = read_report(data, token)
        done = sum(e.get("kind") == "done" for e in events)
        if not events or events[-1].get("kind") != "done" or done != 1:
            raise TraceFailure(
                f"the traced import did not finish (exit status {proc.returncode}); its last output: "
                f"{log.strip()[-600:] or '(none)'}",
                "make every changed module importable on a CPU-only machine without network, GPU or "
                "credentials, and without exiting the interpreter at import")
        tampered = events[-1].get("tampered")
        if tampered:
            raise TraceFailure("code under trace changed the tracer's own objects (its report cannot be "
                               f"trusted): {', '.join(map(str, tampered[:5]))}",
                               "do not reach or change the tracer, the builtins or the import system's "
                               "finders at import", events=events)
        if scan:
            events[-1:-1] = written_events(before, persist_scan(box))
        return Pass(events=events, isolation=isolation_of(child.prefix), copied=copied)
    finally:
        if child is None and warm is not None:
            warm.close()  # not handed its plan (the layout failed): killed unused
        elif child is not None and child.proc.poll() is None:
            _kill(child.proc)  # an error between the hand-over and the collection: never left waiting
        _cleanup(box)


PRIVILEGED = ("done", "located")  # events that end the report or clear a finding


def read_report(data: bytes, token: bytes) -> list[dict[str, Any]]:
    """The child's events, each line checked: `<hmac> <seq> <flag> <json>` with the HMAC-SHA256 of
    `<seq> <flag> <json>` under this pass's key, the lines numbered from 0 without a gap, and `done` /
    `located` only with the privileged flag (sent by the tracer's own `main`). Anything else is a report
    that cannot be shown to be the tracer's: the trace fails (code under trace wrote to the pipe)."""
    events: list[dict[str, Any]] = []
    fix = "do not write to inherited file descriptors or reach the tracer's objects at import"
    for seq, raw in enumerate(data.splitlines()):
        parts = raw.split(b" ", 3)
        if len(parts) != 4 or parts[1] != str(seq).encode() or parts[2] not in (b"U", b"P"):
            raise TraceFailure("the traced child's report has a line the tracer did not write", fix)
        mac = hmac.new(token, b" ".join(parts[1:]), "sha256").hexdigest().encode()
        if not hmac.compare_digest(mac, parts[0]):
            raise TraceFailure("the traced child's report has a line the tracer did not write", fix)
        try:
            event = json.loads(parts[3])
        except ValueError:
            raise TraceFailure("the traced child wrote a line that is not an event", fix) from None
        if not isinstance(event, dict) or (event.get("kind") in PRIVILEGED and parts[2] != b"P"):
            raise TraceFailure("the traced child's report ends or clears a finding from code that is not "
                               "the tracer's", fix)
        events.append(event)
    return events


MAX_SCAN = 20_000  # entries per place
SCAN_DEPTH = 6


def persist_places() -> list[Path]:
    """Where a file written by the traced code would outlive it: temp dirs, HOME, the working directory,
    site-packages (a `.pth`)."""
    import site
    import sysconfig

    places = [tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm", os.path.expanduser("~"), os.getcwd(),
              sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], site.getusersitepackages()]
    out: list[Path] = []
    for p in places:
        real = Path(os.path.realpath(p))
        if real.is_dir() and real not in out:
            out.append(real)
    return out


@dataclass
class PersistScan:
    """What `persist_scan` read: (mtime, size, inode) by path, and for each place whose budget ran out the
    directories it did not (fully) read (a file written there would not be seen: `written_events` fails
    closed on them)."""

    seen: dict[str, tuple[int, int, int]]
    unscanned: dict[str, list[str]]


def persist_scan(box: Path) -> PersistScan:
    """(mtime, size, inode) of the files in `persist_places()` (the sandbox itself aside), MAX_SCAN entries
    and SCAN_DEPTH levels per place; site-packages only at its top (where a `.pth` or package would go)."""
    import sysconfig

    shallow = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
    skip = os.path.realpath(box)
    seen: dict[str, tuple[int, int, int]] = {}
    unscanned: dict[str, list[str]] = {}
    for place in persist_places():
        budget = [MAX_SCAN]
        left = _scan_dir(str(place), 1 if str(place) in shallow else SCAN_DEPTH, skip, seen, budget)
        if left:
            unscanned[str(place)] = left
    return PersistScan(seen, unscanned)


def _scan_dir(path: str, depth: int, skip: str, seen: dict[str, tuple[int, int, int]],
              budget: list[int]) -> list[str]:
    """Breadth first, so that a place's shallow entries are always within the budget (a deep tree under
    /tmp, a checkout's .venv, cannot use it up before a file written at the top of a temp dir is seen).
    Returns the directories left (partly) unread when the budget runs out, else []."""
    level = [path]
    while level and depth >= 1:
        below: list[str] = []
        for i, d in enumerate(level):
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            for e in entries:
                if budget[0] <= 0:
                    return [d, *level[i + 1:], *(below if depth > 1 else [])]
                budget[0] -= 1
                full = e.path
                if full == skip or full.startswith(skip + os.sep):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                seen[full] = (st.st_mtime_ns, st.st_size, st.st_ino)
                if depth > 1 and e.is_dir(follow_symlinks=False):
                    below.append(full)
        level, depth = below, depth - 1
    return []


def written_events(before: PersistScan, after: PersistScan) -> list[dict[str, Any]]:
    """A new or changed file outside the sandbox while the child ran (fail closed: nothing says which line
    wrote it, or whether another process on this machine did), and a place either scan could not read to
    its end (fail closed: a file written in what it left unread would not be seen)."""
    out = []
    for path in sorted(after.seen):
        old = before.seen.get(path)
        if old is None or (old != after.seen[path] and not os.path.isdir(path)):
            out.append({"kind": "fs-write", "target": path, "path": None, "line": None,
                        "detail": "a file " + ("created" if old is None else "changed") + " outside the "
                        "sandbox while the trace ran (found by a scan: this sandbox cannot make the file "
                        "system read-only)"})
    short = []
    for place in sorted({*before.unscanned, *after.unscanned}):
        left = after.unscanned.get(place) or before.unscanned[place]
        shown = ", ".join(left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
        short.append({"kind": "fs-write", "target": place, "path": None, "line": None,
                      "detail": f"not scanned to its end: the scan that stands in for a read-only file "
                      f"system (this kernel gives no mount namespace) stops after {MAX_SCAN:,} entries per "
                      f"place, and left {len(left)} directories unread ({shown}), where a file the trace "
                      "wrote would not be seen; fix: run fasttrack where unprivileged user namespaces are "
                      f"allowed (the file system is then read-only and nothing is scanned), or keep {place} "
                      f"under {MAX_SCAN:,} entries within {SCAN_DEPTH} levels"})
    return out[:50] + short


def _go(child: _Child) -> None:
    """Tell a prestarted child that its plan is written (tmp/plan.json). A child that died meanwhile reads
    nothing; `_collect` then reports it (no `done` event)."""
    stdin = child.proc.stdin
    if stdin is None:
        return
    try:
        stdin.write(b"go\n")
        stdin.close()
    except OSError:
        return


def _collect(proc: subprocess.Popen[bytes], fd: int, started: float, timeout: float,
             cancel: threading.Event | None = None) -> bytes:
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            if cancel is not None and cancel.is_set():
                _kill(proc)
                raise TraceFailure("the trace was cancelled", "rerun fasttrack verify")
            left = timeout - (time.monotonic() - started)
            if left <= 0:
                _kill(proc)
                raise TraceFailure(f"the traced import ran past {timeout:.0f} s",
                                   "keep import-time work small: no compilation, downloads or loops "
                                   "at import")
            ready, _, _ = select.select([fd], [], [], min(left, 0.2 if cancel is not None else 1.0))
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_EVENT_BYTES:
                    _kill(proc)
                    raise TraceFailure("the traced import produced too many events",
                                       "do less at import time")
        try:
            proc.wait(timeout=max(1.0, timeout - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            _kill(proc)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, 9)
    except OSError:
        proc.kill()
    proc.wait()
