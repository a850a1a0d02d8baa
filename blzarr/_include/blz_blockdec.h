/* One whole block of a Blosc 1.x chunk decoded straight into the caller's buffer, for a random read
   (`_chunk.block_at`).

   Why not blosc_getitem: it allocates and frees its temporary buffers on every call, decodes the
   block into one of them and copies the wanted bytes out; for a read that wants the whole block that
   is a second pass over it.  Here the LZ4 stream goes to `dst` (or, shuffled, to a stack buffer
   that is unshuffled into `dst`) with blz_lz4dec.h's decoder, which gives C-Blosc's bytes.

   What it leaves to C-Blosc (BLZ_DEC_OTHER, nothing written): what blz_decode_chunk leaves to it,
   and shuffled blocks larger than the stack buffer.  Every offset and length is checked against the
   chunk's and the block's bounds: a malformed chunk is BLZ_DEC_BAD, never a read or write outside
   them. */
#ifndef BLZ_BLOCKDEC_H
#define BLZ_BLOCKDEC_H
#include "blz_lz4dec.h"

#define BLZ_BLOCK_STACK 32768

/* Block `j` of the chunk at `src` (`srclen` bytes) into `dst`, which holds the block's decoded size
   (`bsize`, which the caller computed from the header, the last block possibly short).  Returns
   `bsize`, BLZ_DEC_BAD or BLZ_DEC_OTHER. */
static int64_t blz_decode_block(const uint8_t *src, int64_t srclen, int64_t j, uint8_t *dst,
                                int64_t bsize) {
    int flags, ts, shuf;
    int64_t nbytes, bs, ct, nblocks;
    uint8_t stack[BLZ_BLOCK_STACK];
    if (srclen < 16) return BLZ_DEC_BAD;
    flags = src[2];
    ts = src[3];
    nbytes = blz_dec_i32(src + 4);
    bs = blz_dec_i32(src + 8);
    ct = blz_dec_i32(src + 12);
    if (ct != srclen || nbytes <= 0 || bs <= 0) return BLZ_DEC_BAD;
    shuf = (flags & 0x01) && ts > 1;
    /* the same chunks as blz_decode_chunk takes, none stored raw */
    if ((flags & 0x02) || !blz_dec_takes(src, flags, ts, shuf))
        return BLZ_DEC_OTHER;
    nblocks = (nbytes + bs - 1) / bs;
    if (j < 0 || j >= nblocks || 16 + 4 * nblocks > ct) return BLZ_DEC_BAD;
    if (bsize != (nbytes - j * bs < bs ? nbytes - j * bs : bs)) return BLZ_DEC_BAD;
    if (shuf && bsize > BLZ_BLOCK_STACK) return BLZ_DEC_OTHER;
    if (blz_dec_block(src, ct, nblocks, j, bsize, shuf ? stack : dst, dst, ts, shuf, 0) != 0)
        return BLZ_DEC_BAD;
    return bsize;
}

#endif
