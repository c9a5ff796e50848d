"""Every kernel file compiles to CUBIN for sm_80 and sm_90 with NVRTC; no GPU needed.

NVRTC comes from the nvidia-cuda-nvrtc wheel (libnvrtc.so.13) through cuda-bindings, both in the
``test`` extra. The options are the ones ``gpuzarr.backends.cuda.kernels`` gives CuPy, and no
include path is passed because the sources include no headers.
"""

from __future__ import annotations

import re

import pytest

from gpuzarr.backends.cuda.kernels import KERNEL_FAMILIES, NVRTC_OPTIONS, kernel_source, kernel_source_dir

# The test extra installs cuda-bindings, so CI always compiles; a bare checkout skips cleanly.
nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (the test extra) is not installed")

ARCHS = ("sm_80", "sm_90")


def _check(result: tuple[object, ...]) -> tuple[object, ...]:
    assert result[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS, result
    return result[1:]


def compile_to_cubin(source: str, filename: str, arch: str) -> tuple[bytes, str]:
    """(CUBIN image, compiler log) of ``source`` for ``arch``; fails the test on a compile error."""
    (program,) = _check(nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], []))
    try:
        options = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in NVRTC_OPTIONS)]
        (compiled,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
        (log_size,) = _check(nvrtc.nvrtcGetProgramLogSize(program))
        log = bytearray(log_size)  # never b" " * n: CPython shares b" " and NVRTC writes into it
        _check(nvrtc.nvrtcGetProgramLog(program, log))
        log_text = bytes(log).rstrip(b"\0 ").decode(errors="replace")
        assert compiled == nvrtc.nvrtcResult.NVRTC_SUCCESS, f"{filename} for {arch}:\n{log_text}"
        (size,) = _check(nvrtc.nvrtcGetCUBINSize(program))
        cubin = bytearray(size)
        _check(nvrtc.nvrtcGetCUBIN(program, cubin))
        return bytes(cubin), log_text
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def test_nvrtc_loads_and_knows_the_archs() -> None:
    major, minor = _check(nvrtc.nvrtcVersion())
    assert (major, minor) >= (13, 0)
    (archs,) = _check(nvrtc.nvrtcGetSupportedArchs())
    assert {80, 90} <= set(archs)


def test_every_kernel_file_is_listed() -> None:
    on_disk = {p.name for p in kernel_source_dir().glob("*.cu")}
    assert on_disk == {filename for filename, _ in KERNEL_FAMILIES.values()}


@pytest.mark.parametrize("family", sorted(KERNEL_FAMILIES))
def test_source_header_and_no_includes(family: str) -> None:
    source = kernel_source(family)
    assert source.startswith("//")
    header = source.split("\n\n")[0] + source.split("\n\n")[1]
    for word in ("Launch", "Argument", "Alignment"):
        assert word in header, f"{family}: the opening comment should describe {word}"
    assert not re.search(r"^\s*#\s*include", source, re.MULTILINE)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("family", sorted(KERNEL_FAMILIES))
def test_compiles_to_cubin(family: str, arch: str) -> None:
    filename, names = KERNEL_FAMILIES[family]
    cubin, log = compile_to_cubin(kernel_source(family), filename, arch)
    assert cubin[:4] == b"\x7fELF", "NVRTC returned no CUBIN (ELF) image"
    assert "warning" not in log.lower(), log
    for name in names:
        # extern "C" keeps the symbol names unmangled, which is how RawModule finds them.
        assert name.encode() + b"\0" in cubin, f"{name} missing from the {arch} CUBIN"
