"""``canary …`` and ``gpu-fit …``.

The command table below names one module per command group (``canary/commands/``). A command
module keeps its top-level imports light (stdlib and ``canary.errors``) and imports what it needs
inside its handler, so ``canary --help`` and ``gpu-fit`` start fast on a machine without a GPU.

Exit codes: 0 admit, 1 reject, 3 unknown, 2 bad input or usage, 4 operational failure.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from canary.errors import EXIT_BAD_INPUT, EXIT_OPERATIONAL, CanaryError, printable, say

# command group → module under canary.commands. Order is the order of `canary --help`.
COMMAND_MODULES: tuple[str, ...] = (
    "fit",
    "admit",
    "occupancy",
    "snapshot",
    "schema",
    "evidence",
    "reservations",
    "jobs",
    "db",
    "envelope",
    "bench",
    "sim",
    "serve",
    "profiles",
    "agent",
)


def _stderr(text: str) -> None:
    """Write a message to stderr (``canary.console.say``: a closed stderr or a reader that left drops it)."""
    say(sys.stderr, text)


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one clear line (its default already uses 2) and no usage spam."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        _stderr(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_BAD_INPUT)


PACKAGE = "canary-gpu"
"""The distribution whose installed metadata ``--version`` reports."""


class _Version(argparse.Action):
    """``--version``: the installed package's version, read only when asked (start-up stays fast)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0,
                         help="print the installed version and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            text = version(PACKAGE)
        except PackageNotFoundError:
            text = f"unknown ({PACKAGE} is not installed: running from a source tree)"
        sys.stdout.write(f"{parser.prog} {text}\n")
        parser.exit(0)


def _add_globals(parser: argparse.ArgumentParser, *, top: bool = True) -> None:
    """The options every command takes, before or after the command's name. On a subcommand they
    leave what the top level parsed alone unless given there (``SUPPRESS``); ``-v`` counts both."""
    parser.add_argument(
        "--db",
        default=(os.environ.get("CANARY_DB_URL") or None) if top else argparse.SUPPRESS,
        help="evidence store URL (default: $CANARY_DB_URL, else a SQLite file in the user data directory)",
    )
    parser.add_argument("-v", "--verbose", action="count", dest="verbose" if top else "verbose_after",
                        default=0 if top else argparse.SUPPRESS, help="more detail on stderr (repeat for more)")
    parser.add_argument(
        "--sim-driver", default=None if top else argparse.SUPPRESS, metavar="VERSION",
        help="the driver version simulated devices (catalog names, snapshot files) report, e.g. to rehearse a "
        "driver upgrade with `canary revalidate --driver VERSION` (default: $CANARY_SIM_DRIVER, else "
        "simulator-1; a snapshot file's own driver_version without either)",
    )


