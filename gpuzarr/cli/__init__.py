"""The ``gpuzarr`` command line: ``info``, ``tree``, ``copy``/``convert``, ``verify``, ``bench``, ``demo``.

:mod:`.main` builds the parser from one module per subcommand; each module has an
``add_parser(subparsers)`` that registers its options and a ``run(args) -> int`` that does the
work. Nothing here is imported by ``import gpuzarr``; tqdm is imported only by the commands that
draw a progress bar. docs/cli.md is the user's guide.
"""

from __future__ import annotations

from .main import main

__all__ = ["main"]
