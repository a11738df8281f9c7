/* GPTDataset, MockGPTDataset and BlendedDataset as megatron-core builds them: the split by sequence,
 * the document index (shuffled by RandomState(seed)), helpers.cpp's build_sample_idx, the shuffle
 * index, the cache files, and helpers.cpp's blending indices. The reference is megatron-core's
 * gpt_dataset.py, blended_dataset.py and blended_megatron_dataset_builder.py. */
#include "data_impl.h"

#include <mt/npy.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MOCK_DOCS    100000
#define MOCK_MAX_LEN 4096

/* A low-level dataset: an indexed dataset or MockGPTLowLevelDataset. */
typedef struct source {
    mt_data_indexed *idx;
    int32_t *mock_len; /* MOCK_DOCS lengths, or NULL */
    int64_t n, vocab, eod;
} source;

/* A GPTDataset (mid-level): its three index arrays over one source. */
typedef struct gpt_set {
    source src;
    int32_t *doc;
    int64_t n_doc;
    int64_t *sample; /* (n_samples + 1) pairs */
    int64_t *shuffle;
    int64_t n_samples;
} gpt_set;

struct mt_data_dataset {
    mt_data_config cfg;
    int n_sets;
    gpt_set *sets;
    int blended;
    int16_t *dataset_index;
    int64_t *dataset_sample_index;
    int64_t len;
    int64_t *scratch; /* one sample's text for get_sample */
};

static const char *split_name[3] = { "train", "valid", "test" };

/* ---- split string ---- */

mt_status mt_data_split_parse(const char *split, double bookends[3][2], int present[3]) {
    MT_REQUIRE(split && bookends && present, MT_ERR_INVALID_ARG, "NULL split");
    double v[3] = { 0, 0, 0 };
    int n = 0;
    const char *p = split;
    while (*p) { /* re.findall(r"[.0-9]+") then float() */
        if (!((*p >= '0' && *p <= '9') || *p == '.')) {
            p++;
            continue;
        }
        const char *b = p;
        while ((*p >= '0' && *p <= '9') || *p == '.')
            p++;
        char tok[64];
        size_t len = (size_t)(p - b);
        MT_REQUIRE(len < sizeof tok && n < 3, MT_ERR_INVALID_ARG,
                   "split '%s': more than 3 numbers or a number too long", split);
        memcpy(tok, b, len);
        tok[len] = 0;
        char *end;
        v[n] = strtod(tok, &end);
        MT_REQUIRE(*end == 0, MT_ERR_INVALID_ARG, "split '%s': '%s' is not a number", split, tok);
        n++;
    }
    double sum = v[0] + v[1] + v[2];
    MT_REQUIRE(sum > 0, MT_ERR_INVALID_ARG, "split '%s' sums to 0", split);
    double at = 0;
    for (int i = 0; i < 3; i++) {
        double w = v[i] / sum, end = at + w;
        present[i] = end > at;
        bookends[i][0] = at;
        bookends[i][1] = end;
        at = end;
    }
    return MT_OK;
}

/* ---- low-level sources ---- */

static mt_status source_open_mock(source *s, int64_t vocab, int64_t eod) {
    MT_REQUIRE(vocab > 0, MT_ERR_INVALID_ARG, "mock data needs vocab_size > 0");
    s->mock_len = malloc(MOCK_DOCS * sizeof *s->mock_len);
    MT_REQUIRE(s->mock_len, MT_ERR_OOM, "mock lengths");
    mt_data_pcg64 r; /* numpy.random.default_rng(seed=0).integers(1, 4096, 100000, int32) */
    mt_data_pcg64_seed(&r, 0);
    for (int i = 0; i < MOCK_DOCS; i++)
        s->mock_len[i] = mt_data_pcg64_integers_i32(&r, 1, MOCK_MAX_LEN);
    s->n = MOCK_DOCS;
    s->vocab = vocab;
    s->eod = eod;
    return MT_OK;
}

static void source_close(source *s) {
    mt_data_indexed_close(s->idx);
    free(s->mock_len);
    memset(s, 0, sizeof *s);
}

static int64_t source_len(const source *s, int64_t i) {
    return s->idx ? mt_data_indexed_sequence_length(s->idx, i) : s->mock_len[i];
}

