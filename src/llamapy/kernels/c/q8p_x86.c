/* q8p_x86.c: see q8p_x86.h.  A tile: 4 activation rows (Q8_K) x the panel's 8 weight rows (one
 * ymm: a dword of 4 unsigned values per row, q8mm_x86.c's layout).  Per sub-block, vpmaddubsw
 * pairs summed in int16 as far as they cannot overflow (Q4_K: 8 steps of 4 values, |sum| <=
 * 8 * 2 * 2 * 15 * 127 / 2 = 30480; Q5_K: 4 steps, 8 * 31 * 127 = 31496; Q6_K's q + 32 in 0..63:
 * 2 steps, 4 * 63 * 127 = 32004), then vpmaddwd by the sub-block's integer scale (int16 lanes 2j,
 * 2j + 1: weight row j's; ggml-cpu's AVX2 vec_dot_q4_K_q8_K does the same) into int32 over the
 * super-block: per int32 lane at most Q4_K 8 x 2 x 30480 x 63 = 30.7e6, Q5_K 8 x 2 x 2 x 31496
 * x 63 = 63.5e6, Q6_K 16 x 2 x 2 x 32004 x 128 = 262e6, all < 2^31.  The minima (Q4_K, Q5_K)
 * as integers too: sum_s m_s bsum32_s by one vpmaddwd per two sub-blocks; Q6_K's +32 offset
 * taken back as 32 sum_g sc_g bsum16_g (|.| <= 32 x 16 x 128 x 2032 = 133e6).  Then ONE float
 * step per super-block and activation row: d8 (d isum - dmin msum).  Each row's sums its own
 * (the same instructions whatever the tile's other rows): a row's product is the same at any
 * row count. */
#include "q8p_x86.h"

#include "row1q8k_x86.h"

/* (the switch: LLAMAPY_Q8P=0 keeps q8mm_256.inc's int8 rows for every row, an A/B switch) */
static int q8p_on = 1;
__attribute__((constructor)) static void q8p_init(void) {
    const char *env = getenv("LLAMAPY_Q8P");
    q8p_on = !(env && env[0] == '0');
}

int lp_q8p_set(int on) {
    const int was = q8p_on;
    q8p_on = on;
    return was;
}

int lp_q8p_covers(int type) {
#if defined(LP_Q8P)
    return q8p_on && (type == LP_Q4_K || type == LP_Q5_K || type == LP_Q6_K);
#else
    (void)type;
    return 0;
#endif
}

