/* The Q4_K / Q6_K one-row products of a single-sequence decode against activations in ggml's
 * Q8_K form (x86: AVX2; the VNNI levels too, their vpmaddwd + vpaddd one vpdpwssd): per 256 values one fp32 scale d8, int8 values (|q| <= 127) and int16
 * sums per 16 (bs8), the activations llama.cpp's ggml_vec_dot_q4_K_q8_K / q6_K_q8_K read.  A
 * super-block of a row: vpmaddubsw of the unsigned weight bytes against the int8 values, the
 * sub-block scales applied as int16 by vpmaddwd, one int32x8 sum, ONE float FMA by d d8; the
 * minimums (Q4_K) from bs8's sums per 32 times the 6-bit mins, Q6_K's -32 from bs8 times its
 * scales: no sums of block sums across lanes, where the int16 activations' scale per 32
 * (row1k_x86.c) reduced eight block sums across lanes per super-block.  Two weight rows a pass
 * share each activation load.  The activations are rounded more coarsely than the int16 form
 * (8 bits per 256 values, ggml's own rounding): the accuracy of llama.cpp's CPU backend. */
#include "row1q8k_x86.h"

#include "blocks_x86.h"
#include "row1k_x86.h"

/* The index of the first of xb[0..256) of the largest |x| (a NaN never is one), that |x| into
 * *amax and the sum of x^2 into *ss. */
static int first_absmax(const float *xb, float *amax, float *ss) {
#if defined(LP_AVX2) || defined(LP_AVX512)
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps(), s2 = _mm256_setzero_ps();
    for (int j = 0; j < 256; j += 8) {
        const __m256 v = _mm256_loadu_ps(xb + j);
        m = _mm256_max_ps(_mm256_and_ps(v, abs), m); /* NaN: m kept */
        s2 = _mm256_fmadd_ps(v, v, s2);
    }
    __m128 t = _mm_add_ps(_mm256_extractf128_ps(s2, 1), _mm256_castps256_ps128(s2));
    t = _mm_add_ps(_mm_movehl_ps(t, t), t);
    *ss = _mm_cvtss_f32(_mm_add_ss(_mm_movehdup_ps(t), t));
    __m128 h = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    h = _mm_max_ps(_mm_movehl_ps(h, h), h);
    h = _mm_max_ss(_mm_movehdup_ps(h), h);
    const __m256 mx = _mm256_set1_ps(*amax = _mm_cvtss_f32(h));
    for (int j = 0; j < 256 && *amax > 0.0f; j += 8) {
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(xb + j), abs), mx, _CMP_EQ_OQ));
        if (hit) return j + __builtin_ctz((unsigned)hit);
    }
    return 0;
#else
    int at = 0;
    *amax = 0.0f, *ss = 0.0f;
    for (int j = 0; j < 256; j++) {
        if (fabsf(xb[j]) > *amax) *amax = fabsf(xb[j]), at = j;
        *ss += xb[j] * xb[j];
    }
    return at;
#endif
}

/* A block of 256 whose largest |x| is over this many times its root mean square (one value
 * dominating it) is rounded too coarsely by Q8_K's 8 bits: its row's products keep the int16
 * form (q8on 0).  Gemma 3 270M's decode (its hidden state carries a few huge channels: half
 * its rows are over 12) against llamapy's f32 logits, 300 tokens of prose, Zen 4 at avx2:
 * Q8_K throughout top-1 95.3% mean KLD 0.0038; over 12 kept int16 98.3%, 7.4e-4; over 8 100%,
 * 7.7e-5 (the int16 form alone: 100%, 1e-7).  Llama 3.2 1B's shape file: 2% of rows over 8. */
#define LP_Q8K_RATIO 8.0f

/* ggml's quantize_row_q8_K_ref: per 256 values, the first of the largest |x| is max,
 * d8 = max / -127, q = round(x * -127 / max) (to nearest even) capped at 127, bs8 the sums of q
 * per 16; all zero where max is 0.  The same integers on every build.  q8on[r]: no block over
 * LP_Q8K_RATIO. */
