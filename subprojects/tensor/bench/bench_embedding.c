/* Embedding on the GPU: forward (token + position rows) and the sorted, atomic-free backward into
 * f32 gradient tables. GB/s: rows read and written once (backward: dout once, plus each touched
 * gradient row read and written). Peer: bench/peers/peer_embedding.py. */
#include "bench_common.h"

#if MT_HAVE_CUDA

typedef struct {
    int bwd;
    int64_t B, T, C, V;
} emb_case;

static void bench_embedding(mt_bench_state *st, void *arg) {
    emb_case *c = arg;
    int64_t N = c->B * c->T;
    size_t need = (size_t)(c->V + c->T) * (size_t)c->C * 6 + (size_t)N * (size_t)c->C * 2 * 2 +
                  (size_t)N * 64 + (64u << 20);
    mt_arena *ar;
    if (!bench_arena_create(st, need, &ar)) return;
    int64_t ish[2] = { c->B, c->T }, osh[3] = { c->B, c->T, c->C };
    int64_t wsh[2] = { c->V, c->C }, psh[2] = { c->T, c->C };
    mt_tensor ids, wte, wpe, out, gw, gp;
    mt_tensor_alloc(ar, MT_I32, 2, ish, &ids);
    mt_tensor_alloc(ar, MT_BF16, 2, wsh, &wte);
    mt_tensor_alloc(ar, MT_BF16, 2, psh, &wpe);
    mt_tensor_alloc(ar, MT_BF16, 3, osh, &out);
    mt_tensor_alloc(ar, MT_F32, 2, wsh, &gw);
    mt_tensor_alloc(ar, MT_F32, 2, psh, &gp);
    bench_fill_uniform(&wte, -1, 1, 1, 0);
    bench_fill_uniform(&wpe, -1, 1, 2, 0);
    bench_fill_uniform(&out, -1, 1, 3, 0);
    bench_fill_uniform(&gw, -1, 1, 4, 0);
    bench_fill_uniform(&gp, -1, 1, 5, 0);
    int32_t *h = malloc((size_t)N * 4);
    char *seen = calloc((size_t)c->V, 1);
    int64_t uniq = 0;
    for (int64_t i = 0; i < N; i++) { /* Zipf-like: low ids far more frequent, as in text */
        double u = mt_philox_uniform(9, 0, (uint64_t)i);
        h[i] = (int32_t)((int64_t)((double)c->V * u * u * u) % c->V);
        uniq += !seen[h[i]], seen[h[i]] = 1;
    }
    mt_memcpy(ids.data, ids.device, h, MT_DEVICE_CPU, (size_t)N * 4, NULL);
    free(h), free(seen);
    size_t wsb = 0;
    void *ws = NULL;
    mt_embedding_bwd_workspace(&ids, c->V, ids.device, &wsb);
    mt_arena_alloc(ar, wsb, &ws);
    if (c->bwd)
        BENCH_LOOP(st, mt_embedding_bwd(&gw, &gp, &out, &ids, ws, wsb, NULL));
    else
        BENCH_LOOP(st, mt_embedding_fwd(&out, &ids, &wte, &wpe, NULL));
    mt_bench_set_bytes(st, c->bwd ? N * c->C * 2 + (uniq + c->T) * c->C * 8 : N * c->C * 2 * 2);
    mt_arena_destroy(ar);
}
#endif

int main(int argc, char **argv) {
#if MT_HAVE_CUDA
    if (bench_cuda_init()) {
        static emb_case cases[] = { { 0, 8, 2048, 768, 50304 },
                                    { 1, 8, 2048, 768, 50304 },
                                    { 0, 4, 2048, 4096, 50304 },
                                    { 1, 4, 2048, 4096, 50304 } };
        static char names[4][80];
        for (int i = 0; i < 4; i++) {
            snprintf(names[i], sizeof names[i], "embedding_%s/cuda/bf16_B%lld_T%lld_C%lld_V%lld",
                     cases[i].bwd ? "bwd" : "fwd", (long long)cases[i].B, (long long)cases[i].T,
                     (long long)cases[i].C, (long long)cases[i].V);
            mt_bench_register(names[i], bench_embedding, &cases[i], MT_BENCH_MANUAL_TIME);
        }
    }
#endif
    return mt_bench_main(argc, argv);
}
