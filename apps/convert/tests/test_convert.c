/* unit: HF -> mt -> HF is bit-exact for tiny GPT-2, Llama (GQA), Qwen3, Mixtral and DeepSeek-V3
 * (split and fused experts) written by transformers (golden/gen_hf_ckpt.py, gen_logits.py); the
 * internal layout is what convert.c's table says, libs/model's (Conv1D transposed, [all q | all k
 * | all v] rows, [gate; up], embeddings zero-padded to 128 rows; DeepSeek-V3's MLA projections as
 * HF's, its expert bias a tensor of ours); split and fused Mixtral files import to the same
 * tensors and export to each other. DeepSeek-V3's multi-token prediction layers are skipped, and
 * configs that libs/model would not run as transformers does are refused, naming the field. */
#include "convert.h"

#include <jansson.h>
#include <mt/testkit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct hf {
    json_t *wmap;
    mt_safetensors *f[16];
    char *fn[16];
    int nf;
} hf;

static void hf_load(hf *h, const char *dir) {
    char p[512];
    memset(h, 0, sizeof *h);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    json_t *ix = json_load_file(p, 0, NULL);
    h->wmap = ix ? json_incref(json_object_get(ix, "weight_map")) : json_object();
    json_decref(ix);
    if (!ix) {
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        MT_CHECK(mt_safetensors_open(p, &h->f[0]));
        h->fn[h->nf++] = strdup("model.safetensors");
        for (int i = 0; i < mt_safetensors_count(h->f[0]); i++)
            json_object_set_new(h->wmap, mt_safetensors_name(h->f[0], i),
                                json_string("model.safetensors"));
        return;
    }
    const char *k;
    json_t *v;
    json_object_foreach(h->wmap, k, v) {
        int have = 0;
        for (int i = 0; i < h->nf; i++)
            have |= !strcmp(h->fn[i], json_string_value(v));
        if (have) continue;
        snprintf(p, sizeof p, "%s/%s", dir, json_string_value(v));
        MT_CHECK(mt_safetensors_open(p, &h->f[h->nf]));
        h->fn[h->nf++] = strdup(json_string_value(v));
    }
}

static mt_tensor hf_get(const hf *h, const char *name) {
    const char *fn = json_string_value(json_object_get(h->wmap, name));
    mt_tensor t = { 0 };
    for (int i = 0; fn && i < h->nf; i++)
        if (!strcmp(h->fn[i], fn)) MT_CHECK(mt_safetensors_get(h->f[i], name, &t));
    if (!t.data) mt_die(__FILE__, __LINE__, "no HF tensor %s", name);
    return t;
}

static void hf_free(hf *h) {
    for (int i = 0; i < h->nf; i++) {
        mt_safetensors_close(h->f[i]);
        free(h->fn[i]);
    }
    json_decref(h->wmap);
}

/* Same names, dtypes, shapes and bytes. */
static void expect_same_hf(const char *what, const char *a_dir, const char *b_dir) {
    hf a, b;
    hf_load(&a, a_dir);
    hf_load(&b, b_dir);
    MT_EXPECT(json_object_size(a.wmap) == json_object_size(b.wmap), "%s: %zu vs %zu tensors", what,
              json_object_size(a.wmap), json_object_size(b.wmap));
    const char *k;
    json_t *v;
    int bad = 0;
    json_object_foreach(a.wmap, k, v) {
        if (!json_object_get(b.wmap, k)) {
            bad += !MT_EXPECT(0, "%s: '%s' missing", what, k);
            continue;
        }
        mt_tensor x = hf_get(&a, k), y = hf_get(&b, k);
        if (x.dtype != y.dtype || !mt_tensor_same_shape(&x, &y) ||
            memcmp(x.data, y.data, mt_tensor_nbytes(&x)) != 0)
            bad += !MT_EXPECT(0, "%s: '%s' differs", what, k);
    }
    MT_EXPECT(!bad, "%s: all tensors bit-exact", what);
    hf_free(&a);
    hf_free(&b);
}

