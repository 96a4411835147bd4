/* Checks one build of llamapy's CPU kernels against another (normally a SIMD level against
 * the portable build of the same source) on random inputs, kernel by kernel.  Used by
 * tests/test_kernel_harness.py natively (avx2 / avx512 vs scalar) and, cross-compiled, under
 * qemu-aarch64 (neon, neon+dotprod vs scalar), where Python cannot load the libraries.
 *
 *   kernel_check LIB_UNDER_TEST LIB_REFERENCE
 * Dequantization and embedding rows must be bit-identical (both are ggml's arithmetic);
 * products, norms, RoPE and attention equal up to fp32 summation order.  Prints one line per
 * check and exits 1 if any failed. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*dequant_fn)(int, const uint8_t *, int64_t, int64_t, int64_t, float *);
typedef void (*rows_fn)(int, const uint8_t *, int64_t, const int64_t *, int64_t, float *);
typedef int (*mm_fn)(int, const uint8_t *, int64_t, int64_t, const float *, int64_t, float *, int64_t, int);
typedef void (*norm_fn)(const float *, const float *, int64_t, int64_t, float, float *);
typedef void (*glu_fn)(const float *, int64_t, int64_t, int, float *);
typedef void (*rope_fn)(float *, int64_t, int64_t, int64_t, int64_t, int64_t, const float *, const float *, int);
typedef int (*attn_fn)(const float *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const uint16_t *,
                       const uint16_t *, int64_t, const float *, const int64_t *, const int64_t *, float, float *);
typedef int (*attn_kv_fn)(const float *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, const void *, int,
                          const void *, int64_t, const float *, const int64_t *, const int64_t *, float, float *);
typedef int (*tiles_fn)(const float *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const uint16_t *,
                        const uint16_t *, int64_t, const float *, float, float *, int64_t);
typedef int64_t (*argmax_fn)(const float *, int64_t);
typedef int64_t (*topk_fn)(const float *, int64_t, int64_t, int64_t *, float *);
typedef const char *(*isa_fn)(void);

typedef struct {
    void *h;
    const char *isa;
    dequant_fn dequant;
    rows_fn get_rows;
    mm_fn mm;
    norm_fn rms_norm;
    glu_fn glu;
    rope_fn rope;
    attn_fn attn;
    attn_kv_fn attn_kv;
    tiles_fn tiles;
    argmax_fn argmax;
    topk_fn topk;
} lib_t;

static int failures = 0;

static lib_t open_lib(const char *path) {
    lib_t l;
    l.h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!l.h) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        exit(2);
    }
    l.isa = ((isa_fn)dlsym(l.h, "lp_isa"))();
    l.dequant = (dequant_fn)dlsym(l.h, "lp_dequant");
    l.get_rows = (rows_fn)dlsym(l.h, "lp_get_rows");
    l.mm = (mm_fn)dlsym(l.h, "lp_mm");
    l.rms_norm = (norm_fn)dlsym(l.h, "lp_rms_norm");
    l.glu = (glu_fn)dlsym(l.h, "lp_glu");
    l.rope = (rope_fn)dlsym(l.h, "lp_rope");
    l.attn = (attn_fn)dlsym(l.h, "lp_attn_f16");
    l.attn_kv = (attn_kv_fn)dlsym(l.h, "lp_attn_kv");
    l.tiles = (tiles_fn)dlsym(l.h, "lp_attn_tiles_f16");
    l.argmax = (argmax_fn)dlsym(l.h, "lp_argmax");
    l.topk = (topk_fn)dlsym(l.h, "lp_topk");
    return l;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float frand(void) { return (float)(rnd() % 2000001) / 1000000.0f - 1.0f; } /* [-1, 1] */

