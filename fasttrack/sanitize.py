"""One sanitiser for text that leaves fasttrack: terminals, logs, GitHub comments, summaries, annotations.

Untrusted text (file names from a PR, manifest fields, finding messages that quote them) may hold control
characters (a newline forges another output line, ESC drives a terminal), bidi overrides and zero-width
characters (text that reads differently than it is), and lone surrogates (a file name that is not valid UTF-8,
decoded with `surrogateescape`, which no encoder accepts). `visible` shows each of them as an escape, so the
text is one line, encodable as UTF-8, and reads as what it is.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

# Characters that change how surrounding text reads without being visible themselves.
_BIDI: Final = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
_INVISIBLE: Final = frozenset("\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180e\u200b\u200c\u200d\u2060"
                              "\u2061\u2062\u2063\u2064\u3164\ufeff\uffa0")


def _escape(ch: str) -> str:
    cp = ord(ch)
    if 0xDC80 <= cp <= 0xDCFF:  # a byte that was not UTF-8, kept by surrogateescape
        return f"\\x{cp - 0xDC00:02x}"
    if cp <= 0xFF:
        return f"\\x{cp:02x}"
    if cp <= 0xFFFF:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def needs_escape(ch: str) -> bool:
    """True for a character `visible` escapes: controls, separators other than space, bidi, invisible ones,
    surrogates, unassigned and private-use code points, and the backslash that starts an escape."""
    if ch == " ":
        return False
    if ch == "\\" or ch in _BIDI or ch in _INVISIBLE:
        return True
    cat = unicodedata.category(ch)
    # Cc control, Cf format, Cs surrogate, Co private use, Cn unassigned, Zl/Zp line and paragraph separators,
    # Zs other than the plain space (no-break and wide spaces read as a space and are not one).
    return cat[0] == "C" or cat in ("Zl", "Zp", "Zs")


def visible(text: str) -> str:
    """`text` on one line with every character `needs_escape` names written as `\\xNN`, `\\uXXXX` or
    `\\UXXXXXXXX`, and a backslash as `\\\\`, so the result is unambiguous: `visible(a) == visible(b)` only if
    `a == b`. Plain text is returned unchanged (apart from backslashes)."""
    if text.isascii() and text.isprintable() and "\\" not in text:
        return text
    out: list[str] = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif needs_escape(ch):
            out.append(_escape(ch))
        else:
            out.append(ch)
    return "".join(out)


def path_text(raw: str | bytes) -> str:
    """A file name for display: bytes decoded as UTF-8 with `surrogateescape`, then `visible`."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "surrogateescape")
    return visible(raw)


# GitHub turns these into links or notifications in comments, summaries and check output: `@user` and
# `@org/team` mentions, `#N`, `owner/repo#N` and `GH-N` references, and bare URLs (GFM autolinks). A
# zero-width space after the sigil keeps the text readable and makes it inert. `visible` has already escaped
# any zero-width space the text itself carried, so every one in the output is ours.
_ZWSP: Final = "\u200b"
_REFERENCE: Final = re.compile(r"(@)|(#)(?=\d)|\b(GH-)(?=\d)|(:)(?=//)|\b(www)(?=\.)",
                               re.IGNORECASE)


# A run of 7 or more hex digits that GitHub may autolink as a commit of the repository (a fork's commit shown
# as if it were the repository's): a zero-width space after its sixth character.
_COMMIT_LIKE: Final = re.compile(r"(?<![0-9A-Za-z])([0-9a-fA-F]{6})(?=[0-9a-fA-F]+(?![0-9A-Za-z]))")


def break_references(text: str) -> str:
    """Mentions, issue/PR references (`#N`, `owner/repo#N`, `GH-N`), commit-like hex runs and bare URLs made
    inert: a zero-width space follows `@`, `#`, `GH-`, the `:` of `://`, `www` and the sixth digit of a hex
    run of seven or more. For text already passed through `visible` (the Markdown renderer escapes in
    between); otherwise use `inert_references`."""
    text = _REFERENCE.sub(lambda m: m.group(0) + _ZWSP, text)
    return _COMMIT_LIKE.sub(lambda m: m.group(1) + _ZWSP, text)


def inert_references(text: str) -> str:
    """`visible(text)` with its mentions, references and bare URLs made inert (`break_references`): for plain
    text that GitHub shows (check-run titles and annotations) and for the pieces of Markdown."""
    return break_references(visible(text))


# The Actions runner treats a log line that starts (after leading whitespace) with `::` as a workflow command
# (`::error`, `::add-mask`, `::stop-commands` ...), and the legacy `##[command]` form anywhere in a line.
_COMMAND: Final = re.compile(r"::|##\[")


def log_line(text: str) -> str:
    """`text` as one log line that cannot start a workflow command: `visible` (so a newline cannot start a new
    line), then every `::` written `:\\x3a` and every `##[` written `##\\x5b`. Still unambiguous: a
    backslash of the text itself is shown doubled."""
    return _COMMAND.sub(lambda m: ":\\x3a" if m.group(0) == "::" else "##\\x5b", visible(text))


def terminal_text(text: str) -> str:
    """`visible(text)` for a line fasttrack starts itself (stdout: the terminal report), which the Actions
    runner parses too: the text cannot break the line (so no `::` command can start one) and its legacy
    `##[command]`, which the runner honours anywhere in a line, is written `##\\x5b`."""
    return visible(text).replace("##[", "##\\x5b")


# A workflow command at the start of a line (after any whitespace, as the runner trims it), in a document
# printed whole: the runner splits stdout at CR and LF.
_LINE_COMMAND: Final = re.compile(r"(^|[\r\n])([^\S\r\n]*)::")


def inert_document(text: str, syntax: str) -> str:
    """A whole rendered document (`json`, `sarif`, `markdown`) as printed to stdout, which the Actions runner
    parses line by line: no line can start a workflow command (`::` after leading whitespace) and no legacy
    `##[command]` is left anywhere, with the document's meaning kept.

    - JSON (and SARIF): `[` after `##` is written `\\u005b` and a line-start `::` as `:\\u003a`. Only a JSON
      string can hold `#` (and a line can start inside one only if it held a raw newline, which JSON does
      not allow), so every rewrite is inside a string and any JSON parser reads the same value.
    - Markdown: `##\\[` and `\\::` (CommonMark backslash escapes: both render as the text; inside a code
      block the backslash shows).
    """
    if syntax in ("json", "sarif"):
        esc_bracket, esc_colon = "\\u005b", ":\\u003a"
    elif syntax == "markdown":
        esc_bracket, esc_colon = "\\[", "\\::"
    else:
        raise ValueError(f"no inert form for {syntax!r} documents")
    text = text.replace("##[", "##" + esc_bracket)
    return _LINE_COMMAND.sub(lambda m: m.group(1) + m.group(2) + esc_colon, text)
