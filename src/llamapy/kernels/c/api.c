/* The row-wise kernels as ctypes entry points (each its own parallel region), the sampler's
 * picks over a row of logits (one thread), and what the library was built for. */
#include <omp.h>

#include "attn.h"
#include "kv_quant.h"
#include "ops.h"

int lp_abi_version(void) { return 11; }

/* The ISA level this build runs, in build.py's names, with the extensions it uses. */
const char *lp_isa(void) {
#if defined(LP_AVX512)
#if defined(LP_VNNI) && defined(LP_BF16)
    return "avx512+vnni+bf16";
#elif defined(LP_VNNI)
    return "avx512+vnni";
#elif defined(LP_BF16)
    return "avx512+bf16";
#else
    return "avx512";
#endif
#elif defined(LP_AVXVNNI)
    return "avx2+vnni";
#elif defined(LP_AVX2)
    return "avx2";
#elif defined(LP_DOTPROD)
    return "neon+dotprod";
#elif defined(LP_NEON)
    return "neon";
#else
    return "scalar";
#endif
}

/* rms_norm over rows [n_rows, n]. */
void lp_rms_norm(const float *x, const float *w, int64_t n_rows, int64_t n, float eps, float *out) {
#pragma omp parallel for schedule(static) if (n_rows * n >= 8192)
    for (int64_t r = 0; r < n_rows; r++) lp_rms_norm_row(x + r * n, w, n, eps, out + r * n);
}

/* out[r, i] = act(g[r * ldg + i]) * u[r * ldu + i], out [n_rows, n_ff]; act silu (gelu = 0)
 * or gelu's tanh form.  Gate and up in separate tensors, or as views of one stacked row. */
void lp_glu_rows(const float *g, int64_t ldg, const float *u, int64_t ldu, int64_t n_rows, int64_t n_ff, int gelu,
                 float *out) {
#pragma omp parallel for schedule(static) if (n_rows * n_ff >= 8192)
    for (int64_t r = 0; r < n_rows; r++) {
        if (gelu)
            lp_geglu_row(g + r * ldg, u + r * ldu, n_ff, out + r * n_ff);
        else
            lp_swiglu_row(g + r * ldg, u + r * ldu, n_ff, out + r * n_ff);
    }
}

/* The same with gate | up stacked in one row of 2 n_ff. */
void lp_glu(const float *gu, int64_t n_rows, int64_t n_ff, int gelu, float *out) {
    lp_glu_rows(gu, 2 * n_ff, gu + n_ff, 2 * n_ff, n_rows, n_ff, gelu, out);
}

/* RoPE on each row of x [n_rows, row stride ldx]; cos, sin [n_rows, n_rot/2]. */
void lp_rope(float *x, int64_t n_rows, int64_t ldx, int64_t n_head, int64_t d, int64_t n_rot, const float *cos_,
             const float *sin_, int neox) {
#pragma omp parallel for schedule(static) if (n_rows * n_head * d >= 8192)
    for (int64_t r = 0; r < n_rows; r++)
        lp_rope_row(x + r * ldx, n_head, d, n_rot, cos_ + r * (n_rot / 2), sin_ + r * (n_rot / 2), neox);
}

/* Per-head RMSNorm (weights qw, kw; NULL: none) then RoPE, in place, on each row's Q and K heads
 * (Gemma 3's and Qwen 3's attention inputs): q [n_rows, ldq] with n_head heads of d contiguous,
 * k [n_rows, ldk] with n_head_kv; cos, sin [n_rows, n_rot/2].  lp_rms_norm's and lp_rope's
 * values, in one pass over rows read where the product wrote them (strided: no copy). */
void lp_qk_norm_rope(float *q, int64_t ldq, int64_t n_head, float *k, int64_t ldk, int64_t n_head_kv, int64_t n_rows,
                     int64_t d, const float *qw, const float *kw, float eps, int64_t n_rot, const float *cos_,
                     const float *sin_, int neox) {
#pragma omp parallel for schedule(static) if (n_rows * (n_head + n_head_kv) * d >= 8192)
    for (int64_t r = 0; r < n_rows; r++) {
        float *qr = q + r * ldq, *kr = k + r * ldk;
        const float *c = cos_ + r * (n_rot / 2), *s = sin_ + r * (n_rot / 2);
        for (int64_t h = 0; qw && h < n_head; h++) lp_rms_norm_row(qr + h * d, qw, d, eps, qr + h * d);
        for (int64_t h = 0; kw && h < n_head_kv; h++) lp_rms_norm_row(kr + h * d, kw, d, eps, kr + h * d);
        lp_rope_row(qr, n_head, d, n_rot, c, s, neox);
        lp_rope_row(kr, n_head_kv, d, n_rot, c, s, neox);
    }
}

