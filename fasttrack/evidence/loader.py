"""Load an evidence bundle directory for verification.

Never raises on a bad bundle: every problem (size, encoding, JSON syntax, nesting, schema: wrong types,
unknown or missing fields, NaN) becomes an FT301 finding in `LoadedEvidence.problems`, and whatever parts
of the statement are valid are kept (an invalid list item or section is dropped, the rest is validated
again), so the other rules can still say what they can.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import pydantic

from fasttrack.errors import field_path
from fasttrack.evidence.audit import AUDIT_DIR
from fasttrack.evidence.bundle import (
    PREDICATE_TYPE,
    REQUIRED_PREDICATE_FIELDS,
    SIGNATURE_FILE,
    STATEMENT_FILE,
    STATEMENT_TYPE,
    Statement,
)
from fasttrack.evidence.digest import sha256_file
from fasttrack.evidence.environment import CPU_CAPABILITY
from fasttrack.evidence.loaded import LoadedAudit, LoadedEvidence, LoadedPart
from fasttrack.evidence.signing import MAX_SIGNATURE_BYTES
from fasttrack.findings import Finding

MAX_STATEMENT_BYTES = 32 * 1024 * 1024
MAX_DEPTH = 32
MAX_PROBLEMS = 50
MAX_SALVAGE_ROUNDS = 25
MAX_PARTS = 16  # statement files read from one bundle directory
SCHEMA_CODE = "FT301"
SCHEMA_FIX = ("write the bundle with `fasttrack collect` and do not edit it by hand: re-run collection for "
              "this contribution and commit the new evidence directory")
# Predicate sections that are lists (an invalid item is dropped) or {name: digest} maps (an invalid entry
# is dropped); any other invalid section is dropped whole.
_LIST_SECTIONS = frozenset({"kernel_tests", "benchmarks", "evals", "lm_eval", "sanitizer"})
_MAP_SECTIONS = frozenset({"files", "logs"})
_STATEMENT_KEYS = {"type": "_type", "subject": "subject", "predicate_type": "predicateType",
                   "predicate": "predicate"}


def load_evidence(bundle_dir: Path) -> LoadedEvidence | None:
    """Read the bundle under `bundle_dir`; None when there is no bundle there at all.

    Every statement file of the directory is a part: `statement.json`, any `statement*.json`, and any other
    top-level `*.json` that has the in-toto Statement shape (`_type` or `predicateType`). Each part is read,
    parsed and has its logs hashed on its own; `merged` concatenates the parsed parts' records."""
    bundle_dir = Path(bundle_dir)
    if not bundle_dir.is_dir():
        return None
    parts = [p for p in (_load_part(bundle_dir, name) for name in _part_names(bundle_dir)) if p is not None]
    primary = next((p for p in parts if p.name == STATEMENT_FILE), parts[0] if parts else None)
    known = {STATEMENT_FILE, SIGNATURE_FILE}
    for part in parts:
        known |= {part.name, part.signature_name, *part.log_digests}
    audits = _load_audits(bundle_dir)
    unlisted = tuple(sorted(
        p.relative_to(bundle_dir).as_posix() for p in _files_under(bundle_dir)
        if p.relative_to(bundle_dir).as_posix() not in known
        and not p.relative_to(bundle_dir).as_posix().startswith(AUDIT_DIR + "/")
    ))
    merged, origin = _merge(parts)
    if primary is None:
        return LoadedEvidence(bundle_dir=bundle_dir, unlisted_files=unlisted, audits=audits)
    return LoadedEvidence(
        bundle_dir=bundle_dir,
        statement=primary.statement,
        statement_bytes=primary.statement_bytes,
        signature=primary.signature,
        problems=primary.problems,
        statement_path=primary.statement_path if primary.statement_bytes is not None else None,
        signature_path=primary.signature_path,
        salvaged=primary.salvaged,
        log_digests=primary.log_digests,
        unlisted_files=unlisted,
        parts=tuple(parts),
        merged=merged,
        origin=origin,
        audits=audits,
    )


MAX_AUDITS = 50
MAX_AUDIT_BYTES = 4 << 20


