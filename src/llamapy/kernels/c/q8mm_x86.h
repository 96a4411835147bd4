/* q8mm_x86.c: prompt-sized products of the K-quants on int8 activations, for LP_Q8MM_ROWS rows or
 * more: AVX512-VNNI vpdpbusd (q8mm_512.inc: 64 u8 x s8 products an instruction, twice vpdpwssd's
 * int16 pairs); at the AVX2 level vpmaddubsw's u8 x s8 pairs summed in int16 as far as they
 * cannot overflow, then vpmaddwd to int32 (q8mm_256.inc; vpdpbusd on ymm with AVX-VNNI).
 * Activations: int8 with one scale per block of 32, and where a block's largest value
 * stands out of its others (an outlier block: max |x| > LP_Q8MM_RATIO x the block's rms) its
 * rounding residual again as int8 at 1/254 of the step, added by a second pass over that block
 * alone -- such a block is then as exact as int16's.  Weights: a panel of Q8MM_NP rows
 * decoded once (lp_unpack_row16) into a thread's buffer as unsigned bytes, four values of a row
 * a dword, the panel's rows side by side, for every activation row of the call; the file's
 * blocks are read as they are, nothing kept.  Both levels compute the same integers, and the
 * same float steps per group (only the activation sums' order differs). */
#ifndef LP_Q8MM_X86_H
#define LP_Q8MM_X86_H

#include "lp.h"

#if defined(LP_VNNI) || (defined(LP_AVX2) && !defined(LP_AVX512))
#define LP_Q8MM 1
#endif
#define LP_Q8MM_ROWS 64 /* products of this many rows or more take it (where lp_q8mm_covers) */
#define LP_Q8MM_RATIO 4.0f /* a block with max |x| above this many times its rms keeps its residual */
#define LP_Q8MM_MAX_FLAGGED 0.02f /* more such blocks: int8 alone */

/* Does the int8 product take this type, row length and row count (with the path switched on)? */
int lp_q8mm_covers(int type, int64_t n_in, int64_t n_rows);
/* 1: on (the default where LP_Q8MM), 0: the lanes as before; the ratio (<= 0: no residual
 * pass); the largest fraction of outlier blocks a product takes (1: any). */
void lp_q8mm_set(int on, float ratio, float max_flagged);
/* Does this product take it, and how: 1 with the outlier blocks' residual pass, where at most
 * max_flagged of the blocks of x's rows (every 4th row looked at) are outliers.  Where more are
 * (the outlier-heavy activations of Gemma 3's every product, or a SwiGLU's output: 49-72% of
 * ffn_down's blocks on the Llama 3.2 1B shape), residuals would cost a second pass row by row
 * (q8_fix: 2x the int8 product or more), 2: int8 alone, at the AVX2 level instead of the
 * fp32 GEMM (2-3x slower), at the AVX512-VNNI level instead of the int16 lanes (1.6x slower):
 * still finer than the Q8_K activations (one scale per 256) ggml-cpu's K-quant products round
 * to.  Gemma 3 270M against transformers (tests/test_gemma3.py; its Q5_0 / Q8_0 products int8
 * with residuals, q8mm32_x86.h): top-1 0.976, max |diff| 2.49 at the native level, 0.966 /
 * 2.74 at AVX2, where llama.cpp's builds give 0.949 / 4.01 and 0.951 / 4.17 (the lanes: 1.000 /
 * 0.038).  0 where not covered. */
int lp_q8mm_takes(int type, const float *x, int64_t n_in, int64_t n_rows);
/* y[r, o] (+)= sum_k x[r, k] W[o, k] for a covered product, with the residual pass (residual:
 * lp_q8mm_takes's 1) or int8 alone (its 2): 0, or -1 without scratch memory.  A row's product
 * depends on that choice and its own values only, not on the other rows of the call. */
int lp_mm_q8(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *x, int64_t n_rows, float *y,
             int64_t ldy, int accumulate, int residual);
/* The fraction of x's blocks of 32 that the residual pass takes (the rule above): a probe. */
double lp_q8mm_flagged(const float *x, int64_t n_in, int64_t n_rows);

#endif
