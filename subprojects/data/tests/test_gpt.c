/* unit: GPTDataset, BlendedDataset and MockGPTDataset built from the same inputs as megatron-core
 * (golden/gen_gpt.py) give the same lengths, index arrays and token ids of every recorded sample;
 * the cache round-trips and a corrupt cache is MT_ERR_FORMAT. */
#include "data_test.h"

#include <jansson.h>
#include <unistd.h>

typedef struct gpt_case { /* mirrors CASES in golden/gen_gpt.py */
    const char *name;
    const char *paths[3];
    int n_paths;
    double weights[3];
    const char *split;
    int64_t seq;
    uint32_t seed;
    int64_t sizes[3]; /* -1: None */
    int keep_partial_valid;
    int indices; /* compare document/sample/shuffle indices too */
    int masks;   /* eod_mask_loss + reset_position_ids (+ reset_attention_mask: the document
                    starts); compare __getitem__ */
} gpt_case;

// clang-format off
static const gpt_case cases[] = {
    /* name, prefixes, n, weights, split, seq, seed, sizes, keep_partial_valid, indices, masks */
    { "single", { "ds_merged" }, 1, { 0 }, "900,80,20", 16, 1234, { 50, 10, 5 }, 0, 1, 0 },
    { "epochs", { "ds_a" }, 1, { 0 }, "80,15,5", 32, 7, { 200, 40, 30 }, 0, 1, 0 },
    { "final", { "ds_b" }, 1, { 0 }, "1,0,0", 8, 99, { 1130, 0, 0 }, 0, 1, 0 },
    { "nodrop", { "ds_c" }, 1, { 0 }, "50,50,0", 10, 3, { 20, 7, 0 }, 1, 0, 0 },
    { "blend3", { "ds_a", "ds_b", "ds_c" }, 3, { .5, .3, .2 }, "90,5,5", 16, 1234, { 60, 12, 6 },
      0, 0, 0 },
    { "blend3nw", { "ds_a", "ds_b", "ds_c" }, 3, { 0 }, "90,5,5", 12, 5, { -1, 20, -1 }, 0, 0, 0 },
    { "blend1", { "ds_c" }, 1, { 1.0 }, "70,20,10", 16, 11, { 40, 8, 4 }, 0, 0, 0 },
    { "mock", { NULL }, 0, { 0 }, NULL, 64, 1234, { 24, 8, 8 }, 0, 0, 0 },
    { "masks", { "ds_e" }, 1, { 0 }, "60,40,0", 16, 21, { 10, 9, 0 }, 1, 0, 1 },
};
// clang-format on
static const char *splits[3] = { "train", "valid", "test" };

static void compare_indices(const mt_data_dataset *ds, const char *base) {
    const int32_t *doc;
    const int64_t *sample, *shuffle;
    int64_t n_doc, ns;
    MT_CHECK(mt_data_dataset_indices(ds, &doc, &n_doc, &sample, &shuffle, &ns));
    char name[256];
    size_t n;
    snprintf(name, sizeof name, "%s_doc.npy", base);
    int64_t *ref = golden_i64(name, &n, NULL), *d64 = malloc((size_t)n_doc * sizeof *d64);
    for (int64_t i = 0; i < n_doc; i++)
        d64[i] = doc[i];
    MT_EXPECT(n == (size_t)n_doc, "%s document_index length %lld want %zu", base, (long long)n_doc,
              n);
    mt_test_equal_i64(name, d64, ref, n < (size_t)n_doc ? n : (size_t)n_doc);
    free(ref);
    free(d64);
    snprintf(name, sizeof name, "%s_sample.npy", base);
    ref = golden_i64(name, &n, NULL);
    MT_EXPECT(n == (size_t)(2 * (ns + 1)), "%s sample_index length", base);
    mt_test_equal_i64(name, sample, ref, n < (size_t)(2 * (ns + 1)) ? n : (size_t)(2 * (ns + 1)));
    free(ref);
    snprintf(name, sizeof name, "%s_shuffle.npy", base);
    ref = golden_i64(name, &n, NULL);
    MT_EXPECT(n == (size_t)ns, "%s shuffle_index length", base);
    mt_test_equal_i64(name, shuffle, ref, n < (size_t)ns ? n : (size_t)ns);
    free(ref);
}