/* Tokens [offset, offset+length) of sequence i into out (length < 0: to the end). */
static mt_status source_get(const source *s, int64_t i, int64_t offset, int64_t length,
                            int64_t *out, int64_t *n) {
    if (s->idx) return mt_data_indexed_get_i64(s->idx, i, offset, length, out, n);
    int64_t l = s->mock_len[i];
    if (length < 0) length = l - offset;
    MT_REQUIRE(offset >= 0 && length >= 0 && offset + length <= l, MT_ERR_INTERNAL,
               "mock slice [%lld, +%lld) of %lld", (long long)offset, (long long)length,
               (long long)l);
    for (int64_t k = 0; k < length; k++) {
        int64_t t = offset + k; /* [(1..l-1) % vocab] + [eod] */
        out[k] = t == l - 1 ? s->eod : (t + 1) % s->vocab;
    }
    *n = length;
    return MT_OK;
}

/* ---- index building (GPTDataset._build_document_sample_shuffle_indices) ---- */

static mt_status build_doc_index(const int32_t *indices, int64_t n, int64_t epochs,
                                 mt_data_mt19937 *rng, int32_t *out) {
    for (int64_t e = 0; e < epochs; e++)
        memcpy(out + e * n, indices, (size_t)n * sizeof *out);
    mt_data_mt19937_shuffle_i32(rng, out, (size_t)(n * epochs));
    return MT_OK;
}

/* helpers.cpp build_sample_idx; *n_samples is set from the token count as there. */
static mt_status build_sample_index(const source *src, const int32_t *doc, int64_t n_doc,
                                    int64_t seq, int64_t epochs, int64_t tpe, int drop_last,
                                    int extra, int64_t **out, int64_t *n_samples) {
    MT_REQUIRE(seq > 1 && tpe > 1, MT_ERR_INVALID_ARG,
               "sequence_length %lld and tokens per epoch %lld must be > 1", (long long)seq,
               (long long)tpe);
    int64_t ns = drop_last ? (epochs * tpe - extra) / seq
                           : (int64_t)ceilf((float)(epochs * tpe - extra) / (float)seq);
    int64_t *s = malloc((size_t)(ns + 1) * 2 * sizeof *s);
    MT_REQUIRE(s, MT_ERR_OOM, "sample index of %lld samples", (long long)ns);
    int64_t d = 0, off = 0;
    s[0] = s[1] = 0;
    for (int64_t k = 1; k <= ns; k++) {
        int64_t rem = seq + extra;
        while (rem != 0) {
            int64_t dl = source_len(src, doc[d]) - off;
            rem -= dl;
            if (rem <= 0) {
                off += rem + dl - extra;
                rem = 0;
            } else {
                if (d == n_doc - 1) {
                    if (k != ns) {
                        free(s);
                        return MT_ERROR(MT_ERR_INTERNAL, "sample index ran out of documents");
                    }
                    off = source_len(src, doc[d]) - extra;
                    break;
                }
                d++;
                off = 0;
            }
        }
        s[2 * k] = d;
        s[2 * k + 1] = off;
    }
    *out = s;
    *n_samples = ns;
    return MT_OK;
}

static void shuffle_range(mt_data_mt19937 *rng, int64_t *a, int64_t beg, int64_t end) {
    for (int64_t i = beg; i < end; i++)
        a[i - beg] = i;
    mt_data_mt19937_shuffle_i64(rng, a, (size_t)(end - beg));
}

