// assemble.cu: scatter the decoded chunks of one batch into an N-d output array, one launch.
//
// Kernels  assemble_chunks: one thread per element, its place found with one division per axis;
//          assemble_rows: one warp per row of the innermost axis, its place found with one division
//          per outer axis for the whole row, the lanes 32 elements apart along it (for rows of
//          16 elements or more: a loader's crops, full reads). Same arguments, same result.
// Launch   block (B, 1, 1), B a multiple of 32 (256 is a good default);
//          grid (X, Y, 1): Y = min(nchunks, 65535), blockIdx.y picks the chunk; both grid axes are
//          grid-stride loops (over elements, or over rows in warps), so any X >= 1 and Y >= 1
//          cover every element of every chunk.
// Arguments (all per-axis tables hold 8 entries per row; only the first `ndim` are read)
//   out          unsigned char*               output base pointer
//   out_strides  const long long[8]           output strides, in elements
//   sources      const unsigned char*[nchunks] decoded chunk base pointers; nullptr = missing chunk,
//                                             its region is written with `fill_value`
//   src_strides  const long long[nchunks][8]  chunk strides in elements; a permutation of the
//                                             chunk's axes (the Zarr `transpose` codec, order="F")
//                                             is expressed here, no copy is made
//   src_offsets  const long long[nchunks][8]  first selected index inside the chunk, per axis
//   src_steps    const long long[nchunks][8]  selection step inside the chunk, per axis (>= 1)
//   dst_offsets  const long long[nchunks][8]  first index in the output, per axis
//   extents      const long long[nchunks][8]  number of elements copied, per axis
//   fill_value   const unsigned char[itemsize] fill value bytes, already in output byte order
//   nchunks, ndim (0..8), itemsize (1, 2, 4, 8 or 16)
//   swap_width   0 or 1: copy bytes as they are; 2/4/8/16: reverse the bytes of every
//                `swap_width`-byte group of each item (big-endian sources; a complex item uses
//                itemsize/2 so each component is swapped on its own)
// Element i (C order over `extents`, index vector r) reads
//   src[sum_d (src_offsets[d] + r[d] * src_steps[d]) * src_strides[d]]
// and writes out[sum_d (dst_offsets[d] + r[d]) * out_strides[d]].
// Alignment: `out` and every source pointer are aligned to min(itemsize, 8) bytes; `fill_value`
// needs no alignment. Nothing is checked on the device: the host proves that every address
// touched lies inside its buffer before launching. Destination regions are disjoint by
// construction (a read's chunks partition its selection, a loader's pieces their crops); that
// is not checked: overlapping ones would be written in no set order, within the buffers.

struct alignas(8) item16 {
    unsigned long long lo, hi;
};

__device__ __forceinline__ unsigned long long bswap64(unsigned long long v) {
    unsigned int lo = (unsigned int)v, hi = (unsigned int)(v >> 32);
    return ((unsigned long long)__byte_perm(lo, 0, 0x0123) << 32) | __byte_perm(hi, 0, 0x0123);
}

// Byte-swap helpers, one per item type: reverse every `width`-byte group of the item.
__device__ __forceinline__ unsigned char swap_groups(unsigned char v, int) { return v; }

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
__device__ __forceinline__ T load_bytes(const unsigned char* p) {
    T v;
    unsigned char* d = reinterpret_cast<unsigned char*>(&v);
    for (int k = 0; k < (int)sizeof(T); ++k) d[k] = p[k];
    return v;
}

