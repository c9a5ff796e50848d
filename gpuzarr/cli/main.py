"""The ``gpuzarr`` parser, and how errors end a command.

Exit status: 0 success; 1 an error while the command ran (one line on stderr: a gpuzarr error,
an operating-system error) or, for ``verify``, corruption found; 2 a usage error (a malformed
option, no command given: argparse's own status). ``--debug`` shows the traceback instead of
the one line. A bare ``gpuzarr`` prints the help on stderr and exits 2, as any other usage error.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from ..errors import GpuZarrError
from . import bench, copy, debug_info, demo, info, tree, verify
from .options import add_common_options

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

#: The subcommand modules, in the order ``--help`` lists them.
COMMANDS = (info, tree, copy, verify, bench, demo, debug_info)

EPILOG = "Run 'gpuzarr COMMAND --help' for the options of a command; docs/cli.md has examples."


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="gpuzarr",
        description="Inspect, copy, convert, verify and benchmark Zarr v2 and v3 arrays.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"gpuzarr {__version__}")
    add_common_options(parser, top_level=True)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for module in COMMANDS:
        before = set(subparsers.choices)
        module.add_parser(subparsers)
        for name in set(subparsers.choices) - before:
            add_common_options(subparsers.choices[name], top_level=False)
    return parser


def _configure_logging(verbose: int, debug: bool) -> Callable[[], None]:
    """Send gpuzarr's log messages to stderr at the level ``-v``/``--debug`` ask for; the
    function that undoes it (``main`` may be called in-process, by tests or other programs)."""
    if not verbose and not debug:
        return lambda: None
    logger = logging.getLogger("gpuzarr")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("gpuzarr: %(message)s"))
    previous = logger.level
    logger.setLevel(logging.DEBUG if debug or verbose >= 2 else logging.INFO)
    logger.addHandler(handler)

    def restore() -> None:
        logger.removeHandler(handler)
        logger.setLevel(previous)

    return restore


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, GpuZarrError) else f"{type(exc).__name__}: {text}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``gpuzarr`` command line with ``argv`` (default: ``sys.argv[1:]``); the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    restore_logging = _configure_logging(args.verbose, args.debug)
    try:
        status: int = args.run(args)
    except BrokenPipeError:
        return 1  # the reader of stdout went away (``| head``): nothing to say to anyone
    except (GpuZarrError, OSError) as exc:
        if args.debug:
            raise
        print(f"gpuzarr {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except MemoryError as exc:  # NumPy's, for an allocation the options asked for (demo --size)
        if args.debug:
            raise
        print(f"gpuzarr {args.command}: error: out of memory ({_one_line(exc)})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"gpuzarr {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        restore_logging()
        _flush_stdout()
    return status


def _flush_stdout() -> None:
    """Flush stdout now, so that a reader that went away (``gpuzarr tree x | head``) ends the
    command quietly instead of with a BrokenPipeError at interpreter exit."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush succeeds.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
