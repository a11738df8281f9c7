/* mt-preprocess-data: Megatron's tools/preprocess_data.py for documents (no sentence splitting).
 * Reads JSON lines, tokenizes each --json-keys field, and writes
 * <output-prefix>_<key>_document.bin/.idx, byte-identical to megatron-core's IndexedDatasetBuilder. */
#include <mt/data.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_KEYS 16

typedef struct args {
    const char *input, *output_prefix, *tokenizer_type, *vocab_file, *merge_file, *tokenizer_model;
    const char *keys[MAX_KEYS];
    int n_keys, append_eod, workers, log_interval;
    int64_t vocab_size;
} args;

static void usage(FILE *f) {
    fprintf(f, "usage: mt-preprocess-data --input FILE.jsonl --output-prefix PREFIX\n"
               "  [--json-keys KEY ...] (default: text)\n"
               "  [--tokenizer-type GPT2BPETokenizer|NullTokenizer|HuggingFaceTokenizer|"
               "Llama2Tokenizer|GPTSentencePieceTokenizer] (default: GPT2BPETokenizer)\n"
               "  [--vocab-file encoder.json] [--merge-file vocab.bpe] (default: the shipped "
               "GPT-2 files)\n"
               "  [--tokenizer-model PATH] (HuggingFaceTokenizer: a directory with tokenizer.json; "
               "Llama2Tokenizer, GPTSentencePieceTokenizer: a SentencePiece model)\n"
               "  [--vocab-size N] (NullTokenizer) [--append-eod] [--workers N] "
               "[--log-interval N]\n"
               "Writes PREFIX_KEY_document.bin/.idx; --workers threads encode, the output in input "
               "order.\n");
}

static void die(const char *msg, const char *arg) {
    fprintf(stderr, "mt-preprocess-data: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    exit(2);
}

static args parse(int argc, char **argv) {
    args a = { 0 };
    a.tokenizer_type = "GPT2BPETokenizer";
    a.workers = 1;
    a.log_interval = 1000;
    a.vocab_size = -1;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        int more = i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0;
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(f, "--append-eod") == 0) {
            a.append_eod = 1;
        } else if (strcmp(f, "--json-keys") == 0) {
            if (!more) die("--json-keys needs at least one key", NULL);
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                if (a.n_keys == MAX_KEYS) die("too many --json-keys", NULL);
                a.keys[a.n_keys++] = argv[++i];
            }
        } else if (!more) {
            usage(stderr);
            die("unknown flag or missing value", f);
        } else if (strcmp(f, "--input") == 0) {
            a.input = argv[++i];
        } else if (strcmp(f, "--output-prefix") == 0) {
            a.output_prefix = argv[++i];
        } else if (strcmp(f, "--tokenizer-type") == 0) {
            a.tokenizer_type = argv[++i];
        } else if (strcmp(f, "--vocab-file") == 0) {
            a.vocab_file = argv[++i];
        } else if (strcmp(f, "--merge-file") == 0) {
            a.merge_file = argv[++i];
        } else if (strcmp(f, "--tokenizer-model") == 0) {
            a.tokenizer_model = argv[++i];
        } else if (strcmp(f, "--vocab-size") == 0) {
            a.vocab_size = atoll(argv[++i]);
        } else if (strcmp(f, "--workers") == 0) {
            a.workers = atoi(argv[++i]);
        } else if (strcmp(f, "--log-interval") == 0) {
            a.log_interval = atoi(argv[++i]);
        } else if (strcmp(f, "--partitions") == 0 || strcmp(f, "--split-sentences") == 0) {
            die("not supported", f);
        } else {
            usage(stderr);
            die("unknown flag", f);
        }
    }
    if (!a.input || !a.output_prefix) {
        usage(stderr);
        die("--input and --output-prefix are required", NULL);
    }
    if (a.n_keys == 0) a.keys[a.n_keys++] = "text";
    if (a.workers < 1) die("--workers must be >= 1", NULL);
    return a;
}

