/* The attention of a ubatch's rows over the KV cache (ops.c's row operations' partner): each row
 * over its visible cells, a row's cells in chunks whose softmax partials are merged, tasks shared
 * among the threads of the caller's parallel region.  Written once over lp.h's float-vector
 * vocabulary (VF_*); attn_x86.c / attn_det_x86.c take the f16 cache where they apply. */
#include <omp.h>

#include "attn.h"
#include "attn_det_x86.h"
#include "attn_merge.h"
#include "attn_x86.h"
#include "kv_quant.h"
#include "quants.h"

/* dot of a float vector with a K row over d elements, and y += p * V row: the row f16, or f32
 * (f32: a block-typed cache's row dequantized, attn_group_blocks) */
static inline float dot_kv(const float *q, const void *k, int64_t d, const int f32) {
    const uint16_t *kh = (const uint16_t *)k;
    const float *kf = (const float *)k;
    int64_t j = 0;
    float s = 0.0f;
#if VW > 1
    vf acc = VF_SET1(0.0f);
    for (; j + VW <= d; j += VW) acc = VF_FMA(VF_LOAD(q + j), f32 ? VF_LOAD(kf + j) : VF_LOADH(kh + j), acc);
    s = VF_SUM(acc);
#endif
    for (; j < d; j++) s += q[j] * (f32 ? kf[j] : lp_f16_to_f32(kh[j]));
    return s;
}

static inline void axpy_kv(float *y, float p, const void *v, int64_t d, const int f32) {
    const uint16_t *vh = (const uint16_t *)v;
    const float *vf32 = (const float *)v;
    int64_t j = 0;
#if VW > 1
    const vf vp = VF_SET1(p);
    for (; j + VW <= d; j += VW) VF_STORE(y + j, VF_FMA(vp, f32 ? VF_LOAD(vf32 + j) : VF_LOADH(vh + j), VF_LOAD(y + j)));
#endif
    for (; j < d; j++) y[j] += p * (f32 ? vf32[j] : lp_f16_to_f32(vh[j]));
}

/* Query heads per attention task: a row's whole KV-head group (each K and V row read once for
 * all of them), one head where a group is over 64. */
int64_t lp_attn_heads_per_task(int64_t n_head, int64_t n_head_kv) {
    const int64_t r = n_head / n_head_kv;
    return r <= 64 ? r : 1;
}

/* Chunks of each (row, head group)'s visible cells: 1 where the groups alone give each of the
 * threads 4 tasks, else as many as that takes (a decode step of one row and few KV heads), of
 * at least LP_ATTN_CHUNK cells.  The chunks' softmax partials are merged (lp_attn_for), so the
 * threads share one row's cells, and each K and V row is still read once. */
#define LP_ATTN_CHUNK 32
int64_t lp_attn_chunks(int64_t n, int64_t n_head, int64_t n_head_kv, int64_t most, int n_threads) {
    const int64_t hpt = lp_attn_heads_per_task(n_head, n_head_kv), tasks = n * (n_head / hpt), want = 4 * (int64_t)n_threads;
    if (hpt == 1 || tasks >= want) return 1;
    const int64_t c = (want + tasks - 1) / tasks, cap = most / LP_ATTN_CHUNK;
    return c < cap ? c : (cap > 1 ? cap : 1);
}

/* Floats of the chunks' partials: [n, n_chunk, n_head] outputs of d_v, and (max, sum) of each. */
int64_t lp_attn_part_floats(int64_t n, int64_t n_head, int64_t d_v, int64_t n_chunk) {
    return n_chunk > 1 ? n * n_chunk * n_head * (d_v + 2) : 0;
}

int64_t lp_most_visible(const int64_t *ptr, int64_t n) {
    int64_t most = 1;
    for (int64_t i = 0; i < n; i++) most = ptr[i + 1] - ptr[i] > most ? ptr[i + 1] - ptr[i] : most;
    return most;
}