static uint16_t to_f16(float f) {
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

typedef struct {
    int type, elems, bytes;
    const char *name;
    int f16[2]; /* offsets of the f16 scale fields, -1: none */
} type_t;

static const type_t TYPES[] = {
    {2, 32, 18, "Q4_0", {0, -1}},    {3, 32, 20, "Q4_1", {0, 2}},    {6, 32, 22, "Q5_0", {0, -1}},
    {7, 32, 24, "Q5_1", {0, 2}},     {8, 32, 34, "Q8_0", {0, -1}},   {10, 256, 84, "Q2_K", {80, 82}},
    {11, 256, 110, "Q3_K", {108, -1}}, {12, 256, 144, "Q4_K", {0, 2}}, {13, 256, 176, "Q5_K", {0, 2}},
    {14, 256, 210, "Q6_K", {208, -1}}, {1, 1, 2, "F16", {-1, -1}},     {30, 1, 2, "BF16", {-1, -1}},
    {0, 1, 4, "F32", {-1, -1}},       {20, 32, 18, "IQ4_NL", {0, -1}}, {23, 256, 136, "IQ4_XS", {0, -1}},
    {39, 32, 17, "MXFP4", {-1, -1}}, /* its E8M0 scale byte: random_matrix keeps it small */
};

/* A random matrix [n_out, n_in] of type t: random bytes with sane scales, or random floats. */
static uint8_t *random_matrix(const type_t *t, int64_t n_out, int64_t n_in) {
    const int64_t nblk = n_out * n_in / t->elems;
    uint8_t *w = malloc((size_t)(nblk * t->bytes));
    for (int64_t b = 0; b < nblk; b++) {
        uint8_t *p = w + b * t->bytes;
        if (t->type == 0) {
            const float f = frand();
            memcpy(p, &f, 4);
        } else if (t->type == 1) {
            const uint16_t h = to_f16(frand());
            memcpy(p, &h, 2);
        } else if (t->type == 30) {
            const float f = frand();
            uint32_t u;
            memcpy(&u, &f, 4);
            const uint16_t h = (uint16_t)(u >> 16);
            memcpy(p, &h, 2);
        } else {
            for (int i = 0; i < t->bytes; i++) p[i] = (uint8_t)rnd();
            for (int k = 0; k < 2; k++)
                if (t->f16[k] >= 0) {
                    const uint16_t h = to_f16(0.002f + 0.03f * (float)(rnd() % 1000) / 1000.0f);
                    memcpy(p + t->f16[k], &h, 2);
                }
            if (t->type == 39) p[0] = (uint8_t)(116 + rnd() % 8); /* MXFP4: a scale of 2^-12 .. 2^-5 */
        }
    }
    return w;
}

static void report(const char *what, const char *type, double err, double tol) {
    const int ok = err <= tol;
    failures += !ok;
    printf("%-4s %-28s %-5s max err %.3g (tol %.3g)\n", ok ? "ok" : "FAIL", what, type, err, tol);
}

static double max_abs(const float *a, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

static double max_diff(const float *a, const float *b, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = isnan(a[i]) || isnan(b[i]) ? INFINITY : fabs((double)a[i] - b[i]);
        m = d > m ? d : m;
    }
    return m;
}

static void check_type(const lib_t *u, const lib_t *r, const type_t *t) {
    const int64_t n_out = 40, n_in = t->elems == 256 ? 512 : 160;
    uint8_t *w = random_matrix(t, n_out, n_in);
    float *a = malloc(sizeof(float) * n_out * n_in), *b = malloc(sizeof(float) * n_out * n_in);
    u->dequant(t->type, w, n_in, 0, n_out, a);
    r->dequant(t->type, w, n_in, 0, n_out, b);
    report("dequant (bit for bit)", t->name, memcmp(a, b, sizeof(float) * n_out * n_in) ? 1.0 : 0.0, 0.0);
    const int64_t ids[4] = {39, 0, 7, 7};
    u->get_rows(t->type, w, n_in, ids, 4, a);
    r->get_rows(t->type, w, n_in, ids, 4, b);
    report("get_rows (bit for bit)", t->name, memcmp(a, b, sizeof(float) * 4 * n_in) ? 1.0 : 0.0, 0.0);
    const int rows[] = {1, 2, 3, 5, 8, 9, 17}; /* f16 / bf16: one weight row at a time up to 8 */
    for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
        const int n = rows[k];
        float *x = malloc(sizeof(float) * n * n_in), *ya = malloc(sizeof(float) * n * n_out), *yb = malloc(sizeof(float) * n * n_out);
        for (int64_t i = 0; i < n * n_in; i++) x[i] = frand();
        for (int64_t i = 0; i < n * n_out; i++) ya[i] = yb[i] = 0.5f;
        const int ra = u->mm(t->type, w, n_out, n_in, x, n, ya, n_out, 1), rb = r->mm(t->type, w, n_out, n_in, x, n, yb, n_out, 1);
        char what[64];
        snprintf(what, sizeof what, "mm %d row%s (+= y)", n, n > 1 ? "s" : "");
        /* a bf16 build multiplies 5 rows or more of the coarse types in bf16 (mm.c) */
        const int bf16 = strstr(u->isa, "bf16") && n > 1 && (t->type == 2 || t->type == 3 || t->type == 10 ||
                                                              t->type == 11 || t->type == 30);
        /* up to 8 rows (mm.c LP_FEW_ROWS): integer products, where x86 reads Q4_0 as nibbles 0..15
         * with a minimum of -8 d (two terms ~8x the result: fp32 rounding amplified by the cancellation) */
        /* x86 reads Q4_K / Q6_K's 1-4 rows (with VNNI: not on AMD Zen 4, a looser bound there) and
         * without VNNI their 5-63 rows (row1q8k_x86.c; mm.c q8k_chunk, q8k4_x86.c) against Q8_K
         * activations (as llama.cpp's ggml_vec_dot_q4_K_q8_K): int8 rounding of x, ~0.3-0.9% of the result here;
         * and with AVX-512 VNNI their 2-127 rows (q8kz_x86.c) */
        const int q8k = !strncmp(u->isa, "avx", 3) && (t->type == 12 || t->type == 14) &&
                        (n <= 4 || (n < 64 && !strstr(u->isa, "vnni")) ||
                         (n >= 2 && n < 128 && strstr(u->isa, "avx512") && strstr(u->isa, "vnni")));
        /* and one row of the 32-element types against ggml's Q8_0 form (row1_x86.h lp_row1_i8) */
        const int q8 = !strncmp(u->isa, "avx", 3) && n == 1 && (t->type == 2 || t->type == 3 || t->type == 6 || t->type == 7 || t->type == 8);
        /* and at the AVX2 level without VNNI the 4- and 5-bit 32-element types' rows from 2 in int8 lanes
         * (lanes8_x86.c: Q8_0-form activations, as the one row; mm_xprep.inc lanes8_rows, rows8_few) */
        const int l8 = !strcmp(u->isa, "avx2") && n >= 2 && (t->type == 2 || t->type == 3 || t->type == 6 || t->type == 7);
        report(what, t->name, ra || rb ? INFINITY : max_diff(ya, yb, n * n_out) / (max_abs(yb, n * n_out) + 1e-30),
               q8k || q8 || l8 ? 2e-2 : bf16 && n >= 5 ? 1e-2 : n <= 8 ? 5e-5 : 2e-5);
        free(x), free(ya), free(yb);
    }
    free(w), free(a), free(b);
}

