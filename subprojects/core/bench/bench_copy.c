/* The device-to-device copy bandwidth (bytes read + written), the ceiling that memory-bound
 * kernels are measured against; and host memcpy for comparison. */
#include <mt/benchkit.h>
#include <mt/core.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if MT_HAVE_CUDA
#include <mt/core_cuda.h>

static void bench_d2d(mt_bench_state *st, void *arg) {
    size_t bytes = (size_t)(uintptr_t)arg;
    void *a, *b;
    cudaEvent_t e0, e1;
    if (mt_device_malloc(&a, bytes) != MT_OK || mt_device_malloc(&b, bytes) != MT_OK) {
        mt_bench_error(st, mt_last_error());
        return;
    }
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    while (mt_bench_keep_running(st)) {
        cudaEventRecord(e0, 0);
        cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        mt_bench_set_iteration_time(st, ms * 1e-3);
    }
    mt_bench_set_bytes(st, 2 * (int64_t)bytes);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    mt_device_free(a);
    mt_device_free(b);
}
#endif

static void bench_host(mt_bench_state *st, void *arg) {
    size_t bytes = (size_t)(uintptr_t)arg;
    char *a = malloc(bytes), *b = malloc(bytes);
    memset(a, 1, bytes);
    memset(b, 0, bytes);
    while (mt_bench_keep_running(st))
        memcpy(b, a, bytes);
    mt_bench_set_bytes(st, 2 * (int64_t)bytes);
    free(a);
    free(b);
}

int main(int argc, char **argv) {
    int ngpu = 0;
    mt_device_count(&ngpu);
    char name[256] = "cpu";
    if (ngpu) mt_device_name(0, name, sizeof name);
    mt_bench_context("device", name);
    mt_bench_register("copy/host/64MiB", bench_host, (void *)(uintptr_t)(64u << 20), 0);
#if MT_HAVE_CUDA
    if (ngpu) {
        mt_bench_register("copy/cuda/64MiB", bench_d2d, (void *)(uintptr_t)(64u << 20),
                          MT_BENCH_MANUAL_TIME);
        mt_bench_register("copy/cuda/1GiB", bench_d2d, (void *)(uintptr_t)(1u << 30),
                          MT_BENCH_MANUAL_TIME);
    }
#endif
    return mt_bench_main(argc, argv);
}
