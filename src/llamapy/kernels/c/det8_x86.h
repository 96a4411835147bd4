/* det8_x86.c: deterministic mode's products of the types of a scale per block of 32 (Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0) at the AVX-512 level with int8 activations (vpdpbusd: 64 products an
 * instruction, twice vpdpwssd's), one row or many, the same bits; at the AVX2 level those and the
 * K-quants (det8_avx2_x86.c: vpmaddubsw, no VNNI needed). */
#ifndef LP_DET8_X86_H
#define LP_DET8_X86_H

#include "lp.h"

/* Activation rows quantized to int8 per block of 32 (ggml's Q8_0 / Q8_1 form), and from 2 rows
 * on also laid out in lanes: lane r of group g is row 16 g + r (rows past n: zeros). */
typedef struct {
    int64_t n_in, n, n_grp; /* row length, rows, groups of 16 rows (0 for one row) */
    int tiles;              /* the products take AMX's tiles (det8_amx_x86.c), not the lanes: set by the caller */
    int8_t *q;              /* [n rounded up to 16, n_in] x / d rounded to nearest even, |q| <= 127 (pad rows 0) */
    float *d, *sum;         /* [n, n_in / 32] max |x| / 127; d * the exact integer sum of the block's q */
    int32_t *qs;            /* [n, n_in / 32] the exact integer sum of the block's q */
    int32_t *lq;            /* [n_grp, n_in / 4, 16] lane r: the row's 4 int8 of quad k */
    float *ld, *lsum;       /* [n_grp, n_in / 32, 16] the rows' d and sum per block */
    int32_t *lqs;           /* [n_grp, n_in / 32, 16] the rows' qs per block */
} lp_x8;

/* Does det8 take this type (at this ISA level)?  At AVX-512: Q4_0, Q4_1, Q5_0, Q5_1, and Q8_0
 * where the build has VNNI (its unsigned bytes reach 255: vpmaddubsw's int16 pairs would
 * saturate); at AVX2 (det8_avx2_x86.c) all five (Q8_0 signed: LP_DET8_Q8_SIGNED); otherwise 0. */
int lp_det8_covers(int type);
size_t lp_x8_bytes(int64_t n_in, int64_t n);
lp_x8 lp_x8_at(void *buf, int64_t n_in, int64_t n);
void lp_x8_row(const float *x, const lp_x8 *p, int64_t r);  /* row r quantized (x: its n_in floats) */
void lp_x8_lanes_block(const lp_x8 *p, int64_t b);         /* block b of every row into the lanes (tiles: ld, lsum, lqs) */
lp_x8 lp_x8_slice(const lp_x8 *p, int64_t r0, int64_t n);  /* rows r0 .. r0 + n (r0 a multiple of 16) */
size_t lp_det8_scratch_bytes(int64_t n_in);
/* The weights' offset to unsigned bytes (det8 reads q + off): Q4_0 8, Q5_0 16, Q8_0 128 (0 with
 * LP_DET8_Q8_SIGNED), else 0. */
int lp_det8_offset(int type);
/* y[r, o] (+)= x_r . W_o for outputs o0 .. o1 and every row of p, each element one sequence:
 * per block of 32 in order, i = the exact int32 sum of (q_w + off) q_x minus off * qs (= the
 * sum of q_w q_x), acc = fmaf((float)i, d_w * d_x, acc); with a minimum (Q4_1, Q5_1) then
 * acc = fmaf(sum_x, m_w, acc).  o1 - o0 <= 16 (LP_MM_CHUNK). */
void lp_det8_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, const lp_x8 *p, float *y,
                   int64_t ldy, int accumulate, void *scratch);

/* The one-row kernels' walk: nr (8 or 16) weight rows from o (the last one repeated past o1:
 * rows[nr]), and the cache lines of the nr rows `ahead` groups on (1: the next group; det16's 2:
 * the one after) to prefetch, spread over the n_steps steps of a row's walk. */
typedef struct {
    const char *pf;
    int64_t lines, per;
} lp_det8_next;

LP_INLINE int lp_det8_rows_n(const uint8_t *w, int64_t o, int64_t o1, int64_t n_out, int64_t rb, int64_t n_steps,
                             const int nr, const int ahead, const uint8_t **rows, lp_det8_next *nx) {
    const int nw = (int)(o1 - o < nr ? o1 - o : nr);
    for (int j = 0; j < nr; j++) rows[j] = w + (o + (j < nw ? j : nw - 1)) * rb;
    const int64_t p0 = o + (int64_t)nr * ahead, p1 = p0 + nr, pe = p1 < n_out ? p1 : n_out;
    nx->pf = (const char *)(((uintptr_t)(w + p0 * rb)) & ~(uintptr_t)63);
    nx->lines = pe > p0 ? ((const char *)(w + pe * rb) - nx->pf + 63) / 64 : 0;
    nx->per = (nx->lines + n_steps - 1) / n_steps;
    return nw;
}