static mt_status build_indices(gpt_set *g, const mt_data_config *cfg, const int32_t *indices,
                               int64_t n_idx, int64_t num_samples, mt_data_split split) {
    int extra = cfg->add_extra_token ? 1 : 0;
    int64_t seq = cfg->sequence_length, tpe = 0;
    for (int64_t i = 0; i < n_idx; i++)
        tpe += source_len(&g->src, indices[i]);
    MT_REQUIRE(tpe > 0, MT_ERR_INVALID_ARG, "%s split has no tokens (%lld sequences)",
               split_name[split], (long long)n_idx);
    int64_t epochs = 1;
    if (num_samples >= 0) {
        for (int64_t t = tpe; t < num_samples * seq + extra; t += tpe)
            epochs++;
    }
    int separate = 0;
    int64_t n_sans_last = 0;
    if (epochs > 1) {
        n_sans_last = ((epochs - 1) * tpe - extra) / seq;
        int64_t from_last = num_samples - n_sans_last, per_epoch = (tpe - extra) / seq;
        MT_REQUIRE(from_last >= 0 && from_last <= per_epoch + 1, MT_ERR_INTERNAL,
                   "samples from the final epoch: %lld", (long long)from_last);
        separate = from_last < (int64_t)(0.80 * (double)per_epoch);
    }
    mt_data_mt19937 rng;
    mt_data_mt19937_seed(&rng, cfg->seed);
    g->n_doc = n_idx * epochs;
    g->doc = malloc((size_t)g->n_doc * sizeof *g->doc);
    MT_REQUIRE(g->doc, MT_ERR_OOM, "document index of %lld", (long long)g->n_doc);
    if (!separate) {
        MT_TRY(build_doc_index(indices, n_idx, epochs, &rng, g->doc));
    } else {
        MT_TRY(build_doc_index(indices, n_idx, epochs - 1, &rng, g->doc));
        MT_TRY(build_doc_index(indices, n_idx, 1, &rng, g->doc + n_idx * (epochs - 1)));
    }
    int drop_last = split != MT_DATA_SPLIT_VALID || cfg->drop_last_partial_validation_sequence;
    MT_TRY(build_sample_index(&g->src, g->doc, g->n_doc, seq, epochs, tpe, drop_last, extra,
                              &g->sample, &g->n_samples));
    int64_t total = g->n_samples;
    g->shuffle = malloc((size_t)(total > 0 ? total : 1) * sizeof *g->shuffle);
    MT_REQUIRE(g->shuffle, MT_ERR_OOM, "shuffle index of %lld", (long long)total);
    if (separate) {
        shuffle_range(&rng, g->shuffle, 0, n_sans_last);
        shuffle_range(&rng, g->shuffle + n_sans_last, n_sans_last, total);
    } else {
        shuffle_range(&rng, g->shuffle, 0, total);
    }
    return MT_OK;
}

/* ---- cache files (megatron's names and dtypes) ---- */

/* Python's repr(float): the shortest round-tripping digits, ".0" on integral values. */
static void py_float(char *buf, size_t n, double v) {
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eninf")) strncat(buf, ".0", n - strlen(buf) - 1);
}

static void describe(char *buf, size_t n, const char *cls, const char *path, int64_t num_samples,
                     mt_data_split split, const mt_data_config *cfg, const double be[3][2],
                     const int present[3]) {
    char ns[32], m[3][2][40];
    if (num_samples >= 0)
        snprintf(ns, sizeof ns, "%lld", (long long)num_samples);
    else
        snprintf(ns, sizeof ns, "null");
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++)
            py_float(m[i][j], sizeof m[i][j], be[i][j]);
    size_t at =
        (size_t)snprintf(buf, n,
                         "{\n    \"class\": \"%s\",\n    \"dataset_path\": %s%s%s,\n"
                         "    \"num_samples\": %s,\n    \"index_split\": \"%s\",\n"
                         "    \"random_seed\": %u,\n    \"sequence_length\": %lld,\n"
                         "    \"split\": \"%s\",\n    \"split_matrix\": [",
                         cls, path ? "\"" : "", path ? path : "null", path ? "\"" : "", ns,
                         split_name[split], cfg->seed, (long long)cfg->sequence_length, cfg->split);
    for (int i = 0; i < 3 && at < n; i++) {
        if (present[i])
            at += (size_t)snprintf(buf + at, n - at,
                                   "%s\n        [\n            %s,\n            %s\n        ]",
                                   i ? "," : "", m[i][0], m[i][1]);
        else
            at += (size_t)snprintf(buf + at, n - at, "%s\n        null", i ? "," : "");
    }
    if (at < n)
        snprintf(buf + at, n - at, "\n    ],\n    \"add_extra_token_to_sequence\": %s\n}",
                 cfg->add_extra_token ? "true" : "false");
}

static mt_status mkdirs(const char *dir) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(tmp, 0777);
        *p = '/';
    }
    MT_REQUIRE(mkdir(tmp, 0777) == 0 || errno == EEXIST, MT_ERR_IO, "mkdir %s: %s", dir,
               strerror(errno));
    return MT_OK;
}

static mt_status save_npy(const char *path, const char *descr, int ndim, const int64_t *shape,
                          const void *data) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    MT_TRY(mt_npy_save(tmp, descr, ndim, shape, data));
    MT_REQUIRE(rename(tmp, path) == 0, MT_ERR_IO, "rename %s: %s", tmp, strerror(errno));
    return MT_OK;
}

