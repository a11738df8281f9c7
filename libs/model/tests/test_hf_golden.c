/* functional (CPU) / gpu: our GPT-2 and Llama models loaded with the weights of tiny Hugging Face
 * models reproduce transformers' logits, loss and every parameter gradient (golden/gen_hf.py).
 * multirank / multigpu (`tp`, under an MPI launcher): the same with the launcher's ranks as one
 * tensor-parallel group, each rank holding its shards (mt_model_create_tp) and checking its
 * pieces of the logits and of every gradient; `tpsp` with sequence parallelism too (each rank
 * holding its rows of the residual stream; mt_model_finalize_grads sums the norms' and the
 * row-parallel biases' shares).
 *   test_hf_golden gpt2|llama[_scaled]|mistral_window|stablelm|qwen2|qwen3[_moe]|mixtral|qwen2_moe[_mixed]|deepseek_mla|
 *                 deepseek_v3|deepseek_yarn
 *                  cpu|cuda f32|bf16|f16 [tp|tpsp] */
#include "hf_tiny.h"

#include <mt/comm.h>

#include <math.h>
#include <string.h>

static mt_comm *g_tp; /* the tensor-parallel group (NULL: TP 1) */
static int g_sp;      /* sequence parallelism */

static mt_model *create(mt_model_config cfg, mt_device dev) {
    cfg.tensor_model_parallel_size = mt_tp_size(g_tp);
    cfg.sequence_parallel = g_sp;
    mt_model *m;
    MT_CHECK(mt_model_create_tp(&cfg, B, dev, g_tp, NULL, NULL, &m));
    return m;
}

/* The logits' real-vocabulary columns this rank holds, against the golden's (B*T, V). */
static void check_logits(const char *what, mt_model *m, const float *golden, double rtol);

/* Host f32 copy of any model tensor (device or host, f32 or bf16). */
static float *to_host_f32(const mt_tensor *t) {
    int64_t n = mt_tensor_numel(t);
    size_t es = mt_dtype_size(t->dtype);
    void *raw = malloc((size_t)n * es);
    float *f = malloc((size_t)n * 4);
    MT_CHECK(mt_memcpy(raw, MT_DEVICE_CPU, t->data, t->device, (size_t)n * es, NULL));
    mt_tensor hr = mt_tensor_1d(raw, t->dtype, n, MT_DEVICE_CPU);
    mt_tensor hf = mt_tensor_1d(f, MT_F32, n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&hf, &hr, NULL));
    free(raw);
    return f;
}

/* The parameter's gradient against the golden one, named prefix + its name (host f32 copy
 * returned). */
static float *check_grad(mt_model_param *p, mt_safetensors *gf, const char *prefix, double rtol) {
    char name[256];
    snprintf(name, sizeof name, "%s%s", prefix, p->name);
    float *got = to_host_f32(&p->grad);
    float *ref = golden_local(gf, name, p);
    double mx = 0;
    int64_t n = mt_tensor_numel(&p->grad);
    for (int64_t j = 0; j < n; j++)
        mx = fmax(mx, fabs(ref[j]));
    /* atol: rtol of the tensor's largest gradient (elements near zero carry only the rounding of
     * the sums that formed them) */
    mt_test_close_f32(name, got, ref, (size_t)n, rtol * mx, rtol);
    free(ref);
    return got;
}

/* Dropout in training (golden/gen_hf.py's <tag>_drop: transformers in training mode with our
 * masks in place of torch's dropout): GPT-2 with hidden and attention dropout, Llama with
 * attention dropout (its HF model has no hidden dropout). The loss, and in f32 every gradient;
 * an evaluation forward of the same model has no dropout (the golden's eval loss). */
