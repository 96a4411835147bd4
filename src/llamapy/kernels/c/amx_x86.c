/* Prompt-sized integer products on AMX (Intel's tile unit, Sapphire Rapids and later): the same
 * integers and the same float steps as the lane products (lanes_x86.c), so the outputs are
 * theirs bit for bit, at fewer instructions.
 *
 * The one-row arithmetic (lp.h) multiplies the weights' int8 values by int16 activations; AMX
 * multiplies int8 by int8 (tdpbssd: a 16 x K int8 tile by a K x 16 one, into 16 x 16 int32).
 * Each int16 activation is split exactly in two, xq = 256 hi + lo (hi = (xq + 128) >> 8, lo in
 * -128..127, |hi| <= 127 since |xq| <= LP_XQ_MAX = 127 * 256 + 127), and each block's integer dot
 * is 256 (w . hi) + (w . lo): one tdpbssd pair, both sums exact in int32.  A block of 32 (for the
 * types with a scale per 16, a 16-group) of 16 activation rows x 16 weight rows is one pair; its
 * two int32 tiles are stored and the block's float step done in zmm registers, one per
 * activation row holding the 16 weight rows' outputs: cvt(p) times d s plus the minimum's
 * m s sum(xq), in the lanes' order.  The tile unit runs a tdpbssd or a tile store in about 16
 * cycles whatever K is, so the pair and its two stores bound a block: on a 2-core Intel Xeon
 * (KVM, family 6 model 167) 16-22 ns a block in a loop of nothing else.
 *
 * Taken (mm.c, lp_xprep_reads) for LP_DENSE_ROWS rows or more of the types with a scale per 32
 * (Q4_0 .. Q8_0, Q4_K, Q5_K) when the library was built with AMX-INT8 (the CPU has it) and Linux
 * granted the tile state (arch_prctl ARCH_REQ_XCOMP_PERM, at load); LLAMAPY_AMX=0 keeps the
 * lanes.  Fewer rows, and the 16-group types, whose pairs do half a block each, stay in the
 * lanes: benchmarks/kernel_ab.py on that Xeon, 2 threads, AMX against the lanes: 512 rows
 * 1.74-1.91x (Q5_0, Q8_0, Q4_K, Q5_K), 128 rows 1.10-1.53x, 64 rows 0.85-1.32x, 16 rows
 * 0.46-0.79x; Q6_K at 256 rows 0.86x. */
#include "amx_x86.h"
#include "quants.h"
#include "unpack_x86.h"

#if defined(LP_AMX)
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int amx_on = 0;

static int amx_granted(void) { return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0; }

/* At load: the tile state requested from Linux; AMX on when granted, unless LLAMAPY_AMX=0. */
__attribute__((constructor)) static void amx_init(void) {
    const char *env = getenv("LLAMAPY_AMX");
    amx_on = !(env && env[0] == '0') && amx_granted();
}

int lp_amx_on(void) { return amx_on; }
int lp_amx_set(int on) { return amx_on = on && amx_granted(); }

/* Row r's int16 activations split into int8 hi and lo (xq = 256 hi + lo), written in the tiles'
 * order (amx_x86.h LP_AMX_AT): each 16-row group's block of 32 is 16 x 32 bytes side by side, so
 * that a tile is one contiguous 512-byte load (rows n_in apart put every line of a tile in one
 * L1 set at n_in 2048 or 8192: 32 lines in a 12-way set, the tile loads missing L1 each time). */
void lp_amx_split_row(const int16_t *q, int64_t n_in, int64_t r, int8_t *xhi, int8_t *xlo) {
    for (int64_t k = 0; k < n_in; k += 32) {
        const __m512i v = _mm512_loadu_si512(q + k);
        const __m512i h = _mm512_srai_epi16(_mm512_add_epi16(v, _mm512_set1_epi16(128)), 8);
        const __m512i l = _mm512_sub_epi16(v, _mm512_slli_epi16(h, 8));
        const int64_t at = LP_AMX_AT(n_in, r, k);
        _mm256_storeu_si256((__m256i *)(xhi + at), _mm512_cvtepi16_epi8(h));
        _mm256_storeu_si256((__m256i *)(xlo + at), _mm512_cvtepi16_epi8(l));
    }
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) tile_config;