template <typename T>
__device__ void assemble_typed(unsigned char* out, const long long* out_strides,
                               const unsigned char* const* sources, const long long* src_strides,
                               const long long* src_offsets, const long long* src_steps,
                               const long long* dst_offsets, const long long* extents,
                               const unsigned char* fill_value, int nchunks, int ndim,
                               int swap_width) {
    // Per-chunk geometry, computed once per block: the copy extent, the source stride of one
    // step along each axis and the two base offsets.
    __shared__ long long s_extent[8];
    __shared__ long long s_src_step[8];
    __shared__ long long s_out_stride[8];
    __shared__ long long s_src_base, s_out_base, s_total;

    T* out_items = reinterpret_cast<T*>(out);
    const long long stride = (long long)gridDim.x * blockDim.x;

    for (int c = blockIdx.y; c < nchunks; c += gridDim.y) {
        if (threadIdx.x == 0) {
            const long long row = (long long)c * 8;
            long long src_base = 0, out_base = 0, total = 1;
            for (int d = 0; d < ndim; ++d) {
                s_extent[d] = extents[row + d];
                s_src_step[d] = src_strides[row + d] * src_steps[row + d];
                s_out_stride[d] = out_strides[d];
                src_base += src_offsets[row + d] * src_strides[row + d];
                out_base += dst_offsets[row + d] * out_strides[d];
                total *= extents[row + d];
            }
            s_src_base = src_base;
            s_out_base = out_base;
            s_total = total;
        }
        __syncthreads();

        const T* src = reinterpret_cast<const T*>(sources[c]);
        const long long total = s_total;
        if (src == nullptr) {
            const T fill = load_bytes<T>(fill_value);
            for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
                long long rem = i, o = s_out_base;
                for (int d = ndim - 1; d > 0; --d) {
                    const long long q = rem / s_extent[d];
                    o += (rem - q * s_extent[d]) * s_out_stride[d];
                    rem = q;
                }
                if (ndim > 0) o += rem * s_out_stride[0];
                out_items[o] = fill;
            }
        } else {
            for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
                long long rem = i, s = s_src_base, o = s_out_base;
                for (int d = ndim - 1; d > 0; --d) {
                    const long long q = rem / s_extent[d];
                    const long long r = rem - q * s_extent[d];
                    s += r * s_src_step[d];
                    o += r * s_out_stride[d];
                    rem = q;
                }
                if (ndim > 0) {
                    s += rem * s_src_step[0];
                    o += rem * s_out_stride[0];
                }
                out_items[o] = swap_groups(src[s], swap_width);
            }
        }
        // The shared geometry is rewritten for the next chunk only after every thread is done.
        __syncthreads();
    }
}

template <typename T>
__device__ void assemble_rows_typed(unsigned char* out, const long long* out_strides,
                                    const unsigned char* const* sources, const long long* src_strides,
                                    const long long* src_offsets, const long long* src_steps,
                                    const long long* dst_offsets, const long long* extents,
                                    const unsigned char* fill_value, int nchunks, int ndim,
                                    int swap_width) {
    // Per-chunk geometry, computed once per block as in assemble_typed, plus the row count (the
    // product of every extent but the innermost one) and the innermost axis's extent and steps.
    __shared__ long long s_extent[8];
    __shared__ long long s_src_step[8];
    __shared__ long long s_out_stride[8];
    __shared__ long long s_src_base, s_out_base, s_rows, s_inner, s_inner_src, s_inner_out;

    T* out_items = reinterpret_cast<T*>(out);
    const int lane = threadIdx.x & 31;
    const long long first_warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;

    for (int c = blockIdx.y; c < nchunks; c += gridDim.y) {
        if (threadIdx.x == 0) {
            const long long row = (long long)c * 8;
            long long src_base = 0, out_base = 0, rows = 1;
            for (int d = 0; d < ndim; ++d) {
                s_extent[d] = extents[row + d];
                s_src_step[d] = src_strides[row + d] * src_steps[row + d];
                s_out_stride[d] = out_strides[d];
                src_base += src_offsets[row + d] * src_strides[row + d];
                out_base += dst_offsets[row + d] * out_strides[d];
                if (d < ndim - 1) rows *= extents[row + d];
            }
            // A 0-d chunk is one row of one element.
            s_inner = ndim > 0 ? s_extent[ndim - 1] : 1;
            s_inner_src = ndim > 0 ? s_src_step[ndim - 1] : 0;
            s_inner_out = ndim > 0 ? s_out_stride[ndim - 1] : 0;
            s_src_base = src_base;
            s_out_base = out_base;
            s_rows = s_inner > 0 ? rows : 0;
        }
        __syncthreads();

        const T* src = reinterpret_cast<const T*>(sources[c]);
        const long long rows = s_rows, inner = s_inner;
        const long long inner_src = s_inner_src, inner_out = s_inner_out;
        const T fill = src == nullptr ? load_bytes<T>(fill_value) : T();
        for (long long r = first_warp; r < rows; r += warps) {
            // Row r's first element: r in C order over the outer axes (0 .. ndim-2). Every lane
            // of the warp works it out alike.
            long long rem = r, s = s_src_base, o = s_out_base;
            for (int d = ndim - 2; d > 0; --d) {
                const long long q = rem / s_extent[d];
                const long long k = rem - q * s_extent[d];
                s += k * s_src_step[d];
                o += k * s_out_stride[d];
                rem = q;
            }
            if (ndim > 1) {
                s += rem * s_src_step[0];
                o += rem * s_out_stride[0];
            }
            if (src == nullptr) {
                for (long long k = lane; k < inner; k += 32) out_items[o + k * inner_out] = fill;
            } else {
                for (long long k = lane; k < inner; k += 32) {
                    out_items[o + k * inner_out] = swap_groups(src[s + k * inner_src], swap_width);
                }
            }
        }
        // The shared geometry is rewritten for the next chunk only after every thread is done.
        __syncthreads();
    }
}

