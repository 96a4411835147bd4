/* Few-row integer products on AMX tiles, weights as the A operand: the MoE experts' products
 * (moe_rows.c), whose 16 to ~100 rows an expert leave amx_x86.c's tiles (weights as B, packed
 * by scatters for every 16 weight rows) slower than the lanes.  Here a weight row is one row of
 * the A tile as it lies once decoded to int8 (no packing), and the activations are the B tile:
 * the lanes' pairs (lanes_x86.c), laid out once per expert for all its weight rows, become per 4
 * values the 16 rows' 4 bytes side by side, split exactly as amx_x86.c splits them (xq = 256 hi
 * + lo, |hi| <= 127).  A block (or 16-group) of 16 weight rows x 16 activation rows is one
 * tdpbssd pair; the int32 tile holds per weight row the 16 activation rows' sums, so row j of
 * the stored tiles is the lanes' vector p for weight row j, and the float step is the lanes':
 * acc_j = fma(cvt(p), d_j s, acc_j), then fma(sum, m_j, acc_j) -- outputs equal lanes_chunk's
 * bit for bit.  Taken (moe_rows.c) where AMX is on and an expert's rows take the lanes. */
#include "amxw_x86.h"

#include "amx_x86.h"
#include "quants.h"
#include "unpack_x86.h"

#if defined(LP_AMX)
void lp_amxw_lanes(const lp_xlanes *l) {
    const __m512i order = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15));
    const __m512i c128 = _mm512_set1_epi16(128);
    for (int64_t g = 0; g < l->n_grp; g++) {
        __m512i *q = (__m512i *)(l->q + g * LP_NL * (l->n_in / 2));
        for (int64_t k = 0; k < l->n_in / 4; k++) { /* pairs 2k and 2k + 1 -> hi, lo of values 4k .. 4k + 3 */
            const __m512i a = _mm512_load_si512(q + 2 * k), b = _mm512_load_si512(q + 2 * k + 1);
            const __m512i ha = _mm512_srai_epi16(_mm512_add_epi16(a, c128), 8), hb = _mm512_srai_epi16(_mm512_add_epi16(b, c128), 8);
            const __m512i la = _mm512_sub_epi16(a, _mm512_slli_epi16(ha, 8)), lb = _mm512_sub_epi16(b, _mm512_slli_epi16(hb, 8));
            _mm512_store_si512(q + 2 * k, _mm512_shuffle_epi8(_mm512_packs_epi16(ha, hb), order));
            _mm512_store_si512(q + 2 * k + 1, _mm512_shuffle_epi8(_mm512_packs_epi16(la, lb), order));
        }
    }
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) tile_config;

#define T_HI 0 /* 16 weight rows x 16 activation rows, int32: the hi sums */
#define T_LO 1
#define T_W 2  /* 16 weight rows x kg int8 (even groups; T_W1 odd) */
#define T_XH 3 /* kg / 4 rows of 16 activation rows x 4 int8 (T_XH1: odd groups) */
#define T_XL 4
#define T_W1 5
#define T_XH1 6
#define T_XL1 7

static void configure(int kg) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    c.rows[T_HI] = c.rows[T_LO] = 16, c.colsb[T_HI] = c.colsb[T_LO] = 64;
    c.rows[T_W] = c.rows[T_W1] = 16, c.colsb[T_W] = c.colsb[T_W1] = (uint16_t)kg;
    c.rows[T_XH] = c.rows[T_XL] = c.rows[T_XH1] = c.rows[T_XL1] = (uint8_t)(kg / 4);
    c.colsb[T_XH] = c.colsb[T_XL] = c.colsb[T_XH1] = c.colsb[T_XL1] = 64;
    _tile_loadconfig(&c);
}

/* Weight rows o0..o1 as int8 rows wq [16][n_in] (rows past o1 zero), their d16 and m16 as
 * dv, mv [n_in / 16][16]: the K-quants' bytes straight from their blocks (lp_unpack_row8), the
 * 32-blocks' int16 rows narrowed, the rest through the canonical form. */
static void weight_rows(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, lp_wrow wr, int16_t *w16,
                        int8_t *wq, float *dv, float *mv) {
    const int64_t rb = lp_row_bytes(type, n_in), ng16 = n_in / 16;
    for (int j = 0; j < 16; j++) {
        int8_t *qj = wq + j * n_in;
        if (o0 + j >= o1) {
            memset(qj, 0, (size_t)n_in);
            for (int64_t g = 0; g < ng16; g++) dv[16 * g + j] = mv[16 * g + j] = 0.0f;
            continue;
        }
        const uint8_t *row = w + (o0 + j) * rb;
        if (lp_unpack_row8(type, row, n_in, 0, (uint8_t *)qj, wr.d16, wr.m16)) { /* (offset 0: the bytes are q) */
        } else if (lp_unpack_row16(type, row, n_in, w16, wr.d16, wr.m16)) {
            for (int64_t k = 0; k < n_in; k += 32)
                _mm256_storeu_si256((__m256i *)(qj + k), _mm512_cvtepi16_epi8(_mm512_loadu_si512(w16 + k)));
        } else {
            lp_unpack_row(type, row, n_in, wr);
            memcpy(qj, wr.q, (size_t)n_in);
        }
        for (int64_t g = 0; g < ng16; g++) dv[16 * g + j] = wr.d16[g], mv[16 * g + j] = wr.m16[g];
    }
}

/* The group's float step for the 16 weight rows: hi, lo the stored tiles [16 weight rows][16
 * activation rows]; dv, mv the weight rows' d16, m16 of the group; sv, sm the activation rows'
 * scales and sums (the lanes' vectors).  lanes_x86.c's tile(), weight row j at a time. */
