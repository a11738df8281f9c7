/* Softmax forward and backward over the last dim on the GPU: GB/s counting each tensor read or
 * written once (peer: bench/peers/peer_softmax.py). */
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
    int bwd;
    mt_dtype dt;
    int64_t R, C;
} sm_case;

static void bench_softmax(mt_bench_state *st, void *arg) {
    sm_case *c = arg;
    size_t es = mt_dtype_size(c->dt), n = (size_t)(c->R * c->C);
    mt_arena *ar;
    if (mt_arena_create(mt_device_cuda(0), 3 * n * es + 4096, &ar) != MT_OK) {
        mt_bench_error(st, mt_last_error());
        return;
    }
    int64_t sh[2] = { c->R, c->C };
    mt_tensor x, y, d;
    mt_tensor_alloc(ar, c->dt, 2, sh, &x);
    mt_tensor_alloc(ar, c->dt, 2, sh, &y);
    mt_tensor_alloc(ar, c->dt, 2, sh, &d);
    fill_random(&x, -4, 4, 1);
    fill_random(&d, -1, 1, 2);
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
    int ngpu = 0;
    mt_device_count(&ngpu);
    if (ngpu) {
        char name[256];
        mt_device_name(0, name, sizeof name);
        mt_bench_context("device", name);
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