static void check_dropout(const char *tag, mt_model_config cfg, mt_device dev, mt_dtype dt,
                          mt_safetensors *wf, mt_safetensors *gf, const mt_tensor *tok,
                          const mt_tensor *tgt, float eval_loss, double rtol, mt_arena *ar) {
    char path[256];
    snprintf(path, sizeof path, "%s_drop.safetensors", tag);
    mt_safetensors *df;
    MT_CHECK(mt_safetensors_open(mt_test_golden_path(path), &df));
    cfg.hidden_dropout = strcmp(tag, "gpt2") == 0 ? 0.1f : 0.0f;
    cfg.attention_dropout = 0.1f;
    cfg.seed = 1234;
    mt_model *m = create(cfg, dev);
    hf_tiny_load_weights(m, wf, dev, dt);
    mt_tensor hid, ids, gl;
    MT_CHECK(mt_safetensors_get(df, "sample_ids", &hid));
    MT_CHECK(mt_safetensors_get(df, "loss", &gl));
    MT_CHECK(mt_tensor_alloc(ar, MT_I64, 1, hid.shape, &ids));
    MT_CHECK(mt_tensor_copy(&ids, &hid, NULL));
    MT_EXPECT(mt_model_forward_backward(m, tok, tgt, 1.0f, NULL) == MT_ERR_INVALID_ARG &&
                  strstr(mt_last_error(), "mt_model_set_sample_ids"),
              "dropout without sample ids: %s", mt_last_error());
    mt_error_clear();
    MT_CHECK(mt_model_set_sample_ids(m, &ids));
    double loss;
    MT_CHECK(mt_model_forward_backward(m, tok, tgt, 1.0f, NULL));
    MT_CHECK(mt_model_take_loss(m, &loss, NULL));
    const float want = ((float *)gl.data)[0];
    MT_EXPECT(fabs(loss - want) <= rtol * fabs(want), "%s dropout: loss %.8f want %.8f", tag, loss,
              want);
    /* the masks matter: the golden's gradients with dropout are far from those without */
    mt_tensor gd, ge;
    MT_CHECK(mt_safetensors_get(df, "grad.decoder.layers.0.self_attention.linear_qkv.weight", &gd));
    MT_CHECK(mt_safetensors_get(gf, "decoder.layers.0.self_attention.linear_qkv.weight", &ge));
    double diff = 0, mag = 0;
    for (int64_t j = 0; j < mt_tensor_numel(&ge); j++) {
        const double x = ((float *)gd.data)[j], y = ((float *)ge.data)[j];
        diff = fmax(diff, fabs(x - y)), mag = fmax(mag, fabs(y));
    }
    MT_EXPECT(diff > 0.05 * mag,
              "the dropout golden's qkv gradient is within %.2e of the one "
              "without dropout",
              diff / mag);
    fprintf(stderr, "dropout loss %.8f want %.8f (rel %.2e)\n", loss, want,
            fabs(loss - want) / want);
    if (dt == MT_F32)
        for (int i = 0; i < mt_model_num_params(m); i++)
            free(check_grad(mt_model_param_at(m, i), df, "grad.", rtol));
    MT_CHECK(mt_model_forward(m, tok, tgt, NULL)); /* evaluation: no dropout */
    MT_CHECK(mt_model_take_loss(m, &loss, NULL));
    MT_EXPECT(fabs(loss - eval_loss) <= rtol * fabs(eval_loss),
              "%s: evaluation with dropout configured: loss %.8f want %.8f", tag, loss, eval_loss);
    mt_model_destroy(m);
    mt_safetensors_close(df);
}

/* Tensor parallelism: each rank's initial weights are its pieces of the unsharded model's,
 * bitwise (mt_model_create_tp draws every tensor whole). */
/* Mixtral with Megatron's router losses (golden/gen_hf.py's mixtral_moe: megatron-core's
 * switch_load_balancing_loss_func and z_loss_func of each layer's router logits added to the
 * cross-entropy): every gradient (f32; bf16 and f16: the loss) and the losses' values averaged
 * over the layers (mt_model_take_moe_losses). */
