/* Every layer of a decode ubatch (few rows) in one call and one parallel region, the threads
 * meeting at a barrier after each step, for the llama and gemma3 layer shapes:
 *
 *   h = rms_norm(x) * attn_norm
 *   q|k|v = wq h, wk h, wv h               (or one stacked wqkv product)
 *   q, k = rms_norm per head * q_norm, k_norm   (gemma3; skipped when NULL)
 *   q, k = rope(q), rope(k); q *= q_scale; k, v stored into the row's cell (f16, or ggml blocks: kv_quant.c)
 *   a = attention over the cells the row's mask lets it see (scale attn_scale)
 *   x += wo a                              (gemma3: x += rms_norm(wo a) * attn_post_norm)
 *   h = rms_norm(x) * ffn_norm
 *   x += wd act(wg h) * (wu h)             (act silu or gelu; gemma3: post-norm as above)
 *   (qwen3moe, Mixtral-style llama: x += the MoE FFN of h, moe.c lp_moe_row_for; one row only)
 *
 * The steps and arithmetic are the per-op path's with the same kernels (mm.c, ops.c, attn.c).  Each
 * layer names its KV set (the cache it stores into and reads: the window cache or the global
 * one of an iSWA model) and its RoPE set (cos/sin of each row for its base frequency).  The rows
 * of a ubatch may lie in different streams of the cache (llama-server's -np layout): each row
 * carries its stream's offset, and its mask row and visible cells are its own stream's. */
#include <omp.h>

#include "attn.h"
#include "kv_quant.h"
#include "mm.h"
#include "moe.h"
#include "ops.h"
#include "det_kz_x86.h"
#include "rows_det_x86.h"
#include "row1_x86.h"

typedef struct {
    const float *attn_norm, *ffn_norm;           /* [n_embd] */
    const float *q_norm, *k_norm;                /* [d] or NULL */
    const float *attn_post_norm, *ffn_post_norm; /* [n_embd] or NULL */
    const uint8_t *wq, *wk, *wv, *wo, *wg, *wu, *wd; /* wk = wv = NULL: wq is Q|K|V stacked; wu = NULL: wg is gate|up */
    int64_t tq, tk, tv, to, tg, tu, td;          /* their GGML types */
    void *k, *v;                                 /* the layer's cache [n_stream, n_cells, n_head_kv * d] */
    int64_t tck, tcv;                            /* its storage types: LP_F16, or blocks of 32 (kv_quant.c) */
    int64_t kv_set, rope_set;
    lp_moe moe;                                  /* n_expert > 0: the FFN is these experts (wg, wu, wd unused) */
} lp_layer;

typedef struct {
    int64_t n_embd, n_head, n_head_kv, d, n_rot, n_ff;
    float eps, attn_scale, q_scale;
    int64_t neox, gelu;
    int64_t det; /* --deterministic: every row as if alone (rows_det_x86.c products, attention row by row) */
} lp_dims;

typedef struct {
    const float *cos, *sin; /* [n, n_rot / 2] */
} lp_rope_in;

typedef struct {
    const int64_t *store_cells; /* [n] each row's cell */
    const int64_t *cell_off;    /* [n] where each row's stream starts in every layer's k and v, in cells */
    const float *mask;          /* [n, n_kv] */
    int64_t n_kv;
    const int64_t *ptr, *cells; /* the visible cells of each row (attn.c lp_attn_for) */
} lp_kv_in;

#define LP_MAX_KV_SETS 8 /* KV sets of one call (an iSWA model has 2) */

