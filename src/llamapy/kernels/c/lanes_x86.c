/* Integer products of many activation rows (16 or more, mm.c LP_LANES_ROWS: a batched decode
 * of 16 sequences, a server step, and at the AVX-512 level prefill, kernels/types.py
 * lanes_gemm) against weight rows in canonical form (lp.h), x86: the activation rows laid out
 * "rows in lanes".  The one-row arithmetic of dot.c (exact integer dots of int8 weights with
 * int16 activations, one float scale per block of 32 or per 16-group), for LP_NL rows at once
 * (16 in a zmm at the AVX-512 level, 8 in a ymm at AVX2):
 *
 *   lane layout (lp_xlanes, per group of LP_NL rows): for each pair k of adjacent elements,
 *   one vector whose lane r holds row r's two int16 (x[2k], x[2k+1]); per block of 32 the rows'
 *   scales s, per 16-group their sums.
 *   product: a weight pair (w[2k], w[2k+1]) broadcast to every lane, one vpdpwssd (AVX512-VNNI,
 *   or AVX-VNNI on an AVX2 chip that has it; vpmaddwd + vpaddd without) adds
 *   w[2k] x_r[2k] + w[2k+1] x_r[2k+1] to lane r: 2 LP_NL exact products per instruction, with no dequantization to float and no horizontal sums;
 *   per block (or 16-group) one conversion and one FMA per weight row give the rows' share.
 *   (A Zen 4 multiplies as many int16 pairs a ns with vpdpwssd on a zmm as on a ymm, half as many
 *   instructions of twice the lanes: 115 products a ns a core, twice its fp32 FMA's 57;
 *   benchmarks/fma_peak.py.)
 *
 * The fp32 tiles (dot.c) dequantize every weight row and spend a multiply-add per weight and
 * row; here a weight row is decoded to int16 once (unpack_x86.c lp_unpack_row16) for all the
 * rows.  The sums are the one-row path's integers, so many rows agree with the one-row
 * products up to the order of the float sums (the fp32 tiles multiplied the unrounded
 * activations). */
#include "lanes_x86.h"
#include "lp_cpu.h"

#if defined(LP_AVX2) || defined(LP_AVX512)

#if defined(LP_AVX512) /* 16 lanes: zmm (on a Zen 4 as many products a ns as ymm, in half the instructions) */
typedef __m512i vi;
typedef __m512 vfl;
#define VI_ZERO() _mm512_setzero_si512()
#define VI_LOAD(p) _mm512_load_si512(p)
#define VI_BCAST(x) _mm512_set1_epi32(x)
#define VI_ADD(a, b) _mm512_add_epi32(a, b)
#define VFL_ZERO() _mm512_setzero_ps()
#define VFL_LOAD(p) _mm512_loadu_ps(p)
#define VFL_SET1(x) _mm512_set1_ps(x)
#define VFL_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VFL_MUL(a, b) _mm512_mul_ps(a, b)
#define VFL_CVT(a) _mm512_cvtepi32_ps(a)
LP_INLINE vi pair_dot(vi acc, vi x, vi w) { return lp_dpwssd512(acc, x, w); }
#else
typedef __m256i vi;
typedef __m256 vfl;
#define VI_ZERO() _mm256_setzero_si256()
#define VI_LOAD(p) _mm256_load_si256(p)
#define VI_BCAST(x) _mm256_set1_epi32(x)
#define VI_ADD(a, b) _mm256_add_epi32(a, b)
#define VFL_ZERO() _mm256_setzero_ps()
#define VFL_LOAD(p) _mm256_loadu_ps(p)
#define VFL_SET1(x) _mm256_set1_ps(x)
#define VFL_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VFL_MUL(a, b) _mm256_mul_ps(a, b)
#define VFL_CVT(a) _mm256_cvtepi32_ps(a)
LP_INLINE vi pair_dot(vi acc, vi x, vi w) {
#if defined(LP_VNNI) || defined(LP_AVXVNNI)
    return lp_dpwssd256(acc, x, w);
#else
    const vi m = _mm256_madd_epi16(x, w);
    __asm__("vpaddd %1, %0, %0" : "+x"(acc) : "x"(m)); /* the add opaque, into acc's own register: GCC reassociated
        * the unrolled chains' integer adds (hoisting every vpmaddwd of the loop and spilling them), and an empty asm
        * on the sum left a vmovdqa after every vpaddd (the same integers either way) */
    return acc;
#endif
}
#endif
/* a chain's first pair: its products alone (no add to a zero) */
LP_INLINE vi pair_first(vi x, vi w) {
#if defined(LP_AVX512) || defined(LP_VNNI) || defined(LP_AVXVNNI)
    return pair_dot(VI_ZERO(), x, w);
#else
    return _mm256_madd_epi16(x, w);
#endif
}
#define NL LP_NL
/* a weight line for a later tile, requested while this one computes: a tile spreads its
 * requests over its blocks (a burst of them at its start left its loads waiting) */
