#!/usr/bin/env bash
# Everything a short GPU lease should run, in stages that each fit one 10-minute call. Logs go to
# $GPUZARR_LOGS (default /tmp/gpuzarr-gpu); where the device tool's $OUT is set, they end up
# there as one gpu-session-<stage>.tar.gz (a call brings back at most 8 files from $OUT).
# Run from the repository root on a GPU host that has the wheels of benchmarks/gpu_wheels.sh (the
# shared fetch-wheels.sh plus the integrations' dependencies) in .whl/:
#
#   bash benchmarks/gpu_session.sh lease    # a whole 15-minute lease in one call: every GPU test
#                                           # file, the loader benchmark, the GPU loader sweep at
#                                           # 2048 crops a pass, full reads and batched crops
#                                           # beside TensorStore
#   bash benchmarks/gpu_session.sh first    # environment report, probes (benchmarks/gpu_probe.py), tests
#   bash benchmarks/gpu_session.sh probe    # environment report and probes alone
#   bash benchmarks/gpu_session.sh tests    # environment report, kernel and GPU tests, one file at a time
#   bash benchmarks/gpu_session.sh bench    # GPU benchmark on the smaller datasets, with ceilings
#   bash benchmarks/gpu_session.sh loader-overheads  # about three minutes: the kernel, loader
#                                           # and array GPU tests, the GPU loader sweep at 256 and
#                                           # 2048 crops a pass (per-pass cost apart from per-batch
#                                           # cost), the loader benchmark beside TensorStore
#   bash benchmarks/gpu_session.sh quick    # about two minutes: the kernel, loader and array GPU
#                                           # tests, the GPU loader sweep and the loader profile
#   bash benchmarks/gpu_session.sh profile  # where the GPU loader's time goes: cProfile of loader
#                                           # passes and whole-volume reads, an Nsight Systems
#                                           # summary where nsys exists, the full-read ceilings
#   bash benchmarks/gpu_session.sh batches  # about four minutes: whole reads and 64 crops at GPU
#                                           # batch budgets of 256 MiB, 1 GiB and 4 GiB
#                                           # (benchmarks/batch_sweep.py), and the GPU loader with
#                                           # the default budget and with 1 GiB ahead
#   bash benchmarks/gpu_session.sh verify   # about four minutes, after a change to the read path:
#                                           # the kernel, read, array and loader GPU tests, full
#                                           # reads and batched crops beside TensorStore, the
#                                           # loader beside TensorStore, and where a whole zstd
#                                           # read of 343 chunk files goes with kvikio reads and
#                                           # with host reads (benchmarks/gpu_profile.py)
#   bash benchmarks/gpu_session.sh diagnose # about four minutes: the kernel, read, array and loader
#                                           # GPU tests, how long one nvCOMP batch takes by stream
#                                           # size and count (benchmarks/nvcomp_latency.py), and
#                                           # where the wall time of whole reads and of loader
#                                           # passes goes (gpu_profile / loader_sweep --phases)
#   bash benchmarks/gpu_session.sh sanitize # compute-sanitizer memcheck over the corrupt-input tests
#   bash benchmarks/gpu_session.sh loader   # the loader workload (CropLoader on the GPU and the CPU
#                                           # beside the CPU peers), without and with chunk caches
#   bash benchmarks/gpu_session.sh cpu      # the host's CPU: batched crops at 1..N threads beside
#                                           # TensorStore (benchmarks/cpu_scaling.py), and the CPU
#                                           # loader on threads and worker processes (loader_sweep)
#   bash benchmarks/gpu_session.sh all      # tests, bench, loader and cpu
#
# Nothing here changes the GPU's settings, and KVIKIO_COMPAT_MODE is left to kvikio (AUTO).
set -uo pipefail
stage=${1:-all}
out=${GPUZARR_LOGS:-/tmp/gpuzarr-gpu}
mkdir -p "$out"
# Also when a step's timeout or the stage's budget cuts it short.
bundle() { [[ -n "${OUT:-}" && -d "$OUT" ]] && tar czf "$OUT/gpu-session-$stage.tar.gz" -C "$out" . ; }
trap bundle EXIT

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$out/pip.log" 2>&1 || { cat "$out/pip.log"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi

