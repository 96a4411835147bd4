/* The KV cache's block types (-ctk / -ctv q8_0, q4_0, q4_1, q5_0, q5_1): a row of K or V
 * values quantized into ggml's blocks of 32 as a decode stores it (the attention reads the
 * rows back with quants.c lp_row_to_f32).  The quantizers are ggml's quantize_row_*_ref, bit for bit (the
 * bytes llamapy's Python quantize and the gguf package write: tests/test_kernels.py), so the
 * fused decode path and the per-op path store the same cells.  Portable C: a row is a few
 * hundred values a layer and token. */
#include "kv_quant.h"
#include "ops.h"

static uint16_t f16_bits(float f) {
    const _Float16 h = (_Float16)f; /* round to nearest even, as GGML_FP32_TO_FP16 */
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

/* The value of largest magnitude (the first of equal ones), ggml's "max" of q4_0 / q5_0. */
static float signed_absmax(const float *x) {
    float a = 0.0f, m = 0.0f;
    for (int j = 0; j < 32; j++)
        if (a < fabsf(x[j])) {
            a = fabsf(x[j]);
            m = x[j];
        }
    return m;
}

static void block_q8_0(const float *x, uint8_t *y) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]); /* ggml's MAX */
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = f16_bits(d);
    memcpy(y, &dh, 2);
    for (int j = 0; j < 32; j++) y[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

static void block_q4_0(const float *x, uint8_t *y) {
    const float d = signed_absmax(x) / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = f16_bits(d);
    memcpy(y, &dh, 2);
    for (int j = 0; j < 16; j++) {
        const int8_t a = (int8_t)(x[j] * id + 8.5f), b = (int8_t)(x[16 + j] * id + 8.5f);
        y[2 + j] = (uint8_t)((a < 15 ? a : 15) | ((b < 15 ? b : 15) << 4));
    }
}

/* The affine types' block head (q4_1, q5_1): d = (max - min) / levels and m = min as f16 into
 * y[0..4); returns 1 / d (0 for a constant block) and min in *mn. */
static float affine_head(const float *x, float levels, uint8_t *y, float *mn) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < 32; j++) {
        lo = x[j] < lo ? x[j] : lo;
        hi = x[j] > hi ? x[j] : hi;
    }
    const float d = (hi - lo) / levels;
    const uint16_t dh = f16_bits(d), mh = f16_bits(lo);
    memcpy(y, &dh, 2);
    memcpy(y + 2, &mh, 2);
    *mn = lo;
    return d != 0.0f ? 1.0f / d : 0.0f;
}

static void block_q4_1(const float *x, uint8_t *y) {
    float mn;
    const float id = affine_head(x, 15.0f, y, &mn);
    for (int j = 0; j < 16; j++) {
        const int8_t a = (int8_t)((x[j] - mn) * id + 0.5f), b = (int8_t)((x[16 + j] - mn) * id + 0.5f);
        y[4 + j] = (uint8_t)((a < 15 ? a : 15) | ((b < 15 ? b : 15) << 4));
    }
}

static void block_q5_0(const float *x, uint8_t *y) {
    const float d = signed_absmax(x) / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = f16_bits(d);
    memcpy(y, &dh, 2);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int8_t a = (int8_t)(x[j] * id + 16.5f), b = (int8_t)(x[16 + j] * id + 16.5f);
        a = a < 31 ? a : 31, b = b < 31 ? b : 31;
        y[6 + j] = (uint8_t)((a & 0x0F) | ((b & 0x0F) << 4));
        qh |= ((uint32_t)(a & 0x10) >> 4) << j;
        qh |= ((uint32_t)(b & 0x10) >> 4) << (j + 16);
    }
    memcpy(y + 2, &qh, 4);
}

static void block_q5_1(const float *x, uint8_t *y) {
    float mn;
    const float id = affine_head(x, 31.0f, y, &mn);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        const uint8_t a = (uint8_t)((x[j] - mn) * id + 0.5f), b = (uint8_t)((x[16 + j] - mn) * id + 0.5f);
        y[8 + j] = (uint8_t)((a & 0x0F) | ((b & 0x0F) << 4));
        qh |= ((uint32_t)(a & 0x10) >> 4) << j;
        qh |= ((uint32_t)(b & 0x10) >> 4) << (j + 16);
    }
    memcpy(y + 4, &qh, 4);
}

int lp_kv_type_ok(int type) {
    return type == LP_F16 || type == LP_Q8_0 || type == LP_Q4_0 || type == LP_Q4_1 || type == LP_Q5_0 || type == LP_Q5_1;
}

int lp_kv_types_ok(int tk, int tv, int64_t d_k, int64_t d_v) {
    return lp_kv_type_ok(tk) && lp_kv_type_ok(tv) && (tk == LP_F16 || d_k % 32 == 0) && (tv == LP_F16 || d_v % 32 == 0);
}

void lp_kv_store(int type, void *dst, const float *x, int64_t n) {
    if (type == LP_F16) {
        lp_store_f16((uint16_t *)dst, x, n);
        return;
    }
    const int bb = lp_block_bytes(type);
    uint8_t *y = (uint8_t *)dst;
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + 32 * b;
        uint8_t *yb = y + b * bb;
        switch (type) {
        case LP_Q8_0: block_q8_0(xb, yb); break;
        case LP_Q4_0: block_q4_0(xb, yb); break;
        case LP_Q4_1: block_q4_1(xb, yb); break;
        case LP_Q5_0: block_q5_0(xb, yb); break;
        default: block_q5_1(xb, yb); break;
        }
    }
}

/* Exported: rows [n_rows, n] of x into dst (lp_row_bytes(type, n) bytes a row; f16: 2 n). */
void lp_kv_quantize(int type, const float *x, int64_t n_rows, int64_t n, void *dst) {
    const int64_t rb = lp_kv_row_bytes(type, n);
    for (int64_t r = 0; r < n_rows; r++) lp_kv_store(type, (uint8_t *)dst + r * rb, x + r * n, n);
}