#define PF(p) LP_PREFETCH_W(p)

/* Four vectors of lanes, a0..a3 (output columns 0..3, lane r: activation row r), as rows: row
 * r's four at y[r ldy]: a 4 x 4 transpose in each 128-bit lane, then a 16-byte store per row.
 * (Stored as columns, the chunk transposed them through memory a float at a time.) */
LP_INLINE void store_rows4(vfl a0, vfl a1, vfl a2, vfl a3, float *y, int64_t ldy) {
#if defined(LP_AVX512)
    const __m512 t0 = _mm512_unpacklo_ps(a0, a1), t1 = _mm512_unpackhi_ps(a0, a1); /* a0[0] a1[0] a0[1] a1[1] | .. */
    const __m512 t2 = _mm512_unpacklo_ps(a2, a3), t3 = _mm512_unpackhi_ps(a2, a3);
    const __m512 r[4] = {_mm512_shuffle_ps(t0, t2, 0x44), _mm512_shuffle_ps(t0, t2, 0xEE), _mm512_shuffle_ps(t1, t3, 0x44),
                         _mm512_shuffle_ps(t1, t3, 0xEE)}; /* r[m], 128-bit lane q: row 4 q + m */
    for (int m = 0; m < 4; m++) {
        _mm_storeu_ps(y + m * ldy, _mm512_castps512_ps128(r[m]));
        _mm_storeu_ps(y + (4 + m) * ldy, _mm512_extractf32x4_ps(r[m], 1));
        _mm_storeu_ps(y + (8 + m) * ldy, _mm512_extractf32x4_ps(r[m], 2));
        _mm_storeu_ps(y + (12 + m) * ldy, _mm512_extractf32x4_ps(r[m], 3));
    }
#else
    const __m256 t0 = _mm256_unpacklo_ps(a0, a1), t1 = _mm256_unpackhi_ps(a0, a1);
    const __m256 t2 = _mm256_unpacklo_ps(a2, a3), t3 = _mm256_unpackhi_ps(a2, a3);
    const __m256 r[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xEE), _mm256_shuffle_ps(t1, t3, 0x44),
                         _mm256_shuffle_ps(t1, t3, 0xEE)};
    for (int m = 0; m < 4; m++) {
        _mm_storeu_ps(y + m * ldy, _mm256_castps256_ps128(r[m]));
        _mm_storeu_ps(y + (4 + m) * ldy, _mm256_extractf128_ps(r[m], 1));
    }
#endif
}

/* Q8_0's block bp as canon16 decodes it (unpack_x86.c): its 32 int8 widened into q16 (64-byte
 * aligned), d into its first 16-group's d16. */
#define DEC_AHEAD 1 /* blocks decoded ahead of the products (2: no faster, harness in L1) */
LP_INLINE void dec_q8_0(const uint8_t *bp, int16_t *q16, float *d16) {
    d16[0] = lp_f16_to_f32(lp_rd16(bp)); /* (the tile reads a block's first 16-group's d only) */
    _mm256_store_si256((__m256i *)q16, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bp + 2))));
    _mm256_store_si256((__m256i *)(q16 + 16), _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(bp + 18))));
}

