"""Run the traced child: a fresh temp directory, an empty environment, no network, rlimits, a timeout.

Layout of the sandbox (one `mkdtemp`, removed afterwards):

    tool/_fasttrack_trace/   the child's own modules (child, snapshot, standins), read-only
    src/                     the contribution's files, read-only (the checkout itself is never opened)
    home/ work/ tmp/         HOME, the working directory and TMPDIR: the only places it may write

The child runs as `python -I -B` (no PYTHON* variables, no user site, no bytecode written) under
`unshare -rn` (a user and network namespace: no interface but loopback) where the kernel allows it;
otherwise the audit hook's socket ban is the network barrier (`isolation = "audit-only"`). Events arrive on
a pipe, one JSON line each, as they happen.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
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
from typing import Any

from fasttrack.confinement.trace.plan import MAX_FILE_BYTES, TracePlan
from fasttrack.safe_read import NotRegular, read_regular

CHILD_MODULES = ("__init__.py", "child.py", "snapshot.py", "standins.py")
TIMEOUT_S = 120.0
MEMORY_BYTES = 16 * 1024**3
FILE_BYTES = 64 * 1024**2
MAX_EVENT_BYTES = 16 * 1024**2
BOOTSTRAP = ("import sys; sys.path.insert(0, sys.argv[1]); import _fasttrack_trace.child as c; "
             "c.main(sys.argv[2])")


class TraceFailure(Exception):
    """The trace could not run to its end; the message says why, `fix` what to do."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


@lru_cache(maxsize=1)
def unshare_prefix() -> tuple[str, ...]:
    """`unshare -rn --` when this kernel lets an unprivileged user make a network namespace, else ()."""
    exe = shutil.which("unshare")
    if exe is None:
        return ()
    try:
        ok = subprocess.run([exe, "-rn", "--", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return (exe, "-rn", "--") if ok else ()


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


def _lay_out(plan: TracePlan, box: Path) -> dict[str, str | None]:
    """Lay the sandbox out; returns the SHA-256 of each contribution file as copied (None: copied without
    reading it whole, over MAX_FILE_BYTES or not a regular file: such a trace is never cached)."""
    tool = box / "tool" / "_fasttrack_trace"
    tool.mkdir(parents=True)
    here = Path(__file__).resolve().parent
    for name in CHILD_MODULES:
        shutil.copyfile(here / name, tool / name)
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
    for d in ("home", "work", "tmp"):
        (box / d).mkdir()
    _read_only(box / "tool")
    _read_only(src)
    return copied


@dataclass(frozen=True)
class Pass:
    """One pass of the child: its events, the isolation it ran under, the digests of the files it saw."""

    events: list[dict[str, Any]]
    isolation: str
    copied: dict[str, str | None]


def run_child(plan: TracePlan, *, locate: list[str] | None = None, timeout: float = TIMEOUT_S,
              cancel: threading.Event | None = None) -> Pass:
    """Run one pass. TraceFailure when it does not finish cleanly (or `cancel` is set: the child is
    killed, the caller no longer wants its result)."""
    box = Path(tempfile.mkdtemp(prefix="fasttrack-trace-"))
    try:
        copied = _lay_out(plan, box)
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
            "writable": [str((box / d).resolve()) for d in ("home", "work", "tmp")],
            "locate": locate or [],
        }
        read_fd, write_fd = os.pipe()
        spec["fd"] = write_fd
        spec_path = box / "tmp" / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        # Nothing of the caller's environment: a temp HOME, and the compiler caches torch and Triton would
        # otherwise set up (and write into os.environ) on first use pointed into the sandbox up front.
        env = {"HOME": str(box / "home"), "TMPDIR": str(box / "tmp"), "PATH": "/usr/bin:/bin",
               "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "TORCHINDUCTOR_CACHE_DIR": str(box / "tmp" / "inductor"),
               "TRITON_CACHE_DIR": str(box / "tmp" / "triton"), "CUDA_VISIBLE_DEVICES": ""}
        prefix = unshare_prefix()
        cmd = [*prefix, sys.executable, "-I", "-B", "-c", BOOTSTRAP, spec["tool_dir"], str(spec_path)]
        started = time.monotonic()
        with open(box / "tmp" / "stdout", "wb") as out:
            try:
                proc = subprocess.Popen(cmd, cwd=box / "work", env=env, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT, pass_fds=(write_fd,),
                                        preexec_fn=lambda: _limits(timeout))
            except OSError as exc:
                os.close(read_fd)
                os.close(write_fd)
                raise TraceFailure(f"the trace sandbox could not start: {exc}",
                                   "run fasttrack where it can start a Python subprocess") from None
            os.close(write_fd)
            data = _collect(proc, read_fd, started, timeout, cancel)
        log = (box / "tmp" / "stdout").read_bytes()[-2000:].decode("utf-8", "replace")
        events = []
        for raw in data.splitlines():
            try:
                events.append(json.loads(raw))
            except ValueError:
                raise TraceFailure("the traced child wrote a line that is not an event",
                                   "do not write to inherited file descriptors at import") from None
        done = sum(e.get("kind") == "done" for e in events)
        if not events or events[-1].get("kind") != "done" or done != 1:
            raise TraceFailure(
                f"the traced import did not finish (exit status {proc.returncode}); its last output: "
                f"{log.strip()[-600:] or '(none)'}",
                "make every changed module importable on a CPU-only machine without network, GPU or "
                "credentials, and without exiting the interpreter at import")
        return Pass(events=events, isolation="unshare-net" if prefix else "audit-only", copied=copied)
    finally:
        _writable_again(box)
        shutil.rmtree(box, ignore_errors=True)


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