static void *al64(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

size_t lp_q8p_x_bytes(int64_t n_in, int64_t n) {
    return (size_t)n * ((size_t)n_in + (size_t)(n_in / 256) * 4 + (size_t)(n_in / 16) * 2 + (size_t)(n_in / 32) * 2 + 1) + 6 * 64;
}

lp_q8p_x lp_q8p_x_at(void *buf, int64_t n_in, int64_t n) {
    lp_q8p_x x = {.n = n, .n_in = n_in};
    x.q = (int8_t *)al64(buf);
    x.d = (float *)al64(x.q + n * n_in);
    x.bs16 = (int16_t *)al64(x.d + n * (n_in / 256));
    x.bs32 = (int16_t *)al64(x.bs16 + n * (n_in / 16));
    x.on = (uint8_t *)al64(x.bs32 + n * (n_in / 32));
    return x;
}

int lp_q8p_row(lp_q8p_x *x, const float *xr, int64_t r) {
    lp_xrows xq = {.n_in = x->n_in, .n = x->n, .q8 = x->q, .d8 = x->d, .bs8 = x->bs16, .q8on = x->on};
    lp_prepare_q8k_row(xr, xq, r);
    const int16_t *b16 = x->bs16 + r * (x->n_in / 16);
    int16_t *b32 = x->bs32 + r * (x->n_in / 32);
    for (int64_t k = 0; k < x->n_in / 32; k++) b32[k] = (int16_t)(b16[2 * k] + b16[2 * k + 1]); /* |.| <= 32 x 127 */
    return x->on[r];
}

/* One panel's integer scales: sc [nsb][nsub][16] int16 (lanes 2j, 2j + 1: row j's scale of the
 * sub-block), mp [nsb][npair][16] int16 (lanes 2j, 2j + 1: row j's two mins (Q4_K, Q5_K) or two
 * scales (Q6_K) of sub-blocks 2p, 2p + 1), d, dm [nsb][8] (each row's d, dmin). */
typedef struct {
    int16_t *sc, *mp;
    float *d, *dm;
} q8p_w;

static size_t q8p_scratch1(int64_t n_in) { return (size_t)(n_in / 256) * (16 + 8) * 32 + 2 * (size_t)(n_in / 256) * 32 + 4 * 64; }
size_t lp_q8p_scratch_bytes(int64_t n_in) {
#if defined(LP_Q8P)
    return 2 * q8p_scratch1(n_in); /* (two panels a call) */
#else
    return q8p_scratch1(n_in);
#endif
}

static q8p_w q8p_scales(int type, const uint8_t *w, int64_t o, int nc, int64_t n_in, void *scratch) {
    const int64_t nsb = n_in / 256, rb = lp_row_bytes(type, n_in), bb = lp_block_bytes(type);
    const int q6 = type == LP_Q6_K, nsub = q6 ? 16 : 8, npair = nsub / 2;
    q8p_w p;
    p.sc = (int16_t *)al64(scratch);
    p.mp = (int16_t *)al64(p.sc + nsb * nsub * 16);
    p.d = (float *)al64(p.mp + nsb * npair * 16);
    p.dm = (float *)al64(p.d + nsb * 8);
    for (int j = 0; j < LP_Q8P_NP; j++)
        for (int64_t i = 0; i < nsb; i++) {
            int sc[16] = {0}, mn[16] = {0};
            float d = 0.0f, dm = 0.0f;
            if (j < nc) {
                const uint8_t *b = w + (o + j) * rb + i * bb;
                if (q6) {
                    for (int g = 0; g < 16; g++) sc[g] = mn[g] = ((const int8_t *)(b + 192))[g];
                    d = lp_f16_to_f32(lp_rd16(b + 208));
                } else {
                    const uint8_t *s = b + 4; /* ggml's get_scale_min_k4 */
                    for (int k = 0; k < 8; k++) {
                        sc[k] = k < 4 ? s[k] & 63 : (s[k + 4] & 15) | ((s[k - 4] >> 6) << 4);
                        mn[k] = k < 4 ? s[k + 4] & 63 : (s[k + 4] >> 4) | ((s[k] >> 6) << 4);
                    }
                    d = lp_f16_to_f32(lp_rd16(b)), dm = lp_f16_to_f32(lp_rd16(b + 2));
                }
            }
            for (int s = 0; s < nsub; s++) p.sc[(i * nsub + s) * 16 + 2 * j] = p.sc[(i * nsub + s) * 16 + 2 * j + 1] = (int16_t)sc[s];
            for (int k = 0; k < npair; k++) {
                p.mp[(i * npair + k) * 16 + 2 * j] = (int16_t)mn[2 * k];
                p.mp[(i * npair + k) * 16 + 2 * j + 1] = (int16_t)mn[2 * k + 1];
            }
            p.d[i * 8 + j] = d, p.dm[i * 8 + j] = dm;
        }
    return p;
}

#if defined(LP_Q8P)
/* Where the 4 x 8 tile stands (Zen 5, one thread, Q4_K 4096x4096 at 512 rows): the tiles take ~57 of 61 ms, ~24 cycles
 * a sub-block (32 vpmaddubsw) against bounds of ~20.5 (41 loads at 2 a cycle), 18 (36 multiplies at 2), 17 (68 vector
 * ops at 4).  Tried and not faster (kernel_ab --q8, max diff 0 each): the sub-block loop unrolled 2 (0.98-1.00x) or fully
 * (0.73-0.78x); 5 rows (0.94-0.97x; 6: 0.87-0.92x); a row's dwords from one vbroadcasti128 + vpshufd instead of
 * vpbroadcastd (every row 0.89x, 1 or 2 rows of 4 0.94-0.95x: the shuffles cost more than the loads they save);
 * two int16 chains a row (0.97x).  The float step is ~4% (Q4_K); all the broadcasts' loads dropped (wrong sums) ~9%.
 * Taken (Q4_K, Q5_K): a tile of 3 activation rows x TWO panels (16 weight rows, a broadcast feeding 2 ymm: 6 + 6
 * accumulators), q8mm_x86.c's q8p_mm packing two panels a call: Q4_K 4096x4096 1.06x, 14336x4096 1.06x, 4096x14336
 * 1.04x, Q5_K 1.04x (the prototype, one panel's bytes twice, ~1.12x: the real one's float step, 6 sums a super-block,
 * spills, ~15% of the panel's time against ~4%).  Q6_K's 3 x 16 tile was 0.90x (its two scale registers a group
 * spill the int32 sums): its tile stays 4 x 8, a panel at a time. */
#ifndef Q8P_MR
#define Q8P_MR 4 /* activation rows a tile: 4 int16 + 4 int32 accumulators, 4 float */
#endif

LP_INLINE __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* y[0 .. nc) (+)= v */
LP_INLINE void q8p_store(float *y, __m256 v, int nc, int accumulate) {
    if (nc >= 8) {
        if (accumulate) v = _mm256_add_ps(v, _mm256_loadu_ps(y));
        _mm256_storeu_ps(y, v);
        return;
    }
    const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32(nc), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    if (accumulate) v = _mm256_add_ps(v, _mm256_maskload_ps(y, k));
    _mm256_maskstore_ps(y, k, v);
}

/* The int32 sums a[j][i] += sub-block sums x scale (panel j < np, activation row i < mr), over
 * steps 0 .. steps (of 4 values), int16 for `depth` steps at a time: a broadcast feeds np panels. */
LP_INLINE void q8p_sub(const int np, const int mr, const int steps, const int depth, const uint32_t *wq0, const uint32_t *wq1,
                       const int8_t *const *xs, int64_t k, const __m256i *sc, __m256i (*a)[Q8P_MR]) {
    for (int t0 = 0; t0 < steps; t0 += depth) {
        __m256i h[2][Q8P_MR];
        for (int j = 0; j < np; j++)
            for (int i = 0; i < mr; i++) h[j][i] = _mm256_setzero_si256();
        for (int t = t0; t < t0 + depth; t++) {
            __m256i w[2];
            w[0] = _mm256_load_si256((const __m256i *)(wq0 + t * 8));
            if (np > 1) w[1] = _mm256_load_si256((const __m256i *)(wq1 + t * 8));
            for (int i = 0; i < mr; i++) {
                const __m256i v = bcast4(xs[i] + k + 4 * t);
                for (int j = 0; j < np; j++) {
                    h[j][i] = _mm256_add_epi16(h[j][i], _mm256_maddubs_epi16(w[j], v));
                    __asm__("" : "+x"(h[j][i])); /* a chain (q8mm_256.inc's reason) */
                }
            }
        }
        for (int j = 0; j < np; j++)
            for (int i = 0; i < mr; i++) a[j][i] = _mm256_add_epi32(a[j][i], _mm256_madd_epi16(h[j][i], sc[j]));
    }
}

/* Activation rows rows[0 .. mr) against np panels (panel j: pq[j], p[j], outputs y + 8 j, nc[j] of them). */
LP_INLINE void q8p_tile(const int bits, const int np, const int mr, const uint32_t *const *pq, const q8p_w *p, const lp_q8p_x *x,
                        const int64_t *rows, float *y, int64_t ldy, const int *nc, int accumulate) {
    const int64_t n_in = x->n_in, nsb = n_in / 256;
    const int8_t *xs[Q8P_MR];
    __m256 f[2][Q8P_MR];
    for (int i = 0; i < mr; i++) xs[i] = x->q + rows[i] * n_in;
    for (int j = 0; j < np; j++)
        for (int i = 0; i < mr; i++) f[j][i] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        __m256i a[2][Q8P_MR], sc[2];
        const uint32_t *wq0 = pq[0] + sb * 64 * 8, *wq1 = np > 1 ? pq[1] + sb * 64 * 8 : wq0;
        for (int j = 0; j < np; j++)
            for (int i = 0; i < mr; i++) a[j][i] = _mm256_setzero_si256();
        if (bits == 6) {
#pragma GCC unroll 1
            for (int g = 0; g < 16; g++) {
                for (int j = 0; j < np; j++) sc[j] = _mm256_load_si256((const __m256i *)(p[j].sc + (sb * 16 + g) * 16));
                q8p_sub(np, mr, 4, 2, wq0 + 4 * g * 8, wq1 + 4 * g * 8, xs, 256 * sb + 16 * g, sc, a);
            }
        } else {
#pragma GCC unroll 1
            for (int s = 0; s < 8; s++) {
                for (int j = 0; j < np; j++) sc[j] = _mm256_load_si256((const __m256i *)(p[j].sc + (sb * 8 + s) * 16));
                q8p_sub(np, mr, 8, bits == 4 ? 8 : 4, wq0 + 8 * s * 8, wq1 + 8 * s * 8, xs, 256 * sb + 32 * s, sc, a);
            }
        }
        for (int j = 0; j < np; j++) {
            const __m256 d = _mm256_load_ps(p[j].d + sb * 8);
            if (bits == 6) {
                for (int i = 0; i < mr; i++) {
                    const int8_t *b16 = (const int8_t *)(x->bs16 + rows[i] * (n_in / 16) + sb * 16);
                    __m256i c = _mm256_setzero_si256();
                    for (int k = 0; k < 8; k++)
                        c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(p[j].mp + (sb * 8 + k) * 16)), bcast4(b16 + 4 * k)));
                    const __m256i si = _mm256_sub_epi32(a[j][i], _mm256_slli_epi32(c, 5));
                    f[j][i] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(si), d), _mm256_set1_ps(x->d[rows[i] * nsb + sb]), f[j][i]);
                }
            } else {
                const __m256 dm = _mm256_load_ps(p[j].dm + sb * 8);
                for (int i = 0; i < mr; i++) {
                    const int8_t *b32 = (const int8_t *)(x->bs32 + rows[i] * (n_in / 32) + sb * 8);
                    __m256i ms = _mm256_setzero_si256();
                    for (int k = 0; k < 4; k++)
                        ms = _mm256_add_epi32(ms, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(p[j].mp + (sb * 4 + k) * 16)), bcast4(b32 + 4 * k)));
                    const __m256 t = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), dm, _mm256_mul_ps(_mm256_cvtepi32_ps(a[j][i]), d));
                    f[j][i] = _mm256_fmadd_ps(t, _mm256_set1_ps(x->d[rows[i] * nsb + sb]), f[j][i]);
                }
            }
        }
    }
    for (int j = 0; j < np; j++)
        for (int i = 0; i < mr; i++) q8p_store(y + rows[i] * ldy + 8 * j, f[j][i], nc[j], accumulate);
}