/* acc[r] += rms_norm(x[r]) w over rows of n (x rows ldx apart, overwritten by their norms; acc
 * contiguous): Gemma's post-attention and post-FFN norms with the residual add, lp_rms_norm's
 * values then one float add each. */
void lp_rms_norm_add(float *x, int64_t ldx, const float *w, int64_t n_rows, int64_t n, float eps, float *acc) {
#pragma omp parallel for schedule(static) if (n_rows * n >= 8192)
    for (int64_t r = 0; r < n_rows; r++) {
        float *xr = x + r * ldx, *ar = acc + r * n;
        lp_rms_norm_row(xr, w, n, eps, xr);
#pragma omp simd
        for (int64_t i = 0; i < n; i++) ar[i] += xr[i];
    }
}

/* Attention of few query rows over a KV cache through the KQ mask, reading only the cells
 * each row can see: row i's visible cells are cells[ptr[i] .. ptr[i+1]) (the mask's non -inf
 * entries, listed once per ubatch), and mask[i, c] is added to the score.  q float [n, ldq]
 * with head h at q + h * d_k; k [n_cells, n_head_kv * d_k] and v [n_cells, n_head_kv * d_v] of
 * storage type tk / tv (f16, or ggml blocks of 32: lp_kv_types_ok); mask float [n, n_kv]; out
 * float [n, n_head * d_v].  Query head h reads KV head h / (n_head / n_head_kv).  A row that
 * sees no cell gets zeros.  sinks (NULL, or [n_head]): each head's sink logit, one more term in
 * its softmax's sum whose value is dropped (gpt-oss, ggml_soft_max_add_sinks).  Returns 0, -1
 * without scratch memory, -2 for a type it does not read. */
int lp_attn_kv_sinks(const float *q, int64_t n, int64_t ldq, int64_t n_head, int64_t n_head_kv, int64_t d_k,
                     int64_t d_v, int tk, const void *k, int tv, const void *v, int64_t n_kv, const float *mask,
                     const int64_t *ptr, const int64_t *cells, float scale, float *out, const float *sinks) {
    if (!lp_kv_types_ok(tk, tv, d_k, d_v)) return -2;
    const int64_t hpt = lp_attn_heads_per_task(n_head, n_head_kv), most = lp_most_visible(ptr, n);
    const int64_t n_chunk = lp_attn_chunks(n, n_head, n_head_kv, most, omp_get_max_threads());
    const int64_t n_part = lp_attn_part_floats(n, n_head, d_v, n_chunk);
    const int64_t n_kvf = tk == LP_F16 && tv == LP_F16 ? 0 : lp_attn_kv_floats(most, d_k, d_v);
    float *part = n_part ? (float *)malloc((size_t)n_part * sizeof(float)) : NULL;
    if (n_part && !part) return -1;
    int failed = 0;
#pragma omp parallel
    {
        float *p = (float *)malloc((size_t)(most * hpt) * sizeof(float));
        float *kvf = n_kvf ? (float *)malloc((size_t)n_kvf * sizeof(float)) : NULL;
#pragma omp atomic update
        failed += p == NULL || (n_kvf && kvf == NULL);
#pragma omp barrier
        if (!failed) lp_attn_for(q, n, ldq, n_head, n_head_kv, d_k, d_v, tk, k, tv, v, n_kv, mask, ptr, cells, scale,
                                 out, n_head * d_v, hpt, n_chunk, p, part, NULL, kvf, NULL, sinks);
        free(p);
        free(kvf);
    }
    free(part);
    return failed ? -1 : 0;
}

/* lp_attn_f16's inputs under --deterministic (layers.c with lp_dims.det): each row over its
 * own chunks, lp_attn_chunks of that row alone (lp_attn_det_for), so a row's output is the one
 * it has in any batch (tests/test_deterministic_attn.py).  Returns 0, -1 without scratch memory. */