def _add_globals_everywhere(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases share one parser
                _add_globals(sub, top=False)
                _add_globals_everywhere(sub)


def build_parser(modules: Sequence[str] = COMMAND_MODULES, prog: str = "canary") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="May this GPU workload share this GPU now? And why.")
    parser.add_argument("--version", action=_Version)
    _add_globals(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in modules:
        try:
            module = importlib.import_module(f"canary.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"canary.commands.{name}":
                continue  # command group not built into this installation
            raise
        module.add_parser(sub)
    _add_globals_everywhere(parser)
    return parser


def _single_positionals(parser: argparse.ArgumentParser) -> set[str]:
    """Destinations of positional arguments that take exactly one value, in the whole parser tree."""
    dests: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                dests |= _single_positionals(sub)
        elif not action.option_strings and action.nargs is None:
            dests.add(action.dest)
    return dests


#: What an interrupted command leaves behind, said where it stops.
_AFTER_INTERRUPT = ("; any probe in progress was rolled back and journaled aborted (canary recover finishes one "
                    "that could not be), and a job's finished pairs are kept: running it again resumes")


_terminated: list[bool] = []


def _on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM (a CronJob's deadline, a pod's termination, ``kill``) is handled as Ctrl-C is — whatever
    handles SIGINT now (Python's, or asyncio's runner, which cancels the running task so a probe's
    shielded rollback and journal run) gets a SIGINT — instead of the process dying with its candidate
    running and its journal row ``running`` until the lease expires. Noted, for the exit code (143).

    Where SIGINT is ignored — a script's background job (``canary warm plan &``) inherits that from the
    shell — nothing would take it: the interrupt is raised here instead. Inside a task group it arrives
    wrapped in an exception group, which ``_dispatch`` unwraps; the probe's rollback is shielded either way."""
    import signal

    _terminated.append(True)
    if callable(signal.getsignal(signal.SIGINT)):
        signal.raise_signal(signal.SIGINT)
    else:
        import logging

        # The process is ending: asyncio would log the interrupt again, with a traceback, as it cancels
        # the tasks that are left; the last line (``_interrupted``) says what happened.
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        raise KeyboardInterrupt


def _interrupted() -> int:
    """The last line and exit code of a command stopped by Ctrl-C (130) or SIGTERM (143)."""
    if _terminated:
        _stderr(f"canary: terminated (SIGTERM){_AFTER_INTERRUPT}\n")
        return 143
    _stderr(f"canary: interrupted{_AFTER_INTERRUPT}\n")
    return 130


def _run(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return _dispatch(parser, argv)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    _terminated.clear()
    try:
        return _dispatch(parser, argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _dispatch(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    args = parser.parse_args(argv)
    for dest in _single_positionals(parser):
        # argparse leaves [] in a one-value positional for "PROFILE -- --" instead of refusing it
        if isinstance(getattr(args, dest, None), list):
            parser.error(f"argument {dest.upper()}: expected one value")
    args.verbose = getattr(args, "verbose", 0) + getattr(args, "verbose_after", 0)
    if hasattr(args, "verbose_after"):
        del args.verbose_after
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    sim_driver_token = None
    try:
        if getattr(args, "db", None) is not None:  # checked before any command connects or creates a file
            from evidence_store.location import check_db_url

            check_db_url(args.db)
        if getattr(args, "sim_driver", None) is not None:
            from canary.backends import set_sim_driver

            sim_driver_token = set_sim_driver(args.sim_driver)
        return handler(args)
    except CanaryError as exc:  # control characters from names on the command line are shown escaped
        _stderr("canary: " + "\n".join(printable(line) for line in str(exc).split("\n")) + "\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return _interrupted()
    except BaseExceptionGroup as group:  # an interrupt raised inside a task group (``_on_sigterm``)
        if group.split(KeyboardInterrupt)[1] is not None:
            raise
        return _interrupted()
    except BrokenPipeError:
        return 0
    except ValueError as exc:  # os.stat/open on a name with a NUL byte: bad input, not a crash
        if "null" not in str(exc):
            raise
        _stderr("canary: a file name on the command line holds a NUL character\n")
        return EXIT_BAD_INPUT
    except OSError as exc:  # unreadable files etc. that escaped a command's own checks
        _stderr(f"canary: {exc.strerror or exc}: {exc.filename or ''}\n")
        return EXIT_OPERATIONAL
    finally:
        if sim_driver_token is not None:
            from canary.backends import reset_sim_driver

            reset_sim_driver(sim_driver_token)


def main(argv: Sequence[str] | None = None) -> int:
    return _run(build_parser(), argv)


def gpu_fit_main(argv: Sequence[str] | None = None) -> int:
    """``gpu-fit DEVICE PROFILE …`` — the same as ``canary fit``, importing only the fit command."""
    from canary.commands import fit

    parser = _Parser(prog="gpu-fit", description="Stage-1 fit and evidence lookup; never probes.")
    parser.add_argument("--version", action=_Version)
    _add_globals(parser)
    fit.add_fit_arguments(parser)
    return _run(parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