void lp_prepare_q8k_row(const float *x, lp_xrows xr, int64_t r) {
    const int64_t n_in = xr.n_in;
    int8_t *q = xr.q8 + r * n_in;
    float *d = xr.d8 + r * (n_in / 256);
    int16_t *bs = xr.bs8 + r * (n_in / 16);
    int on = 1;
    for (int64_t i = 0; i < n_in / 256; i++) {
        const float *xb = x + 256 * i;
        float amax, ss;
        const float max = xb[first_absmax(xb, &amax, &ss)];
        on = on && !(amax * amax * 256.0f > LP_Q8K_RATIO * LP_Q8K_RATIO * ss);
        const float iscale = amax > 0.0f ? -127.0f / max : 0.0f;
        for (int j = 0; j < 256; j++) {
            const float v = rintf(iscale * xb[j]);
            q[256 * i + j] = (int8_t)(v > 127.0f ? 127.0f : v);
        }
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += q[256 * i + 16 * g + j];
            bs[16 * i + g] = (int16_t)s;
        }
        d[i] = amax > 0.0f ? 1.0f / iscale : 0.0f;
    }
    xr.q8on[r] = (uint8_t)on;
}

int lp_q8k_takes(int type, const float *x, int64_t n_in, int64_t n_rows) {
    if ((type != LP_Q4_K && type != LP_Q6_K) || !lp_xrows_q8k(n_rows)) return 0;
    for (int64_t b = 0; b < n_rows * (n_in / 256); b++) {
        float amax, ss;
        first_absmax(x + (b / (n_in / 256)) * n_in + 256 * (b % (n_in / 256)), &amax, &ss);
        if (amax * amax * 256.0f > LP_Q8K_RATIO * LP_Q8K_RATIO * ss) return 0;
    }
    return 1;
}

#if defined(LP_AVX2) || defined(LP_AVX512)

LP_INLINE float hsum8f(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

LP_INLINE float hsum4f(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* v as it is, in a register: each activation / weight vector loaded once, where GCC folded the
 * load into both instructions that read it (fewer loads; by itself no measurable change on Zen 3) */
LP_INLINE __m256i in_reg(__m256i v) {
    __asm__("" : "+x"(v));
    return v;
}

/* prefetch_block without its loop (n a constant: unrolled, no branch on where the block starts
 * in its line): the lines at b + pf, + 64, .. below b + pf + n.  The line of a block's last bytes,
 * where it is not one of these, is the next block's first (a row's blocks, and its rows, lie end
 * to end), asked for by that block's call.  Zen 3, kernel_ab Q4_K 8192 x 2048 one row, against
 * the loop: 1.04x in L3, 1.15x streamed.  Q6_K keeps the loop: its 210-byte blocks, 1.06x in L3
 * with this, streamed 0.91-0.99x (a loaded machine). */
LP_INLINE void prefetch_span(const uint8_t *b, int64_t pf, int n) {
    if (!pf) return;
#pragma GCC unroll 4
    for (int o = 0; o < n; o += 64) LP_PREFETCH_W(b + pf + o);
}

/* lane 0: int16 lane a repeated, lane 1: int16 lane b */
#define LP_REP16x2(a, b)                                                                                                \
    _mm256_setr_m128i(_mm_set1_epi16((short)(((2 * (a) + 1) << 8) | (2 * (a)))),                                     \
                      _mm_set1_epi16((short)(((2 * (b) + 1) << 8) | (2 * (b)))))

/* nr Q4_K rows (in use: the odd last row of a chunk; two rows take q4k_rows2): sub-block 2j's 32
 * values are the low nibbles of bytes 32j.., 2j+1's the high. */
LP_INLINE void q4k_rows(const int nr, const uint8_t *w0, const uint8_t *w1, int64_t nsb, const lp_xrows *xr, int64_t r,
                        int64_t pf, float *y) {
    const int8_t *xq = xr->q8 + r * xr->n_in;
    const float *xd = xr->d8 + r * nsb;
    const int16_t *bs = xr->bs8 + r * nsb * 16;
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    __m128 accm[2] = {_mm_setzero_ps(), _mm_setzero_ps()};
    /* row t's 8 sub-block scales, each as an int16 pair (s, s) in a dword: the multiplier of 32
     * values read by a broadcast load (a load port), where a vpshufb of a register took a vector
     * ALU port (Xeon model 207, kernel_ab.py -t 1, Q4_K 1024 x 2048 in cache: avx2 1.05x, the
     * VNNI level 1.00x; the same int32 sums) */
    int32_t scw[2][8] __attribute__((aligned(16)));
    for (int64_t i = 0; i < nsb; i++) {
        const __m128i q8s = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(bs + 16 * i)),
                                           _mm_loadu_si128((const __m128i *)(bs + 16 * i + 8))); /* sums per 32 */
        const __m128 yd = _mm_set1_ps(xd[i]);
        __m256i sumi[2];
        __m128 dd[2];
        const uint8_t *qs[2];
#pragma GCC unroll 2
        for (int t = 0; t < nr; t++) {
            const uint8_t *b = (t ? w1 : w0) + i * 144;
            prefetch_span(b, pf, 144);
            qs[t] = b + 16;
            const __m256i ms = _mm256_cvtepu8_epi16(lp_k45_sc(b + 4)); /* 8 scales | 8 mins, int16 */
            dd[t] = _mm_mul_ps(f16x2_ps(b), yd);                        /* d d8, dmin d8 */
            const __m128i mp = _mm_madd_epi16(_mm256_extracti128_si256(ms, 1), q8s);
            accm[t] = _mm_fmadd_ps(_mm_permute_ps(dd[t], 0x55), _mm_cvtepi32_ps(mp), accm[t]);
            const __m128i s8 = _mm256_castsi256_si128(ms);
            _mm_store_si128((__m128i *)scw[t], _mm_unpacklo_epi16(s8, s8));
            _mm_store_si128((__m128i *)(scw[t] + 4), _mm_unpackhi_epi16(s8, s8));
            sumi[t] = _mm256_setzero_si256();
        }
        __asm__ volatile("" : : "r"(scw) : "memory"); /* the scales read back from memory */
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m256i xl = in_reg(_mm256_loadu_si256((const __m256i *)(xq + 256 * i + 64 * j)));
            const __m256i xh = in_reg(_mm256_loadu_si256((const __m256i *)(xq + 256 * i + 64 * j + 32)));
#pragma GCC unroll 2
            for (int t = 0; t < nr; t++) {
                const __m256i q = in_reg(_mm256_loadu_si256((const __m256i *)(qs[t] + 32 * j)));
                /* (VNNI: vpdpwssd adds each product in place, the same int32 sums) */
                sumi[t] = lp_dpwssd256(sumi[t], _mm256_set1_epi32(scw[t][2 * j]),
                                       _mm256_maddubs_epi16(_mm256_and_si256(q, m4), xl));
                sumi[t] = lp_dpwssd256(sumi[t], _mm256_set1_epi32(scw[t][2 * j + 1]),
                                       _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), xh));
            }
        }
