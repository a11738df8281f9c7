/* Deterministic reductions on the GPU: sum of squares (the grad-norm building block), zero count,
 * and the column sum (bias gradient). GB/s count the input read once. Peer: peer_reduce.py. */
#include "bench_common.h"

#if MT_HAVE_CUDA

typedef struct {
    int op; /* 0 sumsq, 1 count zeros, 2 colsum */
    mt_dtype dt;
    int64_t R, C;
} red_case;

static void bench_reduce(mt_bench_state *st, void *arg) {
    red_case *c = arg;
    int64_t sh[2] = { c->R, c->C }, one = 1, n = c->R * c->C;
    mt_arena *ar;
    if (!bench_arena_create(st, (size_t)n * mt_dtype_size(c->dt) + (64u << 20), &ar)) return;
    mt_tensor x, o, oc;
    mt_tensor_alloc(ar, c->dt, 2, sh, &x);
    mt_tensor_alloc(ar, MT_F32, 1, &one, &o);
    mt_tensor_alloc(ar, MT_F32, 1, &c->C, &oc);
    bench_fill_uniform(&x, -1, 1, 1, 0);
    size_t wa, wb;
    void *ws;
    mt_reduce_workspace(&x, &wa);
    mt_colsum_workspace(&x, &wb);
    mt_arena_alloc(ar, wa > wb ? wa : wb, &ws);
    if (c->op == 2)
        BENCH_LOOP(st, mt_colsum(&oc, &x, 1, ws, wb, NULL));
    else
        BENCH_LOOP(st,
                   mt_reduce(&o, &x, c->op ? MT_REDUCE_COUNT_ZERO : MT_REDUCE_SUMSQ, ws, wa, NULL));
    mt_bench_set_bytes(st, n * (int64_t)mt_dtype_size(c->dt));
    mt_arena_destroy(ar);
}
#endif

int main(int argc, char **argv) {
#if MT_HAVE_CUDA
    if (bench_cuda_init()) {
        static red_case cases[] = { { 0, MT_BF16, 1 << 14, 1 << 14 },
                                    { 0, MT_F32, 1 << 14, 1 << 14 },
                                    { 1, MT_BF16, 1 << 14, 1 << 14 },
                                    { 2, MT_BF16, 16384, 768 },
                                    { 2, MT_BF16, 16384, 4096 } };
        const char *ops[] = { "sumsq", "count_zero", "colsum" };
        static char names[5][80];
        for (int i = 0; i < 5; i++) {
            if (cases[i].op == 2)
                snprintf(names[i], sizeof names[i], "colsum/cuda/%s_R%lld_C%lld",
                         mt_dtype_name(cases[i].dt), (long long)cases[i].R, (long long)cases[i].C);
            else
                snprintf(names[i], sizeof names[i], "%s/cuda/%s_%lldM", ops[cases[i].op],
                         mt_dtype_name(cases[i].dt), (long long)(cases[i].R * cases[i].C >> 20));
            mt_bench_register(names[i], bench_reduce, &cases[i], MT_BENCH_MANUAL_TIME);
        }
    }
#endif
    return mt_bench_main(argc, argv);
}
