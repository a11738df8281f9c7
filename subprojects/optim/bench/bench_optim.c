/* The optimizer step on the GPU over GPT-2 124M and 1.5B parameter sets (C=768 L=12 and C=1600
 * L=48, V=50304, T=1024): GB/s counting bytes read + written per parameter (f32 params: grad,
 * param, m, v read, param, m, v written = 28 B; bf16 params with fp32 master: 30 B; with clipping
 * the statistics pass reads the grads once more: +4 B), and the fraction of the device-to-device
 * copy bandwidth measured here. peers/peer_optim.py runs torch.optim.AdamW(fused=True). */
#include <mt/benchkit.h>
#include <mt/optim.h>

#include <stdio.h>
#include <stdlib.h>

#if MT_HAVE_CUDA
#include <mt/core_cuda.h>

typedef struct {
    int C, L;
    mt_dtype dt;
    float clip; /* > 0: statistics pass + clipping (Megatron's default --clip-grad 1.0) */
} optim_case;

static double copy_gbs; /* device-to-device copy, bytes read + written per second / 1e9 */

/* GPT-2's parameters in Megatron's naming; weights decay, 1-D params do not. */
static mt_status add_gpt2(mt_optim_buffer *b, int C, int L) {
    const int64_t V = 50304, T = 1024;
    int64_t s[2];
    char name[96];
    s[0] = V, s[1] = C;
    MT_TRY(mt_optim_buffer_add(b, "embedding.word_embeddings.weight", 2, s, 0, NULL));
    s[0] = T;
    MT_TRY(mt_optim_buffer_add(b, "embedding.position_embeddings.weight", 2, s, 0, NULL));
    for (int l = 0; l < L; l++) {
        const struct {
            const char *n;
            int64_t d0, d1;
        } ps[] = { { "input_layernorm.weight", C, 0 },
                   { "input_layernorm.bias", C, 0 },
                   { "self_attention.linear_qkv.weight", 3 * C, C },
                   { "self_attention.linear_qkv.bias", 3 * C, 0 },
                   { "self_attention.linear_proj.weight", C, C },
                   { "self_attention.linear_proj.bias", C, 0 },
                   { "pre_mlp_layernorm.weight", C, 0 },
                   { "pre_mlp_layernorm.bias", C, 0 },
                   { "mlp.linear_fc1.weight", 4 * C, C },
                   { "mlp.linear_fc1.bias", 4 * C, 0 },
                   { "mlp.linear_fc2.weight", C, 4 * C },
                   { "mlp.linear_fc2.bias", C, 0 } };
        for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
            snprintf(name, sizeof name, "decoder.layers.%d.%s", l, ps[i].n);
            s[0] = ps[i].d0, s[1] = ps[i].d1;
            MT_TRY(mt_optim_buffer_add(b, name, ps[i].d1 ? 2 : 1, s, 0, NULL));
        }
    }
    s[0] = C;
    MT_TRY(mt_optim_buffer_add(b, "decoder.final_layernorm.weight", 1, s, 0, NULL));
    MT_TRY(mt_optim_buffer_add(b, "decoder.final_layernorm.bias", 1, s, 0, NULL));
    return MT_OK;
}