#pragma GCC unroll 2
        for (int t = 0; t < nr; t++) acc[t] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd[t]), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
#pragma GCC unroll 2
    for (int t = 0; t < nr; t++) y[t] = hsum8f(acc[t]) - hsum4f(accm[t]);
}

/* lp_k45_sc of two super-blocks' packed scales at sc0 (lane 0) and sc1 (lane 1), one instruction
 * for both rows (the same bytes). */
LP_INLINE __m256i k45_sc2(const uint8_t *sc0, const uint8_t *sc1) {
    const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)sc0)),
                                              _mm_loadu_si128((const __m128i *)sc1), 1);
    const __m256i lo = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_shuffle_epi8(b, _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11))),
                          _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4)),
        _mm256_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m256i hi = _mm256_and_si256(
        _mm256_srli_epi32(_mm256_shuffle_epi8(b, _mm256_broadcastsi128_si256(_mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7))), 2),
        _mm256_set1_epi8(0x30));
    return _mm256_or_si256(lo, hi);
}

/* The sums per 32 of block i's Q8_K values (int16, from bs8's per 16) in both lanes. */
LP_INLINE __m256i q8k_sums32(const int16_t *bs, int64_t i) {
    return _mm256_broadcastsi128_si256(
        _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(bs + 16 * i)), _mm_loadu_si128((const __m128i *)(bs + 16 * i + 8))));
}

/* Block i of two Q4_K rows w0, w1 (row t in lane t) against the activations' sums per 32 q8s:
 * its minimums' term into *accm, its sub-block scales as int16 pairs (s, s) into scw ([row 0
 * k 0..3 | row 1 k 0..3 | row 0 k 4..7 | row 1 k 4..7], each half one vpshufb of the scales);
 * returns [d0 d8, dmin0 d8, d1 d8, dmin1 d8] in both lanes (one vcvtph2ps of both rows' d, dmin
 * twice), so that each row's broadcast is an in-lane vpermilps, where vpermps (Zen 3: latency
 * 8, one per 1.3 cycles) and vbroadcastss of a register (one a cycle) took the vector pipes. */
