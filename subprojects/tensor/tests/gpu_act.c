/* gpu: GELU (tanh), SiLU, sigmoid and SwiGLU forward/backward on CUDA equal the CPU reference on fresh
 * random input in f32, bf16 and f16 (16-byte and scalar paths, strided gate/up views), and the
 * PyTorch golden values. */
#include "gpu_common.h"

static uint64_t seed = 100;

/* Host (CPU) tensor of dt with uniform values in [-4, 4) (rounded once to dt). */
static mt_tensor host_rand(mt_dtype dt, int64_t rows, int64_t cols) {
    size_t n = (size_t)(rows * cols);
    float *f = malloc(n * 4);
    mt_test_fill_uniform(f, n, seed++, 7, -4.0f, 4.0f);
    mt_tensor t32 = mt_tensor_2d(f, MT_F32, rows, cols, MT_DEVICE_CPU);
    mt_tensor t = mt_tensor_2d(malloc(n * mt_dtype_size(dt)), dt, rows, cols, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&t, &t32, NULL));
    free(f);
    return t;
}

/* Compares device tensor d with host tensor h (both read as f32). */
static void cmp(const char *what, const mt_tensor *d, const mt_tensor *h, mt_dtype dt) {
    int64_t n = mt_tensor_numel(h);
    float *got = malloc((size_t)n * 4), *want = malloc((size_t)n * 4);
    void *tmp = malloc((size_t)n * mt_dtype_size(dt));
    mt_tensor th = mt_tensor_1d(tmp, dt, n, MT_DEVICE_CPU), src = *d, hs = *h;
    MT_CHECK(mt_tensor_reshape(&src, 1, &n, &src));
    MT_CHECK(mt_tensor_reshape(&hs, 1, &n, &hs));
    MT_CHECK(mt_tensor_copy(&th, &src, NULL));
    mt_tensor g = mt_tensor_1d(got, MT_F32, n, MT_DEVICE_CPU),
              w = mt_tensor_1d(want, MT_F32, n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&g, &th, NULL));
    MT_CHECK(mt_cast(&w, &hs, NULL));
    double tol = dt == MT_F32 ? 1e-5 : dt == MT_F16 ? 1e-3 : 8e-3; /* f16: bf16's / 8 */
    mt_test_close_f32(what, got, want, (size_t)n, tol, tol);
    free(got), free(want), free(tmp);
}

