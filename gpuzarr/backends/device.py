"""Device selection: ``device="auto" | "cpu" | "gpu" | "cuda" | "cuda:N"``."""

from __future__ import annotations

from ..errors import DeviceError

DEVICES = ("auto", "cpu", "gpu", "cuda")


def resolve_device(device: str) -> str:
    """The concrete device reads run on.

    This build executes reads on the CPU. ``"auto"`` therefore resolves to ``"cpu"``; asking
    for a GPU explicitly raises, rather than silently returning host memory.
    """
    if not isinstance(device, str):
        raise DeviceError(f"device: expected a string, got {device!r}")
    if device in ("auto", "cpu"):
        return "cpu"
    if device in ("gpu", "cuda") or device.startswith("cuda:"):
        raise DeviceError(
            f"device={device!r}: the GPU read path is not available in this build of gpuzarr; "
            "use device='cpu' or 'auto'"
        )
    raise DeviceError(f"device: expected one of {list(DEVICES)} or 'cuda:N', got {device!r}")


def gpu_available() -> bool:
    """True when CuPy is installed and sees a usable CUDA device (imports CuPy lazily)."""
    try:
        import cupy
    except Exception:
        return False
    try:
        return bool(cupy.is_available())
    except Exception:
        return False
