import time, numpy as np, cupy
def t(label, f, n=200):
    f(); cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(n): f()
    cupy.cuda.Device().synchronize()
    print(f"{label}: {(time.perf_counter()-t0)/n*1e6:.1f} us")
small = np.arange(256*8, dtype=np.int64).reshape(256, 8)
t("cupy.asarray 256x8 int64", lambda: cupy.asarray(small))
s = cupy.cuda.Stream(non_blocking=True)
def on_stream():
    with s:
        cupy.asarray(small)
t("cupy.asarray on side stream", on_stream)
pinned = cupy.cuda.alloc_pinned_memory(small.nbytes)
hp = np.frombuffer(pinned, dtype=np.int64, count=small.size)
d = cupy.empty(small.size, dtype=np.int64)
def pinned_copy():
    hp[:] = small.reshape(-1)
    d.set(hp, stream=s)
t("pinned set async", pinned_copy)
arrs = [cupy.empty(64**3, dtype=np.uint16) for _ in range(125)]
srcs = [arrs[i % 125] for i in range(256)]
t("256 .data.ptr", lambda: np.array([a.data.ptr for a in srcs], dtype=np.uint64))
t("256 flags.c_contiguous", lambda: [a.flags.c_contiguous for a in srcs])
t("256 nbytes", lambda: [int(a.nbytes) for a in srcs])
t("event record", lambda: s.record())
t("empty 16MiB", lambda: cupy.empty((32, 64, 64, 64), dtype=np.uint16))
big = np.empty(38 << 20, dtype=np.uint8); big[:] = 1
pb = cupy.cuda.alloc_pinned_memory(big.nbytes); hb = np.frombuffer(pb, dtype=np.uint8, count=big.size)
def copy1(): hb[:] = big
t("38 MiB pageable->pinned copy, 1 thread", copy1, 10)
from concurrent.futures import ThreadPoolExecutor
pool = ThreadPoolExecutor(8)
parts = [(i * (big.size // 128), (i + 1) * (big.size // 128)) for i in range(128)]
def copyn(k):
    def go(p):
        hb[p[0]:p[1]] = big[p[0]:p[1]]
    list(pool.map(go, parts))
t("38 MiB copy in 128 parts, 8 threads", lambda: copyn(8), 10)