int lp_attn_det_f16(const float *q, int64_t n, int64_t ldq, int64_t n_head, int64_t n_head_kv, int64_t d_k, int64_t d_v,
                    const uint16_t *k, const uint16_t *v, int64_t n_kv, const float *mask, const int64_t *ptr,
                    const int64_t *cells, float scale, float *out) {
    const int64_t hpt = lp_attn_heads_per_task(n_head, n_head_kv), most = lp_most_visible(ptr, n);
    int64_t *row_chunks = (int64_t *)malloc((size_t)(n + 1) * sizeof(int64_t)), n_chunk = 1;
    if (!row_chunks) return -1;
    for (int64_t i = 0; i < n; i++) {
        row_chunks[i] = lp_attn_chunks(1, n_head, n_head_kv, lp_most_visible(ptr + i, 1), omp_get_max_threads());
        n_chunk = row_chunks[i] > n_chunk ? row_chunks[i] : n_chunk;
    }
    const int64_t n_part = lp_attn_part_floats(n, n_head, d_v, n_chunk);
    float *part = n_part ? (float *)malloc((size_t)n_part * sizeof(float)) : NULL;
    int failed = n_part && !part;
#pragma omp parallel if (!failed)
    {
        float *p = (float *)malloc((size_t)(2 * most * hpt) * sizeof(float)); /* 2: lp_attn_pair_det */
#pragma omp atomic update
        failed += p == NULL;
#pragma omp barrier
        if (!failed) lp_attn_det_for(q, n, ldq, n_head, n_head_kv, d_k, d_v, LP_F16, k, LP_F16, v, n_kv, mask, ptr, cells,
                                     scale, out, n_head * d_v, hpt, n_chunk, p, part, NULL, NULL, row_chunks);
        free(p);
    }
    free(part);
    free(row_chunks);
    return failed ? -1 : 0;
}

/* lp_attn_kv_sinks without sinks. */
int lp_attn_kv(const float *q, int64_t n, int64_t ldq, int64_t n_head, int64_t n_head_kv, int64_t d_k, int64_t d_v,
               int tk, const void *k, int tv, const void *v, int64_t n_kv, const float *mask, const int64_t *ptr,
               const int64_t *cells, float scale, float *out) {
    return lp_attn_kv_sinks(q, n, ldq, n_head, n_head_kv, d_k, d_v, tk, k, tv, v, n_kv, mask, ptr, cells, scale, out, NULL);
}

/* lp_attn_kv over an f16 cache. */
int lp_attn_f16(const float *q, int64_t n, int64_t ldq, int64_t n_head, int64_t n_head_kv, int64_t d_k, int64_t d_v,
                const uint16_t *k, const uint16_t *v, int64_t n_kv, const float *mask, const int64_t *ptr,
                const int64_t *cells, float scale, float *out) {
    return lp_attn_kv(q, n, ldq, n_head, n_head_kv, d_k, d_v, LP_F16, k, LP_F16, v, n_kv, mask, ptr, cells, scale, out);
}

/* The index of the first largest of x[0..n) (llama.cpp's greedy sampler: `logit > max`, so a
 * NaN never wins), or -1 when nothing is larger than -inf (n 0, or all -inf or NaN).  One
 * thread: a vocabulary's logits are a megabyte the step just wrote, two passes in cache (the
 * largest, then the first index holding it) take ~30 us, where torch.argmax took 250-400 us a
 * row (a server step of 8 slots spent ~3 ms in it with Gemma 3's 262,144).  The vector max
 * keeps its second operand where the first is NaN (x86 maxps, ARM fmaxnm). */
int64_t lp_argmax(const float *x, int64_t n) {
    float m = -INFINITY;
    int64_t i = 0;
#if defined(LP_AVX512)
    __m512 v = _mm512_set1_ps(-INFINITY);
    for (; i + 16 <= n; i += 16) v = _mm512_max_ps(_mm512_loadu_ps(x + i), v);
    m = _mm512_reduce_max_ps(v);
#elif defined(LP_AVX2)
    __m256 v = _mm256_set1_ps(-INFINITY);
    for (; i + 8 <= n; i += 8) v = _mm256_max_ps(_mm256_loadu_ps(x + i), v);
    float t[8];
    _mm256_storeu_ps(t, v);
    for (int j = 0; j < 8; j++) m = t[j] > m ? t[j] : m;
#elif defined(LP_NEON)
    float32x4_t v = vdupq_n_f32(-INFINITY);
    for (; i + 4 <= n; i += 4) v = vmaxnmq_f32(v, vld1q_f32(x + i));
    m = vmaxnmvq_f32(v);
#endif
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    if (!(m > -INFINITY)) return -1;
    i = 0;
#if defined(LP_AVX512)
    for (const __m512 mv = _mm512_set1_ps(m); i + 16 <= n; i += 16) {
        const __mmask16 k = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), mv, _CMP_EQ_OQ);
        if (k) return i + __builtin_ctz(k);
    }