def _load_audits(bundle_dir: Path) -> tuple[LoadedAudit, ...]:
    """The audit records in `audits/` (regular files only, bounded in count and size)."""
    d = bundle_dir / AUDIT_DIR
    if not d.is_dir() or d.is_symlink():
        return ()
    out: list[LoadedAudit] = []
    for path in sorted(d.glob("*.json"))[:MAX_AUDITS]:
        name = f"{AUDIT_DIR}/{path.name}"
        try:
            st = path.lstat()
            if not stat.S_ISREG(st.st_mode):
                out.append(LoadedAudit(name=name, problem="not a regular file"))
                continue
            if st.st_size > MAX_AUDIT_BYTES:
                out.append(LoadedAudit(name=name, problem=f"larger than {MAX_AUDIT_BYTES} bytes"))
                continue
            data = path.read_bytes()
            sig_path = path.with_name(path.name + ".sig")
            sig = sig_path.read_bytes()[:65536] if sig_path.is_file() and not sig_path.is_symlink() else None
        except OSError as exc:
            out.append(LoadedAudit(name=name, problem=f"unreadable: {exc.strerror}"))
            continue
        out.append(LoadedAudit(name=name, data=data, signature=sig))
    return tuple(out)


def load_part(statement_path: Path) -> LoadedPart | None:
    """One statement file and what it binds (its signature, its logs), as the loader reads each part."""
    statement_path = Path(statement_path)
    return _load_part(statement_path.parent, statement_path.name, force=True)


def is_statement_name(name: str) -> bool:
    """File names that are always read as statements (a broken one is reported, never ignored)."""
    return name.endswith(".json") and name.startswith("statement")


def _part_names(bundle_dir: Path) -> list[str]:
    try:
        names = sorted(e.name for e in os.scandir(bundle_dir) if e.name.endswith(".json"))
    except OSError:
        return [STATEMENT_FILE]
    if STATEMENT_FILE not in names:
        names.insert(0, STATEMENT_FILE)  # reported as missing only when there is no other part
    return names[:MAX_PARTS]


def _load_part(bundle_dir: Path, name: str, *, force: bool = False) -> LoadedPart | None:
    """The part `name`; None when it is absent (statement.json) or a `*.json` that is not a statement."""
    statement_path = bundle_dir / name
    signature_path = bundle_dir / (name + ".sig")
    problems = _Problems(str(statement_path))
    raw = _read_regular(statement_path, MAX_STATEMENT_BYTES, problems, "statement")
    named = force or is_statement_name(name)
    if raw is None and not problems.items:
        return None
    statement: Statement | None = None
    salvaged = False
    if raw is not None:
        data = _parse_json(raw, problems, name)
        if not named and not _statement_shaped(data):
            return None
        if data is not _INVALID:
            statement, salvaged = _validate(data, problems, name)
    elif not named:
        return None
    signature = _read_regular(signature_path, MAX_SIGNATURE_BYTES, problems, "signature",
                              report_missing=False)
    log_digests: dict[str, str | None] = {}
    if statement is not None:
        for log in statement.predicate.logs:
            log_digests[log] = _digest_inside(bundle_dir, log)
    return LoadedPart(name=name, statement_path=statement_path, statement=statement, statement_bytes=raw,
                      signature=signature, signature_path=signature_path if signature is not None else None,
                      problems=problems.findings(), salvaged=salvaged, log_digests=log_digests)


def _statement_shaped(data: Any) -> bool:
    return isinstance(data, dict) and (data.get("_type") == STATEMENT_TYPE
                                       or data.get("predicateType") == PREDICATE_TYPE)


def _merge(parts: list[LoadedPart]) -> tuple[Statement | None, dict[int, int]]:
    """The parsed parts' records in one statement (the primary part's header and environment)."""
    parsed = [(i, p.statement) for i, p in enumerate(parts) if p.statement is not None]
    origin: dict[int, int] = {}
    for i, st in parsed:
        pred = st.predicate
        for item in (*pred.kernel_tests, *pred.benchmarks, *pred.evals, *pred.sanitizer):
            origin[id(item)] = i
    if not parsed:
        return None, origin
    first = next((st for i, st in parsed if parts[i].name == STATEMENT_FILE), parsed[0][1])
    if len(parsed) == 1:
        return first, origin
    sts = [st for _, st in parsed]
    pred = first.predicate.model_copy(update={
        "kernel_tests": [t for st in sts for t in st.predicate.kernel_tests],
        "benchmarks": [b for st in sts for b in st.predicate.benchmarks],
        "evals": [e for st in sts for e in st.predicate.evals],
        "lm_eval": [m for st in sts for m in st.predicate.lm_eval],
        "sanitizer": [s for st in sts for s in st.predicate.sanitizer],
    })
    return first.model_copy(update={"predicate": pred}), origin


def parse_statement_bytes(raw: bytes, label: str = STATEMENT_FILE) -> tuple[Statement | None, list[Finding]]:
    """Parse statement bytes the way the loader does (for `fasttrack sign` and tests)."""
    problems = _Problems(label)
    name = Path(label).name or STATEMENT_FILE
    data = _parse_json(raw, problems, name)
    statement = None if data is _INVALID else _validate(data, problems, name)[0]
    return statement, list(problems.findings())