static void check_moe_losses(mt_model_config cfg, mt_device dev, mt_dtype dt, mt_safetensors *wf,
                             const mt_tensor *tok, const mt_tensor *tgt, double rtol) {
    mt_safetensors *mf;
    MT_CHECK(mt_safetensors_open(mt_test_golden_path("mixtral_moe.safetensors"), &mf));
    mt_tensor co, gl, gm;
    MT_CHECK(mt_safetensors_get(mf, "coeffs", &co));
    MT_CHECK(mt_safetensors_get(mf, "loss", &gl));
    MT_CHECK(mt_safetensors_get(mf, "moe_losses", &gm));
    cfg.moe_aux_loss_coeff = ((const float *)co.data)[0];
    cfg.moe_z_loss_coeff = ((const float *)co.data)[1];
    mt_model *m = create(cfg, dev);
    hf_tiny_load_weights(m, wf, dev, dt);
    MT_CHECK(mt_model_forward_backward(m, tok, tgt, 1.0f, NULL));
    MT_CHECK(mt_model_finalize_grads(m, NULL)); /* (sequence parallelism: the norms' shares) */
    double loss, aux, z;
    MT_CHECK(mt_model_take_loss(m, &loss, NULL));
    MT_CHECK(mt_model_take_moe_losses(m, &aux, &z, NULL));
    const float want = ((const float *)gl.data)[0], got[2] = { (float)aux, (float)z };
    MT_EXPECT(fabs(loss - want) <= rtol * fabs(want), "MoE: loss %.8f want %.8f", loss, want);
    mt_test_close_f32("router losses (aux, z)", got, gm.data, 2, 0.0, rtol);
    if (dt == MT_F32)
        for (int i = 0; i < mt_model_num_params(m); i++)
            free(check_grad(mt_model_param_at(m, i), mf, "grad.", rtol));
    /* an evaluation forward computes no router losses */
    MT_CHECK(mt_model_forward(m, tok, tgt, NULL));
    MT_CHECK(mt_model_take_loss(m, &loss, NULL));
    MT_CHECK(mt_model_take_moe_losses(m, &aux, &z, NULL));
    MT_EXPECT(isnan(aux) && isnan(z), "router losses after an evaluation forward: %g %g", aux, z);
    mt_model_destroy(m);
    mt_safetensors_close(mf);
}

/* Multi-token prediction: each depth's mean loss of the training forwards since the last call
 * against the golden's (golden/gen_mtp.py: megatron.core's MTPLossLoggingHelper values). */
static void check_mtp_losses(mt_model *m, mt_safetensors *f, const char *name, double rtol) {
    mt_tensor g;
    MT_CHECK(mt_safetensors_get(f, name, &g));
    const int D = mt_model_get_config(m)->mtp_num_layers;
    MT_EXPECT(mt_tensor_numel(&g) == D, "%s: %lld values for %d depths", name,
              (long long)mt_tensor_numel(&g), D);
    double sum[8], count[8];
    float got[8];
    MT_CHECK(mt_model_take_mtp_loss_sums(m, sum, count, D, NULL));
    for (int k = 0; k < D && k < 8; k++)
        got[k] = (float)(sum[k] / count[k]);
    mt_test_close_f32("MTP losses", got, g.data, (size_t)D, 0.0, rtol);
    fprintf(stderr, "MTP losses:");
    for (int k = 0; k < D && k < 8; k++)
        fprintf(stderr, " %.8f (want %.8f)", got[k], ((const float *)g.data)[k]);
    fprintf(stderr, "\n");
}

static void check_init(const mt_model_config *cfg, mt_device dev) {
    mt_model *one, *part = create(*cfg, dev);
    MT_CHECK(mt_model_create(cfg, B, dev, NULL, NULL, &one));
    int split = 0;
    for (int i = 0; i < mt_model_num_params(part); i++) {
        mt_model_param *p = mt_model_param_at(part, i), *q = mt_model_param_at(one, i);
        float *full = to_host_f32(&q->weight), *got = to_host_f32(&p->weight);
        float *want = cut_local(full, p);
        split += want != NULL;
        int64_t n = mt_tensor_numel(&p->weight), bad = 0;
        for (int64_t j = 0; j < n; j++)
            bad += memcmp(&got[j], want ? &want[j] : &full[j], 4) != 0;
        MT_EXPECT(bad == 0, "%s: %lld of %lld initial weights differ from the unsharded model's",
                  p->name, (long long)bad, (long long)n);
        free(full), free(got), free(want);
    }
    MT_EXPECT(split > 0, "no parameter is split");
    mt_model_destroy(one);
    mt_model_destroy(part);
}

static void check_logits(const char *what, mt_model *m, const float *golden, double rtol) {
    mt_tensor lg = mt_model_logits(m);
    float *l = to_host_f32(&lg);
    const int64_t Vl = lg.shape[1], v0 = mt_tp_rank(g_tp) * Vl;
    const int64_t nv = V - v0 < Vl ? (V - v0 > 0 ? V - v0 : 0) : Vl; /* real columns here */
    float *got = malloc((size_t)(B * T * nv) * 4 + 4), *ref = malloc((size_t)(B * T * nv) * 4 + 4);
    for (int64_t r = 0; r < B * T; r++) {
        memcpy(got + r * nv, l + r * Vl, (size_t)nv * 4);
        memcpy(ref + r * nv, golden + r * V + v0, (size_t)nv * 4);
    }
    mt_test_close_f32(what, got, ref, (size_t)(B * T * nv), rtol * 0.1, rtol);
    free(l);
    free(got);
    free(ref);
}

