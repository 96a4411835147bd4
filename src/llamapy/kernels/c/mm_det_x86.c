/* Deterministic mode's one-call products (x86): which types and row lengths rows_det_x86.c covers,
 * and lp_mm_det, a product in its own parallel region (the rows prepared, then lp_mm_det_for);
 * layers.c runs the same steps inside its own region. */
#include <omp.h>
#include <stdlib.h>

#include "mm_det_x86.h"
#include "rows_det_x86.h"

#define LP_DET_UNCOVERED -2

/* Does this file cover the type at this row length? */
int lp_mm_det_covers(int type, int64_t n_in) {
#if defined(LP_LANES)
    switch (type) {
    case LP_Q4_0: case LP_Q4_1: case LP_Q5_0: case LP_Q5_1: case LP_Q8_0: return n_in > 0 && n_in % 32 == 0;
    case LP_Q4_K: case LP_Q5_K: case LP_Q6_K: return n_in > 0 && n_in % 256 == 0;
    default: return 0;
    }
#else
    (void)type, (void)n_in;
    return 0;
#endif
}

/* y[r, o] (+)= sum_k x[r, k] W[o, k], every element the same bits at any row count (each row
 * alone included).  Returns 0; -1 without scratch memory; LP_DET_UNCOVERED (-2) where the
 * type / row length has no such path (lp_mm_det_covers): nothing written. */
int lp_mm_det(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *x, int64_t n_rows, float *y,
              int64_t ldy, int accumulate) {
    if (!lp_mm_det_covers(type, n_in)) return LP_DET_UNCOVERED;
    void *buf = malloc(lp_det_xprep_bytes(n_in, n_rows));
    if (!buf) return -1;
    lp_xprep xp = lp_det_xprep_at(buf, n_in, n_rows, x);
    xp.reads = lp_det_reads(type);
    int failed = 0;
#pragma omp parallel
    {
        void *scratch = malloc(lp_det_scratch_bytes(n_in));
        lp_det_prep_for(&xp);
        if (scratch) {
            lp_mm_det_for(type, w, n_out, &xp, y, ldy, accumulate, scratch);
        } else {
#pragma omp atomic write
            failed = 1;
        }
        free(scratch);
    }
    free(buf);
    return failed ? -1 : 0;
}
