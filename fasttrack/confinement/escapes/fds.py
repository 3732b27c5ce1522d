"""File descriptors the contribution made itself (hostile review 24): `os.write`/`os.close`/`os.set_blocking`
on a descriptor of the model's own pipe touch nothing another model shares, while the same calls on `1`,
`sys.stdout.fileno()` or a descriptor handed in change the engine's. A descriptor is own only where every
binding of the name is an element of (or the result of) a call that makes a descriptor (`os.pipe()`,
`os.open(...)`, whose flags are judged where it is opened): anything else fails closed."""

from __future__ import annotations

import ast

from fasttrack.confinement.escapes.common import _arg
from fasttrack.confinement.escapes.scope import Resolver, _Alias, _Elem, _Scope
from fasttrack.confinement.escapes.stdlib_effects import FD_CALLS, FD_MAKERS, SHARED_STREAM_PATHS


def on_own_fd(resolver: Resolver, node: ast.Call, q: str, scope: _Scope) -> bool:
    """`q(fd, ...)` is one of the descriptor calls and `fd` is a descriptor this file made."""
    if q not in FD_CALLS:
        return False
    return made_fd(resolver, _arg(node, 0, "fd"), scope)


def made_fd(resolver: Resolver, fd: ast.expr | None, scope: _Scope) -> bool:
    """`fd` is a descriptor this file made (every binding of it)."""
    return fd is not None and _made_fd(resolver, fd, scope, 0)


def _made_fd(resolver: Resolver, expr: ast.expr, scope: _Scope, depth: int) -> bool:
    if depth > 6:
        return False
    if isinstance(expr, ast.Call):
        maker = resolver.resolve(expr.func, scope)
        if maker is None or maker.origin != "import" or maker.qualname not in FD_MAKERS:
            return False
        first = _arg(expr, 0, "fd", "path")
        if maker.qualname == "os.dup":  # a copy of a descriptor is as shared as the original
            return first is not None and _made_fd(resolver, first, scope, depth + 1)
        return maker.qualname != "os.open" or not shared_stream(resolver, first, scope)
    if isinstance(expr, ast.Subscript):  # `p = os.pipe(); os.write(p[1], ...)`
        return _made_fd(resolver, expr.value, scope, depth + 1)
    if not isinstance(expr, ast.Name):
        return False
    bindings = resolver._lookup(expr.id, scope)
    if not bindings:
        return False
    for b in bindings:
        if isinstance(b, _Elem | _Alias):
            if not _made_fd(resolver, b.value, b.scope, depth + 1):
                return False
        else:
            return False
    return True


def shared_stream(resolver: Resolver, first: ast.expr | None, scope: _Scope) -> bool:
    """An opener's first argument naming one of the process's shared streams: a descriptor number, the
    descriptor of `sys.stdin`/`stdout`/`stderr`, or a path such as `/dev/stdin` or `/proc/self/fd/0`."""
    if isinstance(first, ast.Constant) and isinstance(first.value, int) and not isinstance(first.value, bool):
        return True
    if isinstance(first, ast.Call):
        f = resolver.resolve(first.func, scope)
        return f is not None and f.qualname.startswith(("sys.std", "sys.__std")) and \
            f.qualname.endswith(".fileno")
    path = resolver.constant_string(first, scope) if first is not None else None
    return path is not None and path.startswith(SHARED_STREAM_PATHS)
