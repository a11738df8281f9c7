/* Shared parts of the tensor GPU benchmarks (private to bench/): device detection and context,
 * the device arena, random fill, and the CUDA-event timing loop. */
#ifndef MT_TENSOR_BENCH_COMMON_H
#define MT_TENSOR_BENCH_COMMON_H

#include <mt/benchkit.h>
#include <mt/tensor.h>

#include <stdio.h>
#include <stdlib.h>

#if MT_HAVE_CUDA
#include <mt/core_cuda.h>
#include <mt/philox.h>

/* Nonzero when a CUDA device is present; then records device 0's name as the "device" context. */
static inline int bench_cuda_init(void) {
    int ngpu = 0;
    mt_device_count(&ngpu);
    if (ngpu) {
        char name[256];
        mt_device_name(0, name, sizeof name);
        mt_bench_context("device", name);
    }
    return ngpu;
}

/* Creates a device arena of `bytes` on device 0; on failure reports the error and returns 0. */
static inline int bench_arena_create(mt_bench_state *st, size_t bytes, mt_arena **ar) {
    if (mt_arena_create(mt_device_cuda(0), bytes, ar) != MT_OK) {
        mt_bench_error(st, mt_last_error());
        return 0;
    }
    return 1;
}

/* Fills a device float tensor with uniform values in [lo, hi) drawn from Philox (key, stream): a
 * 1M-element random block repeated (never time on zeros or constants). */
static inline mt_status bench_fill_uniform(mt_tensor *t, float lo, float hi, uint64_t key,
                                           uint64_t stream) {
    const int64_t blk = 1 << 20;
    int64_t n = mt_tensor_numel(t), m = n < blk ? n : blk;
    size_t es = mt_dtype_size(t->dtype);
    float *f = malloc((size_t)m * 4);
    void *h = malloc((size_t)m * es);
    MT_REQUIRE(f && h, MT_ERR_OOM, "bench_fill_uniform");
    for (int64_t i = 0; i < m; i++)
        f[i] = lo + (hi - lo) * mt_philox_uniform(key, stream, (uint64_t)i);
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
#endif

#endif
