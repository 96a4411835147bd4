/* det_panel_x86.c: see det_panel_x86.h. */
#include "det_panel_x86.h"

#include <omp.h>

#include "q8mm32_x86.h"
#include "q8mm_x86.h"

#define TASK LP_Q8MM32_NP /* output rows a task of the 32-element types: one panel */

#if defined(LP_DET_PANEL32)
int lp_det_panel_covers(int type, int64_t n_in, int64_t n) {
    if (n_in <= 0) return 0;
    if (LP_DET_PANEL_WIDE_IN && n_in > LP_DET_PANEL_WIDE_IN && n < LP_DET_PANEL_ROWS_WIDE) return 0;
    switch (type) {
    case LP_Q4_0: case LP_Q4_1: return n >= LP_DET_PANEL_ROWS_4 && n_in % 32 == 0;
    case LP_Q5_0: case LP_Q5_1: return n >= LP_DET_PANEL_ROWS_5 && n_in % 32 == 0;
    case LP_Q8_0: return n >= LP_DET_PANEL_ROWS_Q8 && n_in % 32 == 0;
#if defined(LP_DET_PANEL)
    case LP_Q4_K: case LP_Q5_K: return n >= LP_DET_PANEL_ROWS_K && n_in % 256 == 0;
    case LP_Q6_K: return n >= LP_DET_PANEL_ROWS_K && n_in % 256 == 0 && (n < LP_DET_LANES_Q6K_LO || n >= LP_DET_LANES_Q6K_HI
                                                                        || !LP_DET_LANES_Q6K);
#endif
    default: return 0;
    }
}

/* (ROWS_WIDE is 0 at AVX2; ROWS_K, 2, is below every other count at AVX-512, where the K-quants read no x8) */
int lp_det_panel_all(int64_t n) {
    return n >= LP_DET_PANEL_ROWS_Q8 && n >= LP_DET_PANEL_ROWS_4 && n >= LP_DET_PANEL_ROWS_5 && n >= LP_DET_PANEL_ROWS_K &&
           n >= LP_DET_PANEL_ROWS_WIDE;
}

size_t lp_det_panel_scratch_bytes(int64_t n_in) {
    const size_t a = lp_q8mm32_det_scratch_bytes(n_in);
#if defined(LP_DET_PANEL) /* (the K-quants' panels too) */
    const size_t b = lp_q8mm_scratch_bytes(n_in);
    return a > b ? a : b;
#else
    return a;
#endif
}

#if defined(LP_DET_PANEL)
/* Q6_K's offset part per (row, 16-group): 32 x the exact sum of the group's 16 q_x. */
static void qo16_row(const lp_x8 *x8, int64_t r, int32_t *qo) {
    const int8_t *q = x8->q + r * x8->n_in;
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int64_t k = 0; k < x8->n_in; k += 32) { /* psadbw of q + 128: 4 sums of 8 bytes */
        const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(q + k)), flip), _mm256_setzero_si256());
        const int64_t a = _mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1), b = _mm256_extract_epi64(s, 2) + _mm256_extract_epi64(s, 3);
        qo[k / 16] = 32 * (int32_t)(a - 16 * 128);
        qo[k / 16 + 1] = 32 * (int32_t)(b - 16 * 128);
    }
}

#endif

int lp_det_panel_for(int type, const uint8_t *w, int64_t n_out, const lp_x8 *x8, float *y, int64_t ldy, int accumulate,
                     void *scratch) {
#if defined(LP_DET_PANEL)
    const int64_t n = x8->n, n_in = x8->n_in;
    int32_t *qo16 = NULL;
    if (type == LP_Q6_K) {
#pragma omp single copyprivate(qo16)
        qo16 = malloc((size_t)(n * (n_in / 16)) * sizeof(int32_t));
        if (!qo16) { /* det8's tiles then: the lanes lp_det_lanes_for left (lp_det_panel_all) */
#pragma omp for schedule(static)
            for (int64_t b = 0; b < n_in / 32; b++) lp_x8_lanes_block(x8, b);
            return -1;
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n; r++) qo16_row(x8, r, qo16 + r * (n_in / 16));
    }
    if (!lp_q8mm32_type(type)) {
#pragma omp for schedule(static)
        for (int64_t o = 0; o < n_out; o += LP_Q8MM_NP)
            lp_q8mm_det(type, w, o, o + LP_Q8MM_NP < n_out ? o + LP_Q8MM_NP : n_out, x8, qo16, y, ldy, accumulate, scratch);
        if (qo16) {
#pragma omp single
            free(qo16);
        }
        return 0;
    }
#endif
#pragma omp for schedule(static)
    for (int64_t o = 0; o < n_out; o += TASK)
        lp_q8mm32_det(type, w, o, o + TASK < n_out ? o + TASK : n_out, x8, y, ldy, accumulate, scratch);
    return 0;
}
#else
int lp_det_panel_covers(int type, int64_t n_in, int64_t n) { return (void)type, (void)n_in, (void)n, 0; }
int lp_det_panel_all(int64_t n) { return (void)n, 0; }
size_t lp_det_panel_scratch_bytes(int64_t n_in) { return (size_t)n_in * 0 + 64; }
int lp_det_panel_for(int type, const uint8_t *w, int64_t n_out, const lp_x8 *x8, float *y, int64_t ldy, int accumulate,
                     void *scratch) {
    (void)type, (void)w, (void)n_out, (void)x8, (void)y, (void)ldy, (void)accumulate, (void)scratch;
    return -1;
}
#endif