/* hpt query heads h0.. of one row sharing KV head hk: each visible cell's K row is read once
 * for all of them (scores into p [hpt, nc]), then each V row once (softmax-weighted sums into
 * the heads' outputs o + h * d_v, zeroed first).  A head that sees nothing gets zeros.  ms
 * (NULL, or [hpt, 2]): each head's largest score and its softmax's sum (-inf, 0: nothing seen).
 * k, v: f16 rows, or f32 (f32 set), ldk / ldv elements apart. */
static void attn_group(const float *q, int64_t hpt, int64_t d_k, int64_t d_v, const void *k, const void *v,
                       int64_t ldk, int64_t ldv, const float *mi, const int64_t *cells, int64_t nc, float scale,
                       float *p, float *o, float *ms, int f32) {
    if (lp_attn_group_x86(q, hpt, d_k, d_v, k, v, ldk, ldv, mi, cells, nc, scale, p, o, ms, f32)) return;
    const int64_t es = f32 ? 4 : 2; /* bytes an element */
    float mx[64], l[64];
    for (int64_t h = 0; h < hpt; h++) mx[h] = -INFINITY;
    for (int64_t c = 0; c < nc; c++) {
        const void *kr = (const char *)k + cells[c] * ldk * es;
        for (int64_t h = 0; h < hpt; h++) {
            const float sc = dot_kv(q + h * d_k, kr, d_k, f32) * scale + mi[cells[c]];
            p[h * nc + c] = sc;
            mx[h] = sc > mx[h] ? sc : mx[h];
        }
    }
    for (int64_t h = 0; h < hpt; h++) {
        float *ph = p + h * nc, m = mx[h], s = 0.0f;
        for (int64_t c = 0; c < nc; c++) {
            ph[c] = m == -INFINITY ? 0.0f : expf(ph[c] - m);
            s += ph[c];
        }
        l[h] = s > 0.0f ? 1.0f / s : 0.0f;
        if (ms) ms[2 * h] = m, ms[2 * h + 1] = s;
        memset(o + h * d_v, 0, (size_t)d_v * sizeof(float));
    }
    for (int64_t c = 0; c < nc; c++) {
        const void *vr = (const char *)v + cells[c] * ldv * es;
        for (int64_t h = 0; h < hpt; h++) axpy_kv(o + h * d_v, p[h * nc + c] * l[h], vr, d_v, f32);
    }
}

/* Cells a task widens at a time over a block-typed cache: its scratch stays this many cells
 * (about 0.5 MiB a thread for heads of 256) whatever the context holds. */
#define KV_WIDEN 256
#define KV_MAX_HPT 64 /* attn_group's query heads a task, at most */

/* Floats of a thread's scratch for attention over a block-typed cache (lp_attn_for's kvf): up
 * to KV_WIDEN visible cells' K and V rows of one KV head as f32, their mask values and
 * indices, one part's outputs and (max, sum) per head, and a row's canonical form for the
 * dequantization. */
int64_t lp_attn_kv_floats(int64_t most, int64_t d_k, int64_t d_v) {
    const int64_t d = d_k > d_v ? d_k : d_v, w = most < KV_WIDEN ? most : KV_WIDEN;
    return w * (d_k + d_v + 1 + 2) + KV_MAX_HPT * (d_v + 2) + ((int64_t)lp_wrow_bytes(d) + 3) / 4 + 32;
}

/* attn_group over a cache in ggml blocks (or a mix of f16 and blocks): the task's nc visible
 * cells' K and V rows of its KV head (k, v: that head's part of cell 0's row; ldk, ldv: bytes
 * a cell) widened to f32 in scratch KV_WIDEN cells at a time, attn_group on each part, and the
 * parts merged as they come (the running output rescaled by exp(old max - new max), as
 * lp_attn_merge weighs chunks).  One part (nc <= KV_WIDEN) is attn_group's result as it is. */
