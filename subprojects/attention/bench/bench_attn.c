/* Attention forward and forward+backward on the GPU in bf16: TFLOP/s counting 4*B*H*T*T*D for
 * the forward (halved when causal) and 2.5x that for the backward. Peer: peers/peer_attn.py.
 * With document masks (docs L: every L tokens a new document, as --reset-attention-mask makes
 * them) the count is the documents' causal work, 4*B*H*(T/L)*L*L*D/2. */
#include <mt/attention.h>
#include <mt/benchkit.h>

#if MT_HAVE_CUDA
#include <mt/core_cuda.h>

#include <stdio.h>
#include <stdlib.h>

typedef struct {
    int B, H, Hkv, T, D, causal, bwd, det, docs;
} attn_case;

static void fill_random(mt_tensor *dev, uint64_t stream) {
    size_t n = (size_t)mt_tensor_numel(dev);
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        h[i] = mt_f32_to_bf16(mt_philox_uniform(1, stream, i) * 2 - 1);
    mt_memcpy(dev->data, dev->device, h, MT_DEVICE_CPU, n * 2, NULL);
    free(h);
}

static void bench_attn(mt_bench_state *st, void *arg) {
    attn_case *c = arg;
    int64_t shq[4] = { c->B, c->T, c->H, c->D }, shk[4] = { c->B, c->T, c->Hkv, c->D };
    int64_t shl[3] = { c->B, c->H, c->T };
    size_t nq = (size_t)c->B * c->T * c->H * c->D, nk = (size_t)c->B * c->T * c->Hkv * c->D;
    mt_attn_config cfg = MT_ATTN_CONFIG_INIT;
    cfg.causal = c->causal, cfg.deterministic = c->det;
    mt_arena *ar;
    if (mt_arena_create(mt_device_cuda(0), (4 * nq + 4 * nk) * 2 + 4 * nq + (64u << 20), &ar) !=
        MT_OK) {
        mt_bench_error(st, mt_last_error());
        return;
    }
    mt_tensor q, k, v, o, l, g, dq, dk, dv, ks;
    if (c->docs) { /* key starts: each row's documents of c->docs tokens */
        int32_t *h = malloc((size_t)c->B * c->T * 4);
        for (int i = 0; i < c->B * c->T; i++)
            h[i] = i % c->T / c->docs * c->docs;
        mt_tensor_alloc(ar, MT_I32, 2, (int64_t[]){ c->B, c->T }, &ks);
        mt_memcpy(ks.data, ks.device, h, MT_DEVICE_CPU, (size_t)c->B * c->T * 4, NULL);
        free(h);
        cfg.key_start = &ks;
    }
    mt_tensor_alloc(ar, MT_BF16, 4, shq, &q), mt_tensor_alloc(ar, MT_BF16, 4, shk, &k);
    mt_tensor_alloc(ar, MT_BF16, 4, shk, &v), mt_tensor_alloc(ar, MT_BF16, 4, shq, &o);
    mt_tensor_alloc(ar, MT_F32, 3, shl, &l), mt_tensor_alloc(ar, MT_BF16, 4, shq, &g);
    mt_tensor_alloc(ar, MT_BF16, 4, shq, &dq), mt_tensor_alloc(ar, MT_BF16, 4, shk, &dk);
    mt_tensor_alloc(ar, MT_BF16, 4, shk, &dv);
    fill_random(&q, 1), fill_random(&k, 2), fill_random(&v, 3), fill_random(&g, 4);
    size_t wsb = 0;
    void *ws = NULL;
    mt_attn_bwd_workspace(&q, &k, &cfg, &wsb);
    if (mt_arena_alloc(ar, wsb, &ws) != MT_OK) {
        mt_bench_error(st, mt_last_error());
        mt_arena_destroy(ar);
        return;
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    while (mt_bench_keep_running(st)) {
        cudaEventRecord(e0, 0);
        mt_status s = mt_attn_fwd(&o, &l, &q, &k, &v, &cfg, NULL);
        if (s == MT_OK && c->bwd)
            s = mt_attn_bwd(&dq, &dk, &dv, &g, &q, &k, &v, &o, &l, &cfg, ws, wsb, NULL);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        if (s != MT_OK) {
            mt_bench_error(st, mt_last_error());
            break;
        }
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        mt_bench_set_iteration_time(st, ms * 1e-3);
    }
    double flops = 4.0 * c->B * c->H * (double)c->T * c->T * c->D * (c->causal ? 0.5 : 1.0);
    if (c->docs) flops *= (double)c->docs / c->T;
    mt_bench_rate(st, "FLOPS", c->bwd ? 3.5 * flops : flops);
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
        /* B, H, Hkv, T, D, causal, documents: the same list as peers/peer_attn.py, then
         * document masks (no peer) */
        static const int shapes[][7] = {
            { 16, 12, 12, 1024, 64, 1, 0 },   { 8, 16, 16, 2048, 128, 1, 0 },
            { 4, 16, 16, 4096, 128, 1, 0 },   { 4, 16, 16, 4096, 128, 0, 0 },
            { 2, 32, 32, 8192, 128, 1, 0 },   { 2, 32, 8, 4096, 128, 1, 0 },
            { 64, 12, 12, 1024, 64, 1, 0 }, /* GPT-2 124M's B64 step */
            { 16, 12, 12, 1024, 64, 1, 256 }, { 4, 16, 16, 4096, 128, 1, 1024 }
        };
        enum {
            NS = sizeof shapes / sizeof shapes[0]
        };
        static attn_case cases[NS * 3];
        static char names[NS * 3][96];
        int n = 0;
        for (int i = 0; i < NS; i++)
            for (int mode = 0; mode < 3; mode++) { /* fwd, fwd+bwd, fwd+bwd deterministic */
                const int *s = shapes[i];
                cases[n] =
                    (attn_case){ s[0], s[1], s[2], s[3], s[4], s[5], mode > 0, mode == 2, s[6] };
                char kv[16] = "", docs[24] = "";
                if (s[2] != s[1]) snprintf(kv, sizeof kv, "_KV%d", s[2]);
                if (s[6]) snprintf(docs, sizeof docs, "_docs%d", s[6]);
                snprintf(names[n], sizeof names[n], "%s/%s/B%d_H%d%s_T%d_D%d_%s%s",
                         mode ? "attn_fwdbwd" : "attn_fwd", mode == 2 ? "cuda_det" : "cuda", s[0],
                         s[1], kv, s[3], s[4], s[5] ? "causal" : "full", docs);
                mt_bench_register(names[n], bench_attn, &cases[n], MT_BENCH_MANUAL_TIME);
                n++;
            }
    }
#endif
    return mt_bench_main(argc, argv);
}