static int64_t max3(int64_t a, int64_t b, int64_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

/* One product of the prepared activations into y (stride ldy), split among the threads;
 * dx (deterministic mode, or a one-row default ubatch with a type lp_row1_i8 takes; else NULL):
 * the same rows prepared for lp_mm_det_for, whose every row is the same bits at any row count.
 * det: every product takes dx; else only lp_row1_i8's types (row1_x86.h: the row in int8). */
static void product(int64_t type, const uint8_t *w, int64_t n_out, const lp_xprep *xp, float *y, int64_t ldy, int acc,
                    void *scratch, const lp_xprep *dx, int det) {
    if (dx && (det || lp_row1_i8((int)type, xp->n_in))) {
        lp_mm_det_for((int)type, w, n_out, dx, y, ldy, acc, scratch);
        return;
    }
    lp_mm_for((int)type, w, n_out, xp->n_in, xp, y, ldy, acc, scratch);
}

/* Row r of xp (its fp32 row made) prepared for the products: dx's form alone (deterministic
 * mode), else xp's and dx's where given (the forms dx->reads names: none, or int8). */
static void prep_row(lp_xprep *xp, const lp_xprep *dx, int64_t r, int det) {
    if (!det) lp_prep_row(xp, r);
    if (dx) lp_det_prep_row(dx, r);
}

/* Row r of the FFN's activation prepared as prep_row does; SwiGLU rows (glu) read in Q8_K whatever
 * their largest value (q8on 1, as llama.cpp rounds them and moe.c the experts'): Zen 3 avx2, -t 1,
 * Llama 3.2 1B shape decode 1.07x, tiny llama Q4_K_M KLD to llama.cpp 0.011 (0.022 with the rule).
 * GeGLU rows keep lp_prepare_q8k_row's rule: Gemma 3 270M forced was 4x the KLD to f32 (3.7e-3,
 * top-1 0.961; the rule 9.3e-4, 0.979), no closer to llama.cpp, no faster. */
static void prep_ff_row(lp_xprep *xp, const lp_xprep *dx, int64_t r, int det, int glu) {
    prep_row(xp, dx, r, det);
    if (glu && !det) lp_force_q8k_row(xp, r);
    if (glu && det) lp_det_kz_force(dx, r); /* (det_kz_x86.c's Q4_K / Q6_K) */
}

/* The forms dx's rows take for a product of this type: rows_det_x86.c's (deterministic mode),
 * else int8 where lp_row1_i8 (one row), else none. */
static int dx_reads(int64_t type, int64_t n_in, int det) {
    return det ? lp_det_reads((int)type) : lp_row1_i8((int)type, n_in) ? LP_READS_I8 : 0;
}

/* x += rms_norm(t) * post (post NULL: x += t), row by row. */
static void residual_for(float *x, float *t, const float *post, int64_t n, int64_t ne, float eps) {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n; r++) {
        float *tr = t + r * ne, *xr = x + r * ne;
        if (post) lp_rms_norm_row(tr, post, ne, eps, tr);
        for (int64_t i = 0; i < ne; i++) xr[i] += tr[i];
    }
}

/* The prepared rows laid out in lanes (after the rows' loop): dx's (deterministic mode), else xp's
 * (a one-row dx has none). */
static void lanes_for(const lp_xprep *xp, const lp_xprep *dx, int det) {
    if (det)
        lp_det_lanes_for(dx);
    else
        lp_lanes_for(xp);
}

/* xp->x = rms_norm(x) * w, row by row, each row prepared for the products as it is normed
 * (prep_row). */
static void norm_prep_for(const float *x, const float *w, float eps, lp_xprep *xp, const lp_xprep *dx, int det) {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < xp->n; r++) {
        float *out = (float *)xp->x + r * xp->n_in;
        lp_rms_norm_row(x + r * xp->n_in, w, xp->n_in, eps, out);
        prep_row(xp, dx, r, det);
    }
    lanes_for(xp, dx, det);
}

/* Has rows_det_x86.c a product for every matrix of the layer (the expert FFN aside: one row,
 * moe.c's)?  --deterministic products of another type would read undecoded scratch. */
static int det_covered(const lp_layer *l, const lp_dims *hp) {
    const int64_t ne = hp->n_embd, nq = hp->n_head * hp->d;
    int ok = lp_mm_det_covers((int)l->tq, ne) && lp_mm_det_covers((int)l->to, nq);
    if (l->wk) ok = ok && lp_mm_det_covers((int)l->tk, ne) && lp_mm_det_covers((int)l->tv, ne);
    if (l->moe.n_expert > 0) return ok;
    if (l->wu) ok = ok && lp_mm_det_covers((int)l->tu, ne);
    return ok && lp_mm_det_covers((int)l->tg, ne) && lp_mm_det_covers((int)l->td, hp->n_ff);
}

/* What a call sizes before its parallel region: each KV set's attention chunks and partials, the
 * MoE layers' bytes, the forms dx's rows take, and the three working buffers' bytes. */