#elif defined(LP_AVX2)
    for (const __m256 mv = _mm256_set1_ps(m); i + 8 <= n; i += 8) {
        const int k = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), mv, _CMP_EQ_OQ));
        if (k) return i + __builtin_ctz((unsigned)k);
    }
#endif
    for (; i < n; i++)
        if (x[i] == m) return i;
    return -1;
}

/* Heap order of the top-k: is (va, ia) a worse candidate than (vb, ib)?  The smaller logit, or
 * of two equal ones the later index (so the earlier of equal logits is kept, and listed first). */
LP_INLINE int topk_worse(float va, int64_t ia, float vb, int64_t ib) { return va < vb || (va == vb && ia > ib); }

/* Sift the root of the min-heap (v, id) [k] down to its place. */
static void topk_sift(float *v, int64_t *id, int64_t k) {
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1, w = i;
        if (c < k && topk_worse(v[c], id[c], v[w], id[w])) w = c;
        if (c + 1 < k && topk_worse(v[c + 1], id[c + 1], v[w], id[w])) w = c + 1;
        if (w == i) return;
        const float tv = v[i];
        const int64_t ti = id[i];
        v[i] = v[w], id[i] = id[w], v[w] = tv, id[w] = ti;
        i = w;
    }
}

/* The k largest of x[0..n) (1 <= k <= n) into vals[k] and ids[k], largest first, of equal
 * logits the earlier index first (llama.cpp's top_k keeps the k largest; its partial sort
 * leaves ties in no set order); a NaN is never taken while a number is left, and is listed as
 * -inf.  One pass with a k-entry min-heap whose smallest is the bar: 16 (AVX-512) or 8 (AVX2)
 * logits at a time are compared with it and a vector with none above it is skipped, so a
 * vocabulary of random-looking logits costs about a read (Gemma 3's 262,144: ~50 us, where
 * the sampler's chain around torch.topk took 0.9-1.9 ms a token, benchmarks/sampler.py).
 * Returns k, or -1 for a k out of range. */
int64_t lp_topk(const float *x, int64_t n, int64_t k, int64_t *ids, float *vals) {
    if (k < 1 || k > n) return -1;
    for (int64_t i = 0; i < k; i++) {
        int64_t j = i; /* sift up (i, x[i]) */
        vals[j] = x[i] == x[i] ? x[i] : -INFINITY, ids[j] = i;
        while (j > 0 && topk_worse(vals[j], ids[j], vals[(j - 1) / 2], ids[(j - 1) / 2])) {
            const int64_t p = (j - 1) / 2;
            const float tv = vals[p];
            const int64_t ti = ids[p];
            vals[p] = vals[j], ids[p] = ids[j], vals[j] = tv, ids[j] = ti;
            j = p;
        }
    }
    int64_t i = k;
#if defined(LP_AVX512)
    for (; i + 16 <= n; i += 16) {
        __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), _mm512_set1_ps(vals[0]), _CMP_GT_OQ);
        while (m) {
            const int64_t j = i + __builtin_ctz(m);
            m &= m - 1;
            if (x[j] > vals[0]) vals[0] = x[j], ids[0] = j, topk_sift(vals, ids, k);
        }
    }
#elif defined(LP_AVX2)
    for (; i + 8 <= n; i += 8) {
        unsigned m = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(vals[0]), _CMP_GT_OQ));
        while (m) {
            const int64_t j = i + __builtin_ctz(m);
            m &= m - 1;
            if (x[j] > vals[0]) vals[0] = x[j], ids[0] = j, topk_sift(vals, ids, k);
        }
    }
#endif
    for (; i < n; i++)
        if (x[i] > vals[0]) vals[0] = x[i], ids[0] = i, topk_sift(vals, ids, k);
    for (int64_t a = 1; a < k; a++) { /* largest first: insertion sort of the heap */
        const float v = vals[a];
        const int64_t id = ids[a];
        int64_t b = a;
        for (; b > 0 && topk_worse(vals[b - 1], ids[b - 1], v, id); b--) vals[b] = vals[b - 1], ids[b] = ids[b - 1];
        vals[b] = v, ids[b] = id;
    }
    return k;
}