/* The NW weight rows w16[j] (int16 [n_in], widened from canonical rows wr[j]) against NG (1, 2;
 * 3: LP_LANES_NG3) lane groups g0.. of NL rows: row NL i + lane's outputs at y[(NL i + lane) ldy + j]
 * (store_rows4).  Per block of 32 (g16: per 16-group) one integer sum per weight row and lane,
 * NG * NW independent chains of vpdpwssd (2 NW for one group; each weight pair broadcast once
 * for the NG groups), then scaled by d s and the minimum's m sum(x) added, as dot.c does.
 * DEC (Q8_0): the rows are decoded here from raw (row j at raw + j rb) into w16 and wr's d16,
 * block b + 1 while block b computes, where a pass of their own (lp_unpack_row16) had waited on
 * the blocks' loads and its stores (the same int16 and d). */
LP_INLINE void tile(const int NG, const int NW, const int g16, const int has_min, const int DEC, const uint8_t *raw,
                    int64_t rb, const int16_t *const *w16, const lp_wrow *wr, const lp_xlanes *l, int64_t g0,
                    const char *pf, int64_t pf_lines, float *y, int64_t ldy) {
    const int64_t n_in = l->n_in, nb = n_in / 32, ng16 = n_in / 16, np = n_in / 2, pf_b = (pf_lines + nb - 1) / nb;
    int16_t *wq[4]; /* DEC's stores go through copies: through w16 and wr each reloaded its pointer */
    float *wd[4];
    for (int j = 0; j < NW; j++) wq[j] = (int16_t *)w16[j], wd[j] = wr[j].d16;
    if (DEC)
        for (int64_t b = 0; b < DEC_AHEAD && b < nb; b++)
            for (int j = 0; j < NW; j++) dec_q8_0(raw + j * rb + 34 * b, wq[j] + 32 * b, wd[j] + 2 * b);
    const vi *xq[3];
    const float *s[3], *s32[3], *s16[3];
    for (int i = 0; i < NG; i++) {
        xq[i] = (const vi *)(l->q + (g0 + i) * NL * np);
        s[i] = l->s + (g0 + i) * NL * nb;
        s32[i] = l->sum32 + (g0 + i) * NL * nb;
        s16[i] = l->sum16 + (g0 + i) * NL * ng16;
    }
    vfl acc[3][4];
    for (int i = 0; i < NG; i++)
        for (int j = 0; j < NW; j++) acc[i][j] = VFL_ZERO();
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t i = b * pf_b; i < (b + 1) * pf_b && i < pf_lines; i++) PF(pf + 64 * i);
        if (DEC && b + DEC_AHEAD < nb)
            for (int j = 0; j < NW; j++)
                dec_q8_0(raw + j * rb + 34 * (b + DEC_AHEAD), wq[j] + 32 * (b + DEC_AHEAD), wd[j] + 2 * (b + DEC_AHEAD));
        for (int h = 0; h < (g16 ? 2 : 1); h++) {
            const int64_t gi = g16 ? 2 * b + h : 2 * b, k0 = 16 * b + 8 * h; /* gi: the 16-group whose d16, m16 apply */
            const int kn = g16 ? 8 : 16; /* pairs of the group (a constant: the unroll annotations need one) */
            vi p[3][4];
            for (int i = 0; i < NG; i++)
                for (int j = 0; j < NW; j++) p[i][j] = VI_ZERO();
            if (NG == 1) { /* one group: its NW chains of vpdpwssd waited on their latency; even and odd pairs
                            * in two chains each, summed after (the same integers) */
                vi p2[4];
                for (int j = 0; j < NW; j++) p2[j] = VI_ZERO();
#pragma GCC unroll 8 /* unrolled whole: the 8 chains stay in registers (rolled, each vpdpwssd went through a copy) */
                for (int k = 0; k < kn; k += 2) {
                    const vi x0 = VI_LOAD(xq[0] + k0 + k), x1 = VI_LOAD(xq[0] + k0 + k + 1);
                    for (int j = 0; j < NW; j++) {
                        int32_t w0, w1; /* each read on its own: broadcast loads */
                        memcpy(&w0, wq[j] + 2 * (k0 + k), 4);
                        memcpy(&w1, wq[j] + 2 * (k0 + k + 1), 4);
                        p[0][j] = k ? pair_dot(p[0][j], x0, VI_BCAST(w0)) : pair_first(x0, VI_BCAST(w0));
                        p2[j] = k ? pair_dot(p2[j], x1, VI_BCAST(w1)) : pair_first(x1, VI_BCAST(w1));
                    }
                }
                for (int j = 0; j < NW; j++) p[0][j] = VI_ADD(p[0][j], p2[j]);
            } else { /* unrolled whole (a constant k: no pair_first branch, no copies between the chains): at
                      * AVX-512 an unroll of 4 ran 512-row det Q4_K / Q6_K 1.08x / 1.11x and 32-row Q8_0 / Q4_0
                      * 1.23x / 1.19x slower (Zen 5, -t 1, kernel_ab.py; the same integers) */
#pragma GCC unroll 16
                for (int k = 0; k < kn; k++) {
                    vi xv[3];
                    for (int i = 0; i < NG; i++) xv[i] = VI_LOAD(xq[i] + k0 + k);
                    for (int j = 0; j < NW; j++) {
                        int32_t wp;
                        memcpy(&wp, wq[j] + 2 * (k0 + k), 4);
                        const vi wv = VI_BCAST(wp); /* a broadcast load */
                        for (int i = 0; i < NG; i++) p[i][j] = k ? pair_dot(p[i][j], xv[i], wv) : pair_first(xv[i], wv);
                    }
                }
            }
            for (int i = 0; i < NG; i++) {
                const vfl sv = VFL_LOAD(s[i] + NL * b);
                for (int j = 0; j < NW; j++) {
                    acc[i][j] = VFL_FMA(VFL_CVT(p[i][j]), VFL_MUL(VFL_SET1(wd[j][gi]), sv), acc[i][j]);
                    if (has_min)
                        acc[i][j] = VFL_FMA(VFL_LOAD(g16 ? s16[i] + NL * gi : s32[i] + NL * b), VFL_SET1(wr[j].m16[gi]), acc[i][j]);
                }
            }
        }
    }
    for (int i = 0; i < NG; i++)
        store_rows4(acc[i][0], NW > 1 ? acc[i][1] : VFL_ZERO(), NW > 2 ? acc[i][2] : VFL_ZERO(),
                    NW > 3 ? acc[i][3] : VFL_ZERO(), y + NL * i * ldy, ldy);
}

