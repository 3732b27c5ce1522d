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
from fasttrack.evidence.bundle import (
    REQUIRED_PREDICATE_FIELDS,
    SIGNATURE_FILE,
    STATEMENT_FILE,
    Statement,
)
from fasttrack.evidence.digest import sha256_file
from fasttrack.evidence.loaded import LoadedEvidence
from fasttrack.evidence.signing import MAX_SIGNATURE_BYTES
from fasttrack.findings import Finding

MAX_STATEMENT_BYTES = 32 * 1024 * 1024
MAX_DEPTH = 32
MAX_PROBLEMS = 50
MAX_SALVAGE_ROUNDS = 25
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
    """Read the bundle under `bundle_dir`; None when there is no bundle there at all."""
    bundle_dir = Path(bundle_dir)
    if not bundle_dir.is_dir():
        return None
    statement_path = bundle_dir / STATEMENT_FILE
    signature_path = bundle_dir / SIGNATURE_FILE
    problems = _Problems(str(statement_path))

    raw = _read_regular(statement_path, MAX_STATEMENT_BYTES, problems, "statement")
    signature = _read_regular(signature_path, MAX_SIGNATURE_BYTES, problems, "signature",
                              report_missing=False)
    statement: Statement | None = None
    salvaged = False
    if raw is not None:
        data = _parse_json(raw, problems)
        if data is not _INVALID:
            statement, salvaged = _validate(data, problems)

    log_digests: dict[str, str | None] = {}
    if statement is not None:
        for name in statement.predicate.logs:
            log_digests[name] = _digest_inside(bundle_dir, name)
    known = {STATEMENT_FILE, SIGNATURE_FILE, *log_digests}
    unlisted = tuple(sorted(
        p.relative_to(bundle_dir).as_posix() for p in _files_under(bundle_dir)
        if p.relative_to(bundle_dir).as_posix() not in known
    ))
    return LoadedEvidence(
        bundle_dir=bundle_dir,
        statement=statement,
        statement_bytes=raw,
        signature=signature,
        problems=problems.findings(),
        statement_path=statement_path if raw is not None else None,
        signature_path=signature_path if signature is not None else None,
        salvaged=salvaged,
        log_digests=log_digests,
        unlisted_files=unlisted,
    )


def parse_statement_bytes(raw: bytes, label: str = STATEMENT_FILE) -> tuple[Statement | None, list[Finding]]:
    """Parse statement bytes the way the loader does (for `fasttrack sign` and tests)."""
    problems = _Problems(label)
    data = _parse_json(raw, problems)
    statement = None if data is _INVALID else _validate(data, problems)[0]
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


def _parse_json(raw: bytes, problems: _Problems) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        problems.add(f"statement.json is not UTF-8 text (byte {exc.start})")
        return _INVALID
    if not text.strip():
        problems.add("statement.json is empty")
        return _INVALID
    depth = _max_depth(text)
    if depth > MAX_DEPTH:
        problems.add(f"statement.json nests {depth} levels deep, over the limit of {MAX_DEPTH}")
        return _INVALID
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        problems.add(f"statement.json is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except (ValueError, RecursionError) as exc:  # NaN/Infinity, over-long integers
        problems.add(f"statement.json is not valid JSON: {exc}")
    return _INVALID


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


def _validate(data: Any, problems: _Problems) -> tuple[Statement | None, bool]:
    """Validate, reporting every error; drop invalid parts and retry so valid parts are kept."""
    if not isinstance(data, dict):
        problems.add(f"statement.json must hold a JSON object, not {_json_type(data)}")
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
    problems.add("statement.json could not be salvaged")
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