static void attn_group_blocks(const float *q, int64_t hpt, int64_t d_k, int64_t d_v, int tk, const uint8_t *k, int64_t ldk,
                              int tv, const uint8_t *v, int64_t ldv, const float *mi, const int64_t *cells, int64_t nc,
                              float scale, float *p, float *o, float *ms, float *kvf) {
    const int64_t w = nc < KV_WIDEN ? (nc > 0 ? nc : 1) : KV_WIDEN;
    int64_t *ix = (int64_t *)kvf; /* [w] 0 .. w-1 */
    float *mc = kvf + 2 * w, *kf = mc + w, *vf_ = kf + w * d_k, *oc = vf_ + w * d_v, *msc = oc + KV_MAX_HPT * d_v;
    lp_wrow wr = lp_wrow_at(msc + 2 * KV_MAX_HPT, d_k > d_v ? d_k : d_v);
    float run_m[KV_MAX_HPT], run_s[KV_MAX_HPT]; /* each head's largest score so far, its softmax's sum against it */
    for (int64_t c0 = 0; c0 < nc || c0 == 0; c0 += w) {
        const int64_t n1 = nc - c0 < w ? nc - c0 : w;
        for (int64_t c = 0; c < n1; c++) {
            ix[c] = c;
            mc[c] = mi[cells[c0 + c]];
            lp_row_to_f32(tk, k + cells[c0 + c] * ldk, d_k, kf + c * d_k, wr);
            lp_row_to_f32(tv, v + cells[c0 + c] * ldv, d_v, vf_ + c * d_v, wr);
        }
        if (c0 == 0) { /* the first part straight into o */
            attn_group(q, hpt, d_k, d_v, kf, vf_, d_k, d_v, mc, ix, n1, scale, p, o, msc, 1);
            for (int64_t h = 0; h < hpt; h++) run_m[h] = msc[2 * h], run_s[h] = msc[2 * h + 1];
            continue;
        }
        attn_group(q, hpt, d_k, d_v, kf, vf_, d_k, d_v, mc, ix, n1, scale, p, oc, msc, 1);
        for (int64_t h = 0; h < hpt; h++) {
            const float m1 = msc[2 * h];
            if (m1 == -INFINITY) continue; /* this part shows head h nothing */
            const float m = run_m[h] > m1 ? run_m[h] : m1;
            const float a = run_m[h] == -INFINITY ? 0.0f : run_s[h] * expf(run_m[h] - m), b = msc[2 * h + 1] * expf(m1 - m);
            const float inv = 1.0f / (a + b);
            float *oh = o + h * d_v;
            const float *och = oc + h * d_v;
#pragma omp simd
            for (int64_t j = 0; j < d_v; j++) oh[j] = (a * oh[j] + b * och[j]) * inv;
            run_m[h] = m, run_s[h] = a + b;
        }
    }
    if (ms)
        for (int64_t h = 0; h < hpt; h++) ms[2 * h] = run_m[h], ms[2 * h + 1] = run_s[h];
}

/* The cache and layout lp_attn_for's and lp_attn_det_for's tasks read. */
typedef struct {
    const float *q, *mask;
    const int64_t *ptr, *cells, *cell_off;
    const void *k, *v;
    int64_t ldq, n_head, d_k, d_v, n_kv, ldo, hpt, r, ldk, ldv, kcell, vcell, khead, vhead;
    int tk, tv, f16, det; /* det: lp_attn_det_for's (f16 caches take attn_det_x86.c where it applies) */
    float scale;
} attn_args;

/* Task (row i, query heads h0.., chunk ch of n_chunk): its output into o (and ms: NULL, or
 * the chunk's (max, sum) per head). */
static void attn_task(const attn_args *a, int64_t i, int64_t h0, int64_t ch, int64_t n_chunk, float *o, float *ms, float *p,
                      float *kvf) {
    const int64_t hk = h0 / a->r, off = a->cell_off ? a->cell_off[i] : 0, nc = a->ptr[i + 1] - a->ptr[i];
    const int64_t c0 = nc * ch / n_chunk, c1 = nc * (ch + 1) / n_chunk;
    const float *q = a->q + i * a->ldq + h0 * a->d_k, *mi = a->mask + i * a->n_kv;
    const int64_t *cells = a->cells + a->ptr[i] + c0;
    if (a->f16 && a->det &&
        lp_attn_group_det(q, a->hpt, a->d_k, a->d_v, (const uint16_t *)a->k + off * a->ldk + hk * a->d_k,
                          (const uint16_t *)a->v + off * a->ldv + hk * a->d_v, a->ldk, a->ldv, mi, cells, c1 - c0, a->scale, p, o, ms))
        return;
    if (a->f16)
        attn_group(q, a->hpt, a->d_k, a->d_v, (const uint16_t *)a->k + off * a->ldk + hk * a->d_k,
                   (const uint16_t *)a->v + off * a->ldv + hk * a->d_v, a->ldk, a->ldv, mi, cells, c1 - c0, a->scale, p, o, ms, 0);
    else
        attn_group_blocks(q, a->hpt, a->d_k, a->d_v, a->tk, (const uint8_t *)a->k + off * a->kcell + hk * a->khead, a->kcell,
                          a->tv, (const uint8_t *)a->v + off * a->vcell + hk * a->vhead, a->vcell, mi, cells, c1 - c0,
                          a->scale, p, o, ms, kvf);
}