static void run(mt_dtype dt, int64_t R, int64_t C) {
    char what[96];
    mt_arena_reset(ar);
    mt_tensor hx = host_rand(dt, R, C), hd = host_rand(dt, R, C), ho = host_empty(dt, R, C);
    mt_tensor dx = dev(&hx, dt, R, C), dd = dev(&hd, dt, R, C), dout = dev(NULL, dt, R, C);
    const char *names[] = { "gelu", "gelu_bwd", "silu", "silu_bwd", "sigmoid", "sigmoid_bwd" };
    for (int op = 0; op < 6; op++) {
        if (op == 0) {
            MT_CHECK(mt_gelu_fwd(&ho, &hx, NULL));
            MT_CHECK(mt_gelu_fwd(&dout, &dx, NULL));
        } else if (op == 1) {
            MT_CHECK(mt_gelu_bwd(&ho, &hd, &hx, NULL));
            MT_CHECK(mt_gelu_bwd(&dout, &dd, &dx, NULL));
        } else if (op == 2) {
            MT_CHECK(mt_silu_fwd(&ho, &hx, NULL));
            MT_CHECK(mt_silu_fwd(&dout, &dx, NULL));
        } else if (op == 3) {
            MT_CHECK(mt_silu_bwd(&ho, &hd, &hx, NULL));
            MT_CHECK(mt_silu_bwd(&dout, &dd, &dx, NULL));
        } else if (op == 4) {
            MT_CHECK(mt_sigmoid_fwd(&ho, &hx, NULL));
            MT_CHECK(mt_sigmoid_fwd(&dout, &dx, NULL));
        } else { /* (x in y's place: the backward's formula reads any values) */
            MT_CHECK(mt_sigmoid_bwd(&ho, &hd, &hx, NULL));
            MT_CHECK(mt_sigmoid_bwd(&dout, &dd, &dx, NULL));
        }
        snprintf(what, sizeof what, "%s %s %lldx%lld", names[op], mt_dtype_name(dt), (long long)R,
                 (long long)C);
        cmp(what, &dout, &ho, dt);
    }
    if (C % 2 == 0) { /* SwiGLU: fused halves, then separate strided views */
        int64_t F = C / 2;
        mt_tensor hg = host_rand(dt, R, F), hy = host_empty(dt, R, F), hdx = host_empty(dt, R, C);
        mt_tensor dg = dev(&hg, dt, R, F), dy = dev(NULL, dt, R, F), ddx = dev(NULL, dt, R, C);
        MT_CHECK(mt_swiglu_fwd(&hy, &hx, NULL, NULL));
        MT_CHECK(mt_swiglu_fwd(&dy, &dx, NULL, NULL));
        snprintf(what, sizeof what, "swiglu %s %lldx%lld", mt_dtype_name(dt), (long long)R,
                 (long long)C);
        cmp(what, &dy, &hy, dt);
        MT_CHECK(mt_swiglu_bwd(&hdx, NULL, &hg, &hx, NULL, NULL));
        MT_CHECK(mt_swiglu_bwd(&ddx, NULL, &dg, &dx, NULL, NULL));
        snprintf(what, sizeof what, "swiglu_bwd %s %lldx%lld", mt_dtype_name(dt), (long long)R,
                 (long long)C);
        cmp(what, &ddx, &hdx, dt);
        mt_tensor gate, up, dgate, dup, ddx2 = dev(NULL, dt, R, C);
        MT_CHECK(mt_tensor_slice(&dx, 1, 0, F, &gate));
        MT_CHECK(mt_tensor_slice(&dx, 1, F, F, &up));
        MT_CHECK(mt_tensor_slice(&ddx2, 1, 0, F, &dgate));
        MT_CHECK(mt_tensor_slice(&ddx2, 1, F, F, &dup));
        MT_CHECK(mt_swiglu_fwd(&dy, &gate, &up, NULL));
        snprintf(what, sizeof what, "swiglu gate/up %s %lldx%lld", mt_dtype_name(dt), (long long)R,
                 (long long)C);
        cmp(what, &dy, &hy, dt);
        MT_CHECK(mt_swiglu_bwd(&dgate, &dup, &dg, &gate, &up, NULL));
        snprintf(what, sizeof what, "swiglu_bwd gate/up %s %lldx%lld", mt_dtype_name(dt),
                 (long long)R, (long long)C);
        cmp(what, &ddx2, &hdx, dt);
        free(hg.data), free(hy.data), free(hdx.data);
    }
    free(hx.data), free(hd.data), free(ho.data);
}

/* The GPU against the PyTorch golden values directly (f32). */
static void golden(void) {
    mt_arena_reset(ar);
    size_t n;
    float *x = mt_test_golden_f32("act_x.npy", &n, NULL);
    float *ref = mt_test_golden_f32("act_gelu.npy", NULL, NULL);
    float *sw = mt_test_golden_f32("act_swiglu.npy", NULL, NULL), got[7 * 24];
    mt_tensor hx = mt_tensor_2d(x, MT_F32, 7, 24, MT_DEVICE_CPU);
    mt_tensor dx = dev(&hx, MT_F32, 7, 24), dy = dev(NULL, MT_F32, 7, 24),
              dg = dev(NULL, MT_F32, 7, 12);
    mt_tensor hg = mt_tensor_2d(got, MT_F32, 7, 24, MT_DEVICE_CPU),
              hs = mt_tensor_2d(got, MT_F32, 7, 12, MT_DEVICE_CPU);
    MT_CHECK(mt_gelu_fwd(&dy, &dx, NULL));
    MT_CHECK(mt_tensor_copy(&hg, &dy, NULL));
    mt_test_close_f32("gelu cuda vs torch", got, ref, n, 1e-5, 1e-5);
    MT_CHECK(mt_swiglu_fwd(&dg, &dx, NULL, NULL));
    MT_CHECK(mt_tensor_copy(&hs, &dg, NULL));
    mt_test_close_f32("swiglu cuda vs torch", got, sw, n / 2, 1e-5, 1e-5);
    free(x), free(ref), free(sw);
}

int main(void) {
    mt_test_require_gpus(1);
    MT_CHECK(mt_arena_create(mt_device_cuda(0), (size_t)64 << 20, &ar));
    const int64_t shapes[][2] = { { 3, 1000 }, { 5, 77 }, { 64, 4096 }, { 1, 8 }, { 33, 200 } };
    const mt_dtype dtypes[3] = { MT_F32, MT_BF16, MT_F16 };
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 5; s++)
            run(dtypes[d], shapes[s][0], shapes[s][1]);
    golden();
    mt_arena_destroy(ar);
    return mt_test_result();
}
