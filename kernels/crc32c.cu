// crc32c.cu: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78; the checksum of the Zarr
// `crc32c` codec) and CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320; the gzip trailer's) of
// many buffers, one block per buffer. Both use initial value and final XOR 0xFFFFFFFF.
//
// Kernels  crc32c_batch, crc32_batch (same arguments, different polynomial)
// Launch   block (B, 1, 1), 32 <= B <= 1024 (256 is a good default); grid (X, 1, 1), any X >= 1:
//          blockIdx.x is a grid-stride loop over the buffers.
// Arguments
//   buffers   const unsigned char*[nbuffers]  buffer base pointers
//   sizes     const long long[nbuffers]       buffer lengths in bytes (0 gives 0)
//   crcs      unsigned int[nbuffers]          result per buffer
//   nbuffers  int
// Method: the block splits a buffer into B contiguous segments (lengths a multiple of 8 bytes, the
// last one shorter or empty). Each thread computes the CRC of its segment from a zero register with
// slicing-by-8 tables built in shared memory; the segment CRCs are merged by a tree reduction,
// where appending a segment of L bytes multiplies the register by x^(8L) modulo the polynomial
// (the method of zlib's crc32_combine). The initial value and final XOR are applied at the end.
// Alignment: none (byte loads). Shared memory: 8 KiB of tables plus 4 KiB of partial CRCs.

#define CRC32C_POLY 0x82F63B78u
#define CRC32_POLY 0xEDB88320u

// a * b modulo the polynomial poly, both in reflected bit order (x^0 is the top bit).
__device__ unsigned int multmodp(unsigned int a, unsigned int b, unsigned int poly) {
    unsigned int m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ poly : b >> 1;
    }
    return p;
}

// x^(8 * nbytes) modulo the polynomial; x2n[k] holds x^(2^k).
__device__ unsigned int x8nmodp(unsigned long long nbytes, const unsigned int* x2n, unsigned int poly) {
    unsigned int p = 1u << 31;
    int k = 3;
    while (nbytes) {
        if (nbytes & 1) p = multmodp(x2n[k & 31], p, poly);
        nbytes >>= 1;
        ++k;
    }
    return p;
}

__device__ void crc_batch(const unsigned char* const* buffers, const long long* sizes, unsigned int* crcs,
                          int nbuffers, unsigned int poly) {
    __shared__ unsigned int table[8][256];
    __shared__ unsigned int partial[1024];
    __shared__ unsigned int x2n[32];
    const int tid = threadIdx.x;
    const int nthreads = blockDim.x;

    for (int i = tid; i < 256; i += nthreads) {
        unsigned int c = (unsigned int)i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
        table[0][i] = c;
    }
    if (tid == 0) {
        unsigned int p = 1u << 30;  // x^1
        for (int k = 0; k < 32; ++k) {
            x2n[k] = p;
            p = multmodp(p, p, poly);
        }
    }
    __syncthreads();
    for (int t = 1; t < 8; ++t) {
        for (int i = tid; i < 256; i += nthreads) {
            const unsigned int c = table[t - 1][i];
            table[t][i] = (c >> 8) ^ table[0][c & 0xff];
        }
        __syncthreads();
    }

    for (int buf = blockIdx.x; buf < nbuffers; buf += gridDim.x) {
        const unsigned char* data = buffers[buf];
        const long long n = sizes[buf];
        long long seg = (n + nthreads - 1) / nthreads;
        seg = (seg + 7) & ~7LL;
        const long long begin = min((long long)tid * seg, n);
        const long long end = min(begin + seg, n);

        unsigned int crc = 0;
        long long pos = begin;
        for (; pos + 8 <= end; pos += 8) {
            const unsigned char* p = data + pos;
            const unsigned int lo = crc ^ ((unsigned int)p[0] | ((unsigned int)p[1] << 8) |
                                           ((unsigned int)p[2] << 16) | ((unsigned int)p[3] << 24));
            const unsigned int hi = (unsigned int)p[4] | ((unsigned int)p[5] << 8) |
                                    ((unsigned int)p[6] << 16) | ((unsigned int)p[7] << 24);
            crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
                  table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
                  table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        }
        for (; pos < end; ++pos) crc = table[0][(crc ^ data[pos]) & 0xff] ^ (crc >> 8);
        partial[tid] = crc;
        __syncthreads();

        // partial[t] becomes the CRC of segments t .. t + 2 * width - 1.
        for (int width = 1; width < nthreads; width *= 2) {
            if ((tid % (2 * width)) == 0 && tid + width < nthreads) {
                const long long right_begin = min((long long)(tid + width) * seg, n);
                const long long right_end = min((long long)(tid + 2 * width) * seg, n);
                const long long right_len = right_end - right_begin;
                partial[tid] = multmodp(x8nmodp((unsigned long long)right_len, x2n, poly), partial[tid], poly) ^
                               partial[tid + width];
            }
            __syncthreads();
        }
        if (tid == 0) {
            const unsigned int init = multmodp(x8nmodp((unsigned long long)n, x2n, poly), 0xFFFFFFFFu, poly);
            crcs[buf] = partial[0] ^ init ^ 0xFFFFFFFFu;
        }
        __syncthreads();
    }
}

extern "C" __global__ void crc32c_batch(const unsigned char* const* buffers, const long long* sizes,
                                        unsigned int* crcs, int nbuffers) {
    crc_batch(buffers, sizes, crcs, nbuffers, CRC32C_POLY);
}

extern "C" __global__ void crc32_batch(const unsigned char* const* buffers, const long long* sizes,
                                       unsigned int* crcs, int nbuffers) {
    crc_batch(buffers, sizes, crcs, nbuffers, CRC32_POLY);
}