LP_INLINE int lp_det8_rows8(const uint8_t *w, int64_t o, int64_t o1, int64_t n_out, int64_t rb, int64_t n_steps,
                            const uint8_t **rows, lp_det8_next *nx) {
    return lp_det8_rows_n(w, o, o1, n_out, rb, n_steps, 8, 1, rows, nx);
}

/* step s's share of the next rows' lines */
LP_INLINE void lp_det8_prefetch(const lp_det8_next *nx, int64_t s) {
    for (int64_t i = s * nx->per; i < (s + 1) * nx->per && i < nx->lines; i++) LP_PREFETCH_W(nx->pf + 64 * i);
}

#if defined(LP_AVX512) || defined(LP_AVX2)
#include "blocks_x86.h"
#if !defined(LP_AVX512) && !defined(LP_AVXVNNI)
/* The AVX2 level without VNNI reads Q8_0 as its signed int8 (off 0): the products are
 * vpmaddubsw(|q_w|, sign(q_x, q_w)), whose int16 pairs stay within 2 x 128 x 127 (ggml's AVX2 dot),
 * where q + 128 would saturate them. */
#define LP_DET8_Q8_SIGNED 1
#endif
/* Block blk of a 32-element type as det8 reads its weights: 32 unsigned bytes q + off in element
 * order (Q4_0 / Q4_1 the nibbles, Q5_0 / Q5_1 with the fifth bits as 16, Q8_0's int8 + 128; with
 * LP_DET8_Q8_SIGNED Q8_0's int8 as they are). */
LP_INLINE __m256i lp_det8_bytes(const int type, const uint8_t *blk) {
    switch (type) {
    case LP_Q4_0: return nibbles32(blk + 2);
    case LP_Q4_1: return nibbles32(blk + 4);
#if defined(LP_AVX512)
    case LP_Q5_0: {
        const __m256i nb = nibbles32(blk + 6);
        return _mm256_mask_add_epi8(nb, (__mmask32)lp_rd32(blk + 2), nb, _mm256_set1_epi8(16));
    }
    case LP_Q5_1: {
        const __m256i nb = nibbles32(blk + 8);
        return _mm256_mask_add_epi8(nb, (__mmask32)lp_rd32(blk + 4), nb, _mm256_set1_epi8(16));
    }
#else /* the fifth bits as 0x10 bytes (ggml's bytes_from_bits_32) */
    case LP_Q5_0: return _mm256_or_si256(nibbles32(blk + 6), _mm256_and_si256(bits_to_bytes(blk + 2), _mm256_set1_epi8(16)));
    case LP_Q5_1: return _mm256_or_si256(nibbles32(blk + 8), _mm256_and_si256(bits_to_bytes(blk + 4), _mm256_set1_epi8(16)));
#endif
    default:
#if defined(LP_DET8_Q8_SIGNED)
        return _mm256_loadu_si256((const __m256i *)(blk + 2));
#else
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)), _mm256_set1_epi8((char)0x80));
#endif
    }
}

/* A weight row (blocks of bytes32(type)) into u [n_in] (lp_det8_bytes) and its d, m per block (m 0
 * without a minimum). */
LP_INLINE void lp_det8_unpack(int type, const uint8_t *row, int64_t n_in, uint8_t *u, float *d, float *m) {
    const int bb = bytes32(type), has_min = type == LP_Q4_1 || type == LP_Q5_1;
    for (int64_t b = 0; b < n_in / 32; b++) {
        const uint8_t *blk = row + bb * b;
        d[b] = lp_f16_to_f32(lp_rd16(blk)), m[b] = has_min ? lp_f16_to_f32(lp_rd16(blk + 2)) : 0.0f;
        _mm256_storeu_si256((__m256i *)(u + 32 * b), lp_det8_bytes(type, blk));
    }
}

/* Weight rows o0 .. o1 (rb bytes each) asked into the cache (no effect on any result): the many-row
 * kernels issue it for their next rows before computing the rows they unpacked, so that a product
 * of few rows (a batched decode: 16) streams its weights while it computes. */
LP_INLINE void lp_det8_prefetch_rows(const uint8_t *w, int64_t o0, int64_t o1, int64_t rb) {
    for (int64_t o = o0; o < o1; o++)
        for (int64_t b = 0; b < rb; b += 64) _mm_prefetch((const char *)(w + o * rb + b), _MM_HINT_T0);
}

/* The one-row kernels' end: y[0 .. nw] (+)= the 8 outputs of acc. */
LP_INLINE void lp_det8_store8(float *y, __m256 acc, int nw, int accumulate) {
    float t[8];
    _mm256_storeu_ps(t, acc);
    for (int j = 0; j < nw; j++) y[j] = accumulate ? y[j] + t[j] : t[j];
}
#endif

#endif
