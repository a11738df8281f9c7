/* functional (CPU) / gpu (test_doc_mask cuda f32|bf16): document masks (mt_model_set_key_starts,
 * Megatron's --reset-attention-mask) with restarted positions make a document independent of the
 * ones before it in its sequence. Packed: document A (70 tokens, its targets ignored), then
 * document B (90); alone: B at the start, then 70 filler tokens (targets ignored). The loss, B's
 * logits and every parameter gradient must agree between the two, for GPT-2 (learned positions)
 * and Llama (RoPE, GQA) layers with head dim 64 (the tensor-core kernels on a GPU). Without the
 * key starts the packed B sees A: its logits must differ by far more than the tolerance. */
#include <mt/model.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define T  160
#define NA 70 /* document A's tokens (the last one its EOD) */
#define NB 90 /* document B's */
#define V  500

static mt_device dev;
static mt_dtype dtype = MT_F32;

typedef struct result {
    double loss;
    float *logits; /* B's NB rows, f32 */
    float **grads;
} result;

static mt_tensor i32_on_dev(mt_arena *a, const int32_t *h) {
    mt_tensor t;
    MT_CHECK(mt_tensor_alloc(a, MT_I32, 2, (int64_t[]){ 1, T }, &t));
    MT_CHECK(mt_memcpy(t.data, dev, h, MT_DEVICE_CPU, T * 4, NULL));
    return t;
}

/* One forward+backward (gradients written), then a forward for the logits; B's rows from row0.
 * pos and ks NULL: the defaults. */
static result run(const mt_model_config *cfg, const int32_t *tok, const int32_t *tgt,
                  const int32_t *pos, const int32_t *ks, int row0) {
    mt_model *m;
    mt_arena *a;
    MT_CHECK(mt_model_create(cfg, 1, dev, NULL, NULL, &m));
    MT_CHECK(mt_arena_create(dev, 8 * MT_ARENA_ALIGN + 4 * T * 4, &a));
    mt_tensor tk = i32_on_dev(a, tok), tg = i32_on_dev(a, tgt), tp, ts;
    if (pos) tp = i32_on_dev(a, pos);
    if (ks) ts = i32_on_dev(a, ks);
    MT_CHECK(mt_model_set_positions(m, pos ? &tp : NULL));
    MT_CHECK(mt_model_set_key_starts(m, ks ? &ts : NULL));
    MT_CHECK(mt_model_discard_grads(m, NULL));
    MT_CHECK(mt_model_forward_backward(m, &tk, &tg, 1.0f, NULL));
    result r = { 0 };
    MT_CHECK(mt_model_take_loss(m, &r.loss, NULL));
    MT_CHECK(mt_model_forward(m, &tk, &tg, NULL));
    double unused;
    MT_CHECK(mt_model_take_loss(m, &unused, NULL));
    mt_tensor lg = mt_model_logits(m);
    const int64_t vp = lg.shape[1];
    size_t es = mt_dtype_size(lg.dtype), n = (size_t)(NB * vp);
    void *raw = malloc(n * es);
    MT_CHECK(mt_memcpy(raw, MT_DEVICE_CPU, (char *)lg.data + (size_t)(row0 * vp) * es, dev, n * es,
                       NULL));
    r.logits = malloc(n * 4);
    mt_tensor h = mt_tensor_1d(raw, lg.dtype, (int64_t)n, MT_DEVICE_CPU);
    mt_tensor f = mt_tensor_1d(r.logits, MT_F32, (int64_t)n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&f, &h, NULL));
    free(raw);
    int np = mt_model_num_params(m);
    r.grads = calloc((size_t)np + 1, sizeof *r.grads);
    for (int i = 0; i < np; i++) {
        const mt_tensor *g = &mt_model_param_at(m, i)->grad;
        r.grads[i] = malloc(mt_tensor_nbytes(g));
        MT_CHECK(mt_memcpy(r.grads[i], MT_DEVICE_CPU, g->data, dev, mt_tensor_nbytes(g), NULL));
    }
    mt_arena_destroy(a);
    mt_model_destroy(m);
    return r;
}

static void free_result(result *r) {
    for (int i = 0; r->grads[i]; i++)
        free(r->grads[i]);
    free(r->grads), free(r->logits);
}

