"""Which '/'-separated paths stay inside the place they are joined to. Pure.

Used for store keys' prefixes and node paths (:mod:`gpuzarr.store.base`) and for the paths of
TensorStore kvstore specs (:mod:`gpuzarr.tensorstore.kvstore`), which sit below the stores.
"""

from __future__ import annotations

__all__ = ["directory_problem", "path_problem"]


def path_problem(path: str) -> str | None:
    """Why the '/'-separated relative ``path`` could lead outside the place it is joined to, or
    mean different places on different OSes; None when it cannot.

    One leading and one trailing '/' are tolerated (node paths are written both ways); '.',
    '..' and empty components, backslashes and NUL characters are refused, as TensorStore's
    file driver refuses them in keys.
    """
    if "\\" in path or "\0" in path:
        return "backslashes and NUL characters are refused"
    inner = path.removeprefix("/").removesuffix("/")
    if inner and any(part in ("", ".", "..") for part in inner.split("/")):
        return "'.', '..' and empty components are refused"
    return None


def directory_problem(path: str) -> str | None:
    """Why ``path``, a local directory (absolute or relative) that a store is rooted at, is
    refused in a URL or a kvstore spec; None when it is not.

    As TensorStore's file driver: '.', '..' and empty components are refused, so that a
    directory named in JSON is the one it reads as (a link in the path is still followed).
    """
    if "\0" in path:
        return "NUL characters are refused"
    inner = path.removeprefix("/").removesuffix("/")
    if inner and any(part in ("", ".", "..") for part in inner.split("/")):
        return "'.', '..' and empty components are refused"
    return None
