/* IQ4_NL, IQ4_XS and MXFP4 blocks into the canonical row form (quants_iq.h), as ggml-quants.c's
 * dequantize_row_iq4_nl / _iq4_xs / _mxfp4 read them.  Portable C. */
#include "quants_iq.h"

static const int8_t KV_IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static const int8_t KV_MXFP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}; /* E2M1, doubled */

/* ggml_e8m0_to_fp32_half: 2^(e - 128), subnormal below e = 2 */
static inline float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* 16 bytes of nibbles -> 32 table values: low nibbles first, then the high ones */
static inline void nibbles_kv(const uint8_t *qs, const int8_t *kv, int8_t *q) {
    for (int j = 0; j < 16; j++) {
        q[j] = kv[qs[j] & 15];
        q[j + 16] = kv[qs[j] >> 4];
    }
}

/* IQ4_NL: d f16 | qs[16] */
static void unpack_iq4_nl(const uint8_t *b, int8_t *q, float *d16, float *m16) {
    nibbles_kv(b + 2, KV_IQ4NL, q);
    d16[0] = d16[1] = lp_f16_to_f32(lp_rd16(b));
    m16[0] = m16[1] = 0.0f;
}

/* MXFP4: e (E8M0) | qs[16] */
static void unpack_mxfp4(const uint8_t *b, int8_t *q, float *d16, float *m16) {
    nibbles_kv(b + 1, KV_MXFP4, q);
    d16[0] = d16[1] = e8m0_half(b[0]);
    m16[0] = m16[1] = 0.0f;
}

/* IQ4_XS: d f16 | scales_h u16 | scales_l[4] | qs[128]; sub-block j's 6-bit scale ls is nibble
 * j of scales_l with bits 2j, 2j+1 of scales_h above it, its values d * (ls - 32) * kvalue. */
static void unpack_iq4_xs(const uint8_t *b, int8_t *q, float *d16, float *m16) {
    const float d = lp_f16_to_f32(lp_rd16(b));
    const unsigned sh = lp_rd16(b + 2);
    for (int j = 0; j < 8; j++) {
        const int ls = ((b[4 + j / 2] >> 4 * (j % 2)) & 15) | (((sh >> 2 * j) & 3) << 4);
        d16[2 * j] = d16[2 * j + 1] = d * (float)(ls - 32);
        m16[2 * j] = m16[2 * j + 1] = 0.0f;
        nibbles_kv(b + 8 + 16 * j, KV_IQ4NL, q + 32 * j);
    }
}

int lp_unpack_row_iq(int type, const uint8_t *row, int64_t n_in, lp_wrow w) {
#define ROW(fn, be, bb)                                                                                                \
    for (int64_t b = 0; b < n_in / (be); b++) fn(row + b * (bb), w.q + b * (be), w.d16 + b * ((be) / 16), w.m16 + b * ((be) / 16)); \
    return 1;
    switch (type) {
    case LP_IQ4_NL: ROW(unpack_iq4_nl, 32, 18)
    case LP_IQ4_XS: ROW(unpack_iq4_xs, 256, 136)
    case LP_MXFP4: ROW(unpack_mxfp4, 32, 17)
    default: return 0;
    }
#undef ROW
}