LP_INLINE __m256 q4k_head2(const uint8_t *w0, const uint8_t *w1, int64_t i, __m256i q8s, const float *xd, int64_t pf,
                           int32_t *scw, __m256 *accm) {
    const uint8_t *b0 = w0 + i * 144, *b1 = w1 + i * 144;
    prefetch_span(b0, pf, 144);
    prefetch_span(b1, pf, 144);
    const __m256i sm = k45_sc2(b0 + 4, b1 + 4);
    const __m256 dd = _mm256_mul_ps(_mm256_cvtph_ps(_mm_set1_epi64x((long long)(lp_rd32(b0) | (uint64_t)lp_rd32(b1) << 32))),
                                    _mm256_set1_ps(xd[i]));
    const __m256i mp = _mm256_madd_epi16(_mm256_unpackhi_epi8(sm, _mm256_setzero_si256()), q8s); /* mins . sums per 32 */
    *accm = _mm256_fmadd_ps(_mm256_permutevar_ps(dd, _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3)), _mm256_cvtepi32_ps(mp), *accm);
    const __m256i pairs_lo = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1));
    const __m256i pairs_hi = _mm256_add_epi8(pairs_lo, _mm256_broadcastsi128_si256(_mm_setr_epi8(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0)));
    _mm256_store_si256((__m256i *)scw, _mm256_shuffle_epi8(sm, pairs_lo));
    _mm256_store_si256((__m256i *)(scw + 8), _mm256_shuffle_epi8(sm, pairs_hi));
    return dd;
}

/* q4k_rows of npair pairs of rows: pair p the rows at w + p rb and d1 bytes on (row t of a pair in
 * lane t of each block's scales, minimums and d: the same integers and float steps per lane),
 * y[p] and y[p + yd1] (+)= their products (acc_y: add).  Each block's head is taken a block ahead
 * of its products -- the next pair's first block's during a pair's last -- so that its chain of
 * latencies (scales -> stored -> broadcast -> products) holds up no block, nor a pair's first
 * (Zen 3, L1: that work was 40% of a block's time).  Each row's int32 sum is one chain of vpaddd
 * in order (in_reg): GCC had made it a tree, whose partial sums spilled to the stack (Zen 3:
 * 1.15x with q4k_head2's vpermilps).  Pair p prefetches pf ahead where p < npf. */
LP_INLINE void q4k_run2(const uint8_t *w, int64_t rb, int64_t d1, int64_t yd1, int64_t npair, int64_t npf, int64_t nsb,
                        const lp_xrows *xr, int64_t r, int64_t pf, float *y, int acc_y) {
    const int8_t *xq = xr->q8 + r * xr->n_in;
    const float *xd = xr->d8 + r * nsb;
    const int16_t *bs = xr->bs8 + r * nsb * 16;
    const __m256i m4 = _mm256_set1_epi8(15), q8s0 = q8k_sums32(bs, 0);
    int32_t scw[2][16] __attribute__((aligned(32)));
    __m256 accm = _mm256_setzero_ps(), accn = _mm256_setzero_ps(); /* row t in lane t: this pair's, the next's */
    __m256 dd = q4k_head2(w, w + d1, 0, q8s0, xd, npf > 0 ? pf : 0, scw[0], &accm);
    int64_t k = 0; /* blocks done: scw[k & 1] holds the next one's scales */
    for (int64_t p = 0; p < npair; p++) {
        const uint8_t *w0 = w + p * rb, *w1 = w0 + d1;
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        for (int64_t i = 0; i < nsb; i++, k++) {
            const int32_t *sw = scw[k & 1];
            __m256 ddn = dd;
            if (i + 1 < nsb)
                ddn = q4k_head2(w0, w1, i + 1, q8k_sums32(bs, i + 1), xd, p < npf ? pf : 0, scw[(k + 1) & 1], &accm);
            else if (p + 1 < npair) {
                accn = _mm256_setzero_ps();
                ddn = q4k_head2(w0 + rb, w1 + rb, 0, q8s0, xd, p + 1 < npf ? pf : 0, scw[(k + 1) & 1], &accn);
            }
            __asm__ volatile("" : : "r"(scw) : "memory"); /* the scales read back from memory */
            const uint8_t *q0 = w0 + i * 144 + 16, *q1 = w1 + i * 144 + 16;
            __m256i sumi0 = _mm256_setzero_si256(), sumi1 = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const __m256i xl = _mm256_loadu_si256((const __m256i *)(xq + 256 * i + 64 * j)); /* (folded: fewer instructions) */
                const __m256i xh = _mm256_loadu_si256((const __m256i *)(xq + 256 * i + 64 * j + 32));
                const __m256i v0 = in_reg(_mm256_loadu_si256((const __m256i *)(q0 + 32 * j)));
                const __m256i v1 = in_reg(_mm256_loadu_si256((const __m256i *)(q1 + 32 * j)));
                const int c = (2 * j) % 4 + 8 * (j >= 2); /* sub-block 2j of row 0 in scw (2j + 1: c + 1; row 1: + 4) */
                sumi0 = in_reg(lp_dpwssd256(sumi0, _mm256_set1_epi32(sw[c]), _mm256_maddubs_epi16(_mm256_and_si256(v0, m4), xl)));
                sumi0 = in_reg(lp_dpwssd256(sumi0, _mm256_set1_epi32(sw[c + 1]),
                                            _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v0, 4), m4), xh)));
                sumi1 = in_reg(lp_dpwssd256(sumi1, _mm256_set1_epi32(sw[c + 4]), _mm256_maddubs_epi16(_mm256_and_si256(v1, m4), xl)));
                sumi1 = in_reg(lp_dpwssd256(sumi1, _mm256_set1_epi32(sw[c + 5]),
                                            _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v1, 4), m4), xh)));
            }
            acc0 = _mm256_fmadd_ps(_mm256_permute_ps(dd, 0x00), _mm256_cvtepi32_ps(sumi0), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_permute_ps(dd, 0xaa), _mm256_cvtepi32_ps(sumi1), acc1);
            dd = ddn;
        }
        const float y0 = hsum8f(acc0) - hsum4f(_mm256_castps256_ps128(accm));
        const float y1 = hsum8f(acc1) - hsum4f(_mm256_extractf128_ps(accm, 1));
        y[p] = acc_y ? y[p] + y0 : y0;
        y[p + yd1] = acc_y ? y[p + yd1] + y1 : y1;
        accm = accn;
    }
}