static mt_status cache_save(const gpt_set *g, const char *base, const char *desc) {
    char path[4300];
    snprintf(path, sizeof path, "%s-description.txt", base);
    FILE *f = fopen(path, "w");
    MT_REQUIRE(f, MT_ERR_IO, "open %s: %s", path, strerror(errno));
    int ok = fputs(desc, f) >= 0;
    ok = (fclose(f) == 0) && ok;
    MT_REQUIRE(ok, MT_ERR_IO, "write %s", path);
    int64_t shape[2] = { g->n_doc, 2 };
    snprintf(path, sizeof path, "%s-document_index.npy", base);
    MT_TRY(save_npy(path, "<i4", 1, shape, g->doc));
    int64_t n = g->n_samples;
    int big = g->n_doc > INT32_MAX; /* why: megatron's sample index is int64 only past int32 */
    for (int64_t i = 0; i < 2 * (n + 1) && !big; i++)
        big = g->sample[i] > INT32_MAX;
    shape[0] = n + 1;
    snprintf(path, sizeof path, "%s-sample_index.npy", base);
    if (big) {
        MT_TRY(save_npy(path, "<i8", 2, shape, g->sample));
    } else {
        int32_t *s32 = malloc((size_t)(n + 1) * 2 * sizeof *s32);
        MT_REQUIRE(s32, MT_ERR_OOM, "sample index copy");
        for (int64_t i = 0; i < 2 * (n + 1); i++)
            s32[i] = (int32_t)g->sample[i];
        mt_status st = save_npy(path, "<i4", 2, shape, s32);
        free(s32);
        MT_TRY(st);
    }
    shape[0] = n;
    snprintf(path, sizeof path, "%s-shuffle_index.npy", base);
    if (n >= (int64_t)UINT32_MAX - 1) return save_npy(path, "<i8", 1, shape, g->shuffle);
    uint32_t *u = malloc((size_t)(n > 0 ? n : 1) * sizeof *u);
    MT_REQUIRE(u, MT_ERR_OOM, "shuffle index copy");
    for (int64_t i = 0; i < n; i++)
        u[i] = (uint32_t)g->shuffle[i];
    mt_status st = save_npy(path, "<u4", 1, shape, u);
    free(u);
    return st;
}

/* Loads one cached array as int64, checking dtype, shape and bounds [0, hi) per column. */
static mt_status load_ints(const char *path, int ndim, int64_t cols, const int64_t hi[2],
                           int64_t **out, int64_t *rows) {
    mt_npy a;
    MT_TRY(mt_npy_load(path, &a));
    mt_status st = MT_OK;
    int kind_ok = (a.descr[1] == 'i' || a.descr[1] == 'u') && (a.itemsize == 4 || a.itemsize == 8);
    if (!kind_ok || a.ndim != ndim || (ndim == 2 && a.shape[1] != cols)) {
        st = MT_ERROR(MT_ERR_FORMAT, "cache %s: dtype %s or shape (ndim %d) is not megatron's",
                      path, a.descr, a.ndim);
        goto done;
    }
    *rows = a.shape[0];
    *out = malloc((a.count ? a.count : 1) * sizeof **out);
    if (!*out) {
        st = MT_ERROR(MT_ERR_OOM, "cache %s", path);
        goto done;
    }
    for (size_t i = 0; i < a.count; i++) {
        double v = mt_npy_get(&a, i);
        int64_t h = hi[ndim == 2 ? i % 2 : 0];
        if (!(v >= 0 && v < (double)h)) {
            st = MT_ERROR(MT_ERR_FORMAT, "cache %s: element %zu = %.0f is outside [0, %lld)", path,
                          i, v, (long long)h);
            free(*out);
            *out = NULL;
            goto done;
        }
        (*out)[i] = (int64_t)v;
    }
done:
    mt_npy_free(&a);
    return st;
}

static mt_status cache_load(gpt_set *g, const char *base) {
    char path[4300];
    int64_t *doc = NULL, rows;
    int64_t hi[2] = { g->src.n, 0 };
    snprintf(path, sizeof path, "%s-document_index.npy", base);
    MT_TRY(load_ints(path, 1, 1, hi, &doc, &g->n_doc));
    g->doc = malloc((size_t)(g->n_doc ? g->n_doc : 1) * sizeof *g->doc);
    if (!g->doc) {
        free(doc);
        return MT_ERROR(MT_ERR_OOM, "document index");
    }
    for (int64_t i = 0; i < g->n_doc; i++)
        g->doc[i] = (int32_t)doc[i];
    free(doc);
    hi[0] = g->n_doc;
    hi[1] = INT64_MAX;
    snprintf(path, sizeof path, "%s-sample_index.npy", base);
    MT_TRY(load_ints(path, 2, 2, hi, &g->sample, &rows));
    MT_REQUIRE(rows >= 1, MT_ERR_FORMAT, "cache %s: sample_index is empty", path);
    g->n_samples = rows - 1;
    for (int64_t i = 0; i < rows; i++) {
        int64_t d = g->sample[2 * i], off = g->sample[2 * i + 1];
        MT_REQUIRE(off <= source_len(&g->src, g->doc[d]) &&
                       (i == 0 || d > g->sample[2 * i - 2] ||
                        (d == g->sample[2 * i - 2] && off >= g->sample[2 * i - 1])),
                   MT_ERR_FORMAT, "cache %s: sample_index[%lld] = (%lld, %lld) is out of order",
                   path, (long long)i, (long long)d, (long long)off);
    }
    hi[0] = g->n_samples;
    snprintf(path, sizeof path, "%s-shuffle_index.npy", base);
    MT_TRY(load_ints(path, 1, 1, hi, &g->shuffle, &rows));
    MT_REQUIRE(rows == g->n_samples, MT_ERR_FORMAT,
               "cache %s: shuffle_index has %lld entries, sample_index %lld samples", path,
               (long long)rows, (long long)g->n_samples);
    return MT_OK;
}