static void check_ops(const lib_t *u, const lib_t *r) {
    enum { N = 5, D = 96, FF = 40 };
    float x[N * D], w[D], a[N * D], b[N * D], gu[N * 2 * FF];
    for (int i = 0; i < N * D; i++) x[i] = 3.0f * frand();
    for (int i = 0; i < D; i++) w[i] = frand();
    u->rms_norm(x, w, N, D, 1e-5f, a);
    r->rms_norm(x, w, N, D, 1e-5f, b);
    report("rms_norm", "f32", max_diff(a, b, N * D) / max_abs(b, N * D), 1e-6);
    for (int i = 0; i < N * 2 * FF; i++) gu[i] = 4.0f * frand();
    for (int gelu = 0; gelu < 2; gelu++) {
        u->glu(gu, N, FF, gelu, a);
        r->glu(gu, N, FF, gelu, b);
        report(gelu ? "geglu" : "swiglu", "f32", max_diff(a, b, N * FF) / max_abs(b, N * FF), 1e-6);
    }
    float c[N * 16], s[N * 16];
    for (int i = 0; i < N * 16; i++) {
        c[i] = cosf((float)i * 0.37f);
        s[i] = sinf((float)i * 0.37f);
    }
    for (int neox = 0; neox < 2; neox++) {
        memcpy(a, x, sizeof a);
        memcpy(b, x, sizeof b);
        u->rope(a, N, D, 3, 32, 32, c, s, neox);
        r->rope(b, N, D, 3, 32, 32, c, s, neox);
        report(neox ? "rope neox" : "rope norm", "f32", max_diff(a, b, N * D) / max_abs(b, N * D), 1e-6);
    }
    enum { V = 1003 }; /* the greedy pick: the first of two equal largest, NaNs never winning, -1 for all NaN */
    float lg[V];
    int64_t diff = 0;
    for (int k = 0; k < 8; k++) {
        for (int i = 0; i < V; i++) lg[i] = 5.0f * frand();
        lg[(k * 131) % V] = lg[(k * 131 + 400) % V] = 9.0f;
        lg[(k * 131 + 1) % V] = NAN;
        diff += u->argmax(lg, V - k) != r->argmax(lg, V - k);
    }
    for (int i = 0; i < V; i++) lg[i] = NAN;
    diff += u->argmax(lg, V) != -1 || r->argmax(lg, V) != -1;
    report("argmax", "f32", (double)diff, 0.0);
    int64_t ia[64], ib[64]; /* the sampler's top-k: the same ids and values, in the same order */
    float va[64], vb[64];
    diff = 0;
    for (int k = 1; k <= 64; k += 21) {
        for (int i = 0; i < V; i++) lg[i] = 5.0f * frand();
        lg[17] = lg[600] = lg[999] = 7.0f;
        lg[18] = NAN;
        diff += u->topk(lg, V, k, ia, va) != r->topk(lg, V, k, ib, vb);
        for (int i = 0; i < k; i++) diff += ia[i] != ib[i] || va[i] != vb[i];
    }
    report("topk", "f32", (double)diff, 0.0);
}

