/* Fused softmax cross-entropy on the GPU (N tokens, GPT-2 vocab padded 50257 -> 50304): forward
 * only, and forward + backward written in place over the logits. GB/s count the logits read once
 * (and dlogits written once). Peer: torch F.cross_entropy forward + backward. */
#include "bench_common.h"

#if MT_HAVE_CUDA

typedef struct {
    int bwd;
    mt_dtype dt;
    int64_t N, V, Vp;
} xe_case;

static void bench_xent(mt_bench_state *st, void *arg) {
    xe_case *c = arg;
    size_t es = mt_dtype_size(c->dt), n = (size_t)(c->N * c->Vp);
    mt_arena *ar;
    if (!bench_arena_create(st, n * es + 16 * (size_t)c->N + 65536, &ar)) return;
    int64_t sh[2] = { c->N, c->Vp }, two = 2;
    mt_tensor x, t, l, s;
    mt_tensor_alloc(ar, c->dt, 2, sh, &x);
    mt_tensor_alloc(ar, MT_I32, 1, &c->N, &t);
    mt_tensor_alloc(ar, MT_F32, 1, &c->N, &l);
    mt_tensor_alloc(ar, MT_F32, 1, &two, &s);
    bench_fill_uniform(&x, -8, 8, 1, 0);
    int32_t *ht = malloc((size_t)c->N * 4);
    for (int64_t i = 0; i < c->N; i++)
        ht[i] = (int32_t)((i * 7919) % c->V);
    mt_memcpy(t.data, t.device, ht, MT_DEVICE_CPU, (size_t)c->N * 4, NULL);
    free(ht);
    // why: in place, each iteration turns the logits into gradients; values stay finite and random
    if (c->bwd)
        BENCH_LOOP(st, mt_xent_fwd_bwd(&x, &l, &s, &x, &t, NULL, 1.0f, c->V, -100, NULL));
    else
        BENCH_LOOP(st, mt_xent_fwd(&l, &s, &x, &t, c->V, -100, NULL));
    mt_bench_set_bytes(st, (int64_t)((c->bwd ? 2 : 1) * n * es));
    mt_arena_destroy(ar);
}
#endif

int main(int argc, char **argv) {
#if MT_HAVE_CUDA
    if (bench_cuda_init()) {
        static xe_case cases[] = { { 1, MT_BF16, 16384, 50257, 50304 },
                                   { 1, MT_BF16, 8192, 50257, 50304 },
                                   { 0, MT_BF16, 16384, 50257, 50304 },
                                   { 1, MT_F32, 8192, 50257, 50304 } };
        static char names[4][80];
        for (int i = 0; i < 4; i++) {
            snprintf(names[i], sizeof names[i], "xent_%s/cuda/%s_N%lld_V%lld_Vp%lld",
                     cases[i].bwd ? "fwd_bwd" : "fwd", mt_dtype_name(cases[i].dt),
                     (long long)cases[i].N, (long long)cases[i].V, (long long)cases[i].Vp);
            mt_bench_register(names[i], bench_xent, &cases[i], MT_BENCH_MANUAL_TIME);
        }
    }
#endif
    return mt_bench_main(argc, argv);
}