/* max |a - b| / max |b| */
static double rel(const float *a, const float *b, size_t n) {
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

static void test_model(const char *tag) {
    mt_model_config c = MT_MODEL_CONFIG_INIT;
    c.num_layers = 2;
    c.hidden_size = 128;
    c.num_attention_heads = 2; /* head dim 64 */
    c.seq_length = T;
    c.vocab_size = V;
    c.seed = 7;
    c.dtype = dtype;
    c.deterministic = 1; /* (no attention atomics: run-to-run noise stays out of the comparison) */
    if (strcmp(tag, "llama") == 0) {
        c.num_attention_heads = 4, c.num_query_groups = 2, c.hidden_size = 256;
        c.ffn_hidden_size = 256, c.normalization = MT_NORM_RMSNORM;
        c.position_embedding_type = MT_POS_ROPE, c.swiglu = 1, c.add_bias_linear = 0;
        c.untie_embeddings_and_output_weights = 1;
    }
    const int32_t eod = V - 1;
    int32_t doc_a[NA], doc_b[NB], tgt_b[NB], filler[NA];
    uint64_t x = 777;
    for (int i = 0; i < NA + 2 * NB + NA; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        const int32_t r = (int32_t)((x >> 33) % (V - 1));
        if (i < NA)
            doc_a[i] = i == NA - 1 ? eod : r;
        else if (i < NA + NB)
            doc_b[i - NA] = r;
        else if (i < NA + 2 * NB)
            tgt_b[i - NA - NB] = r;
        else
            filler[i - NA - 2 * NB] = r;
    }
    int32_t tok_p[T], tgt_p[T], pos_p[T], ks_p[T], tok_s[T], tgt_s[T];
    for (int t = 0; t < T; t++) {
        const int in_a = t < NA;
        tok_p[t] = in_a ? doc_a[t] : doc_b[t - NA];
        tgt_p[t] = in_a ? -100 : tgt_b[t - NA];
        pos_p[t] = in_a ? t : t - NA; /* --reset-position-ids */
        ks_p[t] = in_a ? 0 : NA;      /* --reset-attention-mask */
        tok_s[t] = t < NB ? doc_b[t] : filler[t - NB];
        tgt_s[t] = t < NB ? tgt_b[t] : -100;
    }
    result packed = run(&c, tok_p, tgt_p, pos_p, ks_p, NA);
    result alone = run(&c, tok_s, tgt_s, NULL, NULL, 0);
    result leaky = run(&c, tok_p, tgt_p, pos_p, NULL, NA);
    const double tol = dtype == MT_BF16 ? 2e-2 : mt_device_is_cuda(dev) ? 1e-4 : 1e-5;
    mt_model *m;
    MT_CHECK(mt_model_create(&c, 1, dev, NULL, NULL, &m));
    const size_t nl = (size_t)NB * (size_t)mt_model_logits(m).shape[1];
    const double dl = rel(packed.logits, alone.logits, nl),
                 dx = rel(leaky.logits, alone.logits, nl);
    fprintf(stderr,
            "%s %s: loss %.7f (alone %.7f, without key starts %.7f); B's logits %.2e "
            "apart (without key starts %.2e)\n",
            tag, mt_dtype_name(dtype), packed.loss, alone.loss, leaky.loss, dl, dx);
    MT_EXPECT(fabs(packed.loss - alone.loss) <= tol * fabs(alone.loss), "%s: loss %.7g, alone %.7g",
              tag, packed.loss, alone.loss);
    MT_EXPECT(dl <= tol, "%s: B's logits %.3g apart (tolerance %.1g)", tag, dl, tol);
    MT_EXPECT(dx > 10 * tol,
              "%s: without key starts B's logits only %.3g apart: the test would "
              "not see a missing mask",
              tag, dx);
    int bad = 0;
    double worst = 0.0;
    for (int i = 0; i < mt_model_num_params(m); i++) {
        mt_model_param *p = mt_model_param_at(m, i);
        const size_t n = (size_t)mt_tensor_numel(&p->grad);
        const double d = rel(packed.grads[i], alone.grads[i], n);
        worst = fmax(worst, d);
        if (!(d <= tol) && bad++ < 5)
            MT_EXPECT(0, "%s: gradient of %s %.3g apart", tag, p->name, d);
    }
    MT_EXPECT(bad == 0, "%s: %d gradients differ", tag, bad);
    fprintf(stderr, "%s: %d gradients within %.2e (tolerance %.1g)\n", tag, mt_model_num_params(m),
            worst, tol);
    mt_model_destroy(m);
    free_result(&packed), free_result(&alone), free_result(&leaky);
}

int main(int argc, char **argv) {
    dev = MT_DEVICE_CPU;
    if (argc > 1 && strcmp(argv[1], "cuda") == 0) {
        mt_test_require_gpus(1);
        dev = mt_device_cuda(0);
        if (argc > 2 && strcmp(argv[2], "bf16") == 0) dtype = MT_BF16;
    }
    test_model("gpt2");
    test_model("llama");
    return mt_test_result();
}