static void check_attention(const lib_t *u, const lib_t *r, int64_t n_head, int64_t n_head_kv, int64_t d) {
    const int64_t n = 5, n_kv = 48, cells = 64;
    float *q = malloc(sizeof(float) * n * n_head * d), *mask = malloc(sizeof(float) * n * n_kv);
    uint16_t *k = malloc(2 * cells * n_head_kv * d), *v = malloc(2 * cells * n_head_kv * d);
    float *a = malloc(sizeof(float) * n * n_head * d), *b = malloc(sizeof(float) * n * n_head * d);
    int64_t ptr[6], vis[5 * 48];
    for (int64_t i = 0; i < n * n_head * d; i++) q[i] = frand();
    for (int64_t i = 0; i < cells * n_head_kv * d; i++) {
        k[i] = to_f16(frand());
        v[i] = to_f16(frand());
    }
    int64_t nv = 0;
    ptr[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t c = 0; c < n_kv; c++) {
            const int see = i < n - 1 && (c == 0 || rnd() % 5 < 2); /* the last row sees nothing */
            mask[i * n_kv + c] = see ? 0.0f : -INFINITY;
            if (see) vis[nv++] = c;
        }
        ptr[i + 1] = nv;
    }
    const int ra = u->attn(q, n, n_head * d, n_head, n_head_kv, d, d, k, v, n_kv, mask, ptr, vis, 0.125f, a);
    const int rb = r->attn(q, n, n_head * d, n_head, n_head_kv, d, d, k, v, n_kv, mask, ptr, vis, 0.125f, b);
    char what[64];
    snprintf(what, sizeof what, "attention %lldx%lld heads d=%lld", (long long)n_head, (long long)n_head_kv, (long long)d);
    report(what, "f16", ra || rb ? INFINITY : max_diff(a, b, n * n_head * d) / max_abs(b, n * n_head * d), 1e-5);
    free(q), free(mask), free(k), free(v), free(a), free(b);
}

/* The few-row attention over a KV cache in ggml's blocks (-ctk / -ctv): K of type tk, V of tv
 * (random blocks with sane scales), rows seeing random cells. */
