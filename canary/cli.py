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

from canary.errors import EXIT_BAD_INPUT, EXIT_OPERATIONAL, CanaryError, printable

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
)


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one clear line (its default already uses 2) and no usage spam."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_BAD_INPUT)


def _add_globals(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default=os.environ.get("CANARY_DB_URL") or None,
        help="evidence store URL (default: $CANARY_DB_URL, else a SQLite file in the user data directory)",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more detail on stderr")


def build_parser(modules: Sequence[str] = COMMAND_MODULES, prog: str = "canary") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="May this GPU workload share this GPU now? And why.")
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


def _run(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    args = parser.parse_args(argv)
    for dest in _single_positionals(parser):
        # argparse leaves [] in a one-value positional for "PROFILE -- --" instead of refusing it
        if isinstance(getattr(args, dest, None), list):
            parser.error(f"argument {dest.upper()}: expected one value")
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    try:
        if getattr(args, "db", None) is not None:  # checked before any command connects or creates a file
            from evidence_store.location import check_db_url

            check_db_url(args.db)
        return handler(args)
    except CanaryError as exc:  # control characters from names on the command line are shown escaped
        sys.stderr.write("canary: " + "\n".join(printable(line) for line in str(exc).split("\n")) + "\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("canary: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except ValueError as exc:  # os.stat/open on a name with a NUL byte: bad input, not a crash
        if "null" not in str(exc):
            raise
        sys.stderr.write("canary: a file name on the command line holds a NUL character\n")
        return EXIT_BAD_INPUT
    except OSError as exc:  # unreadable files etc. that escaped a command's own checks
        sys.stderr.write(f"canary: {exc.strerror or exc}: {exc.filename or ''}\n")
        return EXIT_OPERATIONAL


def main(argv: Sequence[str] | None = None) -> int:
    return _run(build_parser(), argv)


def gpu_fit_main(argv: Sequence[str] | None = None) -> int:
    """``gpu-fit DEVICE PROFILE …`` — the same as ``canary fit``, importing only the fit command."""
    from canary.commands import fit

    parser = _Parser(prog="gpu-fit", description="Stage-1 fit and evidence lookup; never probes.")
    _add_globals(parser)
    fit.add_fit_arguments(parser)
    return _run(parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
