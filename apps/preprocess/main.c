/* mt-preprocess-data: Megatron's tools/preprocess_data.py for documents (no sentence splitting).
 * Reads JSON lines, tokenizes each --json-keys field, and writes
 * <output-prefix>_<key>_document.bin/.idx, byte-identical to megatron-core's IndexedDatasetBuilder. */
#include <mt/data.h>

#include <jansson.h>
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
               "Writes PREFIX_KEY_document.bin/.idx. --workers is accepted; encoding runs on one "
               "thread.\n");
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

int main(int argc, char **argv) {
    args a = parse(argc, argv);
    mt_data_tokenizer *tok = NULL;
    if (strcmp(a.tokenizer_type, "GPT2BPETokenizer") == 0) {
        char vb[4096], mb[4096];
        const char *vocab =
            a.vocab_file ? a.vocab_file : mt_data_gpt2_file("encoder.json", vb, sizeof vb);
        const char *merge =
            a.merge_file ? a.merge_file : mt_data_gpt2_file("vocab.bpe", mb, sizeof mb);
        MT_CHECK(mt_data_tokenizer_gpt2_create(vocab, merge, &tok));
    } else if (strcmp(a.tokenizer_type, "NullTokenizer") == 0) {
        if (a.vocab_size <= 0) die("NullTokenizer needs --vocab-size", NULL);
        MT_CHECK(mt_data_tokenizer_null_create(a.vocab_size, &tok));
    } else if (strcmp(a.tokenizer_type, "HuggingFaceTokenizer") == 0) {
        if (!a.tokenizer_model) die("--tokenizer-model DIR is required for", a.tokenizer_type);
        if (mt_data_tokenizer_hf_create(a.tokenizer_model, &tok) != MT_OK)
            die(mt_last_error(), NULL);
    } else if (strcmp(a.tokenizer_type, "Llama2Tokenizer") == 0 ||
               strcmp(a.tokenizer_type, "GPTSentencePieceTokenizer") == 0) {
        if (!a.tokenizer_model) die("--tokenizer-model FILE is required for", a.tokenizer_type);
        /* Llama2Tokenizer.tokenize puts bos first; GPTSentencePieceTokenizer's does not */
        mt_status st = mt_data_tokenizer_sentencepiece_create(a.tokenizer_model,
                                                              a.tokenizer_type[0] == 'L', &tok);
        if (st != MT_OK) die(mt_last_error(), NULL);
    } else {
        die("unsupported --tokenizer-type", a.tokenizer_type);
    }
    mt_data_dtype dtype = mt_data_dtype_optimal(mt_data_tokenizer_vocab_size(tok));
    mt_data_writer *w[MAX_KEYS];
    for (int k = 0; k < a.n_keys; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s_%s_document.bin", a.output_prefix, a.keys[k]);
        MT_CHECK(mt_data_writer_create(path, dtype, &w[k]));
    }
    FILE *in = fopen(a.input, "rb");
    if (!in) die("cannot open --input", a.input);

    char *line = NULL;
    size_t line_cap = 0, cap = 0, lens_cap = 0;
    ssize_t got;
    int32_t *ids = NULL;
    int64_t *tokens = NULL, *lens = NULL, docs = 0, bytes = 0;
    double t0 = mt_time_now();
    while ((got = getline(&line, &line_cap, in)) > 0) {
        json_error_t err;
        json_t *doc = json_loadb(line, (size_t)got, JSON_ALLOW_NUL | JSON_DECODE_ANY, &err);
        if (!doc || !json_is_object(doc)) {
            fprintf(stderr, "mt-preprocess-data: %s line %lld: %s\n", a.input, (long long)docs + 1,
                    doc ? "not a JSON object" : err.text);
            exit(1);
        }
        for (int k = 0; k < a.n_keys; k++) {
            json_t *v = json_object_get(doc, a.keys[k]);
            if (!v) {
                fprintf(stderr, "mt-preprocess-data: %s line %lld: no key '%s'\n", a.input,
                        (long long)docs + 1, a.keys[k]);
                exit(1);
            }
            size_t n_sent = json_is_array(v) ? json_array_size(v) : 1, n = 0, n_lens = 0;
            if (n_sent + 1 > lens_cap) {
                lens_cap = 2 * (n_sent + 1);
                lens = realloc(lens, lens_cap * sizeof *lens);
                if (!lens) die("out of memory", NULL);
            }
            for (size_t s = 0; s < n_sent; s++) { /* a list of sentences, or one text */
                json_t *sv = json_is_array(v) ? json_array_get(v, s) : v;
                if (!json_is_string(sv)) {
                    fprintf(stderr, "mt-preprocess-data: %s line %lld: '%s' is not text\n", a.input,
                            (long long)docs + 1, a.keys[k]);
                    exit(1);
                }
                size_t before = n;
                MT_CHECK(mt_data_tokenizer_encode(tok, json_string_value(sv),
                                                  json_string_length(sv), 0, &ids, &n, &cap));
                if (n > before) lens[n_lens++] = (int64_t)(n - before); /* empty: dropped */
            }
            if (n > 0 && a.append_eod) { /* the last sequence grows by one */
                if (n + 1 > cap) {
                    int32_t *p = realloc(ids, (n + 1) * sizeof *ids);
                    if (!p) die("out of memory", NULL);
                    ids = p;
                    cap = n + 1;
                }
                ids[n++] = (int32_t)mt_data_tokenizer_eod(tok);
                lens[n_lens - 1]++;
            }
            tokens = realloc(tokens, (n ? n : 1) * sizeof *tokens);
            if (!tokens) die("out of memory", NULL);
            for (size_t i = 0; i < n; i++)
                tokens[i] = ids[i];
            MT_CHECK(mt_data_writer_add_document(w[k], tokens, lens, (int64_t)n_lens));
        }
        json_decref(doc);
        docs++;
        bytes += got;
        if (a.log_interval > 0 && docs % a.log_interval == 0) {
            double dt = mt_time_now() - t0;
            fprintf(stderr, "Processed %lld documents (%.1f docs/s, %.2f MB/s).\n", (long long)docs,
                    docs / dt, bytes / dt / 1e6);
        }
    }
    fclose(in);
    for (int k = 0; k < a.n_keys; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s_%s_document.idx", a.output_prefix, a.keys[k]);
        MT_CHECK(mt_data_writer_finalize(w[k], path, 0));
        mt_data_writer_destroy(w[k]);
    }
    fprintf(stderr, "Done: %lld documents.\n", (long long)docs);
    mt_data_tokenizer_destroy(tok);
    free(line);
    free(ids);
    free(tokens);
    free(lens);
    return 0;
}