/* nr Q6_K rows: q6k_half's values 0..63 (the -32 applied through bs8), sub-block scales int8.
 * Zen 3 (AMD EPYC family 25 model 1, avx2, kernel_ab 8192 x 2048 -t 1 --cpu-time, L3; wrong-sum
 * probes): without the scales' vpshufb 1.11x, without q6k_half's bit assembly 1.38x, without the
 * prefetch 0.76x (streamed 0.36x).  Tried, slower (the same sums): the scales as (s, s) dwords
 * stored a block ahead, each multiplier two vpbroadcastd loads + vpblendd 0.82x; the 8 multipliers
 * of each row stored a block ahead, read as vpmaddwd's memory operand 0.87-0.92x; the int8 scales
 * widened in-lane (vbroadcasti128 + vpcmpgtb + vpunpck*bw, no vpermq / vinserti128) 1.001x; each
 * row's whole block before the other's 0.99-1.01x (streamed 0.95x); the
 * prefetch at 2 pf 0.90-0.95x streamed, at pf / 2 0.98-0.99x streamed, as T0 0.94-0.98x streamed. */
LP_INLINE void q6k_rows(const int nr, const uint8_t *w0, const uint8_t *w1, int64_t nsb, const lp_xrows *xr, int64_t r,
                        int64_t pf, float *y) {
    const int8_t *xq = xr->q8 + r * xr->n_in;
    const float *xd = xr->d8 + r * nsb;
    const int16_t *bs = xr->bs8 + r * nsb * 16;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < nsb; i++) {
        const __m256i q8sums = _mm256_loadu_si256((const __m256i *)(bs + 16 * i));
        __m256i sc[2][2], sumi[2];
#pragma GCC unroll 2
        for (int t = 0; t < nr; t++) {
            const uint8_t *b = (t ? w1 : w0) + i * 210;
            prefetch_block(b, pf, 210);
            const __m128i s8 = _mm_loadu_si128((const __m128i *)(b + 192));
            const __m256i s16 = _mm256_cvtepi8_epi16(s8);
            sc[t][0] = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(s16)); /* scales 0..7 in both lanes */
            sc[t][1] = _mm256_broadcastsi128_si256(_mm256_extracti128_si256(s16, 1));
            sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(q8sums, s16), 5));
        }