static void read_mt(mt_ckpt *c, const char *name, float *buf, int64_t *shape) {
    mt_dtype dt;
    int nd;
    MT_CHECK(mt_ckpt_info(c, name, &dt, &nd, shape));
    if (nd == 1) shape[1] = 1;
    mt_tensor t = mt_tensor_make(buf, dt, nd, shape, MT_DEVICE_CPU);
    MT_CHECK(mt_ckpt_read(c, name, &t, NULL));
}

static char tmp[64];

static const char *sub(const char *leaf) {
    static char p[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", tmp, leaf);
    return p[k];
}

static void round_trip(const char *model, cv_experts ex, const char *expect_dir) {
    char src[512], mt[128], out[128];
    snprintf(src, sizeof src, "%s", mt_test_golden_path(model));
    snprintf(mt, sizeof mt, "%s", sub(model));
    snprintf(out, sizeof out, "%s_hf%d", sub(model), (int)ex);
    MT_CHECK(cv_hf_to_mt(src, mt, 128));
    MT_CHECK(cv_mt_to_hf(mt, out, 20000, ex));
    expect_same_hf(model, expect_dir ? mt_test_golden_path(expect_dir) : src, out);
    char p1[600], p2[600];
    snprintf(p1, sizeof p1, "%s/config.json", src);
    snprintf(p2, sizeof p2, "%s/config.json", out);
    json_t *a = json_load_file(p1, 0, NULL), *b = json_load_file(p2, 0, NULL);
    MT_EXPECT(a && b && json_equal(a, b), "%s: config.json round-trips", model);
    json_decref(a);
    json_decref(b);
}

/* A copy of fixture `model` whose config.json has the keys of the JSON object `set` set so is
 * refused on import with a message that holds `want`. */
static void refused(const char *model, const char *set, const char *want) {
    char cmd[1024], p[600];
    const char *dir = sub("ds_bad");
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir '%s' && ln -s '%s/model.safetensors' '%s/'",
             dir, dir, mt_test_golden_path(model), dir);
    MT_ASSERT(system(cmd) == 0);
    snprintf(p, sizeof p, "%s/config.json", mt_test_golden_path(model));
    json_t *cfg = json_load_file(p, 0, NULL);
    MT_ASSERT(cfg);
    json_t *o = json_loads(set, 0, NULL);
    MT_ASSERT(o && json_object_update(cfg, o) == 0);
    json_decref(o);
    snprintf(p, sizeof p, "%s/config.json", dir);
    MT_ASSERT(json_dump_file(cfg, p, 0) == 0);
    json_decref(cfg);
    mt_status st = cv_hf_to_mt(dir, sub("ds_bad_mt"), 128);
    const char *msg = mt_last_error();
    MT_EXPECT(st != MT_OK && msg && strstr(msg, want), "%s %s refused: '%s'", model, set,
              st == MT_OK ? "accepted" : msg);
    mt_error_clear();
}

/* DeepSeek-V3's fixture with `key` set to `value` (JSON) is refused, naming `want`. */
static void ds_refused(const char *key, const char *value, const char *want) {
    char set[256];
    snprintf(set, sizeof set, "{\"%s\": %s}", key, value);
    refused("logits_deepseek_v3", set, want);
}

