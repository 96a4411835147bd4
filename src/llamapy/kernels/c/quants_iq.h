/* quants_iq.c: the non-linear 4-bit block types (IQ4_NL, IQ4_XS, MXFP4) into the canonical row
 * form of quants.h.  Their values are table entries, so the canonical q is the table's int8
 * value and d16 the block's (or sub-block's) scale: w = d16 * q is ggml's dequantization. */
#ifndef LP_QUANTS_IQ_H
#define LP_QUANTS_IQ_H

#include "quants.h"

/* A row of an IQ4_NL / IQ4_XS / MXFP4 type in canonical form; 0 (nothing written) for other types. */
int lp_unpack_row_iq(int type, const uint8_t *row, int64_t n_in, lp_wrow w);

#endif
