// adler32.cu: Adler-32 (RFC 1950; the zlib trailer's checksum) of many buffers, one block per
// buffer.
//
// Kernel   adler32_batch
// Launch   block (B, 1, 1), 32 <= B <= 1024 (256 is a good default); grid (X, 1, 1), any X >= 1:
//          blockIdx.x is a grid-stride loop over the buffers.
// Arguments
//   buffers   const unsigned char*[nbuffers]  buffer base pointers
//   sizes     const long long[nbuffers]       buffer lengths in bytes (0 gives 1)
//   sums      unsigned int[nbuffers]          result per buffer
//   nbuffers  int
// Method: the block splits a buffer into B contiguous segments (lengths a multiple of 8 bytes, the
// last one shorter or empty). Each thread sums its segment from zero: a = sum of the bytes,
// b = sum of (L - i) * byte i, for a segment of L bytes. Segments merge by a tree reduction:
// X followed by Y (L_Y bytes) gives a = a_X + a_Y, b = b_X + L_Y * a_X + b_Y. The starting value
// A = 1 adds 1 to a and n to b. Everything is kept modulo 65521, the largest prime below 2^16.
// Alignment: none (byte loads). Shared memory: 16 KiB of partial sums.

#define ADLER_MOD 65521ull
// Reduce the running sums this often: a stays below 255 * 2^16 + 65521 and b below 2^48.
#define ADLER_BLOCK 65536

extern "C" __global__ void adler32_batch(const unsigned char* const* buffers, const long long* sizes,
                                         unsigned int* sums, int nbuffers) {
    __shared__ unsigned long long part_a[1024];
    __shared__ unsigned long long part_b[1024];
    const int tid = threadIdx.x;
    const int nthreads = blockDim.x;

    for (int buf = blockIdx.x; buf < nbuffers; buf += gridDim.x) {
        const unsigned char* data = buffers[buf];
        const long long n = sizes[buf];
        long long seg = (n + nthreads - 1) / nthreads;
        seg = (seg + 7) & ~7LL;
        const long long begin = min((long long)tid * seg, n);
        const long long end = min(begin + seg, n);

        // Processing byte d: a += d; b += a. From zero, b ends as sum (L - i) * d_i.
        unsigned long long a = 0, b = 0;
        for (long long pos = begin; pos < end;) {
            const long long stop = min(pos + ADLER_BLOCK, end);
            for (; pos < stop; ++pos) {
                a += data[pos];
                b += a;
            }
            a %= ADLER_MOD;
            b %= ADLER_MOD;
        }
        part_a[tid] = a;
        part_b[tid] = b;
        __syncthreads();

        for (int width = 1; width < nthreads; width *= 2) {
            if ((tid % (2 * width)) == 0 && tid + width < nthreads) {
                const long long right_begin = min((long long)(tid + width) * seg, n);
                const long long right_end = min((long long)(tid + 2 * width) * seg, n);
                const unsigned long long right_len = (unsigned long long)(right_end - right_begin) % ADLER_MOD;
                const unsigned long long left_a = part_a[tid];
                part_a[tid] = (left_a + part_a[tid + width]) % ADLER_MOD;
                part_b[tid] = (part_b[tid] + right_len * left_a + part_b[tid + width]) % ADLER_MOD;
            }
            __syncthreads();
        }
        if (tid == 0) {
            const unsigned long long total_a = (part_a[0] + 1) % ADLER_MOD;
            const unsigned long long total_b = (part_b[0] + (unsigned long long)n % ADLER_MOD) % ADLER_MOD;
            sums[buf] = (unsigned int)((total_b << 16) | total_a);
        }
        __syncthreads();
    }
}
