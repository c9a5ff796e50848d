// lz4_check.cu: walk the sequences of many raw LZ4 blocks (the LZ4 block format) without decoding
// them, one thread per block, and say whether each is well formed and decodes to exactly the
// expected number of bytes.
//
// nvCOMP's LZ4 decoder reports no error for a truncated or corrupt block: it fills the output and
// returns the full size. A block that passes this walk decodes to a determined output, with every
// match inside the bytes already written, so nothing wrong can come out of a decode that follows.
//
// Kernel   lz4_check_batch
// Launch   block (B, 1, 1), any 32 <= B <= 1024 (128 is a good default); grid (X, 1, 1), any X >= 1:
//          a grid-stride loop over the blocks, one thread each.
// Arguments
//   blocks         const unsigned char*[nblocks]  block base pointers
//   sizes          const long long[nblocks]       compressed bytes of each block
//   decoded_sizes  const long long[nblocks]       the decoded bytes each block must give
//   verdicts       long long[nblocks]             -1 when the block is well formed, else the offset of
//                                                 the sequence where it breaks the format
//   nblocks        int
// Rules (lz4_Block_format.md): a sequence is a token, a literal length (extended by bytes while
// they are 255), the literals, then, unless it is the last sequence, a 2-byte little-endian offset
// (1 to the bytes already decoded) and a match length (4 + extension). The last sequence holds
// literals only and ends the block exactly when the output is full; no match starts within the
// last 12 bytes of the output (MFLIMIT) and the last 5 bytes are literals (LASTLITERALS).
// Alignment: none (byte loads). Memory: reads only inside [blocks[i], blocks[i] + sizes[i]); no shared
// memory.

#define LZ4_MIN_MATCH 4
#define LZ4_LAST_LITERALS 5
#define LZ4_MFLIMIT 12

// Adds a length field's extension bytes (read while they are 255) to *length; false when the block
// ends inside them.
__device__ bool lz4_extend(const unsigned char* src, long long n, long long* ip, long long* length) {
    unsigned int extra;
    do {
        if (*ip >= n) return false;
        extra = src[(*ip)++];
        *length += extra;
    } while (extra == 255);
    return true;
}

__device__ long long lz4_walk(const unsigned char* src, long long n, long long out_n) {
    long long ip = 0, op = 0;
    for (;;) {
        const long long sequence = ip;
        if (ip >= n) return sequence;  // the block ends without its last literal run
        const unsigned int token = src[ip++];
        long long literals = token >> 4;
        if (literals == 15 && !lz4_extend(src, n, &ip, &literals)) return sequence;
        if (literals > n - ip || literals > out_n - op) return sequence;
        ip += literals;
        op += literals;
        if (ip == n) return op == out_n ? -1 : sequence;  // the last sequence fills the output
        if (op > out_n - LZ4_MFLIMIT) return sequence;
        if (n - ip < 2) return sequence;
        const long long offset = (long long)src[ip] | ((long long)src[ip + 1] << 8);
        ip += 2;
        if (offset == 0 || offset > op) return sequence;
        long long match = token & 15;
        if (match == 15 && !lz4_extend(src, n, &ip, &match)) return sequence;
        match += LZ4_MIN_MATCH;
        if (match > out_n - LZ4_LAST_LITERALS - op) return sequence;
        op += match;
    }
}

extern "C" __global__ void lz4_check_batch(const unsigned char* const* blocks, const long long* sizes,
                                           const long long* decoded_sizes, long long* verdicts, int nblocks) {
    const int stride = gridDim.x * blockDim.x;
    for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < nblocks; b += stride) {
        verdicts[b] = lz4_walk(blocks[b], sizes[b], decoded_sizes[b]);
    }
}