/* The tiles (literal numbers: the intrinsics paste them into the instructions). */
#define T_HI 0 /* 256 x: 16 activation rows x 16 weight rows, int32 */
#define T_LO 1
#define T_AH 2 /* the activations' hi and lo: 16 rows x kg int8 */
#define T_AL 3
#define T_B 4 /* the weights: kg / 4 rows of 16 x 4 int8 */
#define T_AH1 5 /* (the odd groups' inputs: the sets alternate) */
#define T_AL1 6
#define T_B1 7

static void configure(int kg) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    c.rows[T_HI] = c.rows[T_LO] = 16, c.colsb[T_HI] = c.colsb[T_LO] = 64;
    c.rows[T_AH] = c.rows[T_AL] = c.rows[T_AH1] = c.rows[T_AL1] = 16;
    c.colsb[T_AH] = c.colsb[T_AL] = c.colsb[T_AH1] = c.colsb[T_AL1] = (uint16_t)kg;
    c.rows[T_B] = c.rows[T_B1] = (uint8_t)(kg / 4), c.colsb[T_B] = c.colsb[T_B1] = 64;
    _tile_loadconfig(&c);
}

/* A task's weight tiles: LP_AMX_GROUPS groups of 16 rows, each bt (16 n_in bytes) and dv, mv
 * (8 n_in), and one decoded row (2 n_in). */
size_t lp_amx_scratch_bytes(int64_t n_in) {
    return lp_wrow_bytes(n_in) + (size_t)LP_AMX_GROUPS * (16 * (size_t)n_in + 2 * (size_t)(n_in / 16) * 64) +
           2 * (size_t)n_in + 256;
}

/* The block's (group's) float step for the tile's 16 activation rows: hi, lo the stored int32
 * tiles [16 rows][16 weight rows]; dv, mv the 16 weight rows' d16 and m16 of the group; s[m]
 * and sum[m] row m's scales and s sum(xq) (rows past the product's end point at its last row:
 * their outputs are never stored).  Unrolled, so that acc stays in registers. */
LP_INLINE void step(const int has_min, const int32_t *hi, const int32_t *lo, __m512 dv, __m512 mv,
                    const float *const *s, const float *const *sum, int64_t g, int64_t b, __m512 *acc) {
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) {
        const __m512i p = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(hi + 16 * m), 8), _mm512_load_si512(lo + 16 * m));
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dv, _mm512_set1_ps(s[m][b])), acc[m]);
        if (has_min) acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(sum[m][g]), mv, acc[m]);
    }
}

/* Weight rows o0..o1 (at most 16) as AMX's weight tiles: bt int32 [n_in / 4][16] (per 4
 * consecutive k, the 16 rows' 4 int8 side by side; rows past o1 zero), dv and mv [n_in / 16][16]
 * the rows' d16 and m16.  Each row decoded once (to int16 straight from its blocks where
 * unpack_x86.c can, else through the canonical form), 64 values a scatter. */
static void weight_tiles(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, lp_wrow wr, int16_t *w16,
                         int32_t *bt, float *dv, float *mv) {
    const int64_t rb = lp_row_bytes(type, n_in), ng16 = n_in / 16;
    const __m512i at = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
    for (int j = 0; j < 16; j++) {
        /* row j's values k .. k + 63 into units k / 4 .. of column j (n_in a multiple of 32: the last 32 may be alone) */
#define PUT(k, v) _mm512_mask_i32scatter_epi32(bt + 4 * (k) + j, (__mmask16)((k) + 64 <= n_in ? 0xffff : 0x00ff), at, (v), 4)
        if (o0 + j >= o1) {
            for (int64_t k = 0; k < n_in; k += 64) PUT(k, _mm512_setzero_si512());
            for (int64_t g = 0; g < ng16; g++) dv[16 * g + j] = mv[16 * g + j] = 0.0f;
            continue;
        }
        const uint8_t *row = w + (o0 + j) * rb;
        if (lp_unpack_row16(type, row, n_in, w16, wr.d16, wr.m16)) {
            for (int64_t k = 0; k < n_in; k += 64) {
                const __m256i a = _mm512_cvtepi16_epi8(_mm512_loadu_si512(w16 + k));
                const __m256i b = k + 64 <= n_in ? _mm512_cvtepi16_epi8(_mm512_loadu_si512(w16 + k + 32)) : _mm256_setzero_si256();
                PUT(k, _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1));
            }
        } else {
            lp_unpack_row(type, row, n_in, wr);
            for (int64_t k = 0; k < n_in; k += 64)
                PUT(k, _mm512_maskz_loadu_epi8(k + 64 <= n_in ? ~(__mmask64)0 : (__mmask64)0xffffffffu, wr.q + k));
        }
#undef PUT
        for (int64_t g = 0; g < ng16; g++) dv[16 * g + j] = wr.d16[g], mv[16 * g + j] = wr.m16[g];
    }
}

