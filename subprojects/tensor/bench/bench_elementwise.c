/* Elementwise add and bf16 cast on the GPU: GB/s counting bytes read and written. */
#include <mt/benchkit.h>
#include <mt/tensor.h>

#if MT_HAVE_CUDA
#include <mt/core_cuda.h>

typedef struct {
    int op; /* 0 add, 1 cast f32->bf16 */
    mt_dtype dt;
    int64_t n;
} ew_case;

static void bench_ew(mt_bench_state *st, void *arg) {
    ew_case *c = arg;
    mt_arena *ar;
    size_t es = mt_dtype_size(c->dt);
    if (mt_arena_create(mt_device_cuda(0), 4 * (size_t)c->n * 4 + 4096, &ar) != MT_OK) {
        mt_bench_error(st, mt_last_error());
        return;
    }
    mt_tensor a, b, o, f;
    mt_tensor_alloc(ar, c->dt, 1, &c->n, &a);
    mt_tensor_alloc(ar, c->dt, 1, &c->n, &b);
    mt_tensor_alloc(ar, c->op == 1 ? MT_F32 : c->dt, 1, &c->n, &f);
    mt_tensor_alloc(ar, c->dt, 1, &c->n, &o);
    mt_fill(&a, 1.0f, NULL);
    mt_fill(&b, 2.0f, NULL);
    mt_fill(&f, 3.0f, NULL);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    while (mt_bench_keep_running(st)) {
        cudaEventRecord(e0, 0);
        mt_status s = c->op == 0 ? mt_add(&o, &a, &b, NULL) : mt_cast(&o, &f, NULL);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        if (s != MT_OK) mt_bench_error(st, mt_last_error());
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        mt_bench_set_iteration_time(st, ms * 1e-3);
    }
    mt_bench_set_bytes(st, c->op == 0 ? 3 * c->n * (int64_t)es : c->n * (4 + (int64_t)es));
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
        static ew_case cases[] = { { 0, MT_F32, 1 << 26 },
                                   { 0, MT_BF16, 1 << 26 },
                                   { 1, MT_BF16, 1 << 26 } };
        mt_bench_register("add/cuda/f32_64M", bench_ew, &cases[0], MT_BENCH_MANUAL_TIME);
        mt_bench_register("add/cuda/bf16_64M", bench_ew, &cases[1], MT_BENCH_MANUAL_TIME);
        mt_bench_register("cast/cuda/f32_bf16_64M", bench_ew, &cases[2], MT_BENCH_MANUAL_TIME);
    }
#endif
    return mt_bench_main(argc, argv);
}