/* One panel: tiles of Q8P_MR rows, the last 1..3 rows a tile of theirs.  Two: tiles of 3 rows x 16
 * weight rows (each broadcast feeding both panels' registers: 6 int16 + 6 int32 sums), the last
 * 1..2 rows a tile of theirs. */
LP_INLINE void q8p_panel_of(const int bits, const int np, const uint32_t *const *pq, const q8p_w *p, const lp_q8p_x *x,
                            const int64_t *rows, int64_t nr, float *y, int64_t ldy, const int *nc, int accumulate) {
    int64_t t = 0;
    if (np == 2) {
        for (; t + 3 <= nr; t += 3) q8p_tile(bits, 2, 3, pq, p, x, rows + t, y, ldy, nc, accumulate);
        if (nr - t == 1) q8p_tile(bits, 2, 1, pq, p, x, rows + t, y, ldy, nc, accumulate);
        if (nr - t == 2) q8p_tile(bits, 2, 2, pq, p, x, rows + t, y, ldy, nc, accumulate);
        return;
    }
    for (; t + Q8P_MR <= nr; t += Q8P_MR) q8p_tile(bits, 1, Q8P_MR, pq, p, x, rows + t, y, ldy, nc, accumulate);
    switch ((int)(nr - t)) {
    case 1: q8p_tile(bits, 1, 1, pq, p, x, rows + t, y, ldy, nc, accumulate); break;
    case 2: q8p_tile(bits, 1, 2, pq, p, x, rows + t, y, ldy, nc, accumulate); break;
    case 3: q8p_tile(bits, 1, 3, pq, p, x, rows + t, y, ldy, nc, accumulate); break;
#if Q8P_MR > 4
    case 4: q8p_tile(bits, 1, 4, pq, p, x, rows + t, y, ldy, nc, accumulate); break;
    case 5: q8p_tile(bits, 1, 5, pq, p, x, rows + t, y, ldy, nc, accumulate); break;
#endif
    default: break;
    }
}