class _Problems:
    def __init__(self, evidence_file: str) -> None:
        self.evidence_file = evidence_file
        self.items: list[str] = []
        self.seen: set[str] = set()

    def add(self, message: str) -> None:
        if message not in self.seen:
            self.seen.add(message)
            self.items.append(message)

    def findings(self) -> tuple[Finding, ...]:
        shown = self.items[:MAX_PROBLEMS]
        out = [Finding.error(SCHEMA_CODE, m, evidence_file=self.evidence_file, fix=SCHEMA_FIX) for m in shown]
        if len(self.items) > MAX_PROBLEMS:
            more = len(self.items) - MAX_PROBLEMS
            out.append(Finding.error(SCHEMA_CODE, f"and {more} more schema problems",
                                     evidence_file=self.evidence_file, fix=SCHEMA_FIX))
        return tuple(out)


class _Invalid:
    pass


_INVALID: Any = _Invalid()


def _read_regular(path: Path, limit: int, problems: _Problems, what: str, *,
                  report_missing: bool = True) -> bytes | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        problems.add(f"{path.name}: cannot read the {what}: {exc.strerror}")
        return None
    if not stat.S_ISREG(st.st_mode):
        problems.add(f"{path.name}: the {what} must be a regular file (not a symlink or directory)")
        return None
    if st.st_size > limit:
        problems.add(f"{path.name}: the {what} is {st.st_size} bytes, over the {limit}-byte limit")
        return None
    try:
        with open(path, "rb") as fh:
            return fh.read(limit + 1)[:limit]
    except OSError as exc:
        problems.add(f"{path.name}: cannot read the {what}: {exc.strerror}")
        return None


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _parse_json(raw: bytes, problems: _Problems, name: str = STATEMENT_FILE) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        problems.add(f"{name} is not UTF-8 text (byte {exc.start})")
        return _INVALID
    if not text.strip():
        problems.add(f"{name} is empty")
        return _INVALID
    depth = _max_depth(text)
    if depth > MAX_DEPTH:
        problems.add(f"{name} nests {depth} levels deep, over the limit of {MAX_DEPTH}")
        return _INVALID
    duplicates: list[str] = []
    try:
        data = json.loads(text, parse_constant=_reject_constant,
                          object_pairs_hook=lambda pairs: _no_duplicates(pairs, duplicates))
    except json.JSONDecodeError as exc:
        problems.add(f"{name} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except (ValueError, RecursionError) as exc:  # NaN/Infinity, over-long integers
        problems.add(f"{name} is not valid JSON: {exc}")
    else:
        if not duplicates:
            return data
        # Two parsers may keep different copies of a repeated key: what was signed would not be what is read.
        shown = ", ".join(repr(k) for k in list(dict.fromkeys(duplicates))[:10])
        problems.add(f"{name} repeats a key inside one JSON object ({shown}); every key may appear once")
    return _INVALID


def _no_duplicates(pairs: list[tuple[str, Any]], duplicates: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            duplicates.append(key)
        out[key] = value
    return out


_ESCAPES = re.compile(r"\\.", re.DOTALL)
_NOT_STRUCTURE = re.compile(r'[^"\[\]{}]+')


def _max_depth(text: str) -> int:
    """Bracket nesting depth outside strings (cheap pre-check so json/pydantic never recurse deeply).

    Escape pairs and every character but quotes and brackets are removed first (at C speed), so the loop
    only visits the structure, not the numbers that make up the bulk of a bundle."""
    depth = best = 0
    in_string = False
    for ch in _NOT_STRUCTURE.sub("", _ESCAPES.sub("", text)):
        if ch == '"':
            in_string = not in_string
        elif in_string:
            continue
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        else:
            depth -= 1
    return best


def _validate(data: Any, problems: _Problems, name: str = STATEMENT_FILE) -> tuple[Statement | None, bool]:
    """Validate, reporting every error; drop invalid parts and retry so valid parts are kept."""
    if not isinstance(data, dict):
        problems.add(f"{name} must hold a JSON object, not {_json_type(data)}")
        return None, False
    _report_missing(data, problems)
    work: dict[str, Any] = data
    salvaged = False
    for _ in range(MAX_SALVAGE_ROUNDS):
        try:
            return Statement.model_validate(work), salvaged
        except pydantic.ValidationError as err:
            errors = err.errors(include_url=False, include_input=False)
        for e in errors:
            loc = tuple(e.get("loc", ()))
            msg = "unknown field" if e.get("type") == "extra_forbidden" else e.get("msg", "invalid")
            problems.add(f"{field_path(loc)}: {msg}")
        targets = {_prune_target(tuple(e.get("loc", ())), e.get("type", "")) for e in errors}
        if () in targets:
            return None, True
        # Delete deepest paths and highest list indices first so earlier deletions don't shift later ones.
        for target in sorted(targets, key=_target_order, reverse=True):
            _delete(work, target)
        salvaged = True
    problems.add(f"{name} could not be salvaged")
    return None, True


def _report_missing(data: dict[str, Any], problems: _Problems) -> None:
    for key in _STATEMENT_KEYS.values():
        if key not in data:
            problems.add(f"{key}: missing")
    if isinstance(data.get("subject"), list) and not data["subject"]:
        problems.add("subject: must name the contribution with its digest (it is empty)")
    pred = data.get("predicate")
    if isinstance(pred, dict):
        for key in REQUIRED_PREDICATE_FIELDS:
            if key not in pred:
                problems.add(f"predicate.{key}: missing")
            elif pred[key] is None:
                problems.add(f"predicate.{key}: must not be null (a complete bundle records it)")
        _report_null_facts(pred, problems)


def _report_null_facts(pred: dict[str, Any], problems: _Problems) -> None:
    """Facts the rules rely on that the schema lets default: a GPU's L2 size (the flush check compares
    with it), the number of timed outputs each accuracy entry checked (a default of 1 would stand for a
    check that never ran)."""
    env = pred.get("environment")
    on_gpu = isinstance(env, dict) and env.get("compute_capability") not in (None, CPU_CAPABILITY)
    if on_gpu and isinstance(env, dict) and env.get("l2_bytes") is None:
        problems.add("predicate.environment.l2_bytes: must not be null on a GPU (the L2 flush is "
                     "checked against it)")
    benches = pred.get("benchmarks")
    if not isinstance(benches, list):
        return
    for i, bench in enumerate(benches):
        accuracy = bench.get("accuracy") if isinstance(bench, dict) else None
        if not isinstance(accuracy, dict):
            continue
        for variant, acc in accuracy.items():
            if isinstance(acc, dict) and acc.get("checked") is None:
                problems.add(f"predicate.benchmarks[{i}].accuracy.{variant}.checked: "
                             f"{'missing' if 'checked' not in acc else 'must not be null'} (how many timed "
                             "outputs were compared)")


def _prune_target(loc: tuple[Any, ...], err_type: str) -> tuple[Any, ...]:
    """The smallest part of the statement to drop for an error at `loc`; () means give up."""
    if not loc:
        return ()
    if err_type == "extra_forbidden":
        return loc
    head = loc[0]
    if head == "predicate" and len(loc) >= 2:
        section = loc[1]
        item = len(loc) >= 3 and (isinstance(loc[2], int) or section in _MAP_SECTIONS)
        if item and section in _LIST_SECTIONS | _MAP_SECTIONS:
            return loc[:3]
        return loc[:2]
    if head == "subject" and len(loc) >= 2 and isinstance(loc[1], int):
        return loc[:2]
    return loc[:1]


def _target_order(target: tuple[Any, ...]) -> tuple[int, tuple[int, ...]]:
    return len(target), tuple(p if isinstance(p, int) else 0 for p in target)


def _delete(work: Any, target: tuple[Any, ...]) -> None:
    node = work
    for part in target[:-1]:
        if not _has(node, part):
            break
        node = node[part]
    else:
        if _has(node, target[-1]):
            del node[target[-1]]
            return
    # The path did not resolve (e.g. a "[key]" marker or an alias): drop the top-level key instead.
    if isinstance(work, dict) and target and target[0] in work:
        if target[0] == "predicate" and len(target) >= 2 and isinstance(work["predicate"], dict):
            work["predicate"].pop(target[1], None)
        else:
            del work[target[0]]


def _has(node: Any, part: Any) -> bool:
    if isinstance(node, dict):
        return part in node
    return isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(value), "null")


def _digest_inside(bundle_dir: Path, name: str) -> str | None:
    path = bundle_dir / name
    try:
        if path.is_symlink() or not path.is_file():
            return None
        if not path.resolve().is_relative_to(bundle_dir.resolve()):
            return None
        return sha256_file(path)
    except OSError:
        return None


def _files_under(root: Path, limit: int = 1000) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            out.append(Path(dirpath) / name)
            if len(out) >= limit:
                return out
    return out
