"""What this process's CUDA set-up can do, asked of CuPy lazily (the device probe), and the
small CuPy calls the rest of gpuzarr needs without importing CuPy itself."""

from __future__ import annotations

import functools
import importlib.util

from .kernels import GPU_EXTRA_HINT


@functools.cache
def probe() -> tuple[str | None, int]:
    """(why the GPU read path cannot run, or None; the number of CUDA devices), once per process.

    CuPy is imported only when it is installed (``find_spec`` first), so a machine without the
    GPU extra pays nothing."""
    if importlib.util.find_spec("cupy") is None:
        return f"CuPy is not installed; {GPU_EXTRA_HINT}", 0
    try:
        import cupy

        if not cupy.is_available():
            return "CuPy sees no usable CUDA device", 0
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:
        return f"CuPy cannot reach a CUDA device ({type(exc).__name__}: {exc})", 0
    nvrtc = _nvrtc_missing()
    if nvrtc is not None:
        return nvrtc, count
    try:
        found = importlib.util.find_spec("nvidia.nvcomp") is not None
    except ModuleNotFoundError:  # no "nvidia" namespace package at all
        found = False
    if not found:
        return f"nvCOMP (nvidia-nvcomp) is not installed; {GPU_EXTRA_HINT}", count
    return None, count


def _nvrtc_missing() -> str | None:
    """Why CuPy cannot compile the kernels (NVRTC not found), or None. CuPy finds NVRTC only
    when it is called, so a device can be usable while no kernel compiles. ``cupy.cuda.nvrtc``
    is an attribute, not a module one can import by that name, in CuPy 14 (it lives in
    ``cupy_backends``), so it is reached through ``cupy.cuda``."""
    try:
        import cupy

        cupy.cuda.nvrtc.getVersion()
    except Exception as exc:
        return f"NVRTC not found: CuPy cannot compile gpuzarr's kernels ({type(exc).__name__}: {exc}); {GPU_EXTRA_HINT}"
    return None


def current_device() -> int:
    """CuPy's current device number."""
    import cupy

    return int(cupy.cuda.runtime.getDevice())


def synchronize() -> None:
    """Wait for the work queued on CuPy's current stream."""
    import cupy

    cupy.cuda.get_current_stream().synchronize()


__all__ = ["current_device", "probe", "synchronize"]