/* tokens, labels, loss_mask, position_ids of each kept sample, as megatron's __getitem__ */
static void compare_items(const mt_data_dataset *ds, const char *base, const int64_t *keep,
                          int64_t rows) {
    char name[300];
    snprintf(name, sizeof name, "%s_items.npy", base);
    size_t n;
    int64_t *ref = golden_i64(name, &n, NULL), T = mt_data_dataset_sample_tokens(ds) - 1;
    int64_t *got = malloc((size_t)(rows * 4 * T) * sizeof *got);
    float *mask = malloc((size_t)T * sizeof *mask);
    for (int64_t r = 0; r < rows; r++) {
        int64_t *g = got + r * 4 * T;
        MT_CHECK(mt_data_dataset_get_sample(ds, keep[r], g, g + T, mask, g + 3 * T));
        for (int64_t t = 0; t < T; t++)
            g[2 * T + t] = (int64_t)mask[t];
    }
    MT_EXPECT(n == (size_t)(rows * 4 * T), "%s: %zu values", name, n);
    mt_test_equal_i64(name, got, ref, n);
    /* reset_attention_mask's attention_mask (1 where masked) from the document starts: query t
     * sees keys start[t] .. t */
    snprintf(name, sizeof name, "%s_attn.npy", base);
    int64_t *want = golden_i64(name, &n, NULL), *start = malloc((size_t)T * sizeof *start);
    int64_t *mine = malloc((size_t)(rows * T * T) * sizeof *mine);
    MT_EXPECT(n == (size_t)(rows * T * T), "%s: %zu values", name, n);
    for (int64_t r = 0; r < rows; r++) {
        mt_data_doc_starts(got + r * 4 * T, T, 50256, start);
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < T; j++)
                mine[(r * T + i) * T + j] = !(start[i] <= j && j <= i);
    }
    mt_test_equal_i64(name, mine, want, n);
    free(want), free(start), free(mine);
    free(ref);
    free(got);
    free(mask);
}

static void run_case(const gpt_case *c, json_t *lens, const char *cache) {
    char paths[3][4096];
    const char *pp[3];
    for (int i = 0; i < c->n_paths; i++) {
        snprintf(paths[i], sizeof paths[i], "%s", mt_test_golden_path(c->paths[i]));
        pp[i] = paths[i];
    }
    mt_data_config cfg = MT_DATA_CONFIG_INIT;
    cfg.sequence_length = c->seq;
    cfg.seed = c->seed;
    cfg.split = c->split;
    cfg.n_paths = c->n_paths;
    cfg.paths = pp;
    cfg.weights = c->weights[0] > 0 ? c->weights : NULL;
    cfg.drop_last_partial_validation_sequence = !c->keep_partial_valid;
    cfg.cache_dir = cache;
    cfg.vocab_size = 50257;
    cfg.eod = 50256;
    cfg.eod_mask_loss = cfg.reset_position_ids = c->masks;
    for (int s = 0; s < 3; s++) {
        json_t *want = json_object_get(json_object_get(lens, c->name), splits[s]);
        mt_data_dataset *ds = NULL;
        MT_CHECK(mt_data_dataset_create(&cfg, (mt_data_split)s, c->sizes[s], &ds));
        if (json_is_null(want)) {
            MT_EXPECT(ds == NULL, "%s %s: megatron has no such split", c->name, splits[s]);
            mt_data_dataset_destroy(ds);
            continue;
        }
        if (!MT_EXPECT(ds != NULL, "%s %s: split missing", c->name, splits[s])) continue;
        int64_t len = mt_data_dataset_len(ds);
        MT_EXPECT(len == json_integer_value(want), "%s %s: len %lld want %lld", c->name, splits[s],
                  (long long)len, (long long)json_integer_value(want));
        char base[256], name[300];
        snprintf(base, sizeof base, "gpt_%s_%s", c->name, splits[s]);
        snprintf(name, sizeof name, "%s.npy", base);
        mt_npy shape;
        size_t n, n_ids;
        int64_t *ref = golden_i64(name, &n, &shape);
        snprintf(name, sizeof name, "%s_ids.npy", base);
        int64_t *ids = golden_i64(name, &n_ids, NULL);
        int64_t rows = shape.shape[0], cols = shape.shape[1];
        MT_EXPECT(cols == mt_data_dataset_sample_tokens(ds), "%s sample tokens", base);
        int64_t *got = malloc((size_t)(rows * cols) * sizeof *got),
                *got_ids = malloc((size_t)rows * sizeof *got_ids);
        for (int64_t r = 0; r < rows; r++) {
            int d = -1;
            MT_CHECK(mt_data_dataset_get(ds, ids[rows + r], got + r * cols, &d));
            got_ids[r] = d;
        }
        mt_test_equal_i64(base, got, ref, n);
        snprintf(name, sizeof name, "%s dataset ids", base);
        mt_test_equal_i64(name, got_ids, ids, (size_t)rows);
        if (c->indices) compare_indices(ds, base);
        if (c->masks) compare_items(ds, base, ids + rows, rows);
        free(ref);
        free(ids);
        free(got);
        free(got_ids);
        mt_data_dataset_destroy(ds);
    }
}

