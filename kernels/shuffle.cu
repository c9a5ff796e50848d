// shuffle.cu: Blosc byte un-shuffle and bit un-shuffle of many blocks, one launch per filter.
//
// Kernels  byte_unshuffle, bit_unshuffle
// Launch   block (B, 1, 1), B a multiple of 32 (256 is a good default);
//          grid (X, Y, 1): Y = min(nblocks, 65535), blockIdx.y picks the Blosc block; both grid axes
//          are grid-stride loops, so any X >= 1 and Y >= 1 cover every byte of every block.
// Arguments (one entry per Blosc block; a block is what c-blosc1 shuffles as one unit)
//   src        const unsigned char*[nblocks]  shuffled block bytes (decompressed)
//   dst        unsigned char*[nblocks]        un-shuffled output; must not overlap its source
//   nbytes     const long long[nblocks]       block size in bytes
//   typesizes  const int[nblocks]             Blosc typesize of the block (1..255)
//   nblocks    int
//   bit_unshuffle only:
//   partial_rule int  what happens to a block whose element count n = nbytes / typesize is not a
//                     multiple of 8:
//                     0  the whole block is copied verbatim (c-blosc1, frame format version 2,
//                        which is what numcodecs writes);
//                     1  the first n - n % 8 elements are bit-un-shuffled and the rest is copied
//                        (c-blosc2 and frame format versions >= 3).
// Semantics, n = nbytes / typesize elements, r = nbytes % typesize trailing bytes:
//   byte_unshuffle  dst[i * typesize + j] = src[j * n + i] for i < n, j < typesize; the last r
//                   bytes are copied verbatim (c-blosc1 unshuffle_generic).
//   bit_unshuffle   on the bitshuffled part of m elements (m % 8 == 0, layout of the bitshuffle
//                   library's bshuf_trans_bit_elem): bit (i % 8) of src byte
//                   (j * 8 + b) * (m / 8) + i / 8 is bit b of byte j of element i. Every byte past
//                   m * typesize is copied verbatim.
// Alignment: none (byte loads and stores). Sizes and pointers are checked on the host; the
// kernels only guard against a typesize below 1.

extern "C" __global__ void byte_unshuffle(const unsigned char* const* src, unsigned char* const* dst,
                                          const long long* nbytes, const int* typesizes,
                                          int nblocks) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (int b = blockIdx.y; b < nblocks; b += gridDim.y) {
        const unsigned char* __restrict__ s = src[b];
        unsigned char* __restrict__ d = dst[b];
        const long long size = nbytes[b];
        const int typesize = typesizes[b] > 0 ? typesizes[b] : 1;
        const long long n = size / typesize;
        const long long tail = size - n * typesize;
        // Tasks 0..n-1 rebuild one element each (reads of consecutive threads are consecutive);
        // tasks n..n+tail-1 copy one trailing byte each.
        for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n + tail; t += stride) {
            if (t < n) {
                unsigned char* e = d + t * typesize;
                for (int j = 0; j < typesize; ++j) e[j] = s[(long long)j * n + t];
            } else {
                const long long k = n * typesize + (t - n);
                d[k] = s[k];
            }
        }
    }
}

// Transpose an 8x8 bit matrix held in a 64-bit word: bit (8 * r + c) moves to bit (8 * c + r).
__device__ __forceinline__ unsigned long long transpose_bits_8x8(unsigned long long x) {
    unsigned long long t;
    t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAULL;
    x = x ^ t ^ (t << 7);
    t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCULL;
    x = x ^ t ^ (t << 14);
    t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ULL;
    x = x ^ t ^ (t << 28);
    return x;
}

extern "C" __global__ void bit_unshuffle(const unsigned char* const* src, unsigned char* const* dst,
                                         const long long* nbytes, const int* typesizes, int nblocks,
                                         int partial_rule) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (int b = blockIdx.y; b < nblocks; b += gridDim.y) {
        const unsigned char* __restrict__ s = src[b];
        unsigned char* __restrict__ d = dst[b];
        const long long size = nbytes[b];
        const int typesize = typesizes[b] > 0 ? typesizes[b] : 1;
        const long long n = size / typesize;
        long long m = n - n % 8;  // elements that are bit-shuffled
        if (m != n && partial_rule == 0) m = 0;
        const long long groups = m / 8;  // bytes per bit row
        const long long ntransposes = groups * typesize;
        const long long shuffled_bytes = m * typesize;
        const long long tail = size - shuffled_bytes;
        // Task t < ntransposes gathers the 8 bit rows of byte j for elements 8g..8g+7
        // (consecutive threads read consecutive bytes of each row); later tasks copy one byte.
        for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < ntransposes + tail;
             t += stride) {
            if (t < ntransposes) {
                const long long j = t / groups;
                const long long g = t - j * groups;
                const unsigned char* rows = s + j * 8 * groups + g;
                unsigned long long x = 0;
                for (int bit = 0; bit < 8; ++bit) x |= (unsigned long long)rows[bit * groups] << (8 * bit);
                x = transpose_bits_8x8(x);
                unsigned char* e = d + 8 * g * typesize + j;
                for (int k = 0; k < 8; ++k) e[(long long)k * typesize] = (unsigned char)(x >> (8 * k));
            } else {
                const long long k = shuffled_bytes + (t - ntransposes);
                d[k] = s[k];
            }
        }
    }
}
