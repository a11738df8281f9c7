/* Softmax forward and backward over the last dim on the GPU: GB/s counting each tensor read or
 * written once (peer: bench/peers/peer_softmax.py). */
#include "bench_common.h"

#if MT_HAVE_CUDA

typedef struct {
    int bwd;
    mt_dtype dt;
    int64_t R, C;
} sm_case;

static void bench_softmax(mt_bench_state *st, void *arg) {
    sm_case *c = arg;
    size_t es = mt_dtype_size(c->dt), n = (size_t)(c->R * c->C);
    mt_arena *ar;
    if (!bench_arena_create(st, 3 * n * es + 4096, &ar)) return;
    int64_t sh[2] = { c->R, c->C };
    mt_tensor x, y, d;
    mt_tensor_alloc(ar, c->dt, 2, sh, &x);
    mt_tensor_alloc(ar, c->dt, 2, sh, &y);
    mt_tensor_alloc(ar, c->dt, 2, sh, &d);
    bench_fill_uniform(&x, -4, 4, 1, 0);
    bench_fill_uniform(&d, -1, 1, 2, 0);
    mt_softmax_fwd(&y, &x, NULL);
    if (c->bwd)
        BENCH_LOOP(st, mt_softmax_bwd(&x, &y, &d, NULL));
    else
        BENCH_LOOP(st, mt_softmax_fwd(&y, &x, NULL));
    mt_bench_set_bytes(st, (int64_t)((c->bwd ? 3 : 2) * n * es));
    mt_arena_destroy(ar);
}
#endif

int main(int argc, char **argv) {
#if MT_HAVE_CUDA
    if (bench_cuda_init()) {
        static sm_case cases[] = { { 0, MT_BF16, 65536, 1024 },
                                   { 1, MT_BF16, 65536, 1024 },
                                   { 0, MT_F32, 16384, 4096 },
                                   { 1, MT_F32, 16384, 4096 },
                                   { 0, MT_BF16, 8192, 50304 } };
        static char names[5][64];
        for (int i = 0; i < 5; i++) {
            snprintf(names[i], sizeof names[i], "softmax_%s/cuda/%s_R%lld_C%lld",
                     cases[i].bwd ? "bwd" : "fwd", mt_dtype_name(cases[i].dt),
                     (long long)cases[i].R, (long long)cases[i].C);
            mt_bench_register(names[i], bench_softmax, &cases[i], MT_BENCH_MANUAL_TIME);
        }
    }
#endif
    return mt_bench_main(argc, argv);
}
