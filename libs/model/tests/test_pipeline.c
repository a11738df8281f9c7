/* functional (CPU) / gpu (test_pipeline cuda): pipeline stages. A model of L = 4 layers cut into
 * P = 2 and 4 stages (mt_model_config.pipeline_model_parallel_*) in one process, their tensors
 * passed by hand in the order of Megatron's 1F1B schedule (each stage runs its warm-up forwards,
 * then one forward and one backward, then the remaining backwards; the stages interleaved as
 * their inputs arrive, so a stage holds several micro-batches in its slots), gives the whole
 * model's losses, evaluation loss and every gradient (a tied embedding's: the first stage's plus
 * the last stage's copy) for 3 micro-batches of gradient accumulation: GPT-2 (tied) and Llama
 * (untied) shapes, with hidden and attention dropout, full recomputation and logits chunks, and
 * uneven splits (1 + 3 layers, 2 + 1 + 1), and with the slots in caller memory
 * (mt_model_create_shared_slots; a slot smaller than mt_model_slot_bytes refused); the split rule
 * against a table; mt_model_param_tp_axes against mt_model_param_tp_axis. Each
 * stage has only its parameters and its P - rank slots of activations; the whole model's calls
 * and wrong stage calls are refused. */
#include <mt/model.h>
#include <mt/pp.h>
#include <mt/testkit.h>

#include <string.h>

#include "hf_tiny.h" /* B, T, V and the Llama layer choices */

#define L    4
#define MB   3 /* micro-batches */
#define PMAX 4

static mt_device dev; /* the CPU, or CUDA device 0 with argument "cuda" */

static mt_model_config config_for(const char *tag) {
    mt_model_config c = MT_MODEL_CONFIG_INIT;
    c.num_layers = L;
    c.hidden_size = 64;
    c.num_attention_heads = 4;
    c.seq_length = T;
    c.vocab_size = V;
    c.seed = 7;
    c.deterministic = 1;
    if (strncmp(tag, "llama", 5) == 0) tiny_llama_layers(&c);
    if (strstr(tag, "drop")) c.hidden_dropout = c.attention_dropout = 0.1f;
    if (strstr(tag, "recompute")) {
        c.recompute_granularity = MT_RECOMPUTE_FULL;
        c.recompute_method = MT_RECOMPUTE_UNIFORM;
        c.recompute_num_layers = 1;
    }
    if (strstr(tag, "chunks")) c.logits_chunks = 3;
    return c;
}

/* Per micro-batch device tensors: tokens, targets, sample ids. */
typedef struct batch {
    mt_tensor tok[MB], tgt[MB], sid[MB];
} batch;

static void make_batch(mt_arena *a, batch *b) {
    uint64_t x = 4242;
    for (int mb = 0; mb < MB; mb++) {
        int32_t tok[B * T], tgt[B * T];
        int64_t sid[B] = { 10 * mb + 1, 10 * mb + 2 };
        for (int i = 0; i < B * T; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            tok[i] = (int32_t)((x >> 33) % V);
            tgt[i] = i % 9 == 4 ? -100 : (int32_t)((x >> 17) % V);
        }
        MT_CHECK(mt_tensor_alloc(a, MT_I32, 2, (int64_t[]){ B, T }, &b->tok[mb]));
        MT_CHECK(mt_tensor_alloc(a, MT_I32, 2, (int64_t[]){ B, T }, &b->tgt[mb]));
        MT_CHECK(mt_tensor_alloc(a, MT_I64, 1, (int64_t[]){ B }, &b->sid[mb]));
        MT_CHECK(mt_memcpy(b->tok[mb].data, dev, tok, MT_DEVICE_CPU, sizeof tok, NULL));
        MT_CHECK(mt_memcpy(b->tgt[mb].data, dev, tgt, MT_DEVICE_CPU, sizeof tgt, NULL));
        MT_CHECK(mt_memcpy(b->sid[mb].data, dev, sid, MT_DEVICE_CPU, sizeof sid, NULL));
    }
}

static float *grad_host(const mt_model_param *p) {
    float *h = malloc(mt_tensor_nbytes(&p->grad));
    MT_CHECK(mt_memcpy(h, MT_DEVICE_CPU, p->grad.data, p->grad.device, mt_tensor_nbytes(&p->grad),
                       NULL));
    return h;
}