static attn_args attn_at(const float *q, int64_t ldq, int64_t n_head, int64_t n_head_kv, int64_t d_k, int64_t d_v, int tk,
                         const void *k, int tv, const void *v, int64_t n_kv, const float *mask, const int64_t *ptr,
                         const int64_t *cells, float scale, int64_t ldo, int64_t hpt, const int64_t *cell_off) {
    attn_args a = {q, mask, ptr, cells, cell_off, k, v, ldq, n_head, d_k, d_v, n_kv, ldo, hpt, n_head / n_head_kv,
                   n_head_kv * d_k, n_head_kv * d_v, 0, 0, 0, 0, tk, tv, tk == LP_F16 && tv == LP_F16, 0, scale};
    /* a block-typed cache in bytes: a cell's row, a KV head's part of it */
    a.kcell = lp_kv_row_bytes(tk, a.ldk), a.vcell = lp_kv_row_bytes(tv, a.ldv);
    a.khead = lp_kv_row_bytes(tk, d_k), a.vhead = lp_kv_row_bytes(tv, d_v);
    return a;
}

/* lp_attn_kv's tasks (one per (row, group of hpt query heads), or per chunk of its visible
 * cells: n_chunk, lp_attn_chunks), split among the threads of the enclosing parallel region
 * (which meet after it); p: this thread's scratch of lp_most_visible() * hpt floats; part: the
 * chunks' partials, lp_attn_part_floats() (NULL when n_chunk is 1).  Row i's output is out +
 * i * ldo.  cell_off (NULL: all 0) [n]: where row i's cells start in k and v, in cells (its
 * stream's offset when the ubatch spans several streams).  k, v: cells of tk / tv (f16, or
 * ggml blocks, lp_kv_types_ok); kvf: this thread's lp_attn_kv_floats() where a type is blocks.
 * row_chunks (NULL: every row n_chunk): each row's own chunk count (<= n_chunk: lp_attn_chunks of that
 * row alone), so that each row's tasks and merge are the ones it has alone, all rows' tasks shared
 * among the threads at once (lp_layers passes them always: a row's bits do not depend on the
 * ubatch it is in, so a speculative verification or a server step gives the one-row step's).  lp_attn_for's sinks (NULL,
 * or [n_head]): each head's sink logit in its softmax's sum (gpt-oss). */
/* Where task (row i, heads h0, chunk ch of the row's nch) writes: o, and ms (NULL: not needed).  A chunk's
 * partials go to slot s's place in part (s: the row itself, or the thread's own slot, attn_rows_for). */
static float *task_out(const attn_args *a, int64_t i, int64_t s, int64_t h0, int64_t ch, int64_t nch, int64_t n_chunk,
                       float *out, float *part, float *part_ms, float **ms) {
    if (nch == 1) return out + i * a->ldo + h0 * a->d_v;
    *ms = part_ms + ((s * n_chunk + ch) * a->n_head + h0) * 2;
    return part + ((s * n_chunk + ch) * a->n_head + h0) * a->d_v;
}

/* --deterministic's rows i and i + 1 (heads h0.., chunk ch of each) as one lp_attn_pair_det where both have that
 * chunk over one stream's f16 cells and the level has the pair form; 0: run them alone.  p: 2 hpt x most floats.
 * Their partials in slots s, s + 1 (task_out). */