#define TILE_K(NG, NW)                                                                                                 \
    do {                                                                                                               \
        if (raw)                                                                                                       \
            tile(NG, NW, 0, 0, 1, raw, rb, w16, wr, l, g0, pf, pf_lines, y, ldy);                                      \
        else if (g16 && has_min)                                                                                       \
            tile(NG, NW, 1, 1, 0, raw, rb, w16, wr, l, g0, pf, pf_lines, y, ldy);                                      \
        else if (g16)                                                                                                  \
            tile(NG, NW, 1, 0, 0, raw, rb, w16, wr, l, g0, pf, pf_lines, y, ldy);                                      \
        else if (has_min)                                                                                              \
            tile(NG, NW, 0, 1, 0, raw, rb, w16, wr, l, g0, pf, pf_lines, y, ldy);                                      \
        else                                                                                                           \
            tile(NG, NW, 0, 0, 0, raw, rb, w16, wr, l, g0, pf, pf_lines, y, ldy);                                      \
    } while (0)

#define TILE3_K(NW)                                                                                                    \
    do {                                                                                                               \
        if (has_min)                                                                                                   \
            tile(3, NW, 0, 1, 0, NULL, rb, w16, wr, l, g0, pf, pf_lines, y, ldy);                                      \
        else                                                                                                           \
            tile(3, NW, 0, 0, 0, NULL, rb, w16, wr, l, g0, pf, pf_lines, y, ldy);                                      \
    } while (0)

