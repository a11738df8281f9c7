/* Embedding on the GPU: forward (token + position rows) and the sorted, atomic-free backward into
 * f32 gradient tables. GB/s: rows read and written once (backward: dout once, plus each touched
 * gradient row read and written). Peer: bench/peers/peer_embedding.py. */
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
    int64_t B, T, C, V;
} emb_case;

static void bench_embedding(mt_bench_state *st, void *arg) {
    emb_case *c = arg;
    int64_t N = c->B * c->T;
    size_t need = (size_t)(c->V + c->T) * (size_t)c->C * 6 + (size_t)N * (size_t)c->C * 2 * 2 +
                  (size_t)N * 64 + (64u << 20);
    mt_arena *ar;
    if (mt_arena_create(mt_device_cuda(0), need, &ar) != MT_OK) {
        mt_bench_error(st, mt_last_error());
        return;
    }
    int64_t ish[2] = { c->B, c->T }, osh[3] = { c->B, c->T, c->C };
    int64_t wsh[2] = { c->V, c->C }, psh[2] = { c->T, c->C };
    mt_tensor ids, wte, wpe, out, gw, gp;
    mt_tensor_alloc(ar, MT_I32, 2, ish, &ids);
    mt_tensor_alloc(ar, MT_BF16, 2, wsh, &wte);
    mt_tensor_alloc(ar, MT_BF16, 2, psh, &wpe);
    mt_tensor_alloc(ar, MT_BF16, 3, osh, &out);
    mt_tensor_alloc(ar, MT_F32, 2, wsh, &gw);
    mt_tensor_alloc(ar, MT_F32, 2, psh, &gp);
    fill_random(&wte, -1, 1, 1);
    fill_random(&wpe, -1, 1, 2);
    fill_random(&out, -1, 1, 3);
    fill_random(&gw, -1, 1, 4);
    fill_random(&gp, -1, 1, 5);
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
    int ngpu = 0;
    mt_device_count(&ngpu);
    if (ngpu) {
        char name[256];
        mt_device_name(0, name, sizeof name);
        mt_bench_context("device", name);
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
