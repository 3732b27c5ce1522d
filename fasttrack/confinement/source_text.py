"""The text Python runs, from a file's bytes: what the escape analysis and every other reader must parse.

`ast.parse` of a `str` ignores a PEP 263 coding cookie, but the interpreter honours it when it imports the
file: a file that reads as harmless UTF-8 to a reviewer (and to a checker that decodes it as UTF-8) can run
as something else (`# coding: utf-7` turns `+AAo-` into a newline). So a source file's bytes are decoded
exactly as CPython's tokenizer does (`tokenize.detect_encoding`: a UTF-8 BOM, a cookie on line 1, or on
line 2 when line 1 is blank or a comment), and only when that reading is provably the one a UTF-8 reader
sees is the text handed to the analysis:

- no cookie, or a cookie naming UTF-8 (any alias `codecs.lookup` accepts for it): decoded as UTF-8;
- a cookie naming ASCII or Latin-1 (any alias): accepted only when the file is pure ASCII, where both
  readings are the same text byte for byte; any other byte makes the two readings differ, a finding;
- any other codec (utf-7, utf-16, cp037, rot13-style text transforms, ...), an unknown codec, a BOM that
  conflicts with the cookie, bytes that do not decode, a NUL byte: a `SourceProblem`, never text.

`read_python_source` reads a file of the head tree with symlinks followed on disk (and confined to the tree),
so a `.py` symlink is judged by the text it points to.
"""

from __future__ import annotations

import codecs
import io
import os
import tokenize
from dataclasses import dataclass
from pathlib import Path

MAX_SOURCE_BYTES = 4 * 1024 * 1024
UTF8 = "utf-8"
# Codecs whose reading of a pure-ASCII file is that file's UTF-8 reading (normalised codec names).
_ASCII_COMPATIBLE = frozenset({"ascii", "latin-1", "iso8859-1"})


@dataclass(frozen=True)
class SourceProblem:
    """Why a file's bytes are not accepted as the text Python runs (with the line, when known)."""

    path: str
    reason: str
    line: int | None = None
    kind: str = "encoding"  # encoding | undecodable | bom | unreadable | too-large


def _codec_name(name: str) -> str | None:
    try:
        info = codecs.lookup(name)
    except LookupError:
        return None
    return info.name


def _cookie_line(raw: bytes) -> int | None:
    """1 or 2: the line that holds a coding cookie (None when there is none)."""
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    lines = raw.splitlines()[:2]
    for no, line in enumerate(lines, start=1):
        if tokenize.cookie_re.match(line.decode("latin-1")):
            return no
        if no == 1 and not tokenize.blank_re.match(line):
            return None
    return None


def decode_python_source(raw: bytes, path: str) -> str | SourceProblem:
    """The text CPython would compile from `raw`, or why it is not accepted (see the module doc)."""
    if len(raw) > MAX_SOURCE_BYTES:
        return SourceProblem(path, f"is over {MAX_SOURCE_BYTES // (1024 * 1024)} MiB", kind="too-large")
    try:
        declared, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as exc:
        line = _cookie_line(raw)
        has_bom = raw.startswith(codecs.BOM_UTF8)
        if has_bom and line is not None:
            return SourceProblem(path, "starts with a UTF-8 byte-order mark but declares another encoding "
                                       f"({exc.msg})", line=line, kind="bom")
        if line is not None:
            return SourceProblem(path, f"has a coding declaration Python rejects ({exc.msg})", line=line)
        declared = UTF8  # no cookie: the bytes are not UTF-8; say where below
    name = _codec_name(declared)
    if name == "utf-8-sig":
        name = UTF8
    line = _cookie_line(raw)
    has_bom = raw.startswith(codecs.BOM_UTF8)
    body = raw[len(codecs.BOM_UTF8):] if has_bom else raw
    if name is None:
        return SourceProblem(path, f"declares an unknown encoding {declared!r}", line=line)
    if name != UTF8:
        if name not in _ASCII_COMPATIBLE:
            return SourceProblem(
                path, f"declares the encoding {declared!r} ({name}): Python runs a different text than the "
                      "UTF-8 a reviewer and the diff show", line=line)
        if not body.isascii():
            return SourceProblem(
                path, f"declares the encoding {declared!r} and holds non-ASCII bytes: its {name} reading "
                      "(what Python runs) differs from the UTF-8 reading a reviewer sees", line=line)
    try:
        text = body.decode(UTF8)
    except UnicodeDecodeError as exc:
        bad_line = body[: exc.start].count(b"\n") + 1
        return SourceProblem(path, f"is not valid UTF-8 (byte {exc.start}: {exc.reason})", line=bad_line,
                             kind="undecodable")
    if "\0" in text:
        return SourceProblem(path, "holds a NUL byte (Python refuses such source)",
                             line=text[: text.index("\0")].count("\n") + 1, kind="undecodable")
    return text


def resolve_in_tree(root: Path, rel: str) -> Path | None:
    """Where `rel` really is under `root`, every symlink followed on disk; None when it leaves `root`,
    loops or does not exist."""
    try:
        real_root = root.resolve(strict=True)
        real = (root / rel).resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if real != real_root and real_root not in real.parents:
        return None
    return real


def real_relpath(root: Path, rel: str) -> str | None:
    """`resolve_in_tree` as a path relative to `root` (posix), or None."""
    real = resolve_in_tree(root, rel)
    if real is None:
        return None
    return real.relative_to(root.resolve()).as_posix()


def read_python_source(root: Path, rel: str) -> str | SourceProblem:
    """The text Python runs for the file `rel` of the tree at `root` (a symlink is followed on disk and read
    through, as the import system would); a `SourceProblem` when it cannot be read or is not accepted."""
    real = resolve_in_tree(root, rel)
    if real is None:
        return SourceProblem(rel, "cannot be read inside the tree (missing, a dangling or looping symlink, "
                                  "or a symlink that leaves the tree)", kind="unreadable")
    try:
        if not real.is_file():
            return SourceProblem(rel, "is not a regular file", kind="unreadable")
        size = real.stat().st_size
        if size > MAX_SOURCE_BYTES:
            return SourceProblem(rel, f"is over {MAX_SOURCE_BYTES // (1024 * 1024)} MiB", kind="too-large")
        with open(real, "rb") as fh:
            raw = fh.read(MAX_SOURCE_BYTES + 1)
    except OSError as exc:
        return SourceProblem(rel, f"cannot be read ({os.strerror(exc.errno or 0)})", kind="unreadable")
    return decode_python_source(raw, rel)