static void gpt_set_free(gpt_set *g) {
    source_close(&g->src);
    free(g->doc);
    free(g->sample);
    free(g->shuffle);
}

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* One GPTDataset (or MockGPTDataset when path is NULL) for `split` with num_samples (< 0: None). */
static mt_status gpt_set_build(gpt_set *g, const mt_data_config *cfg, const char *path,
                               const double be[3][2], const int present[3], mt_data_split split,
                               int64_t num_samples) {
    memset(g, 0, sizeof *g);
    if (path)
        MT_TRY(mt_data_indexed_open(path, 0, &g->src.idx));
    else
        MT_TRY(source_open_mock(&g->src, cfg->vocab_size, cfg->eod));
    if (g->src.idx) g->src.n = mt_data_indexed_sequence_count(g->src.idx);
    g->src.eod = cfg->eod;
    g->src.vocab = cfg->vocab_size;
    int64_t n = g->src.n;
    int64_t beg = (int64_t)nearbyint(be[split][0] * (double)n); /* Python round(): half to even */
    int64_t end = (int64_t)nearbyint(be[split][1] * (double)n);
    int64_t n_idx = end - beg;
    int32_t *indices = malloc((size_t)(n_idx > 0 ? n_idx : 1) * sizeof *indices);
    MT_REQUIRE(indices, MT_ERR_OOM, "split indices");
    for (int64_t i = 0; i < n_idx; i++)
        indices[i] = (int32_t)(beg + i);

    char dir[4096] = "", base[4200], desc[4096], md5[33], probe[4300];
    if (cfg->cache_dir)
        snprintf(dir, sizeof dir, "%s", cfg->cache_dir);
    else if (path)
        snprintf(dir, sizeof dir, "%s/cache/GPTDataset_indices", path);
    const char *cls = path ? "GPTDataset" : "MockGPTDataset";
    mt_status st = MT_OK;
    if (dir[0]) {
        describe(desc, sizeof desc, cls, path, num_samples, split, cfg, be, present);
        data_md5_hex(desc, strlen(desc), md5);
        snprintf(base, sizeof base, "%s/%s-%s-%s", dir, md5, cls, split_name[split]);
        snprintf(probe, sizeof probe, "%s-shuffle_index.npy", base);
        if (file_exists(probe)) {
            st = cache_load(g, base);
            free(indices);
            return st;
        }
    }
    st = build_indices(g, cfg, indices, n_idx, num_samples, split);
    free(indices);
    MT_TRY(st);
    if (dir[0]) {
        MT_TRY(mkdirs(dir));
        MT_TRY(cache_save(g, base, desc));
    }
    return MT_OK;
}

/* _query_document_sample_shuffle_indices: the text of sample i (seq + extra tokens, padded). */
static mt_status gpt_set_get(const gpt_set *g, const mt_data_config *cfg, int64_t i,
                             int64_t *text) {
    int extra = cfg->add_extra_token ? 1 : 0;
    int64_t want = cfg->sequence_length + extra, got = 0, n;
    MT_REQUIRE(i >= 0 && i < g->n_samples, MT_ERR_INVALID_ARG, "sample %lld not in [0, %lld)",
               (long long)i, (long long)g->n_samples);
    int64_t j = g->shuffle[i];
    int64_t d0 = g->sample[2 * j], o0 = g->sample[2 * j + 1];
    int64_t d1 = g->sample[2 * j + 2], o1 = g->sample[2 * j + 3];
    for (int64_t d = d0; d <= d1; d++) {
        int64_t off = d == d0 ? o0 : 0;
        int64_t len = d < d1 ? source_len(&g->src, g->doc[d]) - off : o1 - off + extra;
        MT_REQUIRE(len >= 0 && len <= want - got, MT_ERR_FORMAT,
                   "sample %lld: sample_index spans more than %lld tokens", (long long)i,
                   (long long)want);
        MT_TRY(source_get(&g->src, g->doc[d], off, len, text + got, &n));
        got += n;
    }
    for (; got < want; got++)
        text[got] = cfg->pad;
    return MT_OK;
}