/* The tokenizer that args name (one per worker: encode keeps a cache). */
static mt_data_tokenizer *make_tokenizer(const args *a) {
    mt_data_tokenizer *tok = NULL;
    if (strcmp(a->tokenizer_type, "GPT2BPETokenizer") == 0) {
        char vb[4096], mb[4096];
        const char *vocab =
            a->vocab_file ? a->vocab_file : mt_data_gpt2_file("encoder.json", vb, sizeof vb);
        const char *merge =
            a->merge_file ? a->merge_file : mt_data_gpt2_file("vocab.bpe", mb, sizeof mb);
        MT_CHECK(mt_data_tokenizer_gpt2_create(vocab, merge, &tok));
    } else if (strcmp(a->tokenizer_type, "NullTokenizer") == 0) {
        if (a->vocab_size <= 0) die("NullTokenizer needs --vocab-size", NULL);
        MT_CHECK(mt_data_tokenizer_null_create(a->vocab_size, &tok));
    } else if (strcmp(a->tokenizer_type, "HuggingFaceTokenizer") == 0) {
        if (!a->tokenizer_model) die("--tokenizer-model DIR is required for", a->tokenizer_type);
        if (mt_data_tokenizer_hf_create(a->tokenizer_model, &tok) != MT_OK)
            die(mt_last_error(), NULL);
    } else if (strcmp(a->tokenizer_type, "Llama2Tokenizer") == 0 ||
               strcmp(a->tokenizer_type, "GPTSentencePieceTokenizer") == 0) {
        if (!a->tokenizer_model) die("--tokenizer-model FILE is required for", a->tokenizer_type);
        /* Llama2Tokenizer.tokenize puts bos first; GPTSentencePieceTokenizer's does not */
        mt_status st = mt_data_tokenizer_sentencepiece_create(a->tokenizer_model,
                                                              a->tokenizer_type[0] == 'L', &tok);
        if (st != MT_OK) die(mt_last_error(), NULL);
    } else {
        die("unsupported --tokenizer-type", a->tokenizer_type);
    }
    return tok;
}

/* One document (a JSON line) encoded: per key, its ids and the lengths of its sequences (a list
 * of sentences, or one text; empty ones dropped; --append-eod grows the last), or an error. */
typedef struct doc {
    char *line;
    size_t len;
    int64_t lineno;
    int32_t *ids[MAX_KEYS];
    int64_t *lens[MAX_KEYS];
    size_t n[MAX_KEYS], n_lens[MAX_KEYS], cap[MAX_KEYS];
    char err[256];
} doc;

static void encode_doc(const args *a, mt_data_tokenizer *tok, doc *d) {
    json_error_t err;
    json_t *j = json_loadb(d->line, d->len, JSON_ALLOW_NUL | JSON_DECODE_ANY, &err);
    if (!j || !json_is_object(j)) {
        snprintf(d->err, sizeof d->err, "line %lld: %s", (long long)d->lineno,
                 j ? "not a JSON object" : err.text);
        json_decref(j);
        return;
    }
    for (int k = 0; k < a->n_keys && !d->err[0]; k++) {
        json_t *v = json_object_get(j, a->keys[k]);
        if (!v) {
            snprintf(d->err, sizeof d->err, "line %lld: no key '%s'", (long long)d->lineno,
                     a->keys[k]);
            break;
        }
        size_t n_sent = json_is_array(v) ? json_array_size(v) : 1;
        d->n[k] = d->n_lens[k] = 0;
        d->lens[k] = realloc(d->lens[k], (n_sent + 1) * sizeof *d->lens[k]);
        if (!d->lens[k]) die("out of memory", NULL);
        for (size_t s = 0; s < n_sent; s++) { /* a list of sentences, or one text */
            json_t *sv = json_is_array(v) ? json_array_get(v, s) : v;
            if (!json_is_string(sv)) {
                snprintf(d->err, sizeof d->err, "line %lld: '%s' is not text", (long long)d->lineno,
                         a->keys[k]);
                break;
            }
            size_t before = d->n[k];
            if (mt_data_tokenizer_encode(tok, json_string_value(sv), json_string_length(sv), 0,
                                         &d->ids[k], &d->n[k], &d->cap[k]) != MT_OK) {
                snprintf(d->err, sizeof d->err, "line %lld: %s", (long long)d->lineno,
                         mt_last_error());
                break;
            }
            if (d->n[k] > before) d->lens[k][d->n_lens[k]++] = (int64_t)(d->n[k] - before);
        }
        if (!d->err[0] && d->n[k] > 0 && a->append_eod) { /* the last sequence grows by one */
            if (d->n[k] + 1 > d->cap[k]) {
                int32_t *p = realloc(d->ids[k], (d->n[k] + 1) * sizeof *p);
                if (!p) die("out of memory", NULL);
                d->ids[k] = p, d->cap[k] = d->n[k] + 1;
            }
            d->ids[k][d->n[k]++] = (int32_t)mt_data_tokenizer_eod(tok);
            d->lens[k][d->n_lens[k] - 1]++;
        }
    }
    json_decref(j);
}

/* A worker's share of a batch: documents w, w + workers, ... */
typedef struct job {
    const args *a;
    mt_data_tokenizer *tok;
    doc *docs;
    size_t n, first, step;
} job;

