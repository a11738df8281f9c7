/* RoPE on the GPU, (B,T,H,D) bf16, both layouts, out of place: GB/s counting x read and out
 * written once. Peer: bench/peers/peer_rope.py (the Hugging Face and Meta formulas in eager). */
#include "bench_common.h"

#if MT_HAVE_CUDA

typedef struct {
    int inter;
    int64_t B, T, H, D;
} rope_case;

static void bench_rope(mt_bench_state *st, void *arg) {
    rope_case *c = arg;
    int64_t sh[4] = { c->B, c->T, c->H, c->D }, n = c->B * c->T * c->H * c->D;
    mt_arena *ar;
    if (!bench_arena_create(st, (size_t)n * 4 + 4096, &ar)) return;
    mt_tensor x, y;
    mt_tensor_alloc(ar, MT_BF16, 4, sh, &x);
    mt_tensor_alloc(ar, MT_BF16, 4, sh, &y);
    bench_fill_uniform(&x, -1, 1, 1, 0);
    BENCH_LOOP(st, mt_rope_fwd(&y, &x, NULL, (int)c->D, 10000.0, c->inter, NULL));
    mt_bench_set_bytes(st, n * 2 * 2);
    mt_arena_destroy(ar);
}
#endif

int main(int argc, char **argv) {
#if MT_HAVE_CUDA
    if (bench_cuda_init()) {
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
