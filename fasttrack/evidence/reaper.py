"""Processes a phase left behind: the collector kills them before the next phase runs.

Contribution code (its kernel tests, its candidates, its evals) runs in subprocesses of the collector. A
process it starts and detaches (a double fork, `setsid`) would outlive its phase and could load the GPU
while the engine's own pass times stock, which would make stock look slow. The collector makes itself the
*child subreaper* of everything it starts (Linux `prctl(PR_SET_CHILD_SUBREAPER)`), so an orphan is
re-parented to the collector instead of init, and after every phase it kills every child it still has.

Where the subreaper cannot be set (not Linux), `reap` still kills the direct children it can see and the
collector's report says the guarantee is weaker (`subreaper_active`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants; False where the platform does not allow it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except Exception:
        return False


def _stat(pid: int) -> tuple[str, str, int] | None:
    """(command name, state, parent pid) of a process from /proc/<pid>/stat, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return None
    # pid (comm) state ppid ...: comm may hold spaces and parentheses; the last ')' ends it.
    name = stat[stat.find("(") + 1:stat.rfind(")")]
    fields = stat[stat.rfind(")") + 2:].split()
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    return name, fields[0], int(fields[1])


def _listed_children(pid: int) -> list[int] | None:
    """The children of every thread of `pid` from /proc/<pid>/task/<tid>/children (one small read per
    thread, so a child that lives for a millisecond is still seen), or None where the kernel lacks it."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
                out += [int(x) for x in fh.read().split()]
        except (OSError, ValueError):
            return None
    return out


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, command name) of the live processes whose parent is `pid` (Linux /proc); zombie children of
    this process are collected on the way."""
    listed = _listed_children(pid)
    if listed is None:
        try:
            listed = [int(e) for e in os.listdir("/proc") if e.isdigit()]
        except OSError:
            return []
    out: list[tuple[int, str]] = []
    for child in listed:
        st = _stat(child)
        if st is None or st[2] != pid:
            continue
        name, state, _ppid = st
        if state != "Z":
            out.append((child, name))
        elif pid == os.getpid():
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(child, os.WNOHANG)  # a zombie child: collect it
    return out


@dataclass(frozen=True)
class Reaped:
    """What `reap` found and killed after a phase; `remaining`: children still appearing when it gave up
    (a process that re-spawns faster than it is killed: the phase's leftovers are not gone)."""

    killed: tuple[str, ...]  # "pid (name)" of each process killed
    remaining: tuple[str, ...] = ()

    def note(self, phase: str) -> str | None:
        if not self.killed:
            return None
        shown = ", ".join(self.killed[:8]) + (" ..." if len(self.killed) > 8 else "")
        return (f"{len(self.killed)} process(es) were still running after the {phase} phase and were killed "
                f"before the next phase: {shown}")

    def problem(self, phase: str) -> str | None:
        """Why the collection may not go on after `phase`, or None."""
        if not self.remaining:
            return None
        shown = ", ".join(self.remaining[:8])
        return (f"process(es) the {phase} phase left behind kept re-spawning and could not all be killed "
                f"({len(self.killed)} killed; still there: {shown}): contribution code that outlives its "
                "phase could rewrite the results before the collector reads them, or load the machine while "
                "stock is timed")


SETTLE_S = 0.25
TIMEOUT_S = 15.0


def reap(keep: frozenset[int] = frozenset(), settle_s: float = SETTLE_S,
         timeout_s: float = TIMEOUT_S) -> Reaped:
    """Kill (SIGKILL) every child of this process except `keep` as soon as it is seen, and their
    re-parented children, until none has been seen for `settle_s` of continuous watching. A process that
    forks its successor and exits at once is never still at a pid listed a moment earlier, so one empty
    listing proves nothing: only a quiet interval does. Gives up after `timeout_s`, naming what is still
    there in `remaining` (the caller refuses to go on)."""
    me = os.getpid()
    killed: list[str] = []
    start = time.monotonic()
    quiet_since = start
    while True:
        found = [(pid, name) for pid, name in children(me) if pid not in keep]
        now = time.monotonic()
        for pid, name in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(f"{pid} ({name})")
        for pid, _name in found:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        if found:
            quiet_since = now
        elif now - quiet_since >= settle_s:
            return Reaped(killed=tuple(killed))
        if now - start > timeout_s:
            still = tuple(f"{pid} ({name})" for pid, name in children(me) if pid not in keep)
            return Reaped(killed=tuple(killed), remaining=still or ("a process seen moments ago",))
        time.sleep(0.001)
