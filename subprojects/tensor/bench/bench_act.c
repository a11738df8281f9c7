/* GELU (tanh) and SwiGLU forward/backward on the GPU (bf16); GB/s counting bytes read and written
 * once. */
#include <mt/benchkit.h>
#include <mt/tensor.h>

#include <stdio.h>
#include <stdlib.h>

#if MT_HAVE_CUDA
#include <mt/core_cuda.h>

typedef struct {
    int op;       /* 0 gelu_fwd, 1 gelu_bwd, 2 swiglu_fwd, 3 swiglu_bwd */
    int64_t N, F; /* rows; columns (GELU) or SwiGLU's half width */
} act_case;

static mt_status fill_random(mt_tensor *t, uint64_t stream) {
    const int64_t blk = 1 << 20;
    int64_t n = mt_tensor_numel(t), m = n < blk ? n : blk;
    size_t es = mt_dtype_size(t->dtype);
    float *f = malloc((size_t)m * 4);
    void *h = malloc((size_t)m * es);
    MT_REQUIRE(f && h, MT_ERR_OOM, "fill_random");
    for (int64_t i = 0; i < m; i++)
        f[i] = 8.0f * mt_philox_uniform(42, stream, (uint64_t)i) - 4.0f;
    mt_tensor tf = mt_tensor_1d(f, MT_F32, m, MT_DEVICE_CPU),
              th = mt_tensor_1d(h, t->dtype, m, MT_DEVICE_CPU);
    mt_status s = mt_cast(&th, &tf, NULL);
    for (int64_t i = 0; s == MT_OK && i < n; i += m) {
        int64_t len = n - i < m ? n - i : m;
        s = mt_memcpy((char *)t->data + (size_t)i * es, t->device, h, MT_DEVICE_CPU,
                      (size_t)len * es, NULL);
    }
    free(f), free(h);
    return s;
}

static void bench_act(mt_bench_state *st, void *arg) {
    act_case *c = arg;
    mt_arena *ar = NULL;
    int glu = c->op >= 2;
    int64_t wide = glu ? 2 * c->F : c->F;
    int64_t sx[2] = { c->N, wide }, sy[2] = { c->N, c->F };
    mt_tensor x, dx, y, dy;
    mt_status s = mt_arena_create(mt_device_cuda(0),
                                  (size_t)2 * c->N * (2 * wide + 2 * c->F) * 2 + (1u << 20), &ar);
    if (s == MT_OK) s = mt_tensor_alloc(ar, MT_BF16, 2, sx, &x);
    if (s == MT_OK) s = mt_tensor_alloc(ar, MT_BF16, 2, sx, &dx);
    if (s == MT_OK) s = mt_tensor_alloc(ar, MT_BF16, 2, sy, &y);
    if (s == MT_OK) s = mt_tensor_alloc(ar, MT_BF16, 2, sy, &dy);
    if (s == MT_OK) s = fill_random(&x, 1);
    if (s == MT_OK) s = fill_random(&dy, 2);
    if (s != MT_OK) {
        mt_bench_error(st, mt_last_error());
        mt_arena_destroy(ar);
        return;
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    int first = 1;
    while (first || mt_bench_keep_running(st)) {
        cudaEventRecord(e0, 0);
        switch (c->op) {
        case 0:
            s = mt_gelu_fwd(&y, &x, NULL);
            break;
        case 1:
            s = mt_gelu_bwd(&dx, &dy, &x, NULL);
            break;
        case 2:
            s = mt_swiglu_fwd(&y, &x, NULL, NULL);
            break;
        default:
            s = mt_swiglu_bwd(&dx, NULL, &dy, &x, NULL, NULL);
        }
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        if (s != MT_OK) mt_bench_error(st, mt_last_error());
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (!first) mt_bench_set_iteration_time(st, ms * 1e-3);
        first = 0; /* the first call is a warm-up */
    }
    /* gelu fwd: x, y; gelu bwd: dy, x, dx; swiglu fwd: x (2F), y (F); bwd: dy (F), x, dx (2F) */
    int64_t e = c->op == 0   ? 2 * c->N * c->F
                : c->op == 1 ? 3 * c->N * c->F
                : c->op == 2 ? 3 * c->N * c->F
                             : 5 * c->N * c->F;
    mt_bench_set_bytes(st, e * 2);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    mt_arena_destroy(ar);
}
#endif

int main(int argc, char **argv) {
#if MT_HAVE_CUDA
    int ngpu = 0;
    mt_device_count(&ngpu);
    if (ngpu) {
        char name[256];
        mt_device_name(0, name, sizeof name);
        mt_bench_context("device", name);
        static act_case cases[] = { { 0, 16384, 3072 }, { 1, 16384, 3072 }, { 0, 16384, 6400 },
                                    { 1, 16384, 6400 }, { 2, 16384, 4096 }, { 3, 16384, 4096 } };
        static const char *ops[] = { "gelu_fwd", "gelu_bwd", "swiglu_fwd", "swiglu_bwd" };
        static char names[6][96];
        for (int i = 0; i < 6; i++) {
            snprintf(names[i], sizeof names[i], "%s/cuda/bf16_N%lld_F%lld", ops[cases[i].op],
                     (long long)cases[i].N, (long long)cases[i].F);
            mt_bench_register(names[i], bench_act, &cases[i], MT_BENCH_MANUAL_TIME);
        }
    }
#endif
    return mt_bench_main(argc, argv);
}