#pragma GCC unroll 2
        for (int n = 0; n < 2; n++) {
            __m256i x[4];
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) x[j] = _mm256_loadu_si256((const __m256i *)(xq + 256 * i + 128 * n + 32 * j));
#pragma GCC unroll 2
            for (int t = 0; t < nr; t++) {
                const uint8_t *b = (t ? w1 : w0) + i * 210;
                __m256i w[4];
                q6k_half(b + 64 * n, b + 128 + 32 * n, w);
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) /* sub-blocks 8n + 2j (lane 0), 8n + 2j + 1 (lane 1) */
                    sumi[t] = in_reg(lp_dpwssd256(sumi[t], _mm256_shuffle_epi8(sc[t][n], LP_REP16x2(2 * j, 2 * j + 1)),
                                                  _mm256_maddubs_epi16(w[j], x[j])));
            }
        }
#pragma GCC unroll 2
        for (int t = 0; t < nr; t++) {
            const float d = lp_f16_to_f32(lp_rd16((t ? w1 : w0) + i * 210 + 208)) * xd[i];
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < nr; t++) y[t] = hsum8f(acc[t]);
}

void lp_rows_q8k(int type, int nr, const uint8_t *w0, const uint8_t *w1, int64_t nsb, const lp_xrows *xr, int64_t r,
                 int64_t pf, float *y) {
    if (type == LP_Q4_K) {
        if (nr == 2) q4k_run2(w0, 0, w1 - w0, 1, 1, 1, nsb, xr, r, pf, y, 0);
        else q4k_rows(1, w0, w0, nsb, xr, r, pf, y);
    } else {
        if (nr == 2) q6k_rows(2, w0, w1, nsb, xr, r, pf, y);
        else q6k_rows(1, w0, w0, nsb, xr, r, pf, y);
    }
}

/* Why rows j and j + h: two adjacent rows of 2048 (1152 / 1680 bytes) read a block of each in
 * turn interleave in one 4 KiB page, and the cache's own prefetchers (each page's one ascending
 * stream) did not follow them -- Zen 3 (AMD EPYC family 25 model 1, avx2, -t 1, thread CPU time)
 * streamed Q4_K 128256 x 2048 at 14-15.5 GB/s, rows of 8192 at 20; pairs h rows apart 1.24x (Q6_K
 * 1.34x), prefetching a task ahead rather than pass_ahead's 8 KiB (that lands in the other
 * stream's rows) 1.03x more, decode of the 1B 1.22-1.26x. */
int64_t lp_rows_q8k_run(int type, const uint8_t *w, int64_t rb, int64_t o0, int64_t o1, int64_t n_out, const lp_xrows *xr,
                        float *y, int acc_y) {
    const int q8 = (type == LP_Q4_K || type == LP_Q6_K) && xr->q8 && xr->q8on[0];
    const int split = !q8 && (type == LP_Q4_K || type == LP_Q5_K) && xr->qh; /* (an outlier block: row1k_x86.c's pairs) */
    if ((!q8 && !split) || o1 - o0 < 2) return 0;
    const int64_t h = (o1 - o0) / 2, nsb = xr->n_in / 256, pf = 2 * h * rb;
    const int64_t npf = n_out - o0 - 3 * h > 0 ? n_out - o0 - 3 * h : 0; /* pairs p: row p + 3 h within the matrix */
    w += o0 * rb, y += o0;
    if (q8 && type == LP_Q4_K) q4k_run2(w, rb, h * rb, h, h, npf, nsb, xr, 0, pf, y, acc_y);
    else
        for (int64_t p = 0; p < h; p++) { /* (y2: the rows' float steps do not depend on acc_y) */
            float y2[2];
            if (split) lp_row1x2_k45_split(type, w + p * rb, w + (p + h) * rb, nsb, xr, 0, p < npf ? pf : 0, y2);
            else q6k_rows(2, w + p * rb, w + (p + h) * rb, nsb, xr, 0, p < npf ? pf : 0, y2);
            y[p] = acc_y ? y[p] + y2[0] : y2[0];
            y[p + h] = acc_y ? y[p + h] + y2[1] : y2[1];
        }
    return 2 * h;
}

#else
int64_t lp_rows_q8k_run(int type, const uint8_t *w, int64_t rb, int64_t o0, int64_t o1, int64_t n_out, const lp_xrows *xr,
                        float *y, int acc_y) {
    (void)type, (void)w, (void)rb, (void)o0, (void)o1, (void)n_out, (void)xr, (void)y, (void)acc_y;
    return 0;
}
void lp_rows_q8k(int type, int nr, const uint8_t *w0, const uint8_t *w1, int64_t nsb, const lp_xrows *xr, int64_t r,
                 int64_t pf, float *y) {
    (void)type, (void)nr, (void)w0, (void)w1, (void)nsb, (void)xr, (void)r, (void)pf, (void)y;
}
#endif
