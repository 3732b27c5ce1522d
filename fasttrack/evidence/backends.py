"""Which backend ran a stage, read off the kernel names of a profiled or captured graph (pure functions).

The policy lists, per stage and compute capability, the backends the engine accepts (in its order of
preference) and backends it never picks there, each with kernel-name patterns (fnmatch, case-insensitive).
The collector records what it read; `verify` reads it again from the recorded kernel names.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass

from fasttrack.policy import BackendSpec, StageBackends


@dataclass(frozen=True)
class StageMatch:
    stage: str
    accepted: str | None  # the first accepted backend (policy order) whose kernels appear
    rejected: tuple[str, ...]  # rejected backends whose kernels appear
    kernels: tuple[str, ...]  # the kernel names that matched any of the stage's backends

    @property
    def ok(self) -> bool:
        return self.accepted is not None and not self.rejected


def _matches(spec: BackendSpec, names: Iterable[str]) -> list[str]:
    pats = [p.lower() for p in spec.kernel_patterns]
    return [n for n in names if any(fnmatch.fnmatchcase(n.lower(), p) for p in pats)]


def identify(stage: StageBackends, kernel_names: Iterable[str]) -> StageMatch:
    names = list(kernel_names)
    accepted: str | None = None
    hits: list[str] = []
    for spec in stage.accepted:
        found = _matches(spec, names)
        if found and accepted is None:
            accepted = spec.name
        hits += found
    rejected: list[str] = []
    for spec in stage.rejected:
        found = _matches(spec, names)
        if found:
            rejected.append(spec.name)
            hits += found
    return StageMatch(stage=stage.stage, accepted=accepted, rejected=tuple(rejected),
                      kernels=tuple(dict.fromkeys(hits)))
