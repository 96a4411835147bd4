/* x8_lanes16_x86.c: at the AVX2 level, det8's int8 rows (lp_x8) widened into the int16 lanes
 * (lanes_x86.h's layout) that the default's lane tiles read: rows_det_x86.c det_lanes16. */
#ifndef LP_X8_LANES16_X86_H
#define LP_X8_LANES16_X86_H

#include "det8_x86.h"
#include "lanes_x86.h"

/* Block b of x8's rows (x8.n >= 2) into the int16 lanes l (lanes_x86.c's layout, 8 lanes a group): each
 * row's int8 widened, in pairs, its d as the lane's s and d * qs as sum32 (sum16 zeros: no g16 type
 * with a minimum reads these lanes, det_lanes16); the lanes past the rows zeros, as lp_xlanes_fill.
 * A group's 8 rows a pass, transposed in registers: its 16 pairs' vectors stored whole (a row's 16
 * pairs stored one by one, 32 bytes apart, cost a 512-row product of 640 a millisecond). */
void lp_x8_lanes16(const lp_x8 *p, lp_xlanes l, int64_t b);

#endif