LP_INLINE void step(const int has_min, const int32_t *hi, const int32_t *lo, const float *dv, const float *mv,
                    __m512 sv, __m512 sm, __m512 *acc) {
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) {
        const __m512i p = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(hi + 16 * j), 8), _mm512_load_si512(lo + 16 * j));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(_mm512_set1_ps(dv[j]), sv), acc[j]);
        if (has_min) acc[j] = _mm512_fmadd_ps(sm, _mm512_set1_ps(mv[j]), acc[j]);
    }
}

LP_INLINE void chunk(const int g16, const int has_min, int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in,
                     const lp_xlanes *l, int64_t n, float *y, int64_t ldy, int accumulate, void *scratch) {
    const int64_t nb = n_in / 32, ng16 = n_in / 16, ngr = g16 ? ng16 : nb, np = n_in / 2;
    const int nw = (int)(o1 - o0), kg = g16 ? 16 : 32;
    lp_wrow wr = lp_wrow_at(scratch, n_in);
    int8_t *wq = (int8_t *)(((uintptr_t)((char *)scratch + lp_wrow_bytes(n_in)) + 63) & ~(uintptr_t)63);
    float *dv = (float *)(wq + 16 * n_in), *mv = dv + 16 * ng16;
    weight_rows(type, w, o0, o1, n_in, wr, (int16_t *)(mv + 16 * ng16), wq, dv, mv);
    configure(kg);
    int32_t hi[2][256] __attribute__((aligned(64))), lo[2][256] __attribute__((aligned(64)));
    float t[256] __attribute__((aligned(64)));
    for (int64_t g0 = 0; g0 < l->n_grp; g0++) {
        const int8_t *xb = (const int8_t *)(l->q + g0 * LP_NL * np); /* 128 bytes per 4 values: hi, lo */
        const float *s = l->s + g0 * LP_NL * nb, *s32 = l->sum32 + g0 * LP_NL * nb, *s16 = l->sum16 + g0 * LP_NL * ng16;
        __m512 acc[16];
        for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
/* Group g's inputs into tile set (W, XH, XL): the set alternates, so that a load does not wait
 * on the pair that reads the other set; the pair's sums in HI, LO, stored (SAVE) before the next
 * pair is issued and read back (STEP) while it computes. */
#define LOAD(g, W, XH, XL)                                                                                             \
    do {                                                                                                               \
        _tile_loadd(W, wq + kg * (g), n_in);                                                                           \
        _tile_loadd(XH, xb + 32 * kg * (g), 128);                                                                      \
        _tile_loadd(XL, xb + 32 * kg * (g) + 64, 128);                                                                 \
    } while (0)
#define PAIR(W, XH, XL)                                                                                                \
    do {                                                                                                               \
        _tile_zero(T_HI);                                                                                              \
        _tile_zero(T_LO);                                                                                              \
        _tile_dpbssd(T_HI, W, XH);                                                                                     \
        _tile_dpbssd(T_LO, W, XL);                                                                                     \
    } while (0)
#define SAVE(g)                                                                                                        \
    do {                                                                                                               \
        _tile_stored(T_HI, hi[(g) & 1], 64);                                                                           \
        _tile_stored(T_LO, lo[(g) & 1], 64);                                                                           \
    } while (0)
#define STEP(g) /* the 16-group whose d16, m16 apply: g (g16) or 2 g; the block g / 2 or g */                         \
    step(has_min, hi[(g) & 1], lo[(g) & 1], dv + 16 * (g16 ? (g) : 2 * (g)), mv + 16 * (g16 ? (g) : 2 * (g)),           \
         _mm512_load_ps(s + LP_NL * (g16 ? (g) / 2 : (g))),                                                            \
         has_min ? _mm512_load_ps(g16 ? s16 + LP_NL * (g) : s32 + LP_NL * (g)) : _mm512_setzero_ps(), acc)
        LOAD(0, T_W, T_XH, T_XL);
        PAIR(T_W, T_XH, T_XL);
        for (int64_t g = 1; g < ngr; g++) {
            if (g & 1) LOAD(g, T_W1, T_XH1, T_XL1);
            else LOAD(g, T_W, T_XH, T_XL);
            SAVE(g - 1);
            if (g & 1) PAIR(T_W1, T_XH1, T_XL1);
            else PAIR(T_W, T_XH, T_XL);
            STEP(g - 1);
        }
        SAVE(ngr - 1);
        STEP(ngr - 1);
#undef LOAD
#undef PAIR
#undef SAVE
#undef STEP
        for (int j = 0; j < 16; j++) _mm512_store_ps(t + 16 * j, acc[j]);
        for (int64_t r = 0; r < LP_NL && LP_NL * g0 + r < n; r++) { /* lane r: activation row 16 g0 + r */
            float *yr = y + (LP_NL * g0 + r) * ldy + o0;
            for (int j = 0; j < nw; j++) yr[j] = accumulate ? yr[j] + t[16 * j + r] : t[16 * j + r];
        }
    }
    _tile_release();
}

void lp_amxw_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, const lp_xlanes *l, int64_t n,
                   float *y, int64_t ldy, int accumulate, void *scratch) {
    const int g16 = lp_g16(type), has_min = lp_has_min(type);
    if (g16 && has_min)
        chunk(1, 1, type, w, o0, o1, n_in, l, n, y, ldy, accumulate, scratch);
    else if (g16)
        chunk(1, 0, type, w, o0, o1, n_in, l, n, y, ldy, accumulate, scratch);
    else if (has_min)
        chunk(0, 1, type, w, o0, o1, n_in, l, n, y, ldy, accumulate, scratch);
    else
        chunk(0, 0, type, w, o0, o1, n_in, l, n, y, ldy, accumulate, scratch);
}
#endif
