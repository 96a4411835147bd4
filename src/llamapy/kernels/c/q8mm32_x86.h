/* q8mm32_x86.c: prompt-sized products of the types of a scale per block of 32 (Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0) on int8 activations (AVX512-VNNI vpdpbusd: q8mm32_512.inc; AVX2
 * vpmaddubsw: q8mm32_256.inc), the K-quants' way (q8mm_x86.h: the same rounding, the same
 * outlier rule).  Signed weights are offset to unsigned bytes (q + 8, + 16, + 128; at the AVX2
 * level Q8_0 stays signed, |w| x sign(x, w)) and the offset's part taken off with the block's
 * sum of int8 activations; Q4_1 / Q5_1's minima take the block's exact float sum.
 *
 * The outlier blocks' residuals are a second pass organised by block column: each column's
 * flagged rows, whichever they are, gathered Q8MM32_MR at a time into a full tile of vpdpbusd
 * (p32_fix), where a pass per row and block (q8mm_x86.c q8_fix: two accumulators, the panel's
 * block streamed per flagged block) ran at a fraction of the rate.  Such a product costs its
 * int8 pass plus one tile per Q8MM32_MR flagged blocks of a column (and a part-filled tile per
 * column with any); the rule: a product takes it where those residual tiles are at most
 * lp_q8mm32_set's fraction of its int8 pass's tiles. */
#ifndef LP_Q8MM32_X86_H
#define LP_Q8MM32_X86_H

#include "det8_x86.h"
#include "lp.h"

#define Q8MM32_MR 6 /* the rule's tile: rows (q8mm32_512.inc's; the AVX2 level's 3 count alike) */

/* the most residual tiles per int8 tile a product still takes int8 at: the speed crossover
 * (benchmarks/q8mm32_rule.py --cpu-time: int8 / lanes 0.54 at 0, 0.96 at 0.6, 1.07 at 0.8 on
 * a Zen 4), and the outlier ratio, by level as each one's accuracy against llama.cpp's build of
 * that level: at the AVX512-VNNI level 3, not the K-quants' 4, where SmolLM2's Q4_1 products
 * scored worse than llama.cpp's Q8_1 on tests/test_reference_logits.py's check (max |diff| 2.45
 * against 2.06; at 3: 1.57, top-1 97.6% against 96.6%); at the AVX2 level 4 (SmolLM2 97.3%,
 * 1.55 against 96.1%, 1.58; Gemma 3 96.6%, after the window 97.5%, against 95.1%, 96.1%; at 3
 * Gemma 3's after-window 95.9%).  Gemma 3 270M's products all take it; at the native level its
 * check (tests/test_gemma3.py) gives top-1 97.1%, max |diff| 2.61 against llama.cpp's 94.9%,
 * 4.01 (docs/kernels.md).  (Q4_1 / Q5_1, measured so, are not covered yet: q8mm_x86.c
 * lp_q8mm_covers.)  LLAMAPY_Q8MM=all takes every one (a probe). */
#define LP_Q8MM32_MAX_FIXES 0.6f
#if defined(LP_VNNI)
#define LP_Q8MM32_RATIO 3.0f
#else
#define LP_Q8MM32_RATIO 4.0f
#endif

/* Is this one of the types of a scale per 32 this path reads? */
int lp_q8mm32_type(int type);
/* The most residual tiles per int8 tile a product takes (a large value: any), and the outlier
 * ratio (q8mm_x86.h's rule with its own ratio; 0: int8 alone, no residuals). */
void lp_q8mm32_set(float max_fixes, float ratio);
/* x's residual tiles (per block column, its outlier blocks -- the ratio of q8mm_x86.h -- over
 * Q8MM32_MR, rounded up) per int8 tile (rows / Q8MM32_MR x blocks), every 'every'-th row looked
 * at (each one counting 'every'). */
double lp_q8mm32_fixes(const float *x, int64_t n_in, int64_t n_rows, float ratio, int every);
/* lp_q8mm_takes for these types (covered checked by the caller): every 4th row looked at. */
int lp_q8mm32_takes(const float *x, int64_t n_in, int64_t n_rows);
/* lp_mm_q8 for these types: 0, or -1 without scratch memory. */
int lp_mm_q8_32(int type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *x, int64_t n_rows, float *y,
                int64_t ldy, int accumulate, int residual);

/* weight rows a panel (q8mm32_512.inc, q8mm32_256.inc: Q8MM32_NP) */
#if defined(LP_VNNI)
#define LP_Q8MM32_NP 32
#else
#define LP_Q8MM32_NP 16
#endif
/* det_panel_x86.c's entry (where LP_DET_PANEL32): outputs o0 .. o1 (o0 a multiple of LP_Q8MM32_NP) of
 * y (+)= x8's rows W^T in det8's sequence (det_panel_x86.h), in a thread's lp_q8mm32_det_scratch_bytes(n_in). */
size_t lp_q8mm32_det_scratch_bytes(int64_t n_in);
void lp_q8mm32_det(int type, const uint8_t *w, int64_t o0, int64_t o1, const lp_x8 *x8, float *y, int64_t ldy,
                   int accumulate, void *scratch);

#endif
