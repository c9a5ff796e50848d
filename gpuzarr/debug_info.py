"""What a bug report needs: gpuzarr's version, the platform, the versions of the libraries it
reads and writes with, whether the GPU path can run here (and why not), and the settings.

``gpuzarr.print_debug_info()`` (zarr-python's name) and ``gpuzarr debug-info`` print it;
:func:`debug_info` returns it. Versions come from the installed packages' metadata, so no
library is imported for them (a broken CUDA install cannot make the report fail); only the GPU
probe imports CuPy, as a GPU read would.
"""

from __future__ import annotations

import os
import platform
import warnings
from importlib import metadata
from typing import Any

from . import config

#: what gpuzarr needs, by distribution name
REQUIRED = ("numpy", "numcodecs", "google-crc32c", "ml_dtypes", "zstandard", "tqdm", "isal", "zlib-ng")
#: what its GPU path uses
GPU = (
    "cupy-cuda13x", "cupy-cuda12x", "nvidia-nvcomp-cu13", "nvidia-nvcomp-cu12", "kvikio-cu13", "kvikio-cu12",
    "cuda-bindings", "nvidia-cuda-nvrtc",
)  # fmt: skip
#: what its integrations and optional stores use
OPTIONAL = ("torch", "xarray", "dask", "distributed", "obstore", "fsspec", "zarr", "tensorstore")


def _versions(names: tuple[str, ...]) -> dict[str, str | None]:
    """Each package's installed version; None where it is not installed. A package whose
    metadata cannot be read says so: a report must come out whatever is installed."""
    found: dict[str, str | None] = {}
    for name in names:
        try:
            with warnings.catch_warnings():  # Python 3.12 warns of a missing version before None
                warnings.simplefilter("ignore", DeprecationWarning)
                version = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
        except Exception as exc:  # metadata that is not UTF-8, ...
            found[name] = f"unknown (its metadata cannot be read: {type(exc).__name__})"
        else:
            found[name] = version if version else "unknown (its metadata has no version)"
    return found


def debug_info() -> dict[str, Any]:
    """The report as a dict: ``gpuzarr``, ``python``, ``platform``, the package versions
    (``required``, ``gpu_packages``, ``optional``; None where not installed), ``gpu`` (None where
    the GPU path can run, else why not), ``GPUZARR_DEVICE`` (what "auto" means, when set) and
    the ``settings``."""
    from . import __version__  # set once the package's __init__ has run
    from .backends.select import ENVIRONMENT_VARIABLE, gpu_unavailable_reason

    try:
        reason = gpu_unavailable_reason()
    except Exception as exc:  # a report must come out whatever the CUDA install does
        reason = f"the GPU probe failed: {type(exc).__name__}: {exc}"
    return {
        "gpuzarr": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "required": _versions(REQUIRED),
        "gpu_packages": _versions(GPU),
        "optional": _versions(OPTIONAL),
        "gpu": reason,
        "GPUZARR_DEVICE": os.environ.get(ENVIRONMENT_VARIABLE),
        "settings": {name: config.get(name) for name in config.names()},  # every one of them
    }


def print_debug_info() -> None:
    """Print :func:`debug_info` for a bug report, as zarr-python's ``print_debug_info`` does."""
    print(format_debug_info(debug_info()), end="")


def format_debug_info(info: dict[str, Any]) -> str:
    """``info`` as the text :func:`print_debug_info` prints."""
    lines = [f"gpuzarr: {info['gpuzarr']}", f"python: {info['python']}", f"platform: {info['platform']}"]
    gpu = info["gpu"]
    lines.append("GPU path: can run" if gpu is None else f"GPU path: cannot run ({gpu})")
    if info.get("GPUZARR_DEVICE") is not None:
        lines.append(f"GPUZARR_DEVICE: {info['GPUZARR_DEVICE']}")
    for title, key in (("Required", "required"), ("GPU", "gpu_packages"), ("Optional", "optional")):
        versions: dict[str, str | None] = info[key]
        lines += ["", f"{title}:"]
        lines += [f"  {name}: {version or 'not installed'}" for name, version in versions.items()]
    lines += ["", "Settings:"]
    lines += [f"  {name}: {value}" for name, value in info["settings"].items()]
    return "\n".join(lines) + "\n"


__all__ = ["debug_info", "format_debug_info", "print_debug_info"]
