"""Run the GPU read path of ``Array`` on the CPU: the device probe says a GPU is there, and
every device object the reader makes is a CpuEmulatedDevice (NumPy buffers, CPU decoders of
nvCOMP's formats, the NumPy kernel models). Everything from ``Array.read`` to the assemble
launch then runs as on a GPU, except the device calls themselves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from gpuzarr import backends, config
from gpuzarr.backends import select as device_module
from gpuzarr.backends.cuda import reader as reader_module
from gpuzarr.backends.cuda.device import StagingPools
from gpuzarr.backends.cuda.numpy_device import CpuEmulatedDevice, host_block

if TYPE_CHECKING:
    from collections.abc import Iterator

DEVICE_COUNT = 2


class EmulatedGpu:
    """The devices made so far (one per read), to look at the calls they saw."""

    def __init__(self, reads_files: bool = True) -> None:
        self.reads_files = reads_files
        #: whether the devices made report GPUDirect Storage (what "auto" direct reads need)
        self.gds = True
        #: the class of the devices made from now on (a subclass makes a device that misbehaves)
        self.device_class: type[CpuEmulatedDevice] = CpuEmulatedDevice
        self.devices: list[CpuEmulatedDevice] = []
        #: the host staging pools of this test's devices, one per device index
        self.staging = StagingPools(host_block)
        #: the device buffer pools of this test's devices
        self.buffers = StagingPools(host_block, max_blocks=4)

    def make(self, index: int, stream: Any) -> CpuEmulatedDevice:
        device = self.device_class(
            index, stream, reads_files=self.reads_files, gds=self.gds, staging=self.staging, buffers=self.buffers
        )
        self.devices.append(device)
        return device

    def calls(self) -> list[tuple[str, int]]:
        return [call for d in self.devices for call in d.calls]

    def names(self) -> list[str]:
        return [name for name, _ in self.calls()]


@pytest.fixture
def emulated_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[EmulatedGpu]:
    gpu = EmulatedGpu()
    monkeypatch.setattr(device_module, "gpu_unavailable_reason", lambda: None)
    monkeypatch.setattr(device_module, "device_count", lambda: DEVICE_COUNT)
    monkeypatch.setattr(device_module, "_current_device", lambda: 0)
    reader_for = backends.reader_for
    # Arrays opened from now on get GPU readers whose devices are emulated.
    monkeypatch.setattr(backends, "reader_for", lambda device: reader_for(device, device_factory=gpu.make))
    monkeypatch.delenv(device_module.ENVIRONMENT_VARIABLE, raising=False)
    # Each test sees every fallback reason logged afresh.
    monkeypatch.setattr(reader_module, "_logged", set())
    # Every read takes the device path, however few chunks it has (the tests of the small-read
    # rule turn it back on): these tests are about that path.
    with config.set(gpu_small_read_chunks=0):
        yield gpu