/* Copies tensor src (a stage's output or gradient) into host mailbox *box. */
static void post(float **box, const mt_tensor *src) {
    *box = malloc(mt_tensor_nbytes(src));
    MT_CHECK(mt_memcpy(*box, MT_DEVICE_CPU, src->data, src->device, mt_tensor_nbytes(src), NULL));
}

static void take(float **box, mt_tensor *dst) {
    MT_CHECK(mt_memcpy(dst->data, dst->device, *box, MT_DEVICE_CPU, mt_tensor_nbytes(dst), NULL));
    free(*box);
    *box = NULL;
}

static void set_ids(mt_model *m, const batch *b, int mb) {
    MT_CHECK(mt_model_set_sample_ids(m, &b->sid[mb]));
}

static void test_pipeline(const char *tag, int P) {
    mt_model_config whole = config_for(tag);
    mt_arena *arena;
    MT_CHECK(mt_arena_create(dev, 16 * MT_ARENA_ALIGN + MB * (2 * B * T * 4 + 8 * B), &arena));
    batch bt;
    make_batch(arena, &bt);
    const int drop = whole.hidden_dropout > 0.0f;

    /* the whole model: 3 micro-batches accumulated, then an evaluation forward */
    mt_model *ref;
    MT_CHECK(mt_model_create(&whole, B, dev, NULL, NULL, &ref));
    for (int mb = 0; mb < MB; mb++) {
        if (drop) set_ids(ref, &bt, mb);
        MT_CHECK(mt_model_forward_backward(ref, &bt.tok[mb], &bt.tgt[mb], 1.0f / MB, NULL));
    }
    double want[2];
    MT_CHECK(mt_model_take_loss(ref, &want[0], NULL));
    MT_CHECK(mt_model_forward(ref, &bt.tok[1], &bt.tgt[1], NULL));
    MT_CHECK(mt_model_take_loss(ref, &want[1], NULL));

    /* the stages */
    mt_model *st[PMAX];
    mt_arena *pool[PMAX] = { 0 }; /* "shared": each stage's slots in caller memory */
    int ops[PMAX][2 * MB], nops[PMAX], next[PMAX];
    float *fwd_box[PMAX][MB] = { { 0 } }, *bwd_box[PMAX][MB] = { { 0 } };
    for (int r = 0; r < P; r++) {
        mt_model_config c = whole;
        c.pipeline_model_parallel_size = P;
        c.pipeline_model_parallel_rank = r;
        if (strstr(tag, "uneven")) { /* P 2: 1 + 3 layers; P 3: 2 + 1 + 1 */
            c.num_layers_in_first_pipeline_stage = P == 2 ? 1 : 2;
            c.num_layers_in_last_pipeline_stage = P == 2 ? 0 : 1;
        }
        if (strstr(tag, "shared")) {
            mt_model_slots sl = { 0 };
            c.pipeline_num_slots = P - r;
            MT_CHECK(mt_model_slot_bytes(&c, B, dev, &sl.stride));
            MT_CHECK(mt_arena_create(dev, sl.stride * (size_t)(P - r) + MT_ARENA_ALIGN, &pool[r]));
            MT_CHECK(mt_arena_alloc(pool[r], sl.stride * (size_t)(P - r), &sl.base));
            sl.stride -= MT_ARENA_ALIGN; /* (a slot too small is refused) */
            MT_EXPECT_STATUS(
                mt_model_create_shared_slots(&c, B, dev, NULL, NULL, NULL, &sl, &st[r]),
                MT_ERR_INVALID_ARG);
            sl.stride += MT_ARENA_ALIGN;
            MT_CHECK(mt_model_create_shared_slots(&c, B, dev, NULL, NULL, NULL, &sl, &st[r]));
            const mt_tensor in = mt_model_pp_input(st[r], P - r - 1);
            MT_EXPECT(r == 0 || in.data == (char *)sl.base + (P - r - 1) * sl.stride,
                      "%s P%d stage %d: the last slot's input at %p, not in the pool at %p", tag, P,
                      r, in.data, sl.base);
        } else {
            MT_CHECK(mt_model_create(&c, B, dev, NULL, NULL, &st[r]));
        }
        MT_EXPECT(mt_model_pp_slots(st[r]) == P - r, "%s P%d: stage %d has %d slots", tag, P, r,
                  mt_model_pp_slots(st[r]));
        nops[r] = mt_pp_1f1b_order(P, r, MB, ops[r]); /* mt-pp's 1F1B */
        next[r] = 0;
        MT_CHECK(mt_model_discard_grads(st[r], NULL));
    }
    /* run every stage's next op whose input has arrived, until all are done */
    for (int progress = 1; progress;) {
        progress = 0;
        for (int r = 0; r < P; r++) {
            if (next[r] == nops[r]) continue;
            const int op = ops[r][next[r]], mb = op >= 0 ? op : -1 - op, slot = mb % (P - r);
            mt_model *m = st[r];
            if (op >= 0) { /* forward */
                if (r > 0 && !fwd_box[r - 1][mb]) continue;
                if (r > 0) {
                    mt_tensor in = mt_model_pp_input(m, slot);
                    take(&fwd_box[r - 1][mb], &in);
                }
                if (drop) set_ids(m, &bt, mb);
                MT_CHECK(
                    mt_model_pp_forward(m, slot, &bt.tok[mb], &bt.tgt[mb], 1, 1.0f / MB, NULL));
                if (r < P - 1) {
                    mt_tensor out = mt_model_pp_output(m);
                    post(&fwd_box[r][mb], &out);
                }
            } else { /* backward */
                if (r < P - 1 && !bwd_box[r + 1][mb]) continue;
                if (r < P - 1) {
                    mt_tensor g = mt_model_pp_grad(m);
                    take(&bwd_box[r + 1][mb], &g);
                }
                if (drop) set_ids(m, &bt, mb);
                MT_CHECK(mt_model_pp_backward(m, slot, NULL));
                if (r > 0) {
                    mt_tensor g = mt_model_pp_grad(m);
                    post(&bwd_box[r][mb], &g);
                }
            }
            next[r]++;
            progress = 1;
        }
    }
    for (int r = 0; r < P; r++)
        MT_EXPECT(next[r] == nops[r], "%s P%d: stage %d stalled at op %d of %d", tag, P, r, next[r],
                  nops[r]);
    double got[2];
    MT_CHECK(mt_model_take_loss(st[P - 1], &got[0], NULL));
    /* evaluation: forwards without targets before the last stage */
    for (int r = 0; r < P; r++) {
        if (r > 0) {
            mt_tensor in = mt_model_pp_input(st[r], 0);
            take(&fwd_box[r - 1][1], &in);
        }
        MT_CHECK(mt_model_pp_forward(st[r], 0, &bt.tok[1], &bt.tgt[1], 0, 0.0f, NULL));
        if (r < P - 1) {
            mt_tensor out = mt_model_pp_output(st[r]);
            post(&fwd_box[r][1], &out);
        }
    }
    MT_CHECK(mt_model_take_loss(st[P - 1], &got[1], NULL));
    char what[128];
    snprintf(what, sizeof what, "%s P%d losses (train, eval)", tag, P);
    mt_test_close_f64(what, got, want, 2, 1e-7, 1e-6);

    /* every gradient: each parameter on exactly one stage (the tied embedding on the first and
     * the last, its gradient their sum) */
    int found = 0;
    for (int i = 0; i < mt_model_num_params(ref); i++) {
        mt_model_param *p = mt_model_param_at(ref, i);
        const size_t n = (size_t)mt_tensor_numel(&p->grad);
        float *sum = calloc(n, sizeof *sum);
        int holders = 0, shared = 0;
        for (int r = 0; r < P; r++) {
            mt_model_param *q = mt_model_param_find(st[r], p->name);
            if (!q) continue;
            holders++;
            shared += q->pp_shared;
            float *g = grad_host(q);
            for (size_t j = 0; j < n; j++)
                sum[j] += g[j];
            free(g);
        }
        const int tied = strcmp(p->name, "embedding.word_embeddings.weight") == 0 &&
                         !whole.untie_embeddings_and_output_weights;
        MT_EXPECT(holders == 1 + tied && shared == tied, "%s P%d: %s on %d stages (%d shared)", tag,
                  P, p->name, holders, shared);
        float *g = grad_host(p);
        snprintf(what, sizeof what, "%s P%d grad %s", tag, P, p->name);
        mt_test_close_f32(what, sum, g, n, 1e-7, 1e-5);
        found += holders - tied;
        free(g);
        free(sum);
    }
    int total = 0;
    for (int r = 0; r < P; r++)
        total += mt_model_num_params(st[r]);
    MT_EXPECT(found == mt_model_num_params(ref) &&
                  total == found + !whole.untie_embeddings_and_output_weights,
              "%s P%d: the stages hold %d parameters, the whole model %d", tag, P, total,
              mt_model_num_params(ref));
    /* the whole model's calls and out-of-turn stage calls are refused */
    MT_EXPECT_STATUS(mt_model_forward(st[0], &bt.tok[0], &bt.tgt[0], NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_model_forward_backward(st[0], &bt.tok[0], &bt.tgt[0], 1.0f, NULL),
                     MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_model_pp_backward(st[P - 1], 0, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_model_pp_forward(st[0], P, &bt.tok[0], NULL, 0, 0.0f, NULL),
                     MT_ERR_INVALID_ARG);
    fprintf(stderr, "%s P%d: losses %.9g %.9g (whole model %.9g %.9g)\n", tag, P, got[0], got[1],
            want[0], want[1]);
    for (int r = 0; r < P; r++)
        mt_model_destroy(st[r]), mt_arena_destroy(pool[r]);
    mt_model_destroy(ref);
    mt_arena_destroy(arena);
}

/* Megatron's split: even, or the first and/or last stage's count set and the rest even. */
static void test_stage_layers(void) {
    struct {
        int nl, np, f, e, want[4]; /* layers a stage; -1: refused */
    } cases[] = {
        { 12, 4, 0, 0, { 3, 3, 3, 3 } }, { 12, 2, 8, 0, { 8, 4 } },
        { 12, 2, 0, 5, { 7, 5 } },       { 12, 2, 7, 5, { 7, 5 } },
        { 12, 4, 2, 4, { 2, 3, 3, 4 } }, { 12, 3, 0, 2, { 5, 5, 2 } },
        { 12, 5, 0, 0, { -1 } },         { 12, 2, 7, 4, { -1 } },
        { 12, 4, 2, 3, { -1 } },         { 12, 2, 12, 0, { -1 } },
        { 12, 1, 4, 0, { -1 } },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mt_model_config c = MT_MODEL_CONFIG_INIT;
        c.num_layers = cases[i].nl;
        c.pipeline_model_parallel_size = cases[i].np;
        c.num_layers_in_first_pipeline_stage = cases[i].f;
        c.num_layers_in_last_pipeline_stage = cases[i].e;
        int next = 0;
        for (int r = 0; r < cases[i].np; r++) {
            int first = -1, n = -1;
            mt_status st = mt_model_stage_layers(&c, r, &first, &n);
            if (cases[i].want[0] < 0) {
                MT_EXPECT(st == MT_ERR_INVALID_ARG, "L %d P %d first %d last %d: not refused",
                          cases[i].nl, cases[i].np, cases[i].f, cases[i].e);
                mt_error_clear();
                break;
            }
            MT_EXPECT(st == MT_OK && first == next && n == cases[i].want[r],
                      "L %d P %d first %d last %d: stage %d is [%d, +%d), want [%d, +%d)",
                      cases[i].nl, cases[i].np, cases[i].f, cases[i].e, r, first, n, next,
                      cases[i].want[r]);
            next += cases[i].want[r];
        }
    }
}

/* The interleaved schedule's uneven split (first and last ranks' layers over their chunks)
 * against megatron-core's get_transformer_layer_offset and get_num_layers_to_build
 * (golden/stage_layers.txt, gen_stage_layers.py): chunk c of rank r is stage c P + r of P V. */
static void test_stage_layers_interleaved(void) {
    FILE *f = fopen(mt_test_golden_path("stage_layers.txt"), "r");
    MT_EXPECT(f != NULL, "no golden stage_layers.txt");
    if (!f) return;
    int nl, np, nv, nf, ne, cases = 0;
    while (fscanf(f, "%d %d %d %d %d", &nl, &np, &nv, &nf, &ne) == 5) {
        mt_model_config c = MT_MODEL_CONFIG_INIT;
        c.num_layers = nl, c.pipeline_model_parallel_size = np * nv;
        c.virtual_pipeline_model_parallel_size = nv;
        c.num_layers_in_first_pipeline_stage = nf, c.num_layers_in_last_pipeline_stage = ne;
        for (int s = 0; s < np * nv; s++) {
            int want0, wantn, first = -1, n = -1;
            MT_EXPECT(fscanf(f, "%d %d", &want0, &wantn) == 2, "golden truncated");
            mt_status st = mt_model_stage_layers(&c, s, &first, &n);
            MT_EXPECT(st == MT_OK && first == want0 && n == wantn,
                      "L %d P %d V %d first %d last %d: chunk %d of rank %d is [%d, +%d), want "
                      "[%d, +%d)",
                      nl, np, nv, nf, ne, s / np, s % np, first, n, want0, wantn);
            mt_error_clear();
        }
        cases++;
    }
    fclose(f);
    MT_EXPECT(cases >= 6, "%d golden cases", cases);
    /* megatron's checks: the first rank's layers a multiple of V */
    mt_model_config c = MT_MODEL_CONFIG_INIT;
    c.num_layers = 6, c.pipeline_model_parallel_size = 4,
    c.virtual_pipeline_model_parallel_size = 2;
    c.num_layers_in_first_pipeline_stage = 3;
    int first, n;
    MT_EXPECT_STATUS(mt_model_stage_layers(&c, 0, &first, &n), MT_ERR_INVALID_ARG);
}

/* mt_model_param_tp_axes: mt_model_param_tp_axis of every parameter, in the listing's order. */
typedef struct names {
    char name[256][128];
    int n;
} names;
static mt_status list_name(void *ctx, const char *name, int ndim, const int64_t *shape, int no_wd,
                           mt_tensor *w, mt_tensor *g) {
    (void)ndim, (void)shape, (void)no_wd, (void)w, (void)g;
    names *n = ctx;
    if (n->n < 256) snprintf(n->name[n->n], sizeof n->name[0], "%s", name);
    n->n++;
    return MT_OK;
}

static void test_tp_axes(void) {
    for (int tp = 1; tp <= 2; tp++) {
        mt_model_config c = config_for("llama");
        c.tensor_model_parallel_size = tp;
        static names n;
        n.n = 0;
        MT_CHECK(mt_model_list_params(&c, list_name, &n));
        int axes[256], split = 0;
        const int k = mt_model_param_tp_axes(&c, axes, 256);
        MT_EXPECT(k == n.n && k <= 256, "TP %d: %d axes, %d parameters", tp, k, n.n);
        for (int i = 0; i < k && i < 256; i++) {
            MT_EXPECT(axes[i] == mt_model_param_tp_axis(&c, n.name[i]),
                      "TP %d: %s axis %d, want %d", tp, n.name[i], axes[i],
                      mt_model_param_tp_axis(&c, n.name[i]));
            split += axes[i] >= 0;
        }
        MT_EXPECT(tp == 1 ? split == 0 : split > 0 && split < k, "TP %d: %d of %d split", tp, split,
                  k);
        MT_EXPECT(mt_model_param_tp_axes(&c, axes, 1) == k, "TP %d: the count with n = 1", tp);
    }
}

static void test_invalid(void) {
    mt_model_config c = config_for("gpt2");
    c.pipeline_model_parallel_size = 3; /* 4 layers */
    MT_EXPECT_STATUS(mt_model_config_finalize(&c), MT_ERR_INVALID_ARG);
    c = config_for("gpt2");
    c.pipeline_model_parallel_size = 2;
    c.pipeline_model_parallel_rank = 2;
    MT_EXPECT_STATUS(mt_model_config_finalize(&c), MT_ERR_INVALID_ARG);
    c = config_for("recompute");
    c.pipeline_model_parallel_size = 2;
    c.recompute_num_layers = 3; /* 2 layers a stage */
    MT_EXPECT_STATUS(mt_model_config_finalize(&c), MT_ERR_INVALID_ARG);
}

int main(int argc, char **argv) {
    dev = MT_DEVICE_CPU;
    if (argc > 1 && strcmp(argv[1], "cuda") == 0) {
        mt_test_require_gpus(1);
        dev = mt_device_cuda(0);
    }
    const char *tags[] = { "gpt2",       "llama",          "gpt2_drop",
                           "llama_drop", "gpt2_recompute", "llama_chunks" };
    for (size_t i = 0; i < sizeof tags / sizeof *tags; i++) {
        test_pipeline(tags[i], 2);
        test_pipeline(tags[i], 4);
    }
    test_pipeline("gpt2_uneven", 2);
    test_pipeline("llama_uneven", 3);
    test_pipeline("gpt2_shared", 2);
    test_pipeline("llama_recompute_shared", 4);
    test_tp_axes();
    test_stage_layers();
    test_stage_layers_interleaved();
    test_invalid();
    return mt_test_result();
}