static int pair_task(const attn_args *a, int64_t i, int64_t s, int64_t h0, int64_t ch, int64_t n, int64_t n_chunk,
                     float *out, float *part, float *part_ms, const int64_t *row_chunks, float *p) {
    if (i + 1 >= n || ch >= row_chunks[i] || ch >= row_chunks[i + 1]) return 0;
    const int64_t off = a->cell_off ? a->cell_off[i] : 0, hk = h0 / a->r;
    if (a->cell_off && a->cell_off[i + 1] != off) return 0;
    lp_attn_det_row r[2];
    for (int w = 0; w < 2; w++) {
        const int64_t j = i + w, nc = a->ptr[j + 1] - a->ptr[j], nch = row_chunks[j];
        float *ms = NULL, *o = task_out(a, j, s + w, h0, ch, nch, n_chunk, out, part, part_ms, &ms);
        r[w] = (lp_attn_det_row){a->q + j * a->ldq + h0 * a->d_k, a->mask + j * a->n_kv, a->cells + a->ptr[j],
                                 nc * ch / nch, nc * (ch + 1) / nch, o, ms};
    }
    return lp_attn_pair_det(&r[0], &r[1], a->hpt, a->d_k, a->d_v, (const uint16_t *)a->k + off * a->ldk + hk * a->d_k,
                            (const uint16_t *)a->v + off * a->ldv + hk * a->d_v, a->ldk, a->ldv, a->scale, p);
}

/* Rows i0 .. i0 + nr (a task's one or two) with heads h0..: chunk ch of each row that has it, its partials in slots
 * s0 + (i - i0) (task_out). */
static void unit_chunk(const attn_args *a, int64_t i0, int64_t nr, int64_t s0, int64_t h0, int64_t ch, int64_t n,
                       int64_t n_chunk, float *out, float *part, float *part_ms, float *p, float *kvf,
                       const int64_t *row_chunks, const float *sinks) {
    if (nr == 2 && pair_task(a, i0, s0, h0, ch, n, n_chunk, out, part, part_ms, row_chunks, p)) return;
    for (int64_t i = i0; i < i0 + nr && i < n; i++) {
        const int64_t nch = row_chunks ? row_chunks[i] : n_chunk;
        if (ch >= nch) continue;
        float ms1[2 * KV_MAX_HPT], *ms = sinks ? ms1 : NULL; /* sinks, one chunk: the sink's share is taken below */
        float *o = task_out(a, i, s0 + i - i0, h0, ch, nch, n_chunk, out, part, part_ms, &ms);
        attn_task(a, i, h0, ch, nch, o, ms, p, kvf);
        if (sinks && nch == 1) lp_attn_sink_scale(o, a->hpt, a->d_v, ms, sinks + h0);
    }
}

/* Row i's heads h0 .. h1 merged from slot s's chunks (a row of one chunk has its output already). */
static void merge_row(const attn_args *a, int64_t i, int64_t s, int64_t h0, int64_t h1, int64_t nch, int64_t n_chunk,
                      float *out, const float *part, const float *part_ms, const float *sinks) {
    if (nch == 1) return;
    const int64_t n_head = a->n_head, d_v = a->d_v;
    for (int64_t h = h0; h < h1; h++)
        lp_attn_merge(part + (s * n_chunk * n_head + h) * d_v, n_head * d_v, part_ms + (s * n_chunk * n_head + h) * 2,
                      n_head * 2, nch, d_v, sinks ? sinks[h] : -INFINITY, out + i * a->ldo + h * d_v);
}

/* The tasks: a unit of one row (or two: pair_task) and one head group.  Where the units and groups alone give every
 * thread 4 tasks (a prompt), a task runs its rows' chunks one after another and merges them at once, the partials in
 * the thread's own slots of part (in its cache: the rows' own places, 16 MB for Gemma 3's 512 rows x 8 chunks,
 * went out to memory and back; lp_attn_det_f16 of that causal prompt with two threads' chunks, run at one,
 * 4.3-5.1 -> 3.8-4.0 ms, Zen 5);
 * else (a decode's row, a few) every (unit, group, chunk) is a task and the merge follows them all.  Either way
 * each chunk and merge is the same arithmetic: a row's bits do not depend on the schedule. */
