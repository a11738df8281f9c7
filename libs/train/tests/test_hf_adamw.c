/* functional (CPU) / gpu: ten AdamW steps of our GPT-2 and Llama models, with parameters on
 * mt-optim's buffers as mt-pretrain lays them out, reproduce the losses of torch.optim.AdamW on
 * the Hugging Face models (libs/model/golden/gen_hf.py: lr 1e-3, betas .9/.95, eps 1e-8, weight
 * decay 0.1 on 2-D weights only, one fixed batch per step).
 *   test_hf_adamw gpt2|llama cpu|cuda f32|bf16 */
#include "hf_tiny.h"

#include <mt/optim.h>

#include <math.h>
#include <string.h>

static mt_optim_buffer *buf;

static mt_status storage(void *ctx, const char *name, int ndim, const int64_t *shape, int no_wd,
                         mt_tensor *weight, mt_tensor *grad) {
    (void)ctx;
    int idx;
    if (!weight)
        return mt_optim_buffer_add(buf, name, ndim, shape,
                                   no_wd ? MT_OPTIM_PARAM_NO_DECAY : MT_OPTIM_PARAM_DECAY, NULL);
    MT_TRY(mt_optim_buffer_find(buf, name, &idx));
    MT_TRY(mt_optim_buffer_param(buf, idx, weight));
    return mt_optim_buffer_grad(buf, idx, grad);
}

int main(int argc, char **argv) {
    if (argc != 4) mt_die(__FILE__, __LINE__, "usage: %s gpt2|llama cpu|cuda f32|bf16", argv[0]);
    const char *tag = argv[1];
    int cuda = strcmp(argv[2], "cuda") == 0;
    mt_dtype dt = strcmp(argv[3], "bf16") == 0 ? MT_BF16 : MT_F32;
    if (cuda) mt_test_require_gpus(1);
    mt_device dev = cuda ? mt_device_cuda(0) : MT_DEVICE_CPU;
    double rtol = !cuda ? 1e-5 : dt == MT_F32 ? 1e-4 : 1e-2; /* issue 8's tolerances */

    mt_model_config c = hf_tiny_config(tag, dt);
    mt_optim_buffer_config bc = MT_OPTIM_BUFFER_CONFIG_INIT;
    bc.param_dtype = dt;
    bc.device = dev;
    bc.bucket_numel = 20000; /* several buckets */
    MT_CHECK(mt_optim_buffer_create(&bc, &buf));
    MT_CHECK(mt_model_list_params(&c, storage, NULL));
    size_t bytes;
    MT_CHECK(mt_optim_buffer_finalize(buf, &bytes));
    mt_arena *barena, *oarena, *io;
    MT_CHECK(mt_arena_create(dev, bytes, &barena));
    MT_CHECK(mt_optim_buffer_bind(buf, barena));
    mt_model *m;
    MT_CHECK(mt_model_create(&c, B, dev, storage, NULL, &m));

    /* the Hugging Face weights (padded vocab rows stay zero) */
    char path[256];
    snprintf(path, sizeof path, "%s_weights.safetensors", tag);
    mt_safetensors *wf, *af;
    MT_CHECK(mt_safetensors_open(mt_test_golden_path(path), &wf));
    snprintf(path, sizeof path, "%s_adamw.safetensors", tag);
    MT_CHECK(mt_safetensors_open(mt_test_golden_path(path), &af));
    hf_tiny_load_weights(m, wf, dev, dt);
    mt_optim_config oc = MT_OPTIM_CONFIG_INIT;
    oc.adam_beta1 = 0.9f;
    oc.adam_beta2 = 0.95f;
    oc.adam_eps = 1e-8f;
    oc.clip_grad = 0.0f;
    MT_CHECK(mt_optim_state_bytes(&oc, buf, &bytes));
    MT_CHECK(mt_arena_create(dev, bytes, &oarena));
    mt_optim *o;
    MT_CHECK(mt_optim_create(&oc, buf, oarena, &o)); /* copies the loaded params to masters */

    mt_tensor steps, want;
    MT_CHECK(mt_safetensors_get(af, "step_tokens", &steps));
    MT_CHECK(mt_safetensors_get(af, "losses", &want));
    MT_CHECK(mt_arena_create(dev, 8192, &io));
    mt_tensor tok, tgt;
    MT_CHECK(mt_tensor_alloc(io, MT_I32, 2, (int64_t[]){ B, T }, &tok));
    MT_CHECK(mt_tensor_alloc(io, MT_I32, 2, (int64_t[]){ B, T }, &tgt));
    float got[10];
    for (int s = 0; s < 10; s++) {
        const int32_t *st = (const int32_t *)steps.data + s * B * T;
        int32_t ht[B * T], hg[B * T];
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                ht[b * T + t] = st[b * T + t];
                hg[b * T + t] = st[b * T + (t + 1) % T]; /* torch.roll(tokens, -1) */
            }
        MT_CHECK(mt_memcpy(tok.data, dev, ht, MT_DEVICE_CPU, sizeof ht, NULL));
        MT_CHECK(mt_memcpy(tgt.data, dev, hg, MT_DEVICE_CPU, sizeof hg, NULL));
        MT_CHECK(mt_optim_buffer_zero_grad(buf, NULL));
        MT_CHECK(mt_model_forward_backward(m, &tok, &tgt, 1.0f, NULL));
        double loss;
        MT_CHECK(mt_model_take_loss(m, &loss, NULL));
        got[s] = (float)loss;
        mt_optim_step_info info;
        MT_CHECK(mt_optim_step(o, 1e-3, 0.1, NULL, &info, NULL));
        MT_EXPECT(!info.skipped, "step %d skipped", s);
    }
    char what[64];
    snprintf(what, sizeof what, "%s %s %s adamw losses", tag, argv[2], argv[3]);
    mt_test_close_f32(what, got, want.data, 10, 0, rtol);
    mt_optim_destroy(o);
    mt_model_destroy(m);
    mt_optim_buffer_destroy(buf);
    mt_arena_destroy(barena);
    mt_arena_destroy(oarena);
    mt_arena_destroy(io);
    mt_safetensors_close(wf);
    mt_safetensors_close(af);
    return mt_test_result();
}
