/* GELU (tanh) and SwiGLU forward/backward on the GPU (bf16); GB/s counting bytes read and written
 * once. */
#include "bench_common.h"

#if MT_HAVE_CUDA

typedef struct {
    int op;       /* 0 gelu_fwd, 1 gelu_bwd, 2 swiglu_fwd, 3 swiglu_bwd */
    int64_t N, F; /* rows; columns (GELU) or SwiGLU's half width */
} act_case;

static mt_status run_case(const act_case *c, mt_tensor *x, mt_tensor *dx, mt_tensor *y,
                          mt_tensor *dy) {
    switch (c->op) {
    case 0:
        return mt_gelu_fwd(y, x, NULL);
    case 1:
        return mt_gelu_bwd(dx, dy, x, NULL);
    case 2:
        return mt_swiglu_fwd(y, x, NULL, NULL);
    default:
        return mt_swiglu_bwd(dx, NULL, dy, x, NULL, NULL);
    }
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
    if (s == MT_OK) s = bench_fill_uniform(&x, -4, 4, 42, 1);
    if (s == MT_OK) s = bench_fill_uniform(&dy, -4, 4, 42, 2);
    if (s == MT_OK) s = run_case(c, &x, &dx, &y, &dy); /* the first call is a warm-up */
    if (s == MT_OK) s = mt_stream_sync(NULL);
    if (s != MT_OK) {
        mt_bench_error(st, mt_last_error());
        mt_arena_destroy(ar);
        return;
    }
    BENCH_LOOP(st, run_case(c, &x, &dx, &y, &dy));
    /* gelu fwd: x, y; gelu bwd: dy, x, dx; swiglu fwd: x (2F), y (F); bwd: dy (F), x, dx (2F) */
    int64_t e = c->op == 0   ? 2 * c->N * c->F
                : c->op == 1 ? 3 * c->N * c->F
                : c->op == 2 ? 3 * c->N * c->F
                             : 5 * c->N * c->F;
    mt_bench_set_bytes(st, e * 2);
    mt_arena_destroy(ar);
}
#endif

int main(int argc, char **argv) {
#if MT_HAVE_CUDA
    if (bench_cuda_init()) {
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
