/* mm.c: the products of few activation rows against a weight matrix in its blocks. */
#ifndef LP_MM_H
#define LP_MM_H

#include "det8_x86.h"
#include "lanes_x86.h"
#include "lanes8_x86.h"

/* The product split among the threads of an enclosing parallel region. */
typedef struct {
    lp_xrows xr;       /* the integer form */
    lp_xlanes xl;      /* x86, LP_F32_ROWS rows or more (mm.c lanes_bytes): xr's rows in lanes */
    lp_xlanes8 xl8;    /* LP_LANES8 where the lanes are (mm.c lanes8_bytes): x's rows as int8 in lanes; else n_grp 0 */
    uint16_t *xb;      /* the rows as bf16 (AVX512-BF16 builds, 2 rows or more), else NULL */
    int8_t *xhi, *xlo; /* LP_READS_AMX: xr's int16 rows as 256 hi + lo, [n rounded up to 16, n_in] each; else NULL */
    lp_x8 x8;          /* LP_READS_I8 (deterministic mode's Q4_1 at AVX-512, det8_x86.c): the rows in int8 */
    const float *x;    /* fp32 rows */
    int64_t n, n_in;
    int reads;         /* LP_READS_INTS | LP_READS_BF16: the forms the products of xp read (lp_xprep_at: both;
                        * lp_mm: its type's, lp_xprep_reads) -- lp_prep_row makes only these */
} lp_xprep;
#define LP_READS_INTS 1
#define LP_READS_BF16 2
#define LP_READS_AMX 4 /* with LP_READS_INTS: the integer products on AMX tiles (lp_mm's prompt-sized products) */
#define LP_READS_I8 8  /* deterministic mode: x8 (rows_det_x86.c lp_det_reads) */
#define LP_READS_Q8K 32 /* deterministic mode: xr's Q8_K rows alone (det_kz_x86.c) */
#define LP_READS_AMXK 16 /* alone: Q4_K / Q5_K prompts on AMX tiles a super-block a float step (amxk_x86.c) */
/* Does a product of this type read xr's Q8_K rows where they are prepared (mm.c q8k_chunk / q8kz_chunk,
 * row1q8k_x86.c)?  Where none does, the caller drops them (xr.q8 = NULL) and lp_prepare_x_row skips them. */
static inline int lp_reads_q8k(int64_t type) { return type == LP_Q4_K || type == LP_Q6_K; }
size_t lp_xprep_bytes(int64_t n_in, int64_t n);
lp_xprep lp_xprep_at(void *buf, int64_t n_in, int64_t n, const float *x);
int lp_needs_prep(const lp_xprep *xp);
void lp_prep_row(lp_xprep *xp, int64_t r);
void lp_force_q8k_row(lp_xprep *xp, int64_t r);
void lp_prep_for(lp_xprep *xp);
void lp_lanes_for(const lp_xprep *xp);
void lp_lanes_all(const lp_xprep *xp);
size_t lp_mm_scratch_bytes(int64_t n_in);
void lp_mm_for(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const lp_xprep *xp, float *y, int64_t ldy,
               int accumulate, void *scratch);
#define LP_MM_CHUNK 16 /* lp_mm_for's output rows per task (mm.c CHUNK) */
void lp_mm_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, int64_t n_out, int64_t n_in, const lp_xprep *xp,
                 float *y, int64_t ldy, int accumulate, void *scratch);

int lp_mm_takes_lanes(int type, int64_t n_in, int64_t n);
int lp_lanes8_takes(int type, int64_t n_in, int64_t n);

#endif