static void attn_rows_for(const attn_args *a, int64_t n, float *out, int64_t n_chunk, float *p, float *part, float *kvf,
                          const int64_t *row_chunks, const float *sinks) {
    const int64_t n_head = a->n_head, hpt = a->hpt, G = n_head / hpt;
    if (n_chunk < 1 || part == NULL) n_chunk = 1;
    float *part_ms = n_chunk > 1 ? part + n * n_chunk * n_head * a->d_v : NULL; /* [n, n_chunk, n_head, 2] after the outputs */
    const int64_t two = a->det && a->f16 && row_chunks && !sinks ? 2 : 1; /* det: rows in twos (pair_task), a task a pair; sinks: alone */
    const int64_t nu = (n + two - 1) / two, nth = omp_get_num_threads();
    if (n_chunk > 1 && nu * G >= 4 * nth && n >= two * nth) { /* (every thread computes the same condition) */
        const int64_t s0 = two * omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < nu * G; t++) {
            const int64_t u = t / G, h0 = t % G * hpt;
            int64_t most = 1;
            for (int64_t i = u * two; i < (u + 1) * two && i < n; i++) most = row_chunks && row_chunks[i] > most ? row_chunks[i] : most;
            if (!row_chunks) most = n_chunk;
            for (int64_t ch = 0; ch < most; ch++)
                unit_chunk(a, u * two, two, s0, h0, ch, n, n_chunk, out, part, part_ms, p, kvf, row_chunks, sinks);
            for (int64_t i = u * two; i < (u + 1) * two && i < n; i++)
                merge_row(a, i, s0 + i - u * two, h0, h0 + hpt, row_chunks ? row_chunks[i] : n_chunk, n_chunk, out, part,
                          part_ms, sinks);
        }
        return;
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < nu * G * n_chunk; t++) {
        const int64_t ch = t % n_chunk, g = t / n_chunk, u = g / G, h0 = g % G * hpt;
        unit_chunk(a, u * two, two, u * two, h0, ch, n, n_chunk, out, part, part_ms, p, kvf, row_chunks, sinks);
    }
    if (n_chunk == 1) return;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < n * n_head; t++) {
        const int64_t i = t / n_head, h = t % n_head;
        merge_row(a, i, i, h, h + 1, row_chunks ? row_chunks[i] : n_chunk, n_chunk, out, part, part_ms, sinks);
    }
}

void lp_attn_det_for(const float *q, int64_t n, int64_t ldq, int64_t n_head, int64_t n_head_kv, int64_t d_k,
                     int64_t d_v, int tk, const void *k, int tv, const void *v, int64_t n_kv, const float *mask,
                     const int64_t *ptr, const int64_t *cells, float scale, float *out, int64_t ldo, int64_t hpt,
                     int64_t n_chunk, float *p, float *part, const int64_t *cell_off, float *kvf, const int64_t *row_chunks) {
    attn_args a = attn_at(q, ldq, n_head, n_head_kv, d_k, d_v, tk, k, tv, v, n_kv, mask, ptr, cells, scale, ldo, hpt, cell_off);
    a.det = 1;
    attn_rows_for(&a, n, out, n_chunk, p, part, kvf, row_chunks, NULL);
}

void lp_attn_for(const float *q, int64_t n, int64_t ldq, int64_t n_head, int64_t n_head_kv, int64_t d_k,
                 int64_t d_v, int tk, const void *k, int tv, const void *v, int64_t n_kv, const float *mask,
                 const int64_t *ptr, const int64_t *cells, float scale, float *out, int64_t ldo, int64_t hpt,
                 int64_t n_chunk, float *p, float *part, const int64_t *cell_off, float *kvf, const int64_t *row_chunks,
                 const float *sinks) {
    const attn_args a = attn_at(q, ldq, n_head, n_head_kv, d_k, d_v, tk, k, tv, v, n_kv, mask, ptr, cells, scale, ldo, hpt,
                                cell_off);
    attn_rows_for(&a, n, out, n_chunk, p, part, kvf, row_chunks, sinks);
}
