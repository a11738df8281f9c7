/* functional: `mt-convert hf-to-mt` of a tiny transformers GPT-2 / Llama / ... / DeepSeek-V3
 * (golden/gen_logits.py), loaded parameter by parameter (and buffer by buffer: DeepSeek-V3's
 * expert bias) into libs/model, gives transformers' logits (fp32 tolerance), and the vocabulary
 * padding rows give zero logits. The model config comes from the HF config the import stored in
 * the checkpoint's args.
 *   test_convert_logits MT_CONVERT gpt2|llama|... */
#include <math.h>
#include <mt/ckpt.h>
#include <mt/model.h>
#include <mt/testkit.h>
#include <mt/train.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 3)
        mt_die(__FILE__, __LINE__,
               "usage: %s MT_CONVERT gpt2|llama|qwen2|qwen3|mixtral|qwen2_moe[_fused]|"
               "deepseek_v3[_fused]",
               argv[0]);
    char fixture[64], tmp[64] = "/tmp/mt-convert-logits-XXXXXX", cmd[2048], p[1024];
    snprintf(fixture, sizeof fixture, "logits_%s", argv[2]);
    if (!mkdtemp(tmp)) return 1;
    const char *hf_dir = mt_test_golden_path(fixture);
    snprintf(cmd, sizeof cmd, "'%s' hf-to-mt '%s' '%s/ckpt' --make-vocab-size-divisible-by 128",
             argv[1], hf_dir, tmp);
    if (system(cmd) != 0) mt_die(__FILE__, __LINE__, "failed: %s", cmd);

    mt_safetensors *io;
    snprintf(p, sizeof p, "%s/logits.safetensors", hf_dir);
    MT_CHECK(mt_safetensors_open(p, &io));
    mt_tensor tok, ref;
    MT_CHECK(mt_safetensors_get(io, "tokens", &tok));
    MT_CHECK(mt_safetensors_get(io, "logits", &ref));
    int B = (int)tok.shape[0], T = (int)tok.shape[1], V = (int)ref.shape[1];

    snprintf(p, sizeof p, "%s/ckpt", tmp);
    mt_ckpt *ck;
    MT_CHECK(mt_ckpt_open(p, MT_CKPT_ITER_LATEST, MT_CKPT_OPEN_VERIFY, &ck));
    mt_model_config cfg; /* (libs/train's reading of the HF config, as mt-generate's) */
    MT_CHECK(mt_train_model_config_from_hf(mt_ckpt_args(ck), &cfg));
    cfg.seq_length = T;
    MT_EXPECT(cfg.vocab_size == V, "vocab %d, logits have %d columns", cfg.vocab_size, V);
    mt_model *m;
    MT_CHECK(mt_model_create(&cfg, B, MT_DEVICE_CPU, NULL, NULL, &m));
    int Vp = mt_model_get_config(m)->padded_vocab_size;
    MT_EXPECT(Vp == 128, "padded vocab %d (100 rounded up to 128)", Vp);

    /* every model parameter and buffer from the checkpoint, and nothing else in it */
    const int nb = mt_model_num_buffers(m);
    MT_EXPECT(mt_ckpt_count(ck) == mt_model_num_params(m) + nb,
              "checkpoint has %d tensors, model %d parameters and %d buffers", mt_ckpt_count(ck),
              mt_model_num_params(m), nb);
    for (int i = 0; i < mt_model_num_params(m); i++) {
        mt_model_param *pr = mt_model_param_at(m, i);
        mt_dtype dt;
        int nd;
        int64_t sh[MT_MAX_DIMS];
        MT_CHECK(mt_ckpt_info(ck, pr->name, &dt, &nd, sh));
        mt_tensor want = mt_tensor_make(NULL, dt, nd, sh, MT_DEVICE_CPU);
        if (dt != pr->weight.dtype || !mt_tensor_same_shape(&want, &pr->weight)) {
            char a[128], b[128];
            mt_die(__FILE__, __LINE__, "%s: checkpoint %s, model %s", pr->name,
                   mt_tensor_str(&want, a, sizeof a), mt_tensor_str(&pr->weight, b, sizeof b));
        }
        size_t bytes = mt_tensor_nbytes(&want);
        want.data = malloc(bytes + 1);
        MT_CHECK(mt_ckpt_read(ck, pr->name, &want, NULL));
        MT_CHECK(
            mt_memcpy(pr->weight.data, pr->weight.device, want.data, MT_DEVICE_CPU, bytes, NULL));
        free(want.data);
    }
    for (int i = 0; i < nb; i++) { /* (f32, 1-D: the routers' expert biases) */
        const char *name;
        mt_tensor b;
        MT_CHECK(mt_model_buffer_at(m, i, &name, &b));
        mt_tensor want = mt_tensor_make(NULL, MT_F32, b.ndim, b.shape, MT_DEVICE_CPU);
        want.data = malloc(mt_tensor_nbytes(&want) + 1);
        MT_CHECK(mt_ckpt_read(ck, name, &want, NULL));
        MT_CHECK(mt_memcpy(b.data, b.device, want.data, MT_DEVICE_CPU, mt_tensor_nbytes(&b), NULL));
        free(want.data);
    }

    MT_CHECK(mt_model_forward(m, &tok, NULL, NULL));
    MT_CHECK(mt_stream_sync(NULL));
    mt_tensor lg = mt_model_logits(m); /* (B*T, Vp) on the CPU */
    MT_ASSERT(lg.dtype == MT_F32 && lg.shape[1] == Vp && mt_tensor_is_contiguous(&lg));
    const float *l = lg.data, *r = ref.data;
    float *got = malloc((size_t)B * T * V * 4);
    double mx = 0;
    int pad_zero = 1;
    for (int64_t i = 0; i < (int64_t)B * T; i++) {
        memcpy(got + i * V, l + i * Vp, (size_t)V * 4);
        for (int j = V; j < Vp; j++)
            pad_zero &= l[i * Vp + j] == 0.0f;
    }
    for (int64_t i = 0; i < (int64_t)B * T * V; i++)
        mx = fmax(mx, fabs(r[i]));
    /* fp32 forward vs transformers' float64: 1e-5 of the largest logit */
    mt_test_close_f32(argv[2], got, r, (size_t)B * T * V, 1e-5 * mx, 1e-5);
    MT_EXPECT(pad_zero, "%s: logits of the %d padding rows are 0", argv[2], Vp - V);
    free(got);
    mt_ckpt_close(ck);
    mt_model_destroy(m);
    mt_safetensors_close(io);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) return 1;
    return mt_test_result();
}