/* (which types take two panels a tile: Q8P_TWO's bit 1 << bits; Q6_K's 3 x 16 tile measured 0.90x) */
#ifndef Q8P_TWO
#define Q8P_TWO ((1 << 4) | (1 << 5))
#endif

/* nc[1] > 0: a second panel (pq[1], p[1], outputs y + 8). */
LP_INLINE void q8p_run(const int bits, const uint32_t *const *pq, const q8p_w *p, const lp_q8p_x *x, const int64_t *rows, int64_t nr,
                       float *y, int64_t ldy, const int *nc, int accumulate) {
    if (nc[1] > 0 && ((Q8P_TWO >> bits) & 1)) {
        q8p_panel_of(bits, 2, pq, p, x, rows, nr, y, ldy, nc, accumulate);
        return;
    }
    for (int j = 0; j < 1 + (nc[1] > 0); j++) /* (one copy of the tiles: two inlined copies spilled in one) */
        q8p_panel_of(bits, 1, pq + j, p + j, x, rows, nr, y + LP_Q8P_NP * j, ldy, nc + j, accumulate);
}

void lp_q8p_panel(int type, const uint8_t *w, int64_t o, int nc, const uint32_t *pq, const uint32_t *pq2, const lp_q8p_x *x,
                  const int64_t *rows, int64_t nr, float *y, int64_t ldy, int accumulate, void *scratch) {
    const int two = nc > LP_Q8P_NP, ncs[2] = {two ? LP_Q8P_NP : nc, two ? nc - LP_Q8P_NP : 0};
    const uint32_t *pqs[2] = {pq, two ? pq2 : pq};
    q8p_w p[2];
    p[0] = q8p_scales(type, w, o, ncs[0], x->n_in, scratch);
    p[1] = two ? q8p_scales(type, w, o + LP_Q8P_NP, ncs[1], x->n_in, (char *)scratch + q8p_scratch1(x->n_in)) : p[0];
    if (type == LP_Q4_K) q8p_run(4, pqs, p, x, rows, nr, y + o, ldy, ncs, accumulate);
    else if (type == LP_Q5_K) q8p_run(5, pqs, p, x, rows, nr, y + o, ldy, ncs, accumulate);
    else q8p_run(6, pqs, p, x, rows, nr, y + o, ldy, ncs, accumulate);
}
#else
void lp_q8p_panel(int type, const uint8_t *w, int64_t o, int nc, const uint32_t *pq, const uint32_t *pq2, const lp_q8p_x *x,
                  const int64_t *rows, int64_t nr, float *y, int64_t ldy, int accumulate, void *scratch) {
    (void)type, (void)w, (void)o, (void)nc, (void)pq, (void)pq2, (void)x, (void)rows, (void)nr, (void)y, (void)ldy, (void)accumulate;
    (void)scratch;
    (void)q8p_scales;
}
#endif