report() {
  nvidia-smi >"$out/nvidia-smi.txt" 2>&1
  python3 - >"$out/environment.txt" 2>&1 <<'PY'
import importlib, platform
print("python", platform.python_version())
for name in ("numpy", "cupy", "nvidia.nvcomp", "kvikio", "numcodecs", "zarr", "tensorstore", "zarrs",
             "xarray", "dask", "distributed", "dask_cuda", "tqdm", "torch"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as exc:
        print(name, "unavailable:", type(exc).__name__, exc)
try:
    import cupy
    print("CUDA driver", cupy.cuda.runtime.driverGetVersion(), "runtime", cupy.cuda.runtime.runtimeGetVersion())
except Exception as exc:
    print("CUDA driver/runtime unavailable:", type(exc).__name__, exc)
try:
    import cupy
    print("NVRTC", cupy.cuda.nvrtc.getVersion())
except Exception as exc:
    print("NVRTC unavailable:", type(exc).__name__, exc)
from gpuzarr.backends.select import gpu_unavailable_reason
print("gpu_unavailable_reason:", gpu_unavailable_reason())
try:
    import kvikio.defaults
    print("kvikio compat mode preferred:", kvikio.defaults.is_compat_mode_preferred())
except Exception as exc:
    print("kvikio defaults unavailable:", exc)
PY
  cat "$out/environment.txt"
}

# One pytest process per file, each with a timeout taken from what is left of the stage's budget
# (GPUZARR_STAGE_SECONDS, default 540), so a hang or a poisoned context in one file cannot hide
# the others. -x would hide how much works; -rfE lists every failure and error at the end.
# Deprecation warnings from CuPy, kvikio or nvCOMP are reported, not turned into failures
# (pyproject's filterwarnings = error), so API drift cannot hide the real results.
budget=${GPUZARR_STAGE_SECONDS:-540}
left() { echo $(( budget - SECONDS )); }
# At most $1 seconds, never past the stage's budget.
capped() { local remaining; remaining=$(left); echo $(( remaining < $1 ? remaining : $1 )); }

pytest_file() {  # pytest_file NAME SECONDS PATH [ARGS...]
  local name=$1 limit=$2; shift 2
  local remaining; remaining=$(left)
  (( remaining < limit )) && limit=$remaining
  if (( limit < 20 )); then echo "$name: skipped, stage budget spent"; return; fi
  timeout "$limit" python3 -m pytest -q -rfE -p no:cacheprovider -W default::DeprecationWarning \
    --durations=5 "$@" >"$out/pytest-$name.log" 2>&1
  local code=$?
  echo "$name: exit $code ($( tail -1 "$out/pytest-$name.log" ))"
}

probe() {
  timeout "$(( $(left) > 300 ? 300 : $(left) ))" python3 -m benchmarks.gpu_probe --timeout 90 \
    >"$out/probe.log" 2>&1
  echo "probe exit $?"; cat "$out/probe.log"
}

# Failures and errors of every pytest file so far, one place; the first $1 of them printed.
failures() {
  grep -h -E "^(FAILED|ERROR) " "$out"/pytest-*.log >"$out/failures.txt" 2>/dev/null
  echo "failures: $(wc -l <"$out/failures.txt")"
  head -"$1" "$out/failures.txt"
}

# The loader workload beside the CPU peers, for at most $1 seconds.
loader_bench() {
  timeout "$(capped "$1")" python3 -m benchmarks.run --device gpu --repeats 3 --crops 256 --size-mib 64 \
    --only loader sharded-zstd v2-blosc-lz4 --out "$out/loader" >"$out/loader.log" 2>&1
  echo "loader benchmark exit $?"
}

# benchmarks.loader_sweep on the GPU (NAME loader-sweep) or the CPU (loader-sweep-cpu, with
# --device cpu among the arguments), for at most $2 seconds: sweep_loader NAME SECONDS [ARGS...]
sweep_loader() {
  local name=$1 limit=$2; shift 2
  limit=$(capped "$limit")
  if (( limit < 5 )); then echo "$name: skipped, stage budget spent"; return; fi
  timeout "$limit" python3 -m benchmarks.loader_sweep --size-mib 64 --crops 256 "$@" \
    >"$out/$name.md" 2>"$out/$name.log"
  echo "$name exit $?"
  cat "$out/$name.md"
}

tests() {
  pytest_file kernels-gpu 150 tests/gpu/test_kernels_gpu.py
  pytest_file gpu-read 150 tests/gpu/test_gpu_read.py
  pytest_file gpu-array 240 tests/gpu/test_gpu_array.py
  pytest_file loader-gpu 150 tests/gpu/test_loader_gpu.py
  pytest_file xarray-gpu 90 tests/gpu/test_xarray_gpu.py
  pytest_file cli-gpu 90 tests/gpu/test_cli_gpu.py
  pytest_file dask-cuda 120 tests/gpu/test_dask_cuda.py
  pytest_file kernels-compile 120 tests/kernels
  failures 60
}

bench() {
  timeout "$(left)" python3 -m benchmarks.run --device gpu --repeats 3 --crops 64 --size-mib 256 \
    --only sharded-zstd zstd blosc-lz4 gzip raw --out "$out/bench" >"$out/bench.log" 2>&1
  echo "benchmark exit $?"
  tail -60 "$out/bench.log"
}

loader() {
  loader_bench "$budget"
  tail -40 "$out/loader.log"
  # The GPU loader's settings side by side (decoding ahead, the batch budget, the device cache).
  sweep_loader loader-sweep "$budget"
}

# The kernel, loader, read and array GPU test files, each within its cap: what every stage that
# changes or measures the read path runs first.
gpu_tests() {
  pytest_file kernels-gpu 60 tests/gpu/test_kernels_gpu.py
  pytest_file loader-gpu 60 tests/gpu/test_loader_gpu.py
  pytest_file gpu-read 60 tests/gpu/test_gpu_read.py
  pytest_file gpu-array 90 tests/gpu/test_gpu_array.py
  failures 40
}

lease() {
  # A 15-minute lease leaves one call of about nine minutes once the machine has started (run it
  # with GPUZARR_STAGE_SECONDS=500 and the call's timeout at 560). The order:
  # - every GPU test file first: the two assemble kernels, the reads that use them, the loader;
  # - the loader benchmark beside the CPU peers (issue 13's 64^3 crops/s targets);
  # - the GPU loader at 2048 crops a pass (per-batch costs without a pass's fixed cost): decoding
  #   ahead on one lane and on two (decode_ahead_lanes=2, the second lane on a stream of its own
  #   since 2026-11-28's third session), with and without the kept walks of
  #   zstd frames (the last two from 2026-11-28's second session, not yet measured on a GPU), and
  #   the device cache; each row says how long its first batch took;
  # - full reads and batched crops beside TensorStore. The row kernel and kvikio reads by default
  #   (2026-11-28) have not been measured on full reads yet.
  # Each step stops at its cap or at the stage's budget.
  gpu_tests
  loader_bench 180
  grep -E "^\| loader-" "$out/loader/results.md" 2>/dev/null | head -12
  sweep_loader loader-sweep-2048 60 --passes 3 --crops 2048 \
    --rows "ahead default" "ahead default, 2 lanes" "ahead default, frames walked every pass" "device cache"
  timeout "$(capped 150)" python3 -m benchmarks.run --device gpu --repeats 3 --crops 64 --size-mib 128 \
    --only full-read crops-batch zstd sharded-zstd blosc-lz4 raw gpuzarr-gpu gpuzarr-gpu-host tensorstore \
    tensorstore+cupy --out "$out/bench" >"$out/bench.log" 2>&1
  echo "benchmark exit $?"
  grep -E "^\| (full-read|crops-batch) " "$out/bench/results.md" 2>/dev/null | head -12
  echo "stage took ${SECONDS} s of ${budget}"
}

cpu_scaling() {
  # The GPU hosts have many more cores than the development machines: how batched crop reads
  # scale there, and whether threads waiting for the GIL explain what does not.
  timeout "$(left)" python3 -m benchmarks.cpu_scaling --repeats 3 >"$out/cpu-scaling.md" 2>&1
  echo "cpu scaling exit $?"
  cat "$out/cpu-scaling.md"
  # The CPU loader on threads and with 2, 4, ... worker processes, on this host's cores.
  sweep_loader loader-sweep-cpu "$budget" --device cpu
}

loader_overheads() {
  # The kernels first (both assemble kernels on every geometry), then the reads that use them.
  pytest_file kernels-gpu 60 tests/gpu/test_kernels_gpu.py
  pytest_file loader-gpu 40 tests/gpu/test_loader_gpu.py
  pytest_file gpu-array 60 tests/gpu/test_gpu_array.py
  failures 20
  sweep_loader loader-sweep 40 --passes 5 --rows "ahead default" "ahead default, host reads" "device cache"
  sweep_loader loader-sweep-2048 40 --passes 3 --crops 2048 --rows "ahead default" "device cache"
  # The loader workload beside the best CPU peer (TensorStore) only, to fit a short lease.
  timeout "$(capped 90)" python3 -m benchmarks.run --device gpu --repeats 3 --crops 256 --size-mib 64 \
    --only loader sharded-zstd v2-blosc-lz4 gpuzarr-gpu tensorstore --out "$out/loader" >"$out/loader.log" 2>&1
  echo "loader benchmark exit $?"
  grep -E "^\| loader-" "$out/loader/results.md" 2>/dev/null | head -24
  echo "stage took ${SECONDS} s of ${budget}"
}

quick() {
  pytest_file kernels-gpu 90 tests/gpu/test_kernels_gpu.py
  pytest_file loader-gpu 90 tests/gpu/test_loader_gpu.py
  pytest_file gpu-array 120 tests/gpu/test_gpu_array.py
  failures 20
  sweep_loader loader-sweep 120 --passes 5
  timeout "$(capped 120)" python3 -m benchmarks.gpu_profile --loader --crops 256 --top 40 \
    >"$out/profile-loader.txt" 2>&1
  echo "loader profile exit $?"; grep "^===" "$out/profile-loader.txt"
  echo "stage took ${SECONDS} s of ${budget}"
}

profile() {
  # The loader's datasets in one place for every step (generated once).
  local data=/tmp/gpuzarr-data
  timeout "$(capped 200)" python3 -m benchmarks.gpu_profile --loader --crops 256 --top 30 \
    --data-dir "$data" >"$out/profile-loader.txt" 2>&1
  echo "loader profile exit $?"; grep "^===" "$out/profile-loader.txt"
  if command -v nsys >/dev/null; then
    # CUDA API and kernel times of the GPU loader sweep (no timings of ours are trusted here:
    # nsys slows the host side).
    timeout "$(capped 150)" nsys profile --trace=cuda,osrt --stats=true --force-overwrite true \
      -o "$out/loader-sweep" python3 -m benchmarks.loader_sweep --size-mib 64 --crops 256 --passes 2 \
      --data-dir "$data" >"$out/nsys-loader-sweep.txt" 2>&1
    echo "nsys exit $?"; rm -f "$out"/loader-sweep.nsys-rep "$out"/loader-sweep.sqlite
  else
    echo "nsys not found"
  fi
  timeout "$(capped 120)" python3 -m benchmarks.gpu_profile --codec zstd --top 30 >"$out/profile-zstd.txt" 2>&1
  echo "zstd profile exit $?"; grep "^===" "$out/profile-zstd.txt"
  timeout "$(left)" python3 -m benchmarks.run --device gpu --repeats 3 --size-mib 64 --data-dir "$data" \
    --only full-read crops-batch sharded-zstd v2-blosc-lz4 gpuzarr-gpu gpuzarr-gpu-direct gpuzarr-cpu \
    tensorstore tensorstore+cupy --out "$out/bench" >"$out/bench.log" 2>&1
  echo "benchmark exit $?"
  grep -E "^\| (full-read|crops-batch|dataset) " "$out/bench/results.md" 2>/dev/null | head -12
  grep -A8 "Raw ceilings" "$out/bench/results.md" 2>/dev/null
  echo "stage took ${SECONDS} s of ${budget}"
}

batches() {
  # nvCOMP's zstd decode takes about as long as its slowest frame whatever the batch holds, and
  # the executor waits for each batch's decode: how many batches a read is cut into, by budget.
  timeout "$(capped 200)" python3 -m benchmarks.batch_sweep --size-mib 128 --repeats 5 \
    >"$out/batch-sweep.md" 2>"$out/batch-sweep.log"
  echo "batch sweep exit $?"
  cat "$out/batch-sweep.md"
  sweep_loader loader-sweep-256 60 --passes 5 --rows "ahead default" "ahead 1 GiB, batch 4 GiB" "device cache"
  sweep_loader loader-sweep-2048 60 --passes 3 --crops 2048 --rows "ahead default" "ahead 1 GiB, batch 4 GiB" \
    "device cache"
  echo "stage took ${SECONDS} s of ${budget}"
}

verify() {
  gpu_tests
  timeout "$(capped 120)" python3 -m benchmarks.run --device gpu --repeats 3 --crops 64 --size-mib 128 \
    --only full-read crops-batch zstd sharded-zstd blosc-lz4 raw gpuzarr-gpu gpuzarr-gpu-host tensorstore \
    tensorstore+cupy --out "$out/bench" >"$out/bench.log" 2>&1
  echo "benchmark exit $?"
  grep -E "^\| (full-read|crops-batch) " "$out/bench/results.md" 2>/dev/null | head -8
  timeout "$(capped 90)" python3 -m benchmarks.run --device gpu --repeats 3 --crops 256 --size-mib 64 \
    --only loader sharded-zstd v2-blosc-lz4 gpuzarr-gpu tensorstore --out "$out/loader" >"$out/loader.log" 2>&1
  echo "loader benchmark exit $?"
  grep -E "^\| loader-" "$out/loader/results.md" 2>/dev/null | head -8
  for route in direct host; do
    timeout "$(capped 45)" python3 -m benchmarks.gpu_profile --codec zstd --side 416 --crops 8 --top 30 \
      $([[ $route == host ]] && echo --host-reads) >"$out/profile-zstd-$route.txt" 2>&1
    echo "profile ($route reads) exit $?"
    grep "^===" "$out/profile-zstd-$route.txt"
  done
  echo "stage took ${SECONDS} s of ${budget}"
}

diagnose() {
  gpu_tests
  timeout "$(capped 70)" python3 -m benchmarks.nvcomp_latency --sizes-kib 64 512 2048 --counts 1 8 64 512 \
    >"$out/nvcomp-latency.md" 2>"$out/nvcomp-latency.log"
  echo "nvcomp latency exit $?"; cat "$out/nvcomp-latency.md"
  timeout "$(capped 25)" python3 -m benchmarks.nvcomp_latency --cupy-allocator --algorithms zstd --sizes-kib 512 \
    >"$out/nvcomp-latency-cupy-allocator.md" 2>&1
  echo "nvcomp latency (CuPy's allocator) exit $?"; cat "$out/nvcomp-latency-cupy-allocator.md"
  for route in direct host; do
    timeout "$(capped 30)" python3 -m benchmarks.gpu_profile --phases --codec zstd --side 416 --crops 64 \
      $([[ $route == host ]] && echo --host-reads) >"$out/phases-zstd-$route.md" 2>&1
    echo "phases ($route reads) exit $?"; cat "$out/phases-zstd-$route.md"
  done
  sweep_loader loader-sweep-phases 40 --passes 3 --rows "ahead default" "ahead default, CPU decode" "device cache" \
    --phases
  # The second decode lane on a stream of its own (2026-11-28, third session): one lane against
  # two in the steady state of a longer pass, where windows follow each other.
  sweep_loader loader-sweep-2048-lanes 40 --passes 3 --crops 2048 --rows "ahead default" "ahead default, 2 lanes"
  # kvikio's threads for the device's own file reads: min(16, CPUs) by default, which one H100
  # probe of a single cached file contradicted (2026-11-24); whole reads settle it.
  timeout "$(capped 60)" python3 -m benchmarks.batch_sweep --size-mib 128 --repeats 3 --budgets-mib 1024 \
    --datasets zstd sharded-zstd raw --io-threads 1 4 16 >"$out/io-threads.md" 2>"$out/io-threads.log"
  echo "io threads sweep exit $?"; cat "$out/io-threads.md"
  echo "stage took ${SECONDS} s of ${budget}"
}

sanitize() {
  # The corrupt-input tests on the real device under memcheck: every bad stream must end as a
  # CorruptChunkError with no out-of-bounds access by nvCOMP or our kernels. Kernel-only tests
  # and the loader stay out (memcheck slows every launch about 10-100x), except the two assemble
  # kernels' tests (assemble_rows had not run under memcheck before 2026-11-28) and the loader's
  # box copies, whose tables go up in one block of their own layout.
  if ! command -v compute-sanitizer >/dev/null; then
    echo "compute-sanitizer not found"; return 1
  fi
  timeout "$(capped 560)" compute-sanitizer --tool memcheck --error-exitcode 99 --log-file "$out/memcheck.log" \
    python3 -m pytest -q -rfE -p no:cacheprovider -W default::DeprecationWarning \
    tests/gpu/test_gpu_array.py -k "corrupt or bomb or checksum or test_assemble or box_copies" \
    tests/gpu/test_kernels_gpu.py::test_assemble_chunks tests/gpu/test_kernels_gpu.py::test_assemble_into_a_strided_output \
    tests/gpu/test_kernels_gpu.py::test_box_copies_with_either_kernel \
    tests/gpu/test_kernels_gpu.py::test_box_copies_from_separate_arrays \
    >"$out/pytest-memcheck.log" 2>&1
  echo "memcheck exit $? (99: memcheck found errors; see memcheck.log)"
  tail -20 "$out/pytest-memcheck.log"
  grep -c "Invalid" "$out/memcheck.log" || true
}

report
case "$stage" in
  lease) lease ;;
  first) probe; tests ;;
  probe) probe ;;
  tests) tests ;;
  bench) bench ;;
  quick) quick ;;
  loader-overheads) loader_overheads ;;
  profile) profile ;;
  batches) batches ;;
  verify) verify ;;
  diagnose) diagnose ;;
  sanitize) sanitize ;;
  loader) loader ;;
  cpu) cpu_scaling ;;
  all) tests; bench; loader; cpu_scaling ;;
  *) echo "unknown stage $stage (lease | first | probe | tests | bench | quick | loader-overheads | profile | batches | verify | diagnose | sanitize | loader | cpu | all)"; exit 2 ;;
esac
