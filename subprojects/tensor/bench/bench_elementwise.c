/* Elementwise add and bf16 cast on the GPU: GB/s counting bytes read and written. */
#include "bench_common.h"

#if MT_HAVE_CUDA

typedef struct {
    int op; /* 0 add, 1 cast f32->bf16 */
    mt_dtype dt;
    int64_t n;
} ew_case;

static void bench_ew(mt_bench_state *st, void *arg) {
    ew_case *c = arg;
    mt_arena *ar;
    size_t es = mt_dtype_size(c->dt);
    if (!bench_arena_create(st, 4 * (size_t)c->n * 4 + 4096, &ar)) return;
    mt_tensor a, b, o, f;
    mt_tensor_alloc(ar, c->dt, 1, &c->n, &a);
    mt_tensor_alloc(ar, c->dt, 1, &c->n, &b);
    mt_tensor_alloc(ar, c->op == 1 ? MT_F32 : c->dt, 1, &c->n, &f);
    mt_tensor_alloc(ar, c->dt, 1, &c->n, &o);
    mt_fill(&a, 1.0f, NULL);
    mt_fill(&b, 2.0f, NULL);
    mt_fill(&f, 3.0f, NULL);
    BENCH_LOOP(st, c->op == 0 ? mt_add(&o, &a, &b, NULL) : mt_cast(&o, &f, NULL));
    mt_bench_set_bytes(st, c->op == 0 ? 3 * c->n * (int64_t)es : c->n * (4 + (int64_t)es));
    mt_arena_destroy(ar);
}
#endif

int main(int argc, char **argv) {
#if MT_HAVE_CUDA
    if (bench_cuda_init()) {
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