static void *run_job(void *p) {
    job *jb = p;
    for (size_t i = jb->first; i < jb->n; i += jb->step)
        encode_doc(jb->a, jb->tok, &jb->docs[i]);
    return NULL;
}

int main(int argc, char **argv) {
    args a = parse(argc, argv);
    /* why: each worker encodes every workers-th document of a batch with its own tokenizer (the
     * caches are per tokenizer); the main thread writes the batch in input order */
    mt_data_tokenizer **toks = calloc((size_t)a.workers, sizeof *toks);
    if (!toks) die("out of memory", NULL);
    for (int i = 0; i < a.workers; i++)
        toks[i] = make_tokenizer(&a);
    mt_data_tokenizer *tok = toks[0];
    mt_data_dtype dtype = mt_data_dtype_optimal(mt_data_tokenizer_vocab_size(tok));
    mt_data_writer *w[MAX_KEYS];
    for (int k = 0; k < a.n_keys; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s_%s_document.bin", a.output_prefix, a.keys[k]);
        MT_CHECK(mt_data_writer_create(path, dtype, &w[k]));
    }
    FILE *in = fopen(a.input, "rb");
    if (!in) die("cannot open --input", a.input);

    const size_t batch = 256 * (size_t)a.workers;
    doc *docs = calloc(batch, sizeof *docs);
    job *jobs = calloc((size_t)a.workers, sizeof *jobs);
    pthread_t *th = calloc((size_t)a.workers, sizeof *th);
    if (!docs || !jobs || !th) die("out of memory", NULL);
    size_t tok_cap = 0;
    int64_t *tokens = NULL, n_docs = 0, bytes = 0;
    double t0 = mt_time_now();
    for (int eof = 0; !eof;) {
        size_t nb = 0; /* read a batch */
        while (nb < batch) {
            size_t lc = 0;
            free(docs[nb].line);
            docs[nb].line = NULL;
            ssize_t got = getline(&docs[nb].line, &lc, in);
            if (got <= 0) {
                eof = 1;
                break;
            }
            docs[nb].len = (size_t)got, docs[nb].lineno = n_docs + (int64_t)nb + 1;
            docs[nb].err[0] = 0;
            bytes += got;
            nb++;
        }
        for (int t = 0; t < a.workers; t++)
            jobs[t] = (job){ &a, toks[t], docs, nb, (size_t)t, (size_t)a.workers };
        for (int t = 1; t < a.workers; t++)
            if (pthread_create(&th[t], NULL, run_job, &jobs[t]) != 0) die("pthread_create", NULL);
        run_job(&jobs[0]);
        for (int t = 1; t < a.workers; t++)
            pthread_join(th[t], NULL);
        for (size_t i = 0; i < nb; i++) { /* in input order: the first error stops the run */
            doc *d = &docs[i];
            if (d->err[0]) {
                fprintf(stderr, "mt-preprocess-data: %s %s\n", a.input, d->err);
                exit(1);
            }
            for (int k = 0; k < a.n_keys; k++) {
                if (d->n[k] > tok_cap) {
                    tok_cap = d->n[k];
                    tokens = realloc(tokens, tok_cap * sizeof *tokens);
                    if (!tokens) die("out of memory", NULL);
                }
                for (size_t t = 0; t < d->n[k]; t++)
                    tokens[t] = d->ids[k][t];
                MT_CHECK(
                    mt_data_writer_add_document(w[k], tokens, d->lens[k], (int64_t)d->n_lens[k]));
            }
            n_docs++;
            if (a.log_interval > 0 && n_docs % a.log_interval == 0) {
                double dt = mt_time_now() - t0;
                fprintf(stderr, "Processed %lld documents (%.1f docs/s, %.2f MB/s).\n",
                        (long long)n_docs, n_docs / dt, bytes / dt / 1e6);
            }
        }
    }
    fclose(in);
    for (int k = 0; k < a.n_keys; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s_%s_document.idx", a.output_prefix, a.keys[k]);
        MT_CHECK(mt_data_writer_finalize(w[k], path, 0));
        mt_data_writer_destroy(w[k]);
    }
    fprintf(stderr, "Done: %lld documents.\n", (long long)n_docs);
    for (size_t i = 0; i < batch; i++) {
        free(docs[i].line);
        for (int k = 0; k < a.n_keys; k++)
            free(docs[i].ids[k]), free(docs[i].lens[k]);
    }
    for (int i = 0; i < a.workers; i++)
        mt_data_tokenizer_destroy(toks[i]);
    free(toks), free(docs), free(jobs), free(th), free(tokens);
    return 0;
}