void lp_lanes_tile(int ng, int nw, int g16, int has_min, const uint8_t *raw, int64_t rb, const int16_t *const *w16,
                   const lp_wrow *wr, const lp_xlanes *l, int64_t g0, const char *pf, int64_t pf_lines, float *y,
                   int64_t ldy) {
#if defined(LP_LANES_NG3)
    if (ng == 3 && (g16 || raw)) { /* (three groups built for the types of one scale per 32 only: 2 + 1) */
        lp_lanes_tile(2, nw, g16, has_min, raw, rb, w16, wr, l, g0, pf, pf_lines, y, ldy);
        lp_lanes_tile(1, nw, g16, has_min, NULL, rb, w16, wr, l, g0 + 2, NULL, 0, y + 2 * NL * ldy, ldy);
        return;
    }
#endif
    switch (ng * 8 + nw) {
#if defined(LP_LANES_NG3)
    case 25: TILE3_K(1); break;
    case 26: TILE3_K(2); break;
    case 27: TILE3_K(3); break;
    case 28: TILE3_K(4); break;
#endif
    case 17: TILE_K(2, 1); break;
    case 18: TILE_K(2, 2); break;
    case 19: TILE_K(2, 3); break;
    case 20: TILE_K(2, 4); break;
    case 9: TILE_K(1, 1); break;
    case 10: TILE_K(1, 2); break;
    case 11: TILE_K(1, 3); break;
    default: TILE_K(1, 4); break;
    }
}
#undef TILE_K
#undef TILE3_K

int lp_lanes_amd(void) {
    static int amd = -1; /* -1: not asked yet (cpuid traps to the hypervisor under a VM: once, not every product;
                          * threads racing here store the same answer) */
    int v = __atomic_load_n(&amd, __ATOMIC_RELAXED);
    if (v < 0) {
        v = lp_cpu_amd_family() != 0;
        __atomic_store_n(&amd, v, __ATOMIC_RELAXED);
    }
    return v;
}

void lp_widen_q(const int8_t *q, int64_t n_in, int16_t *out) {
    for (int64_t k = 0; k + 16 <= n_in; k += 16)
        _mm256_storeu_si256((__m256i *)(out + k), _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q + k))));
}
#endif

#if defined(LP_AVX512)
/* Twin lanes: LP_F32_ROWS..LP_FEW_ROWS (5..8) activation rows on AVX-512 (a server step of 8
 * slots, a verification of a few drafts).  The 16-lane groups above would leave half of every
 * zmm idle there; instead each row fills two adjacent lanes (lane 2r and 2r + 1 hold row r's
 * pair k) and two weight rows A, B share a vector: their pairs interleaved once per row pair
 * (A[k], B[k] as one 64-bit word, lp_twin_pair), one 64-bit broadcast puts A[k] in the even
 * lanes and B[k] in the odd ones, and one vpdpwssd adds 8 rows x 2 weight rows' products.  Lane
 * 2r + h of a pair's result is row r's output for weight row A (h = 0) or B (h = 1).  The same
 * integers and the same float steps per lane as the 16-lane tile, so its outputs equal it bit for
 * bit. */

/* Weight rows a, b (int16 [n_in], their d16 / m16 in wa, wb) interleaved for the twin tile:
 * ab int32 [n_in] = (a's pair k, b's pair k) for each k; dm float [4 n_in / 16] = (da, db) per
 * 16-group, then (ma, mb). */
void lp_twin_pair(const int16_t *a, const int16_t *b, const lp_wrow *wa, const lp_wrow *wb, int64_t n_in, int32_t *ab,
                  float *dm) {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    for (int64_t k = 0; k < n_in / 2; k += 16) {
        const __m512i va = _mm512_loadu_si512(a + 2 * k), vb = _mm512_loadu_si512(b + 2 * k);
        _mm512_storeu_si512(ab + 2 * k, _mm512_permutex2var_epi32(va, lo, vb));
        _mm512_storeu_si512(ab + 2 * k + 16, _mm512_permutex2var_epi32(va, hi, vb));
    }
    const int64_t ng16 = n_in / 16;
    for (int64_t g = 0; g < ng16; g++) {
        dm[2 * g] = wa->d16[g], dm[2 * g + 1] = wb->d16[g];
        dm[2 * ng16 + 2 * g] = wa->m16[g], dm[2 * ng16 + 2 * g + 1] = wb->m16[g];
    }
}

