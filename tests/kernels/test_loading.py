"""Loading the kernels: nothing at import, a helpful ImportError without CuPy."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuzarr.backends.cuda import kernels


def test_import_touches_no_cuda() -> None:
    code = (
        "import sys, gpuzarr.backends.cuda.kernels, gpuzarr.backends.cuda.kernel_reference\n"
        "loaded = [m for m in ('cupy', 'kvikio', 'nvidia.nvcomp', 'cuda.bindings') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_cupy_names_the_gpu_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    kernels._raw_module.cache_clear()
    try:
        with pytest.raises(ImportError, match=r'pip install "gpuzarr\[gpu\]"'):
            kernels.get_kernel("assemble_chunks")
    finally:
        kernels._raw_module.cache_clear()


def test_every_kernel_name_resolves_to_a_family() -> None:
    names = [n for _, family_names in kernels.KERNEL_FAMILIES.values() for n in family_names]
    assert len(names) == len(set(names))
    with pytest.raises(KeyError, match="unknown kernel"):
        kernels.get_kernel("no_such_kernel")
    with pytest.raises(KeyError, match="unknown kernel family"):
        kernels.kernel_source("no_such_family")
