"""Tensor-parallel points: torchrun command lines, per-rank file names, and the merge of per-rank results.

At tp = n > 1 a point needs n GPUs and n processes. `fasttrack collect` launches them with torchrun
(`python -m torch.distributed.run --standalone --nproc-per-node n ...`); each rank writes its own result file
(`rank_path`), and the collector merges them into the point's one result:

* benchmarks (`merge_case_results`): samples are the element-wise MAX over ranks (a TP step is as slow as its
  slowest rank); a failed accuracy / input / anti-cheat check on ANY rank rejects the point, and the reason
  names the rank; kernel counts are rank 0's (every rank's are kept); bytes moved is the largest shard a
  GPU moved (each GPU moves its own shard: bandwidth is judged per GPU);
* kernel tests (`merge_test_lines`): a test passes at a point only if it passed on every rank; max_error is
  the max over ranks.

Nothing here imports torch or pydantic at import time (the pytest plugin and the collector use it).
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

TORCHRUN_MODULE = "torch.distributed.run"
OUTCOME_ORDER = {"error": 0, "failed": 1, "skipped": 2, "passed": 3}
_RANK_STEM = re.compile(r"\.rank\d+$")


def dist_env(environ: Mapping[str, str] | None = None) -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment; (0, 1, 0) outside torchrun."""
    env = os.environ if environ is None else environ

    def num(name: str, default: int) -> int:
        try:
            return int(env.get(name, default))
        except ValueError:
            return default

    world = max(num("WORLD_SIZE", 1), 1)
    rank = num("RANK", 0)
    return rank, world, num("LOCAL_RANK", rank)


def rank_path(path: Path, rank: int) -> Path:
    """Rank `rank`'s own file beside `path`: `0003-ab.json` -> `0003-ab.rank1.json`."""
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def is_rank_path(path: Path) -> bool:
    """Whether `path` is a rank's own file (named by `rank_path`), not a point's (merged) result."""
    return _RANK_STEM.search(path.stem) is not None


def torchrun_argv(nproc: int, module: str, args: Sequence[str], python: str | None = None) -> list[str]:
    """The command that runs `python -m module args` as `nproc` ranks on this machine (torchrun).

    `--standalone` starts a local rendezvous on a free port (nothing outside the machine is contacted);
    `--max-restarts 0`: a failing rank ends the run (the collector records what was written), never a retry
    that would time a point twice.
    """
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    return [python or sys.executable, "-m", TORCHRUN_MODULE, "--standalone", "--nproc-per-node", str(nproc),
            "--max-restarts", "0", "-m", module, *args]