LP_INLINE __m512i bcast64i(const void *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return _mm512_set1_epi64(v);
}

/* NP weight-row pairs (ab[j], dm[j]: lp_twin_pair) against the twin lanes l: y[16 j + lane]. */
LP_INLINE void twin(const int NP, const int g16, const int has_min, const int32_t *const *ab, const float *const *dm,
                    const lp_xlanes *l, const char *pf, int64_t pf_lines, float *y) {
    const int64_t n_in = l->n_in, nb = n_in / 32, ng16 = n_in / 16, pf_b = (pf_lines + nb - 1) / nb;
    const __m512i *xq = (const __m512i *)l->q;
    __m512 acc[4];
    for (int j = 0; j < NP; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t i = b * pf_b; i < (b + 1) * pf_b && i < pf_lines; i++) PF(pf + 64 * i);
        for (int h = 0; h < (g16 ? 2 : 1); h++) {
            const int64_t gi = g16 ? 2 * b + h : 2 * b, k0 = 16 * b + 8 * h;
            __m512i p[4], p2[4]; /* two chains a pair (even and odd k): the integers' order is free */
            for (int j = 0; j < NP; j++) p[j] = p2[j] = _mm512_setzero_si512();
            for (int k = 0; k < (g16 ? 8 : 16); k += 2) {
                const __m512i xv = _mm512_load_si512(xq + k0 + k), xv2 = _mm512_load_si512(xq + k0 + k + 1);
                for (int j = 0; j < NP; j++) {
                    p[j] = lp_dpwssd512(p[j], xv, bcast64i(ab[j] + 2 * (k0 + k)));
                    p2[j] = lp_dpwssd512(p2[j], xv2, bcast64i(ab[j] + 2 * (k0 + k + 1)));
                }
            }
            for (int j = 0; j < NP; j++) p[j] = _mm512_add_epi32(p[j], p2[j]);
            const __m512 sv = _mm512_loadu_ps(l->s + 16 * b);
            for (int j = 0; j < NP; j++) {
                const __m512 dv = _mm512_castsi512_ps(bcast64i(dm[j] + 2 * gi));
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p[j]), _mm512_mul_ps(dv, sv), acc[j]);
                if (has_min)
                    acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(g16 ? l->sum16 + 16 * gi : l->sum32 + 16 * b),
                                             _mm512_castsi512_ps(bcast64i(dm[j] + 2 * ng16 + 2 * gi)), acc[j]);
            }
        }
    }
    for (int j = 0; j < NP; j++) _mm512_storeu_ps(y + 16 * j, acc[j]);
}

#define TWIN_K(NP)                                                                                                     \
    do {                                                                                                               \
        if (g16 && has_min)                                                                                            \
            twin(NP, 1, 1, ab, dm, l, pf, pf_lines, y);                                                                \
        else if (g16)                                                                                                  \
            twin(NP, 1, 0, ab, dm, l, pf, pf_lines, y);                                                                \
        else if (has_min)                                                                                              \
            twin(NP, 0, 1, ab, dm, l, pf, pf_lines, y);                                                                \
        else                                                                                                           \
            twin(NP, 0, 0, ab, dm, l, pf, pf_lines, y);                                                                \
    } while (0)

void lp_twin_tile(int np, int g16, int has_min, const int32_t *const *ab, const float *const *dm, const lp_xlanes *l,
                  const char *pf, int64_t pf_lines, float *y) {
    switch (np) {
    case 1: TWIN_K(1); break;
    case 2: TWIN_K(2); break;
    case 3: TWIN_K(3); break;
    default: TWIN_K(4); break;
    }
}
#undef TWIN_K
#endif