int main(void) {
    strcpy(tmp, "/tmp/mt-convert-test-XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    round_trip("gpt2", CV_EXPERTS_AUTO, NULL);
    round_trip("llama", CV_EXPERTS_AUTO, NULL);
    round_trip("logits_qwen2", CV_EXPERTS_AUTO, NULL);     /* q, k and v biases */
    round_trip("logits_qwen3", CV_EXPERTS_AUTO, NULL);     /* q_norm, k_norm */
    round_trip("logits_stablelm", CV_EXPERTS_AUTO, NULL);  /* LayerNorm biases, q/k/v biases */
    round_trip("logits_qwen3_moe", CV_EXPERTS_AUTO, NULL); /* q/k norms, experts, a dense layer */
    round_trip("logits_phi3", CV_EXPERTS_AUTO, NULL);      /* qkv_proj, gate_up_proj */
    round_trip("logits_qwen3_moe", CV_EXPERTS_FUSED, "logits_qwen3_moe_fused");
    round_trip("mixtral", CV_EXPERTS_AUTO, NULL);
    round_trip("mixtral_fused", CV_EXPERTS_AUTO, NULL);
    round_trip("mixtral", CV_EXPERTS_FUSED, "mixtral_fused"); /* split in, fused out */
    round_trip("mixtral_fused", CV_EXPERTS_SPLIT, "mixtral");
    round_trip("logits_deepseek_v3", CV_EXPERTS_AUTO, NULL); /* MLA, the expert bias */
    round_trip("logits_deepseek_v3_fused", CV_EXPERTS_AUTO, NULL);
    round_trip("logits_deepseek_v3", CV_EXPERTS_FUSED, "logits_deepseek_v3_fused");
    round_trip("logits_deepseek_v3_fused", CV_EXPERTS_SPLIT, "logits_deepseek_v3");
    ds_refused("rope_parameters", "{\"rope_type\": \"dynamic\", \"factor\": 40}",
               "rope_parameters");
    ds_refused("rope_scaling", "{\"type\": \"dynamic\", \"factor\": 40}", "rope_scaling");
    ds_refused("rope_interleave", "false", "rope_interleave");
    ds_refused("norm_topk_prob", "false", "norm_topk_prob");
    ds_refused("attention_bias", "true", "attention_bias");
    ds_refused("num_experts_per_tok", "3", "n_group"); /* (its groups ranked by their top 3) */
    ds_refused("n_shared_experts", "0", "n_shared_experts");
    /* (Qwen's windows on some layers import: logits_qwen2_window; Llama has none) */
    refused("logits_llama", "{\"sliding_window\": 8}", "sliding_window 8");
    refused("logits_stablelm", "{\"qk_layernorm\": true}", "qk_layernorm");
    refused("logits_stablelm", "{\"use_parallel_residual\": true}", "use_parallel_residual");
    round_trip("logits_mistral", CV_EXPERTS_AUTO, NULL);
    { /* the hub's multi-token prediction layer (model.layers.2.* of 2 layers), incomplete:
       * skipped (a whole one is imported: tests/test_mtp.sh) */
        const char *dir = sub("ds_mtp");
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir '%s' && cp '%s/config.json' '%s/'", dir,
                 dir, mt_test_golden_path("logits_deepseek_v3"), dir);
        MT_ASSERT(system(cmd) == 0);
        hf d;
        hf_load(&d, mt_test_golden_path("logits_deepseek_v3"));
        static mt_tensor t[128];
        mt_safetensors_item it[128];
        int n = 0;
        const char *k;
        json_t *v;
        json_object_foreach(d.wmap, k, v) {
            MT_ASSERT(n < 126);
            t[n] = hf_get(&d, k);
            it[n] = (mt_safetensors_item){ k, &t[n] };
            n++;
        }
        mt_tensor norm = hf_get(&d, "model.layers.1.input_layernorm.weight");
        mt_tensor eh = hf_get(&d, "model.layers.1.self_attn.o_proj.weight");
        it[n++] = (mt_safetensors_item){ "model.layers.2.enorm.weight", &norm };
        it[n++] = (mt_safetensors_item){ "model.layers.2.eh_proj.weight", &eh };
        snprintf(cmd, sizeof cmd, "%s/model.safetensors", dir);
        MT_CHECK(mt_safetensors_save(cmd, it, n, NULL, 0));
        hf_free(&d);
        mt_ckpt *a, *b;
        MT_CHECK(cv_hf_to_mt(dir, sub("ds_mtp_mt"), 128));
        MT_CHECK(mt_ckpt_open(sub("ds_mtp_mt"), MT_CKPT_ITER_LATEST, 0, &a));
        MT_CHECK(mt_ckpt_open(sub("logits_deepseek_v3"), MT_CKPT_ITER_LATEST, 0, &b));
        MT_EXPECT(mt_ckpt_count(a) == mt_ckpt_count(b) && mt_ckpt_count(a) == 43,
                  "deepseek_v3 with an MTP layer: %d tensors, as without (%d)", mt_ckpt_count(a),
                  mt_ckpt_count(b));
        mt_ckpt_close(a);
        mt_ckpt_close(b);
    }
    { /* --make-vocab-size-divisible-by 96: 64 rows padded to 96, dropped again on export */
        mt_ckpt *c96;
        int64_t s96[MT_MAX_DIMS];
        MT_CHECK(cv_hf_to_mt(mt_test_golden_path("gpt2"), sub("gpt2_96"), 96));
        MT_CHECK(mt_ckpt_open(sub("gpt2_96"), MT_CKPT_ITER_LATEST, 0, &c96));
        MT_CHECK(mt_ckpt_info(c96, "embedding.word_embeddings.weight", NULL, NULL, s96));
        MT_EXPECT(s96[0] == 96, "gpt2 divisible by 96: %lld embedding rows", (long long)s96[0]);
        mt_ckpt_close(c96);
        MT_CHECK(cv_mt_to_hf(sub("gpt2_96"), sub("gpt2_96_hf"), 1 << 30, CV_EXPERTS_AUTO));
        expect_same_hf("gpt2 (96)", mt_test_golden_path("gpt2"), sub("gpt2_96_hf"));
        MT_EXPECT(cv_hf_to_mt(mt_test_golden_path("gpt2"), sub("gpt2_0"), 0) == MT_ERR_INVALID_ARG,
                  "divisor 0 is refused");
        mt_error_clear();
    }
    { /* a tied model whose files also hold lm_head.weight (some writers save the tied copy):
       * no output_layer.weight in our checkpoint, which mt-pretrain --load would refuse as an
       * unexpected key of a tied model */
        char cmd[1024], ix[600];
        snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", mt_test_golden_path("gpt2"), sub("gpt2_lm"));
        MT_ASSERT(system(cmd) == 0);
        hf g;
        hf_load(&g, mt_test_golden_path("gpt2"));
        mt_tensor wte = hf_get(&g, "transformer.wte.weight");
        mt_safetensors_item it = { "lm_head.weight", &wte };
        snprintf(cmd, sizeof cmd, "%s/lm.safetensors", sub("gpt2_lm"));
        MT_CHECK(mt_safetensors_save(cmd, &it, 1, NULL, 0));
        snprintf(ix, sizeof ix, "%s/model.safetensors.index.json", sub("gpt2_lm"));
        json_t *j = json_load_file(ix, 0, NULL);
        MT_ASSERT(j);
        json_object_set_new(json_object_get(j, "weight_map"), "lm_head.weight",
                            json_string("lm.safetensors"));
        MT_ASSERT(json_dump_file(j, ix, 0) == 0);
        json_decref(j);
        hf_free(&g);
        mt_ckpt *c;
        MT_CHECK(cv_hf_to_mt(sub("gpt2_lm"), sub("gpt2_lm_mt"), 128));
        MT_CHECK(mt_ckpt_open(sub("gpt2_lm_mt"), MT_CKPT_ITER_LATEST, 0, &c));
        MT_EXPECT(mt_ckpt_info(c, "output_layer.weight", NULL, NULL, NULL) != MT_OK,
                  "tied gpt2 with lm_head.weight: no output_layer.weight");
        mt_error_clear();
        mt_ckpt_close(c);
    }

    static float x[1 << 14], y[1 << 14];
    int64_t s[MT_MAX_DIMS], s2[MT_MAX_DIMS];
    mt_ckpt *c;
    /* GPT-2 (C=16, H=4, D=4): fc1 = c_fc^T; qkv rows of head 1 = q rows D..2D of c_attn^T */
    hf g;
    hf_load(&g, mt_test_golden_path("gpt2"));
    MT_CHECK(mt_ckpt_open(sub("gpt2"), MT_CKPT_ITER_LATEST, MT_CKPT_OPEN_VERIFY, &c));
    read_mt(c, "decoder.layers.1.mlp.linear_fc1.weight", x, s);
    mt_tensor fc = hf_get(&g, "transformer.h.1.mlp.c_fc.weight"); /* (C, 4C) */
    int ok = s[0] == 64 && s[1] == 16;
    for (int r = 0; ok && r < 64; r++)
        for (int k = 0; k < 16; k++)
            ok &= x[r * 16 + k] == ((float *)fc.data)[k * 64 + r];
    MT_EXPECT(ok, "gpt2: linear_fc1 = c_fc transposed");
    read_mt(c, "decoder.layers.0.self_attention.linear_qkv.weight", x, s);
    mt_tensor ca = hf_get(&g, "transformer.h.0.attn.c_attn.weight"); /* (C, 3C) */
    ok = s[0] == 48;
    for (int r = 0; ok && r < 48; r++) /* [q heads 0..3 | k heads | v heads], each head D rows */
        for (int k = 0; k < 16; k++)
            ok &= x[r * 16 + k] == ((float *)ca.data)[k * 48 + r];
    MT_EXPECT(ok, "gpt2: linear_qkv = c_attn transposed ([all q | all k | all v] rows)");
    read_mt(c, "embedding.word_embeddings.weight", x, s);
    mt_tensor wte = hf_get(&g, "transformer.wte.weight"); /* (64, 16) */
    ok = s[0] == 128 && s[1] == 16 && !memcmp(x, wte.data, 64 * 16 * 4);
    for (int j = 64 * 16; ok && j < 128 * 16; j++)
        ok &= x[j] == 0.0f;
    MT_EXPECT(ok, "gpt2: word embeddings = wte then 64 zero rows (V 64 padded to 128)");
    mt_ckpt_close(c);
    hf_free(&g);
    /* Llama (C=32, Q=4, G=2, D=8): qkv rows [q 0..32 | k 32..48 | v 48..64] */
    hf l;
    hf_load(&l, mt_test_golden_path("llama"));
    MT_CHECK(mt_ckpt_open(sub("llama"), MT_CKPT_ITER_LATEST, 0, &c));
    read_mt(c, "decoder.layers.0.self_attention.linear_qkv.weight", x, s);
    mt_tensor q = hf_get(&l, "model.layers.0.self_attn.q_proj.weight");
    mt_tensor kk = hf_get(&l, "model.layers.0.self_attn.k_proj.weight");
    mt_tensor vv = hf_get(&l, "model.layers.0.self_attn.v_proj.weight");
    MT_EXPECT(s[0] == 64 && s[1] == 32, "llama qkv shape ((4+2*2)*8, 32)");
    MT_EXPECT(!memcmp(x, q.data, 32 * 32 * 4) && !memcmp(x + 32 * 32, kk.data, 16 * 32 * 4) &&
                  !memcmp(x + 48 * 32, vv.data, 16 * 32 * 4),
              "llama: linear_qkv = [q_proj; k_proj; v_proj]");
    read_mt(c, "output_layer.weight", x, s);
    mt_tensor lm = hf_get(&l, "lm_head.weight"); /* untied (64, 32) */
    ok = s[0] == 128 && s[1] == 32 && !memcmp(x, lm.data, 64 * 32 * 4);
    for (int j = 64 * 32; ok && j < 128 * 32; j++)
        ok &= x[j] == 0.0f;
    MT_EXPECT(ok, "llama: output_layer = lm_head then 64 zero rows");
    read_mt(c, "decoder.layers.1.mlp.linear_fc1.weight", x, s);
    mt_tensor up = hf_get(&l, "model.layers.1.mlp.up_proj.weight");
    MT_EXPECT(s[0] == 96 && !memcmp(x + 48 * 32, up.data, 48 * 32 * 4), "llama: fc1 = [gate; up]");
    mt_ckpt_close(c);
    hf_free(&l);
    /* Mixtral: split and fused files give the same internal tensors */
    mt_ckpt *a, *b;
    MT_CHECK(mt_ckpt_open(sub("mixtral"), MT_CKPT_ITER_LATEST, 0, &a));
    MT_CHECK(mt_ckpt_open(sub("mixtral_fused"), MT_CKPT_ITER_LATEST, 0, &b));
    MT_EXPECT(mt_ckpt_count(a) == mt_ckpt_count(b), "mixtral: same tensor count");
    int same = 1;
    for (int i = 0; i < mt_ckpt_count(a); i++) {
        read_mt(a, mt_ckpt_name(a, i), x, s);
        read_mt(b, mt_ckpt_name(a, i), y, s2);
        same &= s[0] == s2[0] && s[1] == s2[1] && !memcmp(x, y, (size_t)(s[0] * s[1]) * 4);
    }
    MT_EXPECT(same, "mixtral: split and fused imports agree tensor by tensor");
    MT_EXPECT(mt_ckpt_info(a, "decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight",
                           NULL, NULL, s) == MT_OK &&
                  s[0] == 48,
              "mixtral: per-expert fc1 (2I, H)");
    mt_ckpt_close(a);
    mt_ckpt_close(b);
    /* DeepSeek-V3 (C=32, 4 heads, q_lora 16, kv_lora 16, nope 8, rope 8, v 8; layer 1 MoE) */
    hf ds;
    hf_load(&ds, mt_test_golden_path("logits_deepseek_v3"));
    MT_CHECK(mt_ckpt_open(sub("logits_deepseek_v3"), MT_CKPT_ITER_LATEST, 0, &c));
    const struct {
        const char *ours, *hf;
    } dsn[] = {
        { "decoder.layers.1.self_attention.linear_q_down_proj.weight",
          "model.layers.1.self_attn.q_a_proj.weight" },
        { "decoder.layers.1.self_attention.linear_q_up_proj.layer_norm_weight",
          "model.layers.1.self_attn.q_a_layernorm.weight" },
        { "decoder.layers.1.self_attention.linear_q_up_proj.weight",
          "model.layers.1.self_attn.q_b_proj.weight" },
        { "decoder.layers.0.self_attention.linear_kv_down_proj.weight",
          "model.layers.0.self_attn.kv_a_proj_with_mqa.weight" },
        { "decoder.layers.0.self_attention.linear_kv_up_proj.layer_norm_weight",
          "model.layers.0.self_attn.kv_a_layernorm.weight" },
        { "decoder.layers.0.self_attention.linear_kv_up_proj.weight",
          "model.layers.0.self_attn.kv_b_proj.weight" },
        { "decoder.layers.1.mlp.router.expert_bias",
          "model.layers.1.mlp.gate.e_score_correction_bias" },
        { "decoder.layers.1.mlp.shared_experts.linear_fc2.weight",
          "model.layers.1.mlp.shared_experts.down_proj.weight" },
    };
    for (size_t i = 0; i < sizeof dsn / sizeof *dsn; i++) {
        read_mt(c, dsn[i].ours, x, s);
        mt_tensor t = hf_get(&ds, dsn[i].hf);
        MT_EXPECT(s[0] == t.shape[0] && !memcmp(x, t.data, mt_tensor_nbytes(&t)),
                  "deepseek_v3: %s = %s", dsn[i].ours, dsn[i].hf);
    }
    read_mt(c, "decoder.layers.0.mlp.linear_fc1.weight", x, s); /* (layer 0 dense) */
    mt_tensor dup = hf_get(&ds, "model.layers.0.mlp.up_proj.weight");
    MT_EXPECT(s[0] == 96 && !memcmp(x + 48 * 32, dup.data, 48 * 32 * 4),
              "deepseek_v3: dense fc1 = [gate; up]");
    read_mt(c, "decoder.layers.1.mlp.shared_experts.linear_fc1.weight", x, s);
    mt_tensor sup = hf_get(&ds, "model.layers.1.mlp.shared_experts.up_proj.weight");
    MT_EXPECT(s[0] == 32 && !memcmp(x + 16 * 32, sup.data, 16 * 32 * 4),
              "deepseek_v3: shared fc1 = [gate; up]");
    mt_ckpt_close(c);
    hf_free(&ds);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) return 1;
    return mt_test_result();
}