/* Output rows o0..o1 (at most LP_AMX_ROWS: up to LP_AMX_GROUPS groups of 16) against xp's n rows
 * (prepared with their AMX hi / lo rows): every group's weight tiles once, then per 16
 * activation rows each group in turn, every block's tdpbssd pair, the next block's pair issued
 * before this one's float step (2 stored pairs in turn), so that the tile unit and the vector
 * units overlap.  The 16 activation rows' tiles (32 n_in bytes) are read once per group: from
 * L2 after the first, where a task of one group read all n rows' from memory per 16 weight
 * rows.  Each output's sum is the one-group task's, in the same order.  The inputs go in two
 * tile sets, alternating (with one, each load waited on the previous pair: kernel_ab.py 2048 x
 * 2048 at 512 rows, one thread, on a 2-core Intel Xeon (KVM, family 6 model 207), Q4_K 1.39x,
 * Q5_K 1.15x, Q8_0 1.33x, the outputs the same). */
LP_INLINE void chunk(const int g16, const int has_min, int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in,
                     const lp_xprep *xp, float *y, int64_t ldy, int accumulate, void *scratch) {
    const int64_t nb = n_in / 32, ng16 = n_in / 16, n = xp->n, ngr = g16 ? ng16 : nb; /* ngr: groups of one scale */
    const int kg = g16 ? 16 : 32, ngroups = (int)((o1 - o0 + 15) / 16);
    lp_wrow wr = lp_wrow_at(scratch, n_in);
    int32_t *bt0 = (int32_t *)(((uintptr_t)((char *)scratch + lp_wrow_bytes(n_in)) + 63) & ~(uintptr_t)63);
    float *dv0 = (float *)(bt0 + LP_AMX_GROUPS * 4 * n_in), *mv0 = dv0 + LP_AMX_GROUPS * 16 * ng16;
    for (int j = 0; j < ngroups; j++) {
        const int64_t a = o0 + 16 * j, e = a + 16 < o1 ? a + 16 : o1;
        weight_tiles(type, w, a, e, n_in, wr, (int16_t *)(mv0 + LP_AMX_GROUPS * 16 * ng16), bt0 + j * 4 * n_in,
                     dv0 + j * 16 * ng16, mv0 + j * 16 * ng16);
    }
    configure(kg);
    int32_t hi[2][256] __attribute__((aligned(64))), lo[2][256] __attribute__((aligned(64)));
    for (int64_t r0 = 0; r0 < n; r0 += 16) {
        const int mr = (int)(n - r0 < 16 ? n - r0 : 16);
        const int8_t *ah = xp->xhi + r0 * n_in, *al = xp->xlo + r0 * n_in;
        const float *s[16], *sum[16];
        for (int m = 0; m < 16; m++) {
            const int64_t r = r0 + (m < mr ? m : mr - 1);
            s[m] = xp->xr.s + r * nb;
            sum[m] = g16 ? xp->xr.sum16 + r * ng16 : xp->xr.sum32 + r * nb;
        }
        for (int j = 0; j < ngroups; j++) {
            const int32_t *bt = bt0 + j * 4 * n_in;
            const float *dv = dv0 + j * 16 * ng16, *mv = mv0 + j * 16 * ng16;
            const int64_t oj = o0 + 16 * j;
            const int nw = (int)(o1 - oj < 16 ? o1 - oj : 16);
            const __mmask16 cols = (__mmask16)((1u << nw) - 1);
            __m512 acc[16];
            for (int m = 0; m < 16; m++) acc[m] = _mm512_setzero_ps();
/* a block's tile: 16 rows of 32 bytes (LP_AMX_AT); a 16-group is half of one, rows still 32 apart */
#define A_AT(g) (g16 ? (g) / 2 * 512 + (g) % 2 * 16 : (g) * 512)
/* Group g's inputs into a tile set that alternates (a load then does not wait on the pair
 * reading the other set), the pair's sums stored (SAVE) before the next pair is issued, and
 * read back (STEP) while that one computes. */
#define LOAD(g, AH, AL, B)                                                                                             \
    do {                                                                                                               \
        _tile_loadd(AH, ah + A_AT(g), 32);                                                                             \
        _tile_loadd(AL, al + A_AT(g), 32);                                                                             \
        _tile_loadd(B, bt + (kg / 4) * 16 * (g), 64);                                                                  \
    } while (0)
#define PAIR(AH, AL, B)                                                                                                \
    do {                                                                                                               \
        _tile_zero(T_HI);                                                                                              \
        _tile_zero(T_LO);                                                                                              \
        _tile_dpbssd(T_HI, AH, B);                                                                                     \
        _tile_dpbssd(T_LO, AL, B);                                                                                     \
    } while (0)
#define SAVE(g)                                                                                                        \
    do {                                                                                                               \
        _tile_stored(T_HI, hi[(g) & 1], 64);                                                                           \
        _tile_stored(T_LO, lo[(g) & 1], 64);                                                                           \
    } while (0)
#define STEP(g) /* gi: the 16-group whose d16, m16 apply; the block (g) / 2 or g */                                    \
    step(has_min, hi[(g) & 1], lo[(g) & 1], _mm512_load_ps(dv + 16 * (g16 ? (g) : 2 * (g))),                          \
         _mm512_load_ps(mv + 16 * (g16 ? (g) : 2 * (g))), s, sum, (g), g16 ? (g) / 2 : (g), acc)
            LOAD(0, T_AH, T_AL, T_B);
            PAIR(T_AH, T_AL, T_B);
            for (int64_t g = 1; g < ngr; g++) {
                if (g & 1) LOAD(g, T_AH1, T_AL1, T_B1);
                else LOAD(g, T_AH, T_AL, T_B);
                SAVE(g - 1);
                if (g & 1) PAIR(T_AH1, T_AL1, T_B1);
                else PAIR(T_AH, T_AL, T_B);
                STEP(g - 1);
            }
            SAVE(ngr - 1);
            STEP(ngr - 1);
#undef LOAD
#undef PAIR
#undef SAVE
#undef STEP
#undef A_AT
#pragma GCC unroll 16
            for (int m = 0; m < 16; m++) {
                if (m >= mr) break;
                float *yr = y + (r0 + m) * ldy + oj;
                _mm512_mask_storeu_ps(yr, cols, accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(cols, yr), acc[m]) : acc[m]);
            }
        }
    }
    _tile_release();
}

void lp_amx_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_in, const lp_xprep *xp, float *y,
                  int64_t ldy, int accumulate, void *scratch) {
    const int g16 = lp_g16(type), has_min = lp_has_min(type);
    if (g16 && has_min)
        chunk(1, 1, type, w, o0, o1, n_in, xp, y, ldy, accumulate, scratch);
    else if (g16)
        chunk(1, 0, type, w, o0, o1, n_in, xp, y, ldy, accumulate, scratch);
    else if (has_min)
        chunk(0, 1, type, w, o0, o1, n_in, xp, y, ldy, accumulate, scratch);
    else
        chunk(0, 0, type, w, o0, o1, n_in, xp, y, ldy, accumulate, scratch);
}
#else
int lp_amx_on(void) { return 0; }
int lp_amx_set(int on) { return (void)on, 0; }
#endif
