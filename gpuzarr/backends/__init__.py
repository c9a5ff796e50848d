"""Device backends. Only backends/cuda/ may import cupy, nvidia.nvcomp or kvikio."""
