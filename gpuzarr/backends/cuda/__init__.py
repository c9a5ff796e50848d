"""CUDA backend: the only package that imports cupy, nvidia.nvcomp or kvikio, always lazily.

``kernels`` loads the CUDA C sources of ``kernels/*.cu`` through ``cupy.RawModule`` on first use;
``kernel_reference`` is a NumPy model of every kernel, with the same arguments, used by CI.
"""
