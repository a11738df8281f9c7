/* Deterministic reductions on the GPU: sum of squares (the grad-norm building block), zero count,
 * and the column sum (bias gradient). GB/s count the input read once. Peer: peer_reduce.py. */
#include <mt/benchkit.h>
#include <mt/tensor.h>

#include <stdio.h>
#include <stdlib.h>

#if MT_HAVE_CUDA
#include <mt/core_cuda.h>
#include <mt/philox.h>

/* Fills a device float tensor with uniform values in [lo, hi) (a 1M-element random block repeated:
 * never time on zeros or constants). */
static void fill_random(mt_tensor *t, float lo, float hi, uint64_t seed) {
    int64_t n = mt_tensor_numel(t), blk = n < (1 << 20) ? n : (1 << 20);
    size_t es = mt_dtype_size(t->dtype);
    float *f = malloc((size_t)blk * 4);
    void *h = malloc((size_t)blk * es);
    for (int64_t i = 0; i < blk; i++)
        f[i] = lo + (hi - lo) * mt_philox_uniform(seed, 0, (uint64_t)i);
    mt_tensor tf = mt_tensor_1d(f, MT_F32, blk, MT_DEVICE_CPU),
              th = mt_tensor_1d(h, t->dtype, blk, MT_DEVICE_CPU);
    mt_cast(&th, &tf, NULL);
    for (int64_t o = 0; o < n; o += blk) {
        int64_t m = n - o < blk ? n - o : blk;
        mt_memcpy((char *)t->data + o * es, t->device, h, MT_DEVICE_CPU, (size_t)m * es, NULL);
    }
    free(f), free(h);
}

/* The timed loop: CUDA events around each `call` (an mt_status expression), manual time. */
#define BENCH_LOOP(st, call)                            \
    do {                                                \
        cudaEvent_t e0, e1;                             \
        cudaEventCreate(&e0);                           \
        cudaEventCreate(&e1);                           \
        while (mt_bench_keep_running(st)) {             \
            cudaEventRecord(e0, 0);                     \
            mt_status s_ = (call);                      \
            cudaEventRecord(e1, 0);                     \
            cudaEventSynchronize(e1);                   \
            if (s_ != MT_OK) {                          \
                mt_bench_error(st, mt_last_error());    \
                break;                                  \
            }                                           \
            float ms;                                   \
            cudaEventElapsedTime(&ms, e0, e1);          \
            mt_bench_set_iteration_time(st, ms * 1e-3); \
        }                                               \
        cudaEventDestroy(e0);                           \
        cudaEventDestroy(e1);                           \
    } while (0)

typedef struct {
    int op; /* 0 sumsq, 1 count zeros, 2 colsum */
    mt_dtype dt;
    int64_t R, C;
} red_case;

static void bench_reduce(mt_bench_state *st, void *arg) {
    red_case *c = arg;
    int64_t sh[2] = { c->R, c->C }, one = 1, n = c->R * c->C;
    mt_arena *ar;
    if (mt_arena_create(mt_device_cuda(0), (size_t)n * mt_dtype_size(c->dt) + (64u << 20), &ar) !=
        MT_OK) {
        mt_bench_error(st, mt_last_error());
        return;
    }
    mt_tensor x, o, oc;
    mt_tensor_alloc(ar, c->dt, 2, sh, &x);
    mt_tensor_alloc(ar, MT_F32, 1, &one, &o);
    mt_tensor_alloc(ar, MT_F32, 1, &c->C, &oc);
    fill_random(&x, -1, 1, 1);
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
    int ngpu = 0;
    mt_device_count(&ngpu);
    if (ngpu) {
        char name[256];
        mt_device_name(0, name, sizeof name);
        mt_bench_context("device", name);
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