extern "C" __global__ void assemble_chunks(unsigned char* out, const long long* out_strides,
                                           const unsigned char* const* sources,
                                           const long long* src_strides, const long long* src_offsets,
                                           const long long* src_steps, const long long* dst_offsets,
                                           const long long* extents, const unsigned char* fill_value,
                                           int nchunks, int ndim, int itemsize, int swap_width) {
    switch (itemsize) {
        case 1:
            assemble_typed<unsigned char>(out, out_strides, sources, src_strides, src_offsets,
                                          src_steps, dst_offsets, extents, fill_value, nchunks,
                                          ndim, swap_width);
            break;
        case 2:
            assemble_typed<unsigned short>(out, out_strides, sources, src_strides, src_offsets,
                                           src_steps, dst_offsets, extents, fill_value, nchunks,
                                           ndim, swap_width);
            break;
        case 4:
            assemble_typed<unsigned int>(out, out_strides, sources, src_strides, src_offsets,
                                         src_steps, dst_offsets, extents, fill_value, nchunks, ndim,
                                         swap_width);
            break;
        case 8:
            assemble_typed<unsigned long long>(out, out_strides, sources, src_strides, src_offsets,
                                               src_steps, dst_offsets, extents, fill_value,
                                               nchunks, ndim, swap_width);
            break;
        case 16:
            assemble_typed<item16>(out, out_strides, sources, src_strides, src_offsets, src_steps,
                                   dst_offsets, extents, fill_value, nchunks, ndim, swap_width);
            break;
        default:
            break;  // rejected on the host
    }
}

extern "C" __global__ void assemble_rows(unsigned char* out, const long long* out_strides,
                                         const unsigned char* const* sources,
                                         const long long* src_strides, const long long* src_offsets,
                                         const long long* src_steps, const long long* dst_offsets,
                                         const long long* extents, const unsigned char* fill_value,
                                         int nchunks, int ndim, int itemsize, int swap_width) {
    switch (itemsize) {
        case 1:
            assemble_rows_typed<unsigned char>(out, out_strides, sources, src_strides, src_offsets,
                                               src_steps, dst_offsets, extents, fill_value,
                                               nchunks, ndim, swap_width);
            break;
        case 2:
            assemble_rows_typed<unsigned short>(out, out_strides, sources, src_strides,
                                                src_offsets, src_steps, dst_offsets, extents,
                                                fill_value, nchunks, ndim, swap_width);
            break;
        case 4:
            assemble_rows_typed<unsigned int>(out, out_strides, sources, src_strides, src_offsets,
                                              src_steps, dst_offsets, extents, fill_value, nchunks,
                                              ndim, swap_width);
            break;
        case 8:
            assemble_rows_typed<unsigned long long>(out, out_strides, sources, src_strides,
                                                    src_offsets, src_steps, dst_offsets, extents,
                                                    fill_value, nchunks, ndim, swap_width);
            break;
        case 16:
            assemble_rows_typed<item16>(out, out_strides, sources, src_strides, src_offsets,
                                        src_steps, dst_offsets, extents, fill_value, nchunks, ndim,
                                        swap_width);
            break;
        default:
            break;  // rejected on the host
    }
}
