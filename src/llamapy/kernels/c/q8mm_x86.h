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
 * same float steps per group (only the activation sums' order differs).  At the AVX2 level
 * without VNNI (q8p_x86.h) Q4_K / Q5_K / Q6_K rows that pass ggml's Q8_K outlier rule
 * (row1q8k_x86.c) are multiplied in Q8_K on the same packed panel instead, a float step per
 * super-block (llama.cpp's AVX2 arithmetic); the other rows stay here. */
#ifndef LP_Q8MM_X86_H
#define LP_Q8MM_X86_H

#include "det8_x86.h"
#include "lp.h"

#if defined(LP_VNNI) || (defined(LP_AVX2) && !defined(LP_AVX512))
#define LP_Q8MM 1
#endif
#define LP_Q8MM_ROWS 64 /* products of this many rows or more take it (where lp_q8mm_covers) */
#define LP_Q8MM_RATIO 4.0f /* a block with max |x| above this many times its rms keeps its residual */
#define LP_Q8MM_MAX_FLAGGED 0.02f /* more such blocks: int8 alone */
#if defined(LP_VNNI)
#define LP_Q8MM_NP 32 /* weight rows a panel (q8mm_512.inc) */
#else
#define LP_Q8MM_NP 8 /* (q8mm_256.inc) */
#endif

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
/* lp_q8mm_takes's answer for a product of any row count (LP_Q8MM_ROWS not asked). */
int lp_q8mm_mode(int type, const float *x, int64_t n_in, int64_t n_rows);

/* The activation rows as the products read them; g: the weights' scale group (16: Q6_K, 32). */
typedef struct {
    int64_t n, n_in, ng; /* rows, row length, groups a row (n_in / g) */
    int g, off;          /* group, the weights' offset (their bytes are q + off, unsigned) */
    int bits;            /* the weights' bits (4, 5, 6: q8mm_256.inc's int16 sums) */
    float ratio2;        /* the outlier rule's ratio squared; 0: no residuals (int8 alone) */
    int8_t *q, *rq;      /* [n, n_in] int8, and the residual where the block is flagged */
    float *s;            /* [n, n_in / 32] the block's scale (max |x| / 127) */
    float *sum;          /* [n, ng] the exact float sum of x over the group (the minima's factor) */
    int32_t *qo, *ro;    /* [n, ng] off x the sum of q (of rq) over the group */
    uint8_t *flag;       /* [n, n_in / 32] 1: the block's residual is in rq */
    int32_t *nflag;      /* [n] flagged blocks a row */
} lp_q8x;

/* For a caller that hands out its own tasks (moe_rows.c: each expert's rows one lp_q8x, its
 * products (expert, output rows) tasks) -- lp_mm_q8's steps one by one, the same sums:
 * lp_q8x_bytes / lp_q8x_at: the rows' room, for weights of `type`; lp_q8x_row: row r rounded
 * (flagging the outlier blocks); lp_q8x_settle, once every row is: lp_q8mm_mode's rule on the
 * flags (every 4th row), 1 keeping the residuals, else 2 with them dropped (int8 alone: the
 * AVX2 level's answer; the caller of an AVX512-VNNI build must not use the rows then);
 * lp_q8mm_chunk: output rows o0 .. o1 (o0 a multiple of LP_Q8MM_NP) of y (+)= x W^T, in a
 * thread's lp_q8mm_scratch_bytes(n_in); W of x's type or one of the same group and offset
 * (Q4_K rows serve Q5_K weights and back, not Q6_K's). */
size_t lp_q8x_bytes(int64_t n_in, int64_t n);
lp_q8x lp_q8x_at(void *buf, int type, int64_t n_in, int64_t n);
void lp_q8x_row(lp_q8x *x, const float *xr, int64_t r);
int lp_q8x_settle(lp_q8x *x);
size_t lp_q8mm_scratch_bytes(int64_t n_in);
void lp_q8mm_chunk(int type, const uint8_t *w, int64_t o0, int64_t o1, const lp_q8x *x, float *y, int64_t ldy,
                   int accumulate, void *scratch);
/* Does the int8 product take this type and row length (the switch on; any row count)? */
int lp_q8mm_covers_type(int type, int64_t n_in);

/* det_panel_x86.c's entry for Q4_K / Q5_K / Q6_K (where LP_DET_PANEL): outputs o0 .. o1 (o0 a multiple
 * of LP_Q8MM_NP) in det8's sequence, in lp_q8mm_scratch_bytes(n_in); qo16: Q6_K's 32 x the sum of q_x
 * per 16-group [n, n_in / 16] (else unread). */
void lp_q8mm_det(int type, const uint8_t *w, int64_t o0, int64_t o1, const lp_x8 *x8, const int32_t *qo16, float *y,
                 int64_t ldy, int accumulate, void *scratch);

#endif
