/* row1_x86.c: one activation row against one weight row straight from the blocks (x86). */
#ifndef LP_ROW1_X86_H
#define LP_ROW1_X86_H

#include "quants.h"

/* One row straight from the blocks; 0 where the type has no such path here.  pf: where
 * lp_row1_prefetches, the distance in bytes at which the kernel prefetches each block's
 * weights as it computes (0: none); the others ignore it. */
int lp_dot_row1(int type, const uint8_t *row, int64_t n_in, const lp_xrows *xr, int64_t r, int64_t pf, float *y);
int lp_row1_prefetches(int type, const lp_xrows *xr);
/* k (lp_row1_pass: 4 for the 32-element types, row1z_x86.c; else 2) consecutive weight rows from w0
 * (rb bytes each) against activation row r, read together: y[0..k); 0 where the type has no
 * such path. */
int lp_row1_pass(int type);
int lp_dot_row1xk(int type, int k, const uint8_t *w0, int64_t rb, int64_t n_in, const lp_xrows *xr, int64_t r,
                  int64_t pf, float *y);

/* Does a one-row product of this type read the row in int8 per block of 32 (ggml's Q8_0 / Q8_1,
 * as llama.cpp does), through --deterministic's one-row kernel (det8_row_x86.c, det16_row_x86.c at
 * AVX-512: a vpdpbusd per 64 products, where the int16 form, row1z_x86.c, takes one vpmaddwd per
 * 32 and the widening)?  The 32-element types
 * det8 covers (Q4_0, Q4_1, Q5_0, Q5_1; Q8_0 with VNNI or at AVX2), on x86; 0 elsewhere.  The
 * default decode's products then are --deterministic's bits for these types (lp_mm one row,
 * layers.c).  By default (lp_row1_i8_set(-1)) ON at the AVX2 level without VNNI (LP_LANES8) for
 * Q4_0 / Q4_1 / Q5_0 / Q5_1, whose products of 2 rows or more read the same int8 rows there
 * (lanes8_x86.c: the same rounding, integers and float steps, so a row's bits do not depend on
 * the ubatch: tests/test_row_counts_i8.py); OFF elsewhere and for Q8_0, whose products of several
 * rows keep int16 (a one-row step would round x otherwise than the same row inside a ubatch:
 * tests/test_speculative.py greedy-unchanged, test_embeddings alone-vs-batch).
 * lp_row1_i8_set(1) turns it on for every such type, (0) off, (-1) back to the default; returns it. */
int lp_row1_i8(int type, int64_t n_in);
int lp_row1_i8_set(int on);

#endif
