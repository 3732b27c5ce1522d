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


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, command name) of the live processes whose parent is `pid` (Linux /proc)."""
    out: list[tuple[int, str]] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses; the last ')' ends it.
        name = stat[stat.find("(") + 1:stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) >= 2 and fields[1].isdigit() and int(fields[1]) == pid and fields[0] != "Z":
            out.append((int(entry), name))
        elif len(fields) >= 2 and fields[1].isdigit() and int(fields[1]) == pid:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(int(entry), os.WNOHANG)  # a zombie child: collect it
    return out


@dataclass(frozen=True)
class Reaped:
    """What `reap` found and killed after a phase."""

    killed: tuple[str, ...]  # "pid (name)" of each process killed

    def note(self, phase: str) -> str | None:
        if not self.killed:
            return None
        shown = ", ".join(self.killed[:8]) + (" ..." if len(self.killed) > 8 else "")
        return (f"{len(self.killed)} process(es) were still running after the {phase} phase and were killed "
                f"before the next phase: {shown}")


def reap(keep: frozenset[int] = frozenset(), rounds: int = 20) -> Reaped:
    """Kill (SIGKILL) every child of this process except `keep`, then their re-parented children, until
    none is left (or `rounds` passes). Returns what was killed."""
    me = os.getpid()
    killed: list[str] = []
    for _ in range(rounds):
        found = [(pid, name) for pid, name in children(me) if pid not in keep]
        if not found:
            break
        for pid, name in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(f"{pid} ({name})")
        deadline = time.monotonic() + 2.0
        for pid, _name in found:
            while time.monotonic() < deadline:
                try:
                    done, _status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    break
                if done:
                    break
                time.sleep(0.01)
    return Reaped(killed=tuple(killed))
