#!/usr/bin/env bash
# The wheels a GPU test host lacks, for everything benchmarks/gpu_session.sh runs: the shared
# GPU stack (nvCOMP, kvikio, numcodecs, zarr, zarrs) plus what the integrations need there:
# tqdm (the command line's progress bars), isal (gzip/zlib inflate), zlib-ng (gzip/zlib deflate),
# zstandard (zstd prefixes and encoding), Dask, distributed and dask-cuda with their pure
# Python dependencies (tests/gpu/test_dask_cuda.py; numba and llvmlite are left out: with them the
# wheels exceed the 64 MiB a device call carries). Run from the repository root on a machine
# with the package registry; the wheels land in .whl/ (git-ignored).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
bash ../shared/gpu/fetch-wheels.sh \
  tqdm isal zlib-ng zstandard dask==2026.8.0 distributed==2026.8.0 dask-cuda rapids-dask-dependency \
  cloudpickle toolz partd locket pyyaml msgpack psutil sortedcontainers tblib tornado zict \
  click nvidia-ml-py