typedef struct {
    int64_t most, n_part, n_chunk[LP_MAX_KV_SETS];
    size_t moe_own, moe_shared;
    int blocks, r_ne, r_q, r_ff, any;
    size_t buf, xbuf, dbuf; /* the floats (xn .. moe_sh), xp's rows, dx's rows (0: none) */
} lp_plan;

#define LP_ALIGN64(b) (((size_t)(b) + 63) & ~(size_t)63)

/* The working bytes in one region: buf, xbuf, dbuf, each from a 64-byte boundary. */
static size_t plan_region(const lp_plan *pl) { return LP_ALIGN64(pl->buf) + LP_ALIGN64(pl->xbuf) + LP_ALIGN64(pl->dbuf); }

/* The plan of a call (row_chunks [n_kv_sets * n] filled, or NULL: the sizes alone): 0, or lp_layers'
 * error (-1 too many KV sets, -2 a cache type not read, -3 experts on several rows, -4 --deterministic
 * products of a type rows_det_x86.c lacks). */
static int plan_for(const lp_layer *L, int64_t n_layer, const lp_dims *hp, int64_t n, const lp_kv_in *kvs,
                    int64_t n_kv_sets, int64_t *row_chunks, lp_plan *pl) {
    const int64_t ne = hp->n_embd, d = hp->d, nq = hp->n_head * d, nqkv = nq + 2 * hp->n_head_kv * d;
    const int64_t n_ff = hp->n_ff, wide = max3(ne, nq, n_ff);
    const int det = (int)hp->det;
    memset(pl, 0, sizeof *pl);
    pl->most = 1;
    if (n_kv_sets > LP_MAX_KV_SETS) return -1;
    for (int64_t il = 0; il < n_layer; il++) {
        if (!lp_kv_types_ok((int)L[il].tck, (int)L[il].tcv, d, d)) return -2;
        if (det && !det_covered(L + il, hp)) return -4;
        pl->blocks |= L[il].tck != LP_F16 || L[il].tcv != LP_F16;
        if (L[il].moe.n_expert == 0) continue;
        if (n != 1 || L[il].moe.k < 1 || L[il].moe.k > LP_MOE_MAX_K || L[il].moe.k > L[il].moe.n_expert) return -3;
        const size_t own = lp_moe_own_bytes(&L[il].moe), sh = lp_moe_shared_floats(&L[il].moe);
        pl->moe_own = own > pl->moe_own ? own : pl->moe_own;
        pl->moe_shared = sh > pl->moe_shared ? sh : pl->moe_shared;
    }
    for (int64_t s = 0; s < n_kv_sets; s++) { /* each row's own chunks (as alone), the partials laid out by the most */
        const int64_t m = lp_most_visible(kvs[s].ptr, n);
        pl->most = m > pl->most ? m : pl->most;
        pl->n_chunk[s] = 1;
        for (int64_t i = 0; i < n; i++) {
            const int64_t c = lp_attn_chunks(1, hp->n_head, hp->n_head_kv, lp_most_visible(kvs[s].ptr + i, 1), omp_get_max_threads());
            if (row_chunks) row_chunks[s * n + i] = c;
            pl->n_chunk[s] = c > pl->n_chunk[s] ? c : pl->n_chunk[s];
        }
        const int64_t pd = lp_attn_part_floats(n, hp->n_head, d, pl->n_chunk[s]);
        pl->n_part = pd > pl->n_part ? pd : pl->n_part;
    }
    /* det: --deterministic; else a one-row ubatch's lp_row1_i8 types read dx's int8 rows (row1_x86.h):
     * the forms the layers' products read, asked before dx's buffer is (none: no buffer) */
    if (det || n == 1)
        for (int64_t il = 0; il < n_layer; il++) {
            const lp_layer *l = L + il;
            pl->r_ne |= dx_reads(l->tq, ne, det) | dx_reads(l->tg, ne, det);
            if (l->wk) pl->r_ne |= dx_reads(l->tk, ne, det) | dx_reads(l->tv, ne, det);
            if (l->wu) pl->r_ne |= dx_reads(l->tu, ne, det);
            pl->r_q |= dx_reads(l->to, nq, det), pl->r_ff |= dx_reads(l->td, n_ff, det);
        }
    pl->any = det || (pl->r_ne | pl->r_q | pl->r_ff);
    pl->buf = ((size_t)(n * (2 * ne + nqkv + nq + 3 * n_ff) + pl->n_part) + pl->moe_shared) * sizeof(float);
    pl->xbuf = lp_xprep_bytes(wide, n);
    pl->dbuf = pl->any ? lp_det_xprep_bytes(wide, n) : 0;
    return 0;
}

