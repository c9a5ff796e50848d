"""Argument types and the options several subcommands share.

An argument type raises ``argparse.ArgumentTypeError``, so a malformed value is a usage error
(exit status 2, with the usage line), before any store is touched.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

#: Options every subcommand takes, before or after its name (``gpuzarr --debug info x`` and
#: ``gpuzarr info x --debug``).
COMMON_FLAGS = ("debug", "verbose")


def add_common_options(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    """``--debug`` and ``-v``; below the top level their defaults are SUPPRESS, so that a flag
    given before the subcommand is not reset by the subcommand's parser."""
    default_debug: Any = False if top_level else argparse.SUPPRESS
    default_verbose: Any = 0 if top_level else argparse.SUPPRESS
    parser.add_argument(
        "--debug", action="store_true", default=default_debug,
        help="show the full traceback of an error, and debug log messages",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=default_verbose,
        help="log what gpuzarr does on stderr (-vv: debug messages)",
    )


def add_storage_options(parser: argparse.ArgumentParser, what: str = "PATH") -> None:
    parser.add_argument(
        "--storage-options", type=json_object, default=None, metavar="JSON",
        help=f"options of the store {what} names, as a JSON object or @FILE holding one (object "
        "stores: endpoint, region, credentials, ...; see docs/stores.md)",
    )


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="draw a progress bar on stderr (default: only when stderr is a terminal)",
    )


def add_jobs_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "-j", "--jobs", type=positive_int, default=default_jobs(), metavar="N",
        help=f"{what} at once (default: the number of CPUs, at most 8; here {default_jobs()})",
    )


def default_jobs() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def json_object(text: str) -> dict[str, Any]:
    """A JSON object given inline or, as ``@FILE``, in a file."""
    source = "argument"
    if text.startswith("@"):
        source = text[1:]
        try:
            with open(source, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {source!r}: {exc.strerror}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"the {source} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {type(value).__name__}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def shape(text: str) -> tuple[int, ...]:
    """``"64,64,64"`` (or ``"64x64x64"``); one number stands for every axis (a 1-tuple here,
    widened to the array's rank where the array is known)."""
    parts = text.replace("x", ",").split(",")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values