/* ---- blending (helpers.cpp) ---- */

static void normalize(double *w, int n) {
    double s = 0; /* numpy.sum of < 8 values adds left to right */
    for (int i = 0; i < n; i++)
        s += w[i];
    for (int i = 0; i < n; i++)
        w[i] /= s;
}

static void blend_indices(int16_t *di, int64_t *dsi, const double *w, int n, int64_t size) {
    int64_t cur[n];
    memset(cur, 0, sizeof cur);
    for (int64_t s = 0; s < size; s++) {
        double sd = s > 1 ? (double)s : 1.0;
        int best = 0;
        double max_err = w[0] * sd - (double)cur[0];
        for (int d = 1; d < n; d++) {
            double e = w[d] * sd - (double)cur[d];
            if (e > max_err) {
                max_err = e;
                best = d;
            }
        }
        di[s] = (int16_t)best;
        dsi[s] = cur[best]++;
    }
}

static void blend_indices_exhaustive(int16_t *di, int64_t *dsi, const int64_t *sizes, int n) {
    int64_t total = 0, cur[n];
    double w[n];
    int unspent[n];
    for (int i = 0; i < n; i++)
        total += sizes[i];
    for (int i = 0; i < n; i++) {
        cur[i] = 0;
        w[i] = (double)sizes[i] / (double)total;
        unspent[i] = sizes[i] > 0;
    }
    for (int64_t s = 0; s < total; s++) {
        double sd = s > 1 ? (double)s : 1.0, max_err = -HUGE_VAL;
        int best = -1;
        for (int d = 0; d < n; d++) {
            if (!unspent[d]) continue;
            double e = w[d] * sd - (double)cur[d];
            if (e > max_err || best < 0) {
                max_err = e;
                best = d;
            }
        }
        di[s] = (int16_t)best;
        dsi[s] = cur[best]++;
        if (cur[best] == sizes[best]) unspent[best] = 0;
    }
}

/* ---- the public dataset ---- */