/* The bytes of lp_layers' working region for this call (its `work`), or its error code (< 0).  Asked
 * from the thread that calls lp_layers, with the same thread count: the attention's partials grow with it. */
int64_t lp_layers_work_bytes(const lp_layer *L, int64_t n_layer, const lp_dims *hp, int64_t n, const lp_kv_in *kvs,
                             int64_t n_kv_sets) {
    lp_plan pl;
    const int rc = plan_for(L, n_layer, hp, n, kvs, n_kv_sets, NULL, &pl);
    return rc ? rc : (int64_t)plan_region(&pl);
}

/* work: the caller's kept region (lp_layers_work_bytes; 64-byte aligned) for the ubatch's working
 * buffers, reused from call to call; NULL, too small or misaligned: they are malloc'd and freed here
 * (glibc maps those of 32 MiB or more afresh each call, its pages faulted in again: model/work.py). */
int lp_layers(const lp_layer *L, int64_t n_layer, const lp_dims *hp, float *x, int64_t n, const lp_rope_in *ropes,
              const lp_kv_in *kvs, int64_t n_kv_sets, void *work, int64_t work_bytes) {
    const int64_t ne = hp->n_embd, d = hp->d, nq = hp->n_head * d, nk = hp->n_head_kv * d, nqkv = nq + 2 * nk;
    const int64_t n_ff = hp->n_ff, half = hp->n_rot / 2, wide = max3(ne, nq, n_ff);
    const int64_t hpt = lp_attn_heads_per_task(hp->n_head, hp->n_head_kv);
    /* each row's attention chunks as it has alone (attn.c attn_rows_for): a row's bits do not depend on
     * the rows beside it (a speculative verification's, a server step's), --deterministic or not */
    int64_t *row_chunks = (int64_t *)malloc((size_t)(n * n_kv_sets + 1) * sizeof(int64_t));
    if (!row_chunks) return -1;
    lp_plan pl;
    const int rc = plan_for(L, n_layer, hp, n, kvs, n_kv_sets, row_chunks, &pl);
    if (rc) {
        free(row_chunks);
        return rc;
    }
    const int64_t most = pl.most, n_part = pl.n_part, *n_chunk = pl.n_chunk;
    const int det = (int)hp->det, any = pl.any, blocks = pl.blocks;
    const size_t moe_own = pl.moe_own;
    const int kept = work && !((uintptr_t)work & 63) && work_bytes >= (int64_t)plan_region(&pl);
    float *buf = kept ? (float *)work : (float *)malloc(pl.buf);
    void *xbuf = kept ? (char *)work + LP_ALIGN64(pl.buf) : malloc(pl.xbuf);
    void *dbuf = !any ? NULL : kept ? (char *)xbuf + LP_ALIGN64(pl.xbuf) : malloc(pl.dbuf);
    if (!buf || !xbuf || (any && !dbuf)) {
        free(buf); /* (not kept: kept ones are never NULL) */
        free(xbuf);
        free(dbuf);
        free(row_chunks);
        return -1;
    }
    float *xn = buf, *qkv = xn + n * ne, *att = qkv + n * nqkv, *gu = att + n * nq, *h = gu + n * 2 * n_ff;
    float *tmp = h + n * n_ff, *part = tmp + n * ne; /* part: the attention chunks' partials */
    float *moe_sh = part + n_part;                   /* the MoE layers' shared floats */
    int failed = 0;
    lp_xprep xp_ne = lp_xprep_at(xbuf, ne, n, xn), xp_q = lp_xprep_at(xbuf, nq, n, att), xp_ff = lp_xprep_at(xbuf, n_ff, n, h);
    { /* Q8_K rows (lp_xrows_q8k's row counts) only for an input some Q4_K / Q6_K product reads (mm.c q8k_chunk,
       * q8kz_chunk, row1q8k_x86.c); the others' rows are not rounded to it (lp_prepare_x_row) */
        int k_ne = 0, k_q = 0, k_ff = 0;
        for (int64_t il = 0; il < n_layer; il++) {
            const lp_layer *l = L + il;
            k_ne |= lp_reads_q8k(l->tq) | lp_reads_q8k(l->tk) | lp_reads_q8k(l->tv) | lp_reads_q8k(l->tg) | lp_reads_q8k(l->tu);
            k_q |= lp_reads_q8k(l->to), k_ff |= lp_reads_q8k(l->td);
        }
        if (!k_ne) xp_ne.xr.q8 = NULL;
        if (!k_q) xp_q.xr.q8 = NULL;
        if (!k_ff) xp_ff.xr.q8 = NULL;
        int e_ne = 0, e_q = 0, e_ff = 0; /* and the AVX2 level's int8 lanes (mm.c lanes8_chunk) likewise */
        for (int64_t il = 0; il < n_layer; il++) {
            const lp_layer *l = L + il;
            e_ne |= lp_lanes8_type(l->tq) | lp_lanes8_type(l->tk) | lp_lanes8_type(l->tv) | lp_lanes8_type(l->tg) | lp_lanes8_type(l->tu);
            e_q |= lp_lanes8_type(l->to), e_ff |= lp_lanes8_type(l->td);
        }
        if (!e_ne) xp_ne.xl8.n_grp = 0, xp_ne.x8.q = NULL; /* (and 2, 3 rows' int8 rows: mm.c lp_det8_rows) */
        if (!e_q) xp_q.xl8.n_grp = 0, xp_q.x8.q = NULL;
        if (!e_ff) xp_ff.xl8.n_grp = 0, xp_ff.x8.q = NULL;
    }
    /* deterministic mode (one-row ubatches: the lp_row1_i8 types'): the same rows in rows_det_x86.c's forms */
    lp_xprep dx_ne, dx_q, dx_ff;
    if (any) {
        dx_ne = lp_det_xprep_at(dbuf, ne, n, xn), dx_q = lp_det_xprep_at(dbuf, nq, n, att), dx_ff = lp_det_xprep_at(dbuf, n_ff, n, h);
        dx_ne.reads = pl.r_ne, dx_q.reads = pl.r_q, dx_ff.reads = pl.r_ff;
    }
    const lp_xprep *dne = any ? &dx_ne : NULL, *dq = any ? &dx_q : NULL, *dff = any ? &dx_ff : NULL;
#pragma omp parallel
    {
        float *p = (float *)malloc((size_t)(2 * most * hpt) * sizeof(float)); /* 2: lp_attn_pair_det */
        const size_t sb = lp_mm_scratch_bytes(wide), sd = any ? lp_det_scratch_bytes(wide) : 0;
        void *scratch = malloc(sb > sd ? sb : sd);
        float *kvf = blocks ? (float *)malloc((size_t)lp_attn_kv_floats(most, d, d) * sizeof(float)) : NULL;
        char *own = moe_own ? (char *)malloc(moe_own + 64) : NULL;
        int ok = p && scratch && (!blocks || kvf) && (!moe_own || own);
#pragma omp atomic update
        failed += !ok;
#pragma omp barrier
        for (int64_t il = 0; il < n_layer && !failed; il++) {
            const lp_layer *l = L + il;
            const lp_kv_in *kv = kvs + l->kv_set;
            const lp_rope_in *rp = ropes + l->rope_set;
            /* attention */
            norm_prep_for(x, l->attn_norm, hp->eps, &xp_ne, dne, det);
            if (l->wk == NULL) {
                product(l->tq, l->wq, nqkv, &xp_ne, qkv, nqkv, 0, scratch, dne, det);
            } else {
                product(l->tq, l->wq, nq, &xp_ne, qkv, nqkv, 0, scratch, dne, det);
                product(l->tk, l->wk, nk, &xp_ne, qkv + nq, nqkv, 0, scratch, dne, det);
                product(l->tv, l->wv, nk, &xp_ne, qkv + nq + nk, nqkv, 0, scratch, dne, det);
            }
#pragma omp for schedule(static)
            for (int64_t r = 0; r < n; r++) { /* Q and K normed, rotated and scaled; K and V into the row's cell */
                float *row = qkv + r * nqkv;
                if (l->q_norm)
                    for (int64_t hh = 0; hh < hp->n_head; hh++) lp_rms_norm_row(row + hh * d, l->q_norm, d, hp->eps, row + hh * d);
                if (l->k_norm)
                    for (int64_t hh = 0; hh < hp->n_head_kv; hh++)
                        lp_rms_norm_row(row + nq + hh * d, l->k_norm, d, hp->eps, row + nq + hh * d);
                lp_rope_row(row, hp->n_head + hp->n_head_kv, d, hp->n_rot, rp->cos + r * half, rp->sin + r * half, (int)hp->neox);
                if (hp->q_scale != 1.0f)
                    for (int64_t i = 0; i < nq; i++) row[i] *= hp->q_scale;
                const int64_t cell = kv->cell_off[r] + kv->store_cells[r];
                lp_kv_store((int)l->tck, (char *)l->k + cell * lp_kv_row_bytes((int)l->tck, nk), row + nq, nk);
                lp_kv_store((int)l->tcv, (char *)l->v + cell * lp_kv_row_bytes((int)l->tcv, nk), row + nq + nk, nk);
            }
            if (hp->det)
                lp_attn_det_for(qkv, n, nqkv, hp->n_head, hp->n_head_kv, d, d, (int)l->tck, l->k, (int)l->tcv, l->v, kv->n_kv,
                                kv->mask, kv->ptr, kv->cells, hp->attn_scale, att, nq, hpt, n_chunk[l->kv_set], p, part,
                                kv->cell_off, kvf, row_chunks + l->kv_set * n);
            else
                lp_attn_for(qkv, n, nqkv, hp->n_head, hp->n_head_kv, d, d, (int)l->tck, l->k, (int)l->tcv, l->v, kv->n_kv,
                        kv->mask, kv->ptr, kv->cells, hp->attn_scale, att, nq, hpt, n_chunk[l->kv_set], p, part,
                        kv->cell_off, kvf, row_chunks + l->kv_set * n, NULL);
#pragma omp for schedule(static)
            for (int64_t r = 0; r < n; r++) prep_row(&xp_q, dq, r, det);
            lanes_for(&xp_q, dq, det);
            if (l->attn_post_norm) {
                product(l->to, l->wo, ne, &xp_q, tmp, ne, 0, scratch, dq, det);
                residual_for(x, tmp, l->attn_post_norm, n, ne, hp->eps);
            } else {
                product(l->to, l->wo, ne, &xp_q, x, ne, 1, scratch, dq, det);
            }
            /* feed-forward */
            if (l->moe.n_expert > 0) {
                lp_moe_row_for(&l->moe, x, l->ffn_norm, hp->eps, x, moe_sh, (char *)(((uintptr_t)own + 63) & ~(uintptr_t)63),
                               NULL, NULL);
                continue;
            }
            norm_prep_for(x, l->ffn_norm, hp->eps, &xp_ne, dne, det);
            if (l->wu == NULL) {
                product(l->tg, l->wg, 2 * n_ff, &xp_ne, gu, 2 * n_ff, 0, scratch, dne, det);
            } else {
                product(l->tg, l->wg, n_ff, &xp_ne, gu, 2 * n_ff, 0, scratch, dne, det);
                product(l->tu, l->wu, n_ff, &xp_ne, gu + n_ff, 2 * n_ff, 0, scratch, dne, det);
            }
#pragma omp for schedule(static)
            for (int64_t r = 0; r < n; r++) { /* the activation, each row prepared as it is made */
                const float *g = gu + r * 2 * n_ff;
                if (hp->gelu)
                    lp_geglu_row(g, g + n_ff, n_ff, h + r * n_ff);
                else
                    lp_swiglu_row(g, g + n_ff, n_ff, h + r * n_ff);
                prep_ff_row(&xp_ff, dff, r, det, !hp->gelu);
            }
            lanes_for(&xp_ff, dff, det);
            if (l->ffn_post_norm) {
                product(l->td, l->wd, ne, &xp_ff, tmp, ne, 0, scratch, dff, det);
                residual_for(x, tmp, l->ffn_post_norm, n, ne, hp->eps);
            } else {
                product(l->td, l->wd, ne, &xp_ff, x, ne, 1, scratch, dff, det);
            }
        }
        free(p);
        free(scratch);
        free(kvf);
        free(own);
    }
    if (!kept) {
        free(buf);
        free(xbuf);
        free(dbuf);
    }
    free(row_chunks);
    return failed ? -1 : 0;
}