def _who(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ",".join(str(r) for r in ranks)


def _labelled(per_rank: Sequence[tuple[int, Sequence[str]]]) -> list[str]:
    """Reasons from several ranks, each once, prefixed with the rank(s) that gave it."""
    seen: dict[str, list[int]] = {}
    for rank, reasons in per_rank:
        for reason in reasons:
            who = seen.setdefault(reason, [])
            if rank not in who:
                who.append(rank)
    return [f"{_who(ranks)}: {reason}" for reason, ranks in seen.items()]


def _elementwise_max(lists: Sequence[Sequence[float]]) -> list[float]:
    n = min(len(x) for x in lists)
    return [max(float(x[i]) for x in lists) for i in range(n)]


def merge_case_results(per_rank: Sequence[Mapping[str, Any] | None],
                       point: Mapping[str, Any]) -> dict[str, Any]:
    """Merge the timing protocol's per-rank CaseResults (JSON, index = rank) into the point's one result.

    A missing rank file (the rank died) makes the point not run. The result is a CaseResult as JSON, with
    `world_size` and `ranks` (one summary per rank) set, and every rank's raw samples kept per variant.
    """
    world = len(per_rank)
    pt = dict(point)
    missing = [r for r, res in enumerate(per_rank) if res is None]
    if missing:
        why = (f"{_who(missing)} of {world} wrote no result (the rank process died or was killed: see "
               "bench.log)")
        return {"point": pt, "status": "not_run", "reasons": [why], "world_size": world}
    results: list[Mapping[str, Any]] = [res for res in per_rank if res is not None]
    summaries = [_rank_summary(r, res) for r, res in enumerate(results)]
    not_run = [r for r, res in enumerate(results)
               if res.get("status") == "not_run" or res.get("protocol") is None]
    if len(not_run) == world:
        reasons = _labelled([(r, list(res.get("reasons") or ["not run"])) for r, res in enumerate(results)])
        by = [res.get("not_run_by") for res in results]
        return {"point": pt, "status": "not_run", "reasons": reasons, "world_size": world, "ranks": summaries,
                "not_run_by": by[0] if len(set(by)) == 1 else "harness"}
    if not_run:
        ran = [r for r in range(world) if r not in not_run]
        reasons = _labelled([(r, list(results[r].get("reasons") or ["not run"])) for r in not_run])
        reasons.append(f"{_who(not_run)} did not run the case while {_who(ran)} did: the ranks were not in "
                       "lockstep")
        return {"point": pt, "status": "rejected", "reasons": reasons, "world_size": world,
                "ranks": summaries}

    base = results[0]
    reasons = _labelled([(r, list(res.get("reasons") or [])) for r, res in enumerate(results)])
    layers = {res.get("layers") for res in results}
    if len(layers) > 1:
        reasons.append(f"the ranks report different layer counts ({sorted(map(str, layers))})")

    variants: dict[str, dict[str, Any]] = {}
    names = list(base.get("variants") or {})
    for name in names:
        per = [dict((res.get("variants") or {}).get(name) or {}) for res in results]
        absent = [r for r, v in enumerate(per) if not v]
        if absent:
            reasons.append(f"{_who(absent)}: no variant {name!r} (the ranks ran different cases)")
        lists = [list(v.get("samples_us") or []) for v in per]
        lengths = sorted({len(x) for x in lists})
        if len(lengths) > 1:
            counts = ", ".join(f"rank {r}: {len(x)}" for r, x in enumerate(lists))
            reasons.append(f"variant {name!r}: the ranks recorded different numbers of samples ({counts}): "
                           "not in lockstep")
        merged: dict[str, Any] = dict(per[0])
        merged["samples_us"] = _elementwise_max(lists)
        walls = [v.get("samples_wall_us") for v in per]
        if all(isinstance(w, list) and w for w in walls):
            merged["samples_wall_us"] = _elementwise_max([w for w in walls if isinstance(w, list)])
        for r, own in enumerate(lists):  # every rank's own samples, beside their max
            merged[f"samples_us_rank{r}"] = own
        moved = [float(v["bytes_moved"]) for v in per if isinstance(v.get("bytes_moved"), int | float)]
        merged["bytes_moved"] = max(moved) if moved else None
        merged["gpus"] = world
        errors = [(r, [str(v["error"])]) for r, v in enumerate(per) if v.get("error")]
        merged["error"] = "; ".join(_labelled(errors))[:8192] if errors else None
        variants[name] = merged
    for r, res in enumerate(results[1:], start=1):
        extra = sorted(set(res.get("variants") or {}) - set(names))
        if extra:
            reasons.append(f"rank {r}: variant(s) {', '.join(map(repr, extra))} that rank 0 does not have")

    accuracy: dict[str, dict[str, Any]] = {}
    for name in (base.get("accuracy") or {}):
        per_acc = [dict((res.get("accuracy") or {}).get(name) or {}) for res in results]
        present = [a for a in per_acc if a]
        errs = [float(a["max_abs_error"]) for a in present if isinstance(a.get("max_abs_error"), int | float)]
        bad = [(r, a) for r, a in enumerate(per_acc) if not a or not a.get("ok", False)]
        merged_acc: dict[str, Any] = dict(per_acc[0])
        merged_acc["ok"] = not bad
        merged_acc["max_abs_error"] = max(errs) if errs else 0.0
        merged_acc["checked"] = min((int(a.get("checked", 0)) if a else 0) for a in per_acc)
        merged_acc["failures"] = sum(int(a.get("failures") or 0) for a in present)
        if bad:
            merged_acc["reason"] = "; ".join(
                f"rank {r}: {a.get('reason') or ('no accuracy record' if not a else 'check failed')}"
                for r, a in bad)[:4000]
        accuracy[name] = merged_acc
        for r, a in bad:  # a rank's own reasons already name its failed checks; a missing record is new
            if not a or results[r].get("status") == "ok":
                why = a.get("reason") or ("no accuracy record" if not a else "accuracy check failed")
                reasons.append(f"rank {r}: variant {name!r}: {why}")

    oracle: dict[str, dict[str, Any]] = {}
    for name in (base.get("oracle") or {}):
        per_or = [dict((res.get("oracle") or {}).get(name) or {}) for res in results]
        errs = [float(o["max_abs_error"]) for o in per_or if isinstance(o.get("max_abs_error"), int | float)]
        bad_or = [(r, o) for r, o in enumerate(per_or) if not o or not o.get("ok", False)]
        merged_or: dict[str, Any] = dict(per_or[0])
        merged_or["ok"] = not bad_or
        merged_or["max_abs_error"] = max(errs) if errs else None
        if bad_or:
            merged_or["reason"] = "; ".join(f"rank {r}: {o.get('reason') or 'no oracle check'}"
                                            for r, o in bad_or)[:4000]
        oracle[name] = merged_or

    protocol = dict(base["protocol"])
    notes = list(protocol.get("notes") or [])
    notes.append(f"tensor parallel: {world} ranks in lockstep, a device-side rendezvous before every timed "
                 "replay; samples are the element-wise max over ranks")
    protocol["notes"] = notes
    deduped: list[str] = []
    for reason in reasons:
        if reason not in deduped:
            deduped.append(reason)
    return {
        "point": pt, "status": "rejected" if deduped else "ok", "reasons": deduped, "protocol": protocol,
        "variants": variants, "accuracy": accuracy, "layers": base.get("layers"), "world_size": world,
        "ranks": summaries, "oracle": oracle,
    }


def _rank_summary(rank: int, res: Mapping[str, Any]) -> dict[str, Any]:
    """One rank's `RankInfo` (`fasttrack.evidence.measurement`): its status, reasons, and each variant's
    kernels and collectives per layer and bytes moved, as that rank counted them."""
    variants: Mapping[str, Any] = res.get("variants") or {}
    kernels: dict[str, int] = {}
    collectives: dict[str, int] = {}
    moved: dict[str, float] = {}
    for name, v in variants.items():
        if not isinstance(v, Mapping):
            continue
        if isinstance(v.get("kernels_per_step"), int):
            kernels[name] = int(v["kernels_per_step"])
            collectives[name] = int(v.get("collectives_per_step") or 0)
        if isinstance(v.get("bytes_moved"), int | float):
            moved[name] = float(v["bytes_moved"])
    return {"rank": rank, "status": str(res.get("status", "not_run")),
            "rejected": list(res.get("reasons") or [])[:256], "kernels_per_step": kernels,
            "collectives_per_step": collectives, "bytes_moved": moved}


# ------------------------------------------------------------------------------------------ kernel tests
def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def merge_test_lines(per_rank: Sequence[Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Merge the plugin's per-rank result lines (index = rank) into one line per test.

    A test passes only if it passed on every rank; a failure or error on any rank wins (the message names
    the rank); a test a rank did not report is an error for that rank. max_error is the max over ranks (a
    NaN anywhere stays NaN, as the string the plugin writes).
    """
    world = len(per_rank)
    by_rank: list[dict[str, Mapping[str, Any]]] = [{str(x.get("nodeid")): x for x in rank_lines}
                                                   for rank_lines in per_rank]
    order: list[str] = []
    for rank_lines in per_rank:
        for x in rank_lines:
            nid = str(x.get("nodeid"))
            if nid not in order:
                order.append(nid)
    out: list[dict[str, Any]] = []
    for nid in order:
        lines: list[tuple[int, Mapping[str, Any] | None]] = [(r, by_rank[r].get(nid)) for r in range(world)]
        present: list[tuple[int, Mapping[str, Any]]] = [(r, x) for r, x in lines if x is not None]
        first = present[0][1]
        outcomes = {r: (str(x.get("outcome")) if x is not None else "error") for r, x in lines}
        worst = min(outcomes.values(), key=lambda o: OUTCOME_ORDER.get(o, 0))
        messages: list[str] = []
        for r, line in lines:
            if line is None:
                messages.append(f"rank {r}: no result (the rank did not run this test)")
            elif outcomes[r] == worst and worst != "passed" and line.get("message"):
                messages.append(f"rank {r}: {line.get('message')}")
            elif outcomes[r] == worst and worst != "passed":
                messages.append(f"rank {r}: {outcomes[r]}")
        raw_errors = [x.get("max_error") for _, x in present if x.get("max_error") is not None]
        nan = next((e for e in raw_errors if isinstance(e, str)), None)
        errors = [(e, x) for _, x in present if (e := _finite(x.get("max_error"))) is not None]
        if nan is not None:
            max_error: Any = nan
            tolerance = next((x.get("tolerance") for _, x in present if isinstance(x.get("max_error"), str)),
                             None)
        elif errors:
            max_error, holder = max(errors, key=lambda t: t[0])
            tolerance = holder.get("tolerance")
        else:
            max_error, tolerance = None, first.get("tolerance")
        extra: dict[str, Any] = dict(first.get("extra") or {})
        extra["world_size"] = world
        for r, x in present:
            if x.get("max_error") is not None:
                extra[f"rank{r}_max_error"] = x.get("max_error")
        durations = [d for _, x in present if (d := _finite(x.get("duration_s"))) is not None]
        out.append({
            "nodeid": nid, "point": first.get("point"), "outcome": worst, "max_error": max_error,
            "tolerance": tolerance, "duration_s": max(durations) if durations else None, "extra": extra,
            "message": "\n".join(messages) or None,
        })
    return out