mt_status mt_data_dataset_create(const mt_data_config *cfg_in, mt_data_split split,
                                 int64_t num_samples, mt_data_dataset **out) {
    MT_REQUIRE(cfg_in && out && cfg_in->size >= sizeof(mt_data_config), MT_ERR_INVALID_ARG,
               "NULL config/out or config without MT_DATA_CONFIG_INIT");
    MT_REQUIRE(split >= MT_DATA_SPLIT_TRAIN && split <= MT_DATA_SPLIT_TEST, MT_ERR_INVALID_ARG,
               "split %d", (int)split);
    *out = NULL;
    mt_data_config cfg = *cfg_in;
    int n = cfg.n_paths;
    MT_REQUIRE(n >= 0 && n < 32767 && (n == 0 || cfg.paths), MT_ERR_INVALID_ARG, "%d dataset paths",
               n);
    if (n == 0) cfg.split = "1,1,1"; /* mock: an arbitrarily even split, as megatron */
    MT_REQUIRE(cfg.split, MT_ERR_INVALID_ARG, "split must be provided with a blend");
    double be[3][2];
    int present[3];
    MT_TRY(mt_data_split_parse(cfg.split, be, present));
    if (!present[split]) return MT_OK;

    mt_data_dataset *ds = calloc(1, sizeof *ds);
    MT_REQUIRE(ds, MT_ERR_OOM, "dataset");
    ds->cfg = cfg;
    ds->n_sets = n ? n : 1;
    ds->sets = calloc((size_t)ds->n_sets, sizeof *ds->sets);
    mt_status st = MT_OK;
    if (!ds->sets) {
        st = MT_ERROR(MT_ERR_OOM, "datasets");
        goto fail;
    }
    ds->blended = n > 1 || (n == 1 && cfg.weights);
    if (!ds->blended) {
        MT_TRY_GOTO(gpt_set_build(&ds->sets[0], &cfg, n ? cfg.paths[0] : NULL, be, present, split,
                                  num_samples),
                    st, fail);
        ds->len = ds->sets[0].n_samples;
    } else {
        double w[n];
        int64_t target = 0, sizes[n];
        if (cfg.weights) {
            MT_REQUIRE(num_samples >= 0, MT_ERR_INVALID_ARG,
                       "using weights requires a number of samples");
            for (int i = 0; i < n; i++) {
                w[i] = cfg.weights[i];
                MT_REQUIRE(w[i] > 0, MT_ERR_INVALID_ARG, "weight %d is not > 0", i);
            }
            normalize(w, n);
        }
        for (int i = 0; i < n; i++) {
            int64_t want = -1;
            if (cfg.weights) { /* ceil(ceil(N * w) * (1 + surplus)) */
                double t = ceil((double)num_samples * w[i]);
                target += (int64_t)t;
                want = (int64_t)ceil(t * (1.0 + cfg.mid_level_dataset_surplus));
            }
            MT_TRY_GOTO(gpt_set_build(&ds->sets[i], &cfg, cfg.paths[i], be, present, split, want),
                        st, fail);
            sizes[i] = ds->sets[i].n_samples;
        }
        int exhaustive = 0;
        if (cfg.weights) {
            normalize(w, n); /* BlendedDataset normalizes the builder's weights again */
            ds->len = target;
        } else {
            int64_t sum = 0;
            for (int i = 0; i < n; i++) {
                w[i] = (double)sizes[i];
                sum += sizes[i];
                MT_REQUIRE(sizes[i] > 0, MT_ERR_INVALID_ARG, "dataset %s has no samples",
                           cfg.paths[i]);
            }
            if (num_samples >= 0) {
                ds->len = num_samples < sum ? num_samples : sum;
                normalize(w, n);
            } else {
                ds->len = sum;
                exhaustive = 1;
            }
        }
        ds->dataset_index = malloc((size_t)(ds->len ? ds->len : 1) * sizeof *ds->dataset_index);
        ds->dataset_sample_index =
            malloc((size_t)(ds->len ? ds->len : 1) * sizeof *ds->dataset_sample_index);
        if (!ds->dataset_index || !ds->dataset_sample_index) {
            st = MT_ERROR(MT_ERR_OOM, "blending indices of %lld", (long long)ds->len);
            goto fail;
        }
        if (exhaustive)
            blend_indices_exhaustive(ds->dataset_index, ds->dataset_sample_index, sizes, n);
        else
            blend_indices(ds->dataset_index, ds->dataset_sample_index, w, n, ds->len);
        int64_t count[n];
        memset(count, 0, sizeof count);
        for (int64_t s = 0; s < ds->len; s++)
            count[ds->dataset_index[s]]++;
        for (int i = 0; i < n; i++)
            if (count[i] > sizes[i]) {
                st = MT_ERROR(MT_ERR_INVALID_ARG,
                              "the %s blend oversamples dataset %d (%s): %lld samples of %lld",
                              split_name[split], i, cfg.paths[i], (long long)count[i],
                              (long long)sizes[i]);
                goto fail;
            }
    }
    ds->scratch = malloc((size_t)(cfg.sequence_length + 1) * sizeof *ds->scratch);
    if (!ds->scratch) {
        st = MT_ERROR(MT_ERR_OOM, "scratch");
        goto fail;
    }
    *out = ds;
    return MT_OK;
fail:
    mt_data_dataset_destroy(ds);
    return st;
}

void mt_data_dataset_destroy(mt_data_dataset *ds) {
    if (!ds) return;
    for (int i = 0; ds->sets && i < ds->n_sets; i++)
        gpt_set_free(&ds->sets[i]);
    free(ds->sets);
    free(ds->dataset_index);
    free(ds->dataset_sample_index);
    free(ds->scratch);
    free(ds);
}

int64_t mt_data_dataset_len(const mt_data_dataset *ds) {
    return ds ? ds->len : 0;
}

int64_t mt_data_dataset_sample_tokens(const mt_data_dataset *ds) {
    return ds->cfg.sequence_length + (ds->cfg.add_extra_token ? 1 : 0);
}

mt_status mt_data_dataset_get(const mt_data_dataset *ds, int64_t i, int64_t *text,
                              int *dataset_id) {
    MT_REQUIRE(ds && text, MT_ERR_INVALID_ARG, "NULL dataset or text");
    MT_REQUIRE(i >= 0 && i < ds->len, MT_ERR_INVALID_ARG, "sample %lld not in [0, %lld)",
               (long long)i, (long long)ds->len);
    int d = ds->blended ? ds->dataset_index[i] : 0;
    int64_t j = ds->blended ? ds->dataset_sample_index[i] : i;
    if (dataset_id) *dataset_id = d;
    return gpt_set_get(&ds->sets[d], &ds->cfg, j, text);
}

