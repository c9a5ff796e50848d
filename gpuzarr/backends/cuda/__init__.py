"""CUDA backend: the only package that imports cupy, nvidia.nvcomp or kvikio, always lazily.

The modules of a read, from the top; each imports only modules listed after it (and, outside
this package, ``gpuzarr.layout``, ``parallel``, ``plan``, ``codecs``, ``store``, ``metadata``,
``errors``, ``config``, ``buffers``, and ``backends.cpu`` for the CPU fallback):

* ``reader``: :class:`~.reader.CudaReader`, the :class:`~gpuzarr.backends.Reader` of
  ``device="cuda:N"``: plans the read, gathers what the kernel cannot express, falls back to the
  CPU, delivers into ``out``.
* ``gather``: selections that are not strided boxes, read as their bounding box and gathered.
* ``executor``: the order of work of a read (``execute``): per batch, fetch and bind on a
  helper thread, then ``run_batch`` on the device; CPU re-decode of streams the device fails.
* ``fetch``: the encoded bytes of one batch, read on the host (``fetch_batch``), or the file
  spans the device reads itself; the sharded part is ``_fetch_sharded``.
* ``bind``: one batch bound to its bytes (``bind_batch``): streams, staging and work layout,
  kernel arguments, all validated.
* ``cupy_device``: :class:`~.cupy_device.CudaDevice`: CuPy buffers, kvikio reads, nvCOMP's
  batched decoders and our kernels; its kvikio handle and nvCOMP codec caches.
* ``numpy_device``: :class:`~.numpy_device.CpuEmulatedDevice`: NumPy buffers, CPU decoders of
  nvCOMP's formats and the kernel models; CI runs the whole host side through it.
* ``device``: the :class:`~.device.Device` protocol both devices implement, and the helpers
  they share.
* ``launches``: the records of a bound batch (stream groups, un-shuffle and assemble launches,
  file reads) that a device runs.
* ``gpu_plan``: the GPU read plan (``build_gpu_read_plan``): tasks, assemble rows, batches.
* ``routes``: how each codec pipeline is decoded, from a table keyed by Zarr codec name
  (``ROUTES``).
* ``streams``: encoded chunks taken apart into raw nvCOMP streams, one splitter per codec name
  (``SPLITTERS``, the same keys as ``ROUTES``).
* ``kernels``: loads the CUDA C sources of ``kernels/*.cu`` through ``cupy.RawModule`` on first
  use, and launches them (``launch_*``).
* ``launch_checks``: the pure host-side validation of every launch (``check_*``).
* ``kernel_reference``: a NumPy model of every kernel, with the same arguments, used by CI.

Beside the read path: ``phases`` (where a read's wall time goes, timed on the host while a
caller records), ``runtime`` (the device probe and the few CuPy calls the rest of gpuzarr
needs) and ``host`` (device arrays given to writes, copied to the host).
"""