int main(void) {
    /* split strings -> megatron's split matrix */
    const char *strs[] = { "949,50,1",    "969, 30, 1", "1,1,1", "98,2",
                           "0.7,0.2,0.1", "1,0,0",      "3,3,1" };
    size_t n;
    double *m = mt_test_golden_f64("split_matrix.npy", &n);
    for (int i = 0; i < 7; i++) {
        double be[3][2], got[6];
        int present[3];
        MT_CHECK(mt_data_split_parse(strs[i], be, present));
        for (int s = 0; s < 3; s++)
            for (int k = 0; k < 2; k++)
                got[2 * s + k] = present[s] ? be[s][k] : -1.0;
        mt_test_close_f64(strs[i], got, m + 6 * i, 6, 0, 0); /* exact */
    }
    free(m);

    json_error_t err;
    json_t *lens = json_load_file(mt_test_golden_path("gpt_cases.json"), 0, &err);
    if (!lens) mt_die(__FILE__, __LINE__, "gpt_cases.json: %s", err.text);
    char cache[64];
    snprintf(cache, sizeof cache, "test_gpt_cache_%ld", (long)getpid());
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        run_case(&cases[i], lens, cache);
    /* again: every plain dataset now loads its indices from the cache */
    for (size_t i = 0; i < 4; i++)
        run_case(&cases[i], lens, cache);
    /* a corrupt cache file is MT_ERR_FORMAT */
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "for f in %s/*-GPTDataset-train-shuffle_index.npy; do printf 'garbage' > $f; done",
             cache);
    MT_ASSERT(system(cmd) == 0);
    mt_data_config cfg = MT_DATA_CONFIG_INIT;
    char path[4096];
    snprintf(path, sizeof path, "%s", mt_test_golden_path("ds_merged"));
    const char *pp[1] = { path };
    cfg.sequence_length = 16;
    cfg.split = "900,80,20";
    cfg.n_paths = 1;
    cfg.paths = pp;
    cfg.cache_dir = cache;
    mt_data_dataset *ds = NULL;
    MT_EXPECT_STATUS(mt_data_dataset_create(&cfg, MT_DATA_SPLIT_TRAIN, 50, &ds), MT_ERR_FORMAT);
    mt_data_dataset_destroy(ds);
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
    MT_ASSERT(system(cmd) == 0);
    json_decref(lens);
    return mt_test_result();
}
