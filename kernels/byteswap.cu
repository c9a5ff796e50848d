// byteswap.cu: reverse the byte order of many items, in place or out of place.
//
// Kernel   byteswap
// Launch   block (B, 1, 1), B a multiple of 32 (256 is a good default); grid (X, 1, 1), any X >= 1:
//          a grid-stride loop covers all `nitems` items, one thread per item.
// Arguments
//   src         const unsigned char*  first item
//   dst         unsigned char*        first output item; may equal `src` (in place), must not
//                                     otherwise overlap it
//   nitems      long long             number of items
//   itemsize    int                   2, 4, 8 or 16
//   swap_width  int                   size of the byte groups that are reversed: itemsize for
//                                     scalars, itemsize/2 for complex items (each component is
//                                     swapped on its own); 0 or 1 copies without swapping
// Alignment: `src` and `dst` are aligned to min(itemsize, 8) bytes. The host checks that both
// buffers hold nitems * itemsize bytes; nothing is checked on the device.
//
// The swap helpers are the same as in assemble.cu: each kernel file compiles on its own, with no
// headers, so that NVRTC needs no include path.

struct alignas(8) item16 {
    unsigned long long lo, hi;
};

__device__ __forceinline__ unsigned long long bswap64(unsigned long long v) {
    unsigned int lo = (unsigned int)v, hi = (unsigned int)(v >> 32);
    return ((unsigned long long)__byte_perm(lo, 0, 0x0123) << 32) | __byte_perm(hi, 0, 0x0123);
}

__device__ __forceinline__ unsigned short swap_groups(unsigned short v, int width) {
    return width == 2 ? (unsigned short)__byte_perm(v, 0, 0x3201) : v;
}

__device__ __forceinline__ unsigned int swap_groups(unsigned int v, int width) {
    if (width == 4) return __byte_perm(v, 0, 0x0123);
    if (width == 2) return __byte_perm(v, 0, 0x2301);
    return v;
}

__device__ __forceinline__ unsigned long long swap_groups(unsigned long long v, int width) {
    if (width == 8) return bswap64(v);
    unsigned int lo = (unsigned int)v, hi = (unsigned int)(v >> 32);
    return ((unsigned long long)swap_groups(hi, width) << 32) | swap_groups(lo, width);
}

__device__ __forceinline__ item16 swap_groups(item16 v, int width) {
    item16 r;
    if (width == 16) {
        r.lo = bswap64(v.hi);
        r.hi = bswap64(v.lo);
    } else {
        r.lo = swap_groups(v.lo, width);
        r.hi = swap_groups(v.hi, width);
    }
    return r;
}

template <typename T>
__device__ void byteswap_typed(const unsigned char* src, unsigned char* dst, long long nitems,
                               int swap_width) {
    // No __restrict__: src and dst alias when swapping in place. Each thread reads its item
    // before writing it, and no other thread touches that item.
    const T* s = reinterpret_cast<const T*>(src);
    T* d = reinterpret_cast<T*>(dst);
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < nitems; i += stride) {
        d[i] = swap_groups(s[i], swap_width);
    }
}

extern "C" __global__ void byteswap(const unsigned char* src, unsigned char* dst, long long nitems,
                                    int itemsize, int swap_width) {
    switch (itemsize) {
        case 2: byteswap_typed<unsigned short>(src, dst, nitems, swap_width); break;
        case 4: byteswap_typed<unsigned int>(src, dst, nitems, swap_width); break;
        case 8: byteswap_typed<unsigned long long>(src, dst, nitems, swap_width); break;
        case 16: byteswap_typed<item16>(src, dst, nitems, swap_width); break;
        default: break;  // rejected on the host
    }
}
