/* det_kz_x86.c: see det_kz_x86.h. */
#include "det_kz_x86.h"

#include "lp.h"

int lp_det_kz_type(int type) {
#if defined(LP_DET_KZ)
    return type == LP_Q4_K || type == LP_Q6_K;
#else
    (void)type;
    return 0;
#endif
}

#if defined(LP_DET_KZ)
static void *up64(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

size_t lp_det_kz_bytes(int64_t n_in, int64_t n) {
    return (size_t)(n * n_in) + (size_t)(n * (n_in / 256)) * 4 + (size_t)(n * (n_in / 16)) * 2 + (size_t)n + 4 * 64;
}

void lp_det_kz_at(lp_xrows *xr, void *buf) {
    if (xr->q8) return;
    const int64_t n = xr->n, n_in = xr->n_in;
    xr->q8 = (int8_t *)up64(buf);
    xr->d8 = (float *)up64(xr->q8 + n * n_in);
    xr->bs8 = (int16_t *)up64(xr->d8 + n * (n_in / 256));
    xr->q8on = (uint8_t *)up64(xr->bs8 + n * (n_in / 16));
}

void lp_det_kz_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, int64_t n_in, const lp_xrows *xr,
                     int64_t n, float *y, int64_t ldy, int accumulate) {
    const int64_t rb = lp_row_bytes(type, n_in);
    int64_t rows[LP_DENSE_ROWS];
    float t[LP_Q8KZ_W * LP_DENSE_ROWS]; /* [row of the group][weight row of the pass] */
    for (int64_t o = o0; o < o1; o += LP_Q8KZ_W) {
        const int nw = o1 - o < LP_Q8KZ_W ? (int)(o1 - o) : LP_Q8KZ_W;
        const uint8_t *wv[LP_Q8KZ_W];
        for (int v = 0; v < nw; v++) wv[v] = w + (o + v) * rb;
        int64_t pf = o + 2 * LP_Q8KZ_W <= n_out ? LP_Q8KZ_W * rb : 0; /* the next pass's rows (mm_q8kz.inc's rule) */
        for (int64_t r = 0; r < n;) { /* the rows with q8on in groups of lp_q8kz_rows' most */
            int nr = 0;
            for (; r < n && nr < LP_DENSE_ROWS; r++)
                if (xr->q8on[r]) rows[nr++] = r;
            if (!nr) break;
            lp_q8kz_rows(type, nw, wv, n_in / 256, pf, xr, rows, nr, t);
            pf = 0; /* (asked for once) */
            for (int i = 0; i < nr; i++) {
                float *yr = y + rows[i] * ldy + o;
                for (int v = 0; v < nw; v++) yr[v] = accumulate ? yr[v] + t[LP_Q8KZ_W * i + v] : t[LP_Q8KZ_W * i + v];
            }
        }
    }
}

void lp_det_kz_force(const lp_xprep *dx, int64_t r) {
    if ((dx->reads & LP_READS_Q8K) && dx->xr.q8on) dx->xr.q8on[r] = 1;
}
#else
size_t lp_det_kz_bytes(int64_t n_in, int64_t n) { return (size_t)(n_in * n) * 0; }
void lp_det_kz_at(lp_xrows *xr, void *buf) { (void)xr, (void)buf; }
void lp_det_kz_force(const lp_xprep *dx, int64_t r) { (void)dx, (void)r; }
void lp_det_kz_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, int64_t n_in, const lp_xrows *xr,
                     int64_t n, float *y, int64_t ldy, int accumulate) {
    (void)type, (void)w, (void)o0, (void)o1, (void)n_out, (void)n_in, (void)xr, (void)n, (void)y, (void)ldy, (void)accumulate;
}
#endif