int main(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && (strcmp(argv[4], "tp") == 0 || strcmp(argv[4], "tpsp") == 0)))
        mt_die(
            __FILE__, __LINE__,
            "usage: %s "
            "gpt2|llama[_scaled]|stablelm|qwen2|qwen3|mixtral|qwen2_moe|deepseek_mla|deepseek_v3|"
            "deepseek_yarn "
            "cpu|cuda f32|bf16|f16 [tp|tpsp]",
            argv[0]);
    g_sp = argc == 5 && strcmp(argv[4], "tpsp") == 0;
    const char *tag = argv[1];
    int cuda = strcmp(argv[2], "cuda") == 0;
    mt_dtype dt = strcmp(argv[3], "bf16") == 0  ? MT_BF16
                  : strcmp(argv[3], "f16") == 0 ? MT_F16
                                                : MT_F32;
    mt_comm *world = NULL;
    if (argc == 5) { /* the launcher's ranks as one tensor-parallel group */
        if (!(cuda ? mt_comm_have_nccl() : mt_comm_have_mpi()))
            mt_test_skip(cuda ? "built without NCCL" : "built without MPI");
        mt_test_require_ranks(2);
    }
    if (cuda) mt_test_require_gpus(1);
    if (argc == 5) {
        mt_comm_config cc = MT_COMM_CONFIG_INIT;
        cc.backends = cuda ? MT_COMM_DEVICE : MT_COMM_HOST;
        cc.timeout_s = 120;
        MT_CHECK(mt_comm_world_create(&cc, &world));
        g_tp = world;
    }
    mt_device dev = cuda ? (world ? mt_comm_device(world) : mt_device_cuda(0)) : MT_DEVICE_CPU;
    /* tolerances: CPU fp32 1e-5 relative, GPU fp32 1e-4, bf16 losses 1e-2 (issue 8), f16 losses
     * bf16's / 8 (the ratio of their unit roundoffs, 2^-11 and 2^-8) */
    double rtol = dt == MT_BF16 ? 1e-2 : dt == MT_F16 ? 1e-2 / 8 : !cuda ? 1e-5 : 1e-4;

    mt_model_config cfg = hf_tiny_config(tag, dt);
    if (g_tp) check_init(&cfg, dev);
    mt_model *m = create(cfg, dev);
    char path[256];
    snprintf(path, sizeof path, "%s_weights.safetensors", tag);
    mt_safetensors *wf, *gf, *io;
    MT_CHECK(mt_safetensors_open(mt_test_golden_path(path), &wf));
    snprintf(path, sizeof path, "%s_grads.safetensors", tag);
    MT_CHECK(mt_safetensors_open(mt_test_golden_path(path), &gf));
    snprintf(path, sizeof path, "%s_io.safetensors", tag);
    MT_CHECK(mt_safetensors_open(mt_test_golden_path(path), &io));
    MT_EXPECT(mt_safetensors_count(wf) == mt_model_num_params(m) + mt_model_num_buffers(m),
              "golden has %d tensors, model %d params and %d buffers", mt_safetensors_count(wf),
              mt_model_num_params(m), mt_model_num_buffers(m));

    /* load the weights */
    hf_tiny_load_weights(m, wf, dev, dt);

    /* tokens and targets on the device */
    mt_tensor ht, hg, gl, gloss;
    MT_CHECK(mt_safetensors_get(io, "tokens", &ht));
    MT_CHECK(mt_safetensors_get(io, "targets", &hg));
    MT_CHECK(mt_safetensors_get(io, "logits", &gl));
    MT_CHECK(mt_safetensors_get(io, "loss", &gloss));
    mt_arena *ar;
    MT_CHECK(mt_arena_create(dev, 4096, &ar));
    mt_tensor tok, tgt;
    MT_CHECK(mt_tensor_alloc(ar, MT_I32, 2, ht.shape, &tok));
    MT_CHECK(mt_tensor_alloc(ar, MT_I32, 2, hg.shape, &tgt));
    MT_CHECK(mt_tensor_copy(&tok, &ht, NULL));
    MT_CHECK(mt_tensor_copy(&tgt, &hg, NULL));

    /* forward: loss and logits */
    MT_CHECK(mt_model_forward(m, &tok, &tgt, NULL));
    double loss;
    MT_CHECK(mt_model_take_loss(m, &loss, NULL));
    float want = ((float *)gloss.data)[0];
    MT_EXPECT(fabs(loss - want) <= rtol * fabs(want), "%s %s %s loss %.8f want %.8f", tag, argv[2],
              argv[3], loss, want);
    fprintf(stderr, "loss %.8f want %.8f (rel %.2e)\n", loss, want, fabs(loss - want) / want);
    if (dt == MT_F32) {
        check_logits("logits", m, gl.data, rtol);

        /* backward: every gradient */
        MT_CHECK(mt_model_zero_grad(m, NULL));
        MT_CHECK(mt_model_forward_backward(m, &tok, &tgt, 1.0f, NULL));
        MT_CHECK(mt_model_finalize_grads(m, NULL));
        MT_CHECK(mt_model_take_loss(m, &loss, NULL));
        MT_EXPECT(fabs(loss - want) <= rtol * fabs(want), "fused loss %.8f want %.8f", loss, want);
        if (cfg.mtp_num_layers) check_mtp_losses(m, io, "mtp_losses", rtol);
        int np = mt_model_num_params(m);
        float **first = calloc((size_t)np, sizeof *first);
        for (int i = 0; i < np; i++)
            first[i] = check_grad(mt_model_param_at(m, i), gf, "", rtol);

        /* the same step over stale grads after mt_model_discard_grads: every grad is written
         * (the first backward GEMMs with beta = 0; the embeddings' scatter targets zeroed), so
         * they equal the grads above bitwise */
        for (int i = 0; i < np; i++) {
            mt_tensor *g = &mt_model_param_at(m, i)->grad;
            int64_t n = mt_tensor_numel(g);
            MT_EXPECT(g->dtype == MT_F32, "grads are f32");
            float *stale = malloc((size_t)n * 4);
            for (int64_t j = 0; j < n; j++)
                stale[j] = 1e3f + (float)(j % 7);
            MT_CHECK(mt_memcpy(g->data, g->device, stale, MT_DEVICE_CPU, (size_t)n * 4, NULL));
            free(stale);
        }
        MT_CHECK(mt_model_discard_grads(m, NULL));
        MT_CHECK(mt_model_forward_backward(m, &tok, &tgt, 1.0f, NULL));
        MT_CHECK(mt_model_finalize_grads(m, NULL));
        MT_CHECK(mt_model_take_loss(m, &loss, NULL));
        if (cfg.mtp_num_layers) check_mtp_losses(m, io, "mtp_losses", rtol);
        for (int i = 0; i < np; i++) {
            mt_model_param *p = mt_model_param_at(m, i);
            float *got = to_host_f32(&p->grad);
            int64_t n = mt_tensor_numel(&p->grad), bad = 0;
            for (int64_t j = 0; j < n; j++)
                bad += memcmp(&got[j], &first[i][j], 4) != 0;
            MT_EXPECT(bad == 0, "%s: %lld of %lld grads differ after discard_grads", p->name,
                      (long long)bad, (long long)n);
            free(got);
            free(first[i]);
        }
        free(first);

        /* per_token_loss (--calculate-per-token-loss): the backward of the SUM of token losses
         * times loss_scale; with loss_scale = 1 / the counted tokens (the golden batch ignores
         * one) that is transformers' mean again, on the one-call and the sliced output layer */
        int64_t counted = 0;
        for (int64_t j = 0; j < mt_tensor_numel(&hg); j++)
            counted += ((const int32_t *)hg.data)[j] != MT_XENT_IGNORE_INDEX;
        MT_EXPECT(counted < mt_tensor_numel(&hg), "the golden batch ignores no token");
        /* (multi-token prediction: Megatron's per-token MTP losses are sums, not the golden's
         * means; its sliced output layer below) */
        for (int chunks = 1; chunks <= 3 && !cfg.mtp_num_layers; chunks += 2) {
            mt_model_config pc = cfg;
            pc.per_token_loss = 1;
            pc.logits_chunks = chunks;
            mt_model *pm = create(pc, dev);
            hf_tiny_load_weights(pm, wf, dev, dt);
            MT_CHECK(mt_model_forward_backward(pm, &tok, &tgt, 1.0f / (float)counted, NULL));
            MT_CHECK(mt_model_finalize_grads(pm, NULL));
            MT_CHECK(mt_model_take_loss(pm, &loss, NULL));
            MT_EXPECT(fabs(loss - want) <= rtol * fabs(want), "per-token loss %.8f want %.8f", loss,
                      want);
            for (int i = 0; i < np; i++)
                free(check_grad(mt_model_param_at(pm, i), gf, "", rtol));
            mt_model_destroy(pm);
        }

        if (cfg.mtp_num_layers) { /* the MTP heads and the decoder's on logits slices */
            mt_model_config pc = cfg;
            pc.logits_chunks = 3;
            mt_model *pm = create(pc, dev);
            hf_tiny_load_weights(pm, wf, dev, dt);
            MT_CHECK(mt_model_forward_backward(pm, &tok, &tgt, 1.0f, NULL));
            MT_CHECK(mt_model_finalize_grads(pm, NULL));
            MT_CHECK(mt_model_take_loss(pm, &loss, NULL));
            MT_EXPECT(fabs(loss - want) <= rtol * fabs(want), "sliced: loss %.8f want %.8f", loss,
                      want);
            check_mtp_losses(pm, io, "mtp_losses", rtol);
            for (int i = 0; i < np; i++)
                free(check_grad(mt_model_param_at(pm, i), gf, "", rtol));
            mt_model_destroy(pm);
        }

        /* position ids that restart inside the sequences (--reset-position-ids): transformers
         * with position_ids; learned positions (GPT-2) and RoPE angles (Llama); (megatron.core's
         * MTP golden: learned positions only, its RoPE ignores them) */
        if (cfg.mtp_num_layers && cfg.position_embedding_type == MT_POS_ROPE) goto done;
        mt_safetensors *pf;
        snprintf(path, sizeof path, "%s_pos.safetensors", tag);
        MT_CHECK(mt_safetensors_open(mt_test_golden_path(path), &pf));
        mt_tensor hp, pl, plo, pos;
        MT_CHECK(mt_safetensors_get(pf, "position_ids", &hp));
        MT_CHECK(mt_safetensors_get(pf, "logits", &pl));
        MT_CHECK(mt_safetensors_get(pf, "loss", &plo));
        MT_CHECK(mt_tensor_alloc(ar, MT_I32, 2, hp.shape, &pos));
        MT_CHECK(mt_tensor_copy(&pos, &hp, NULL));
        MT_CHECK(mt_model_set_positions(m, &pos));
        MT_CHECK(mt_model_zero_grad(m, NULL));
        MT_CHECK(mt_model_forward_backward(m, &tok, &tgt, 1.0f, NULL));
        MT_CHECK(mt_model_finalize_grads(m, NULL));
        MT_CHECK(mt_model_take_loss(m, &loss, NULL));
        want = ((float *)plo.data)[0];
        MT_EXPECT(fabs(loss - want) <= rtol * fabs(want), "positions: loss %.8f want %.8f", loss,
                  want);
        if (cfg.mtp_num_layers) check_mtp_losses(m, pf, "mtp_losses", rtol);
        /* (the check can fail: the golden's loss moves by more than the CPU's tolerance; the
         * logits and gradients with positions are checked element by element) */
        MT_EXPECT(fabs(want - ((float *)gloss.data)[0]) > 1e-5 * fabs(want),
                  "the positions change the loss by no more than 1e-5");
        for (int i = 0; i < np; i++)
            free(check_grad(mt_model_param_at(m, i), pf, "grad.", rtol));
        MT_CHECK(
            mt_model_forward(m, &tok, &tgt, NULL)); /* the logits (the fused step's are dlogits) */
        MT_CHECK(mt_model_take_loss(m, &loss, NULL));
        check_logits("logits with positions", m, pl.data, rtol);
        MT_CHECK(mt_model_set_positions(m, NULL));
        mt_safetensors_close(pf);
    }
done:
    if (strcmp(tag, "mixtral") == 0) check_moe_losses(cfg, dev, dt, wf, &tok, &tgt, rtol);
    /* (tensor parallelism: the attention dropout's masks are each rank's own, Megatron's
     * model-parallel RNG, not the golden's; MoE layers take no hidden dropout yet) */
    if ((strcmp(tag, "gpt2") == 0 || strcmp(tag, "llama") == 0) && !g_tp)
        check_dropout(tag, cfg, dev, dt, wf, gf, &tok, &tgt, ((float *)gloss.data)[0], rtol, ar);
    mt_arena_destroy(ar);
    mt_safetensors_close(wf);
    mt_safetensors_close(gf);
    mt_safetensors_close(io);
    mt_model_destroy(m);
    mt_comm_destroy(world);
    return mt_test_result();
}
