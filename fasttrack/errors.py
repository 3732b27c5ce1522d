"""The error contract of every command.

- exit 0: pass; exit 1: a policy failure (the verdict fails) and nothing else;
- exit 2: bad input or an unusable path (`InputError`, and any `OSError` from a file fasttrack was told to
  read or write): one line naming the file, the field and the fix, never a traceback;
- exit 3: a bug in fasttrack: one line asking for a report, with the traceback under `--debug`.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pydantic

EXIT_PASS = 0
EXIT_POLICY_FAILURE = 1
EXIT_INPUT_ERROR = 2
EXIT_BUG = 3


class InputError(Exception):
    """A problem with something the user gave us: names the file, the field and the fix."""

    def __init__(self, message: str, *, path: str | Path | None = None, field: str | None = None,
                 fix: str | None = None) -> None:
        self.message = message
        self.path = str(path) if path is not None else None
        self.field = field
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        from fasttrack.sanitize import visible

        where = ""
        if self.path:
            where = f"{visible(self.path)}: "
        if self.field:
            where += f"{self.field}: "
        text = f"{where}{self.message}"
        if self.fix:
            text += f" (fix: {self.fix})"
        return text


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,99}$")


def field_path(loc: tuple[int | str, ...]) -> str:
    """Render a pydantic error location as a dotted TOML/JSON path, e.g. envelope.batch.max or claims[0].

    A key that is not a plain name (it came from the input: an unknown key may be anything, a newline or a
    forged `::error` included) is quoted, `findings[0]['a b']`; whatever prints the error escapes it
    (`sanitize.log_line` on a terminal or log, the Markdown renderer on GitHub)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(str(part)):
            out += ("." if out else "") + str(part)
        else:
            out += f"['{str(part)[:200]}']"
    return out or "<root>"


def from_validation_error(err: pydantic.ValidationError, path: str | Path, what: str) -> InputError:
    """Turn the first pydantic error into an InputError naming the file and field (all errors in the text)."""
    problems = []
    for e in err.errors():
        loc = field_path(tuple(e.get("loc", ())))
        msg = e.get("msg", "invalid")
        if e.get("type") == "extra_forbidden":
            msg = "unknown key"
        problems.append(f"{loc}: {msg}")
    first = err.errors()[0]
    first_field = field_path(tuple(first.get("loc", ())))
    detail = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
    return InputError(f"invalid {what}: {detail}", path=path, field=first_field,
                      fix=f"correct the {what} (see the schema in the README)")


_OS_FIXES = {
    errno.EISDIR: "pass a file path, not a directory",
    errno.ENOTDIR: "a parent of this path is not a directory: pass another path",
    errno.ENOENT: "pass an existing path (create the directory first when writing)",
    errno.EACCES: "check the file's permissions, or pass a path you may use",
    errno.EPERM: "check the file's permissions, or pass a path you may use",
    errno.EROFS: "the file system is read-only: write somewhere else",
    errno.ENOSPC: "the device is full: free space or write somewhere else",
    errno.EDQUOT: "the disk quota is exceeded: free space or write somewhere else",
    errno.ENAMETOOLONG: "pass a shorter path",
    errno.ELOOP: "the path is a symlink loop (or a symlink where none is allowed): pass a real file",
    errno.EFBIG: "the file is too large for the device: write somewhere else",
}


def from_os_error(exc: OSError, *, what: str = "file", field: str | None = None,
                  path: str | Path | None = None) -> InputError:
    """An OSError on a path the user named, as the one-line InputError (file, field, fix)."""
    where = path if path is not None else exc.filename
    if isinstance(where, bytes):
        where = where.decode("utf-8", "surrogateescape")
    reason = exc.strerror or type(exc).__name__
    fix = _OS_FIXES.get(exc.errno or -1, "pass a path fasttrack can use")
    return InputError(f"cannot use this {what}: {reason}", path=None if where is None else str(where),
                      field=field, fix=fix)