static void bench_step(mt_bench_state *st, void *arg) {
    optim_case *c = arg;
    mt_optim_buffer *b = NULL;
    mt_optim *o = NULL;
    mt_arena *ar = NULL;
    mt_optim_buffer_config bc = MT_OPTIM_BUFFER_CONFIG_INIT;
    bc.param_dtype = c->dt;
    bc.device = mt_device_cuda(0);
    bc.bucket_numel = 40000000; /* Megatron's default bucket (40M params) */
    mt_optim_config oc = MT_OPTIM_CONFIG_INIT;
    oc.clip_grad = c->clip;
    oc.check_for_nan_in_grad = c->clip > 0.0f;
    size_t bytes, sbytes;
    mt_tensor p, g;
    mt_status s = mt_optim_buffer_create(&bc, &b);
    if (s == MT_OK) s = add_gpt2(b, c->C, c->L);
    if (s == MT_OK) s = mt_optim_buffer_finalize(b, &bytes);
    if (s == MT_OK) s = mt_optim_state_bytes(&oc, b, &sbytes);
    if (s == MT_OK) s = mt_arena_create(bc.device, bytes + sbytes, &ar);
    if (s == MT_OK) s = mt_optim_buffer_bind(b, ar);
    if (s == MT_OK) s = mt_optim_buffer_params(b, &p);
    if (s == MT_OK) s = mt_fill(&p, 0.01f, NULL);
    if (s == MT_OK) s = mt_optim_create(&oc, b, ar, &o);
    if (s == MT_OK) s = mt_optim_buffer_grads(b, &g);
    if (s == MT_OK) s = mt_fill(&g, 1e-3f, NULL);
    if (s == MT_OK) s = mt_stream_sync(NULL);
    if (s != MT_OK) {
        mt_bench_error(st, mt_last_error());
        goto done;
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    mt_optim_step(o, 1e-4, 0.1, NULL, NULL, NULL); /* warm-up */
    double total_s = 0;
    int64_t iters = 0;
    while (mt_bench_keep_running(st)) {
        cudaEventRecord(e0, 0);
        s = mt_optim_step(o, 1e-4, 0.1, NULL, NULL, NULL);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        if (s != MT_OK) mt_bench_error(st, mt_last_error());
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        mt_bench_set_iteration_time(st, ms * 1e-3);
        total_s += ms * 1e-3;
        iters++;
    }
    int64_t n = mt_optim_buffer_numel(b);
    int64_t per = (c->dt == MT_F32 ? 28 : 30) + (c->clip > 0.0f ? 4 : 0);
    mt_bench_set_bytes(st, per * n);
    mt_bench_counter(st, "params", (double)n);
    if (iters && copy_gbs > 0)
        mt_bench_counter(st, "frac_of_copy_bw",
                         (double)(per * n) * iters / total_s / 1e9 / copy_gbs);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
done:
    mt_optim_destroy(o);
    mt_optim_buffer_destroy(b);
    mt_arena_destroy(ar);
}

/* Median of 10 timed 1 GiB device-to-device copies (bench_copy's copy/cuda/1GiB). */
static double measure_copy(void) {
    size_t bytes = (size_t)1 << 30;
    void *a, *b;
    if (mt_device_malloc(&a, bytes) != MT_OK) return 0;
    if (mt_device_malloc(&b, bytes) != MT_OK) {
        mt_device_free(a);
        return 0;
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float t[10];
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    for (int i = 0; i < 10; i++) {
        cudaEventRecord(e0, 0);
        cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&t[i], e0, e1);
    }
    for (int i = 1; i < 10; i++) /* insertion sort */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            float x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    mt_device_free(a);
    mt_device_free(b);
    return 2.0 * (double)bytes / (t[5] * 1e-3) / 1e9;
}
#endif

int main(int argc, char **argv) {
#if MT_HAVE_CUDA
    int ngpu = 0;
    mt_device_count(&ngpu);
    if (ngpu) {
        char name[256], gbs[32];
        mt_device_name(0, name, sizeof name);
        mt_bench_context("device", name);
        copy_gbs = measure_copy();
        snprintf(gbs, sizeof gbs, "%.1f", copy_gbs);
        mt_bench_context("copy_GBs", gbs);
        static optim_case cases[] = {
            { 768, 12, MT_F32, 0.0f },  { 768, 12, MT_BF16, 0.0f },  { 768, 12, MT_F32, 1.0f },
            { 1600, 48, MT_F32, 0.0f }, { 1600, 48, MT_BF16, 0.0f }, { 1600, 48, MT_F32, 1.0f },
        };
        static const char *names[] = {
            "adamw/cuda/f32_124M", "adamw/cuda/bf16_124M", "adamw_clip/cuda/f32_124M",
            "adamw/cuda/f32_1.5B", "adamw/cuda/bf16_1.5B", "adamw_clip/cuda/f32_1.5B",
        };
        for (int i = 0; i < 6; i++)
            mt_bench_register(names[i], bench_step, &cases[i], MT_BENCH_MANUAL_TIME);
    }
#endif
    return mt_bench_main(argc, argv);
}
