"""``gpuzarr debug-info``: what a bug report needs (versions, the GPU path, the settings)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..debug_info import debug_info, format_debug_info

if TYPE_CHECKING:
    import argparse


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "debug-info",
        help="print versions, the GPU path's state and the settings, for a bug report",
        description="Print gpuzarr's version, Python's and the platform's, the versions of the "
        "libraries gpuzarr uses (required, GPU, optional), whether the GPU path can run here and why "
        "not, and gpuzarr's settings: what a bug report needs. The same as gpuzarr.print_debug_info().",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    info = debug_info()
    print(json.dumps(info, indent=2) if args.json else format_debug_info(info), end="\n" if args.json else "")
    return 0