static void check_attention_blocks(const lib_t *u, const lib_t *r, const type_t *tk, const type_t *tv, int64_t n_head,
                                   int64_t n_head_kv, int64_t d) {
    const int64_t n = 3, n_kv = 200, cells = 208;
    float *q = malloc(sizeof(float) * n * n_head * d), *mask = malloc(sizeof(float) * n * n_kv);
    uint8_t *k = random_matrix(tk, cells, n_head_kv * d), *v = random_matrix(tv, cells, n_head_kv * d);
    float *a = malloc(sizeof(float) * n * n_head * d), *b = malloc(sizeof(float) * n * n_head * d);
    int64_t ptr[4], vis[3 * 200];
    for (int64_t i = 0; i < n * n_head * d; i++) q[i] = frand();
    int64_t nv = 0;
    ptr[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t c = 0; c < n_kv; c++) {
            const int see = c == 0 || rnd() % 3 == 0;
            mask[i * n_kv + c] = see ? 0.0f : -INFINITY;
            if (see) vis[nv++] = c;
        }
        ptr[i + 1] = nv;
    }
    const int ra = u->attn_kv(q, n, n_head * d, n_head, n_head_kv, d, d, tk->type, k, tv->type, v, n_kv, mask, ptr, vis,
                              0.125f, a);
    const int rb = r->attn_kv(q, n, n_head * d, n_head, n_head_kv, d, d, tk->type, k, tv->type, v, n_kv, mask, ptr, vis,
                              0.125f, b);
    char what[96];
    snprintf(what, sizeof what, "attention over %s K / %s V, %lldx%lld heads d=%lld", tk->name, tv->name, (long long)n_head,
             (long long)n_head_kv, (long long)d);
    report(what, "kv", ra || rb ? INFINITY : max_diff(a, b, n * n_head * d) / max_abs(b, n * n_head * d), 1e-5);
    free(q), free(mask), free(k), free(v), free(a), free(b);
}

/* The many-row attention (attn_tiles.c): a causal prompt of 37 rows after 5 held cells, 11
 * cells past it, row 3 seeing nothing. */
static void check_tiles(const lib_t *u, const lib_t *r, int64_t n_head, int64_t n_head_kv, int64_t d) {
    const int64_t n = 37, n_kv = 5 + n + 11;
    float *q = malloc(sizeof(float) * n * n_head * d), *mask = malloc(sizeof(float) * n * n_kv);
    uint16_t *k = malloc(2 * n_kv * n_head_kv * d), *v = malloc(2 * n_kv * n_head_kv * d);
    float *a = malloc(sizeof(float) * n * n_head * d), *b = malloc(sizeof(float) * n * n_head * d);
    for (int64_t i = 0; i < n * n_head * d; i++) q[i] = frand();
    for (int64_t i = 0; i < n_kv * n_head_kv * d; i++) {
        k[i] = to_f16(frand());
        v[i] = to_f16(frand());
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < n_kv; c++) mask[i * n_kv + c] = c <= 5 + i && i != 3 ? 0.0f : -INFINITY;
    const int ra = u->tiles(q, n, n_head * d, n_head, n_head_kv, d, d, k, v, n_kv, mask, 0.125f, a, n_head * d);
    const int rb = r->tiles(q, n, n_head * d, n_head, n_head_kv, d, d, k, v, n_kv, mask, 0.125f, b, n_head * d);
    char what[64];
    snprintf(what, sizeof what, "attention tiles %lldx%lld d=%lld", (long long)n_head, (long long)n_head_kv, (long long)d);
    report(what, "f16", ra || rb ? INFINITY : max_diff(a, b, n * n_head * d) / max_abs(b, n * n_head * d), 1e-5);
    free(q), free(mask), free(k), free(v), free(a), free(b);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s LIB_UNDER_TEST LIB_REFERENCE\n", argv[0]);
        return 2;
    }
    const lib_t u = open_lib(argv[1]), r = open_lib(argv[2]);
    printf("checking %s against %s\n", u.isa, r.isa);
    for (size_t i = 0; i < sizeof(TYPES) / sizeof(TYPES[0]); i++) check_type(&u, &r, &TYPES[i]);
    check_ops(&u, &r);
    check_attention(&u, &r, 9, 3, 64);
    check_attention(&u, &r, 4, 1, 256);
    check_attention(&u, &r, 6, 2, 32);
    check_attention_blocks(&u, &r, &TYPES[4], &TYPES[4], 9, 3, 64);   /* q8_0 / q8_0 */
    check_attention_blocks(&u, &r, &TYPES[0], &TYPES[1], 4, 1, 256);  /* q4_0 / q4_1 */
    check_attention_blocks(&u, &r, &TYPES[2], &TYPES[10], 6, 2, 32);  /* q5_0 / f16 */
    check_attention_blocks(&u, &r, &TYPES[10], &TYPES[3], 9, 3, 64);  /* f16 / q5_1 */
    check_tiles(&u, &r, 9, 3, 64);
    check_tiles(&u, &r, 4, 1, 256);
    check_tiles(&u, &r, 20, 1, 12);
    printf("%d failed\n", failures);
    return failures != 0;
}
