"""The `fasttrack` entry point and its error contract (fasttrack.errors): exit 0 pass, 1 policy failure, 2 bad
input or an unusable path (one line naming the file, the field and the fix), 3 a bug in fasttrack (one line
asking for a report; `--debug` shows the traceback).

This module stays light: `fasttrack`, `fasttrack -h` and `fasttrack --version` answer without importing typer,
pydantic or rich. The commands live in `fasttrack.app` (imported for everything else); `fasttrack.cli.app` is
that Typer app, loaded on first use.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from typing import TYPE_CHECKING, Any

from fasttrack import __version__

if TYPE_CHECKING:
    from fasttrack.confinement.trace.sandbox import Warm

EXIT_INPUT_ERROR = 2
EXIT_BUG = 3
DEBUG_ENV = "FASTTRACK_DEBUG"

# name -> one-line summary, in the order `fasttrack -h` lists them (tests check it against fasttrack.app).
COMMANDS: tuple[tuple[str, str], ...] = (
    ("verify", "Verify a contribution directory (default kernels/kimi_k3) or a PR given as a git range."),
    ("collect", "Collect evidence for a contribution on this machine's GPUs and write evidence/<name>/."),
    ("sign", "SSH-sign an evidence bundle's statement."),
    ("audit", "Re-run points of a bundle here with the same harness and baseline; write a signed record."),
    ("report", "Build the maintainer review dashboard: index.html, a page per contribution, report.md."),
    ("github", "Publish verdicts to GitHub; fetch a PR's files."),
    ("rules", "List every rule code with its one-line doc."),
    ("schema", "Print the JSON schema of the Verdict, the manifest, the policy or the evidence statement."),
)

ROOT_HELP = """Usage: fasttrack [--version] [--debug] COMMAND [ARGS]...

Gate fast-track kernel contributions: confinement, envelope, evidence.

Commands:
{commands}

Examples:
  fasttrack verify                                   the reference contribution, kernels/kimi_k3
  fasttrack verify kernels/kimi_k3 -f json -o v.json a contribution directory, the verdict as JSON
  fasttrack verify --repo ../vllm --base origin/main --head HEAD   a PR as a git range
  fasttrack COMMAND -h                               a command's options, examples and exit codes

Options:
  --version  Print the version and exit.
  --debug    On an internal error, show the traceback (also: {debug_env}=1).
  -h, --help Show this message and exit.

Exit codes: 0 pass, 1 policy failure, 2 bad input or an unusable path, 3 a bug in fasttrack.
"""


def root_help() -> str:
    width = max(len(n) for n, _ in COMMANDS)
    rows = "\n".join(f"  {name:<{width}}  {summary}" for name, summary in COMMANDS)
    return ROOT_HELP.format(commands=rows, debug_env=DEBUG_ENV)


def __getattr__(name: str) -> Any:
    if name == "app":  # `from fasttrack.cli import app`: the Typer app, loaded on first use
        from fasttrack.app import app

        return app
    raise AttributeError(name)


def _split_debug(args: list[str]) -> tuple[list[str], bool]:
    """`--debug` anywhere before a `--` separator, removed from the arguments."""
    out: list[str] = []
    debug = False
    for i, a in enumerate(args):
        if a == "--":
            out.extend(args[i:])
            break
        if a == "--debug":
            debug = True
        else:
            out.append(a)
    return out, debug


def _err(line: str) -> None:
    from fasttrack.sanitize import log_line

    # One line that cannot start a GitHub workflow command, whatever the error quotes.
    sys.stderr.write(log_line(f"fasttrack: {line}") + "\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> None:
    """Run a command; every outcome is one of the exit codes above, never a traceback (unless --debug)."""
    args, debug = _split_debug(list(sys.argv[1:] if argv is None else argv))
    debug = debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    if args in ([], ["-h"], ["--help"]):
        sys.stdout.write(root_help())
        sys.exit(0)
    if args == ["--version"]:
        sys.stdout.write(f"{__version__}\n")
        sys.exit(0)
    sys.exit(_run(args, debug))


def _run(args: list[str], debug: bool) -> int:
    started: list[Warm] = []  # the trace child prestarted for `verify`, if any
    collecting = gc.isenabled()
    if args[:1] == ["verify"]:
        # One run that allocates a large, long-lived heap (the import graph, the ASTs) and little cyclic
        # garbage: the collector's passes over that heap were 0.4-0.5 s of a cold run's ~3.3 s of CPU (5
        # full collections) for no memory back (peak RSS 83-84 MB either way, vLLM 0.33). Off during the
        # command only (a caller running main() in its own process gets it back); run_verify as a library
        # and the trace's child (a fresh interpreter) keep theirs.
        gc.disable()
    try:
        return _dispatch(args, debug, started)
    finally:
        for warm in started:
            warm.close()  # a no-op once the run took it; kills it when the command stopped before
        if collecting:
            gc.enable()


def _dispatch(args: list[str], debug: bool, started: list[Warm]) -> int:
    import warnings

    from fasttrack.errors import InputError, from_os_error

    try:
        if args[:1] == ["verify"]:
            # The effect trace's child imports the engine stack (a cold run's floor) while the command loads.
            from fasttrack.pipeline.prestart import prestart_for_verify_args

            started.extend(w for w in [prestart_for_verify_args(args[1:])] if w is not None)
            from fasttrack.commands.root import verify_app

            app = verify_app()  # the root and verify alone: the other commands are neither imported nor built
        else:
            from fasttrack.app import app

        # Python prints a warning raw (`FILE:LINE: Category: message`, FILE may be a PR's file name handed
        # to ast.parse): within this call each one is a single log_line instead.
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            # Without standalone mode click returns a typer.Exit's code instead of exiting: pass it on.
            rc = app(args=args, prog_name="fasttrack", standalone_mode=False,
                     obj=started[0] if started else None)
    except InputError as exc:
        _err(f"error: {exc.render()}")
        return EXIT_INPUT_ERROR
    except (BrokenPipeError, SystemExit):
        # `fasttrack verify | head`: the reader left. click turns that into SystemExit(1) (the only SystemExit
        # a command raises without standalone mode); exit 1 means a policy failure, so say 2 instead.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_INPUT_ERROR
    except OSError as exc:  # a path the user named that cannot be read or written
        _err(f"error: {from_os_error(exc).render()}")
        return EXIT_INPUT_ERROR
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except Exception as exc:
        names = {k.__name__ for k in type(exc).__mro__}
        if "Exit" in names:  # typer.Exit / click.exceptions.Exit
            code = getattr(exc, "exit_code", 0)
            return code if isinstance(code, int) else 0
        if "Abort" in names:
            _err("aborted")
            return EXIT_INPUT_ERROR
        if "ClickException" in names:  # usage errors: click's, or the copy newer typer vendors
            exc.show()  # type: ignore[attr-defined]
            return EXIT_INPUT_ERROR
        return _bug(exc, debug)
    return rc if isinstance(rc, int) else 0


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    _err(f"warning: {filename}:{lineno}: {category.__name__}: {message}")


def _bug(exc: BaseException, debug: bool) -> int:
    if debug:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    where = ""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        where = f" at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
    detail = str(exc)[:200]
    hint = "" if debug else "; run the same command with --debug for the traceback"
    _err(f"internal error: {type(exc).__name__}{where}: {detail} -- this is a bug in fasttrack, please "
         f"report it{hint}")
    return EXIT_BUG
