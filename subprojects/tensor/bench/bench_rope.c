/* RoPE on the GPU, (B,T,H,D) bf16, both layouts, out of place: GB/s counting x read and out
 * written once. Peer: bench/peers/peer_rope.py (the Hugging Face and Meta formulas in eager). */
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
    int inter;
    int64_t B, T, H, D;
} rope_case;

static void bench_rope(mt_bench_state *st, void *arg) {
    rope_case *c = arg;
    int64_t sh[4] = { c->B, c->T, c->H, c->D }, n = c->B * c->T * c->H * c->D;
    mt_arena *ar;
    if (mt_arena_create(mt_device_cuda(0), (size_t)n * 4 + 4096, &ar) != MT_OK) {
        mt_bench_error(st, mt_last_error());
        return;
    }
    mt_tensor x, y;
    mt_tensor_alloc(ar, MT_BF16, 4, sh, &x);
    mt_tensor_alloc(ar, MT_BF16, 4, sh, &y);
    fill_random(&x, -1, 1, 1);
    BENCH_LOOP(st, mt_rope_fwd(&y, &x, NULL, (int)c->D, 10000.0, c->inter, NULL));
    mt_bench_set_bytes(st, n * 2 * 2);
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
        static rope_case cases[] = { { 0, 8, 2048, 32, 128 },
                                     { 1, 8, 2048, 32, 128 },
                                     { 0, 16, 1024, 12, 64 } };
        static char names[3][80];
        for (int i = 0; i < 3; i++) {
            snprintf(names[i], sizeof names[i], "rope_fwd_%s/cuda/bf16_B%lld_T%lld_H%lld_D%lld",
                     cases[i].inter ? "interleaved" : "half", (long long)cases[i].B,
                     (long long)cases[i].T, (long long)cases[i].H, (long long)cases[i].D);
            mt_bench_register(names[i], bench_rope, &cases[i], MT_BENCH_MANUAL_TIME);
        }
    }
#endif
    return mt_bench_main(argc, argv);
}