void mt_data_doc_starts(const int64_t *tokens, int64_t T, int64_t eod, int64_t *start) {
    for (int64_t t = 0, s = 0; t < T; t++) {
        start[t] = s;
        if (tokens[t] == eod) s = t + 1;
    }
}

mt_status mt_data_dataset_get_sample(const mt_data_dataset *ds, int64_t i, int64_t *tokens,
                                     int64_t *labels, float *loss_mask, int64_t *position_ids) {
    MT_REQUIRE(ds && tokens && labels && loss_mask && position_ids, MT_ERR_INVALID_ARG,
               "NULL dataset or output");
    const mt_data_config *c = &ds->cfg;
    int64_t T = c->sequence_length, *text = ds->scratch, pad = c->pad;
    /* why: scratch makes get_sample not thread-safe; callers use one dataset per thread */
    MT_TRY(mt_data_dataset_get(ds, i, text, NULL));
    for (int64_t t = 0; t < T; t++) {
        tokens[t] = text[t];
        labels[t] = c->add_extra_token ? text[t + 1] : (t + 1 < T ? text[t + 1] : pad);
    }
    if (c->reset_position_ids) mt_data_doc_starts(tokens, T, c->eod, position_ids);
    for (int64_t t = 0; t < T; t++) {
        loss_mask[t] = c->eod_mask_loss && tokens[t] == c->eod ? 0.0f : 1.0f;
        position_ids[t] = c->reset_position_ids ? t - position_ids[t] : t;
    }
    for (int64_t t = 0; t < T; t++) {
        if (labels[t] == pad) {
            loss_mask[t] = 0.0f;
            labels[t] = 0;
        }
        if (tokens[t] == pad) tokens[t] = 0;
    }
    return MT_OK;
}

mt_status mt_data_dataset_indices(const mt_data_dataset *ds, const int32_t **doc, int64_t *n_doc,
                                  const int64_t **sample, const int64_t **shuffle,
                                  int64_t *n_samples) {
    MT_REQUIRE(ds && !ds->blended, MT_ERR_INVALID_ARG, "NULL or blended dataset");
    const gpt_set *g = &ds->sets[0];
    if (doc) *doc = g->doc;
    if (n_doc) *n_doc = g->n_doc;
    if (sample) *sample = g->sample;
    if (shuffle) *shuffle = g->shuffle;
    if (n_samples) *n_samples = g->n_samples;
    return MT_OK;
}

/* ---- MegatronPretrainingSampler ---- */

mt_status mt_data_sampler_init(mt_data_sampler *s, int64_t total_samples, int64_t consumed_samples,
                               int64_t micro_batch, int dp_rank, int dp_size, int drop_last) {
    MT_REQUIRE(s, MT_ERR_INVALID_ARG, "NULL sampler");
    MT_REQUIRE(total_samples > 0, MT_ERR_INVALID_ARG, "no sample to consume: %lld",
               (long long)total_samples);
    MT_REQUIRE(consumed_samples >= 0 && consumed_samples < total_samples, MT_ERR_INVALID_ARG,
               "no samples left to consume: %lld, %lld", (long long)consumed_samples,
               (long long)total_samples);
    MT_REQUIRE(micro_batch > 0 && dp_size > 0, MT_ERR_INVALID_ARG,
               "micro batch %lld and data parallel size %d must be > 0", (long long)micro_batch,
               dp_size);
    MT_REQUIRE(dp_rank >= 0 && dp_rank < dp_size, MT_ERR_INVALID_ARG,
               "data_parallel_rank should be smaller than data size: %d, %d", dp_rank, dp_size);
    s->total_samples = total_samples;
    s->next = consumed_samples;
    s->micro_batch = micro_batch;
    s->dp_rank = dp_rank;
    s->dp_size = dp_size;
    s->drop_last = drop_last;
    return MT_OK;
}

int64_t mt_data_sampler_next(mt_data_sampler *s, int64_t *ids) {
    int64_t chunk = s->micro_batch * s->dp_size, left = s->total_samples - s->next;
    if (left <= 0 || (left < chunk && s->drop_last)) return 0;
    int64_t len = left < chunk ? left : chunk; /* batch[start:end] of a possibly short chunk */
    int64_t beg = s->dp_rank * s->micro_batch, end = beg + s->micro_batch, n = 0;
    for (int64_t k = beg; k < end && k < len; k++)
        ids[n++] = s->next + k;
    s->next += len;
    return n;
}
