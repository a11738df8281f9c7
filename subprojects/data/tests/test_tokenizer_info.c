/* unit: what training needs of a tokenizer it does not run, as Megatron's tokenizers give it:
 * mt_data_hf_tokenizer_info against transformers (HuggingFaceTokenizer: len(AutoTokenizer),
 * eos_token_id) on tiny BPE, Unigram and WordPiece tokenizers (golden/hf_tokenizers/gen.py:
 * added tokens past the vocabulary and inside it, eos named by tokenizer_config.json as a string
 * or an AddedToken, or by special_tokens_map.json), from the directory or the tokenizer.json;
 * mt_data_sentencepiece_info against sentencepiece (Llama2Tokenizer, GPTSentencePieceTokenizer:
 * vocab_size(), eos_id()) on tiny unigram and BPE models (golden/sentencepiece/gen.py: the default
 * eos and a moved one). Missing, truncated and foreign files, and no eos, are errors that name
 * the problem. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include "data_test.h"

#include <jansson.h>
#include <stdio.h>

typedef mt_status (*info_fn)(const char *path, int64_t *vocab_size, int64_t *eod);

/* Every case of <golden>/<sub>/expected.json ({name: {vocab_size, eod}}), the path being
 * <sub>/<name>, and also <sub>/<name>/<also> when `also` is not NULL. */
static void golden(const char *sub, info_fn info, const char *also, size_t cases) {
    char dir[4096], p[4400];
    snprintf(dir, sizeof dir, "%s", mt_test_golden_path(sub));
    snprintf(p, sizeof p, "%s/expected.json", dir);
    json_t *want = json_load_file(p, 0, NULL);
    MT_ASSERT(want && json_object_size(want) == cases);
    const char *name;
    json_t *w;
    json_object_foreach(want, name, w) {
        int64_t wv = json_integer_value(json_object_get(w, "vocab_size"));
        int64_t we = json_integer_value(json_object_get(w, "eod"));
        for (int k = 0; k < (also ? 2 : 1); k++) {
            int64_t v = -1, e = -1;
            snprintf(p, sizeof p, "%s/%s%s%s", dir, name, k ? "/" : "", k ? also : "");
            MT_CHECK(info(p, &v, &e));
            MT_EXPECT(v == wv && e == we, "%s: vocab %lld eod %lld, reference %lld, %lld", p,
                      (long long)v, (long long)e, (long long)wv, (long long)we);
        }
        printf("ok %s/%s: vocab size %lld, eod %lld\n", sub, name, (long long)wv, (long long)we);
    }
    json_decref(want);
}

/* info(path) fails with `status` and an error containing `text`. */
static void refused(info_fn info, const char *path, mt_status status, const char *text) {
    int64_t v, e;
    MT_EXPECT_STATUS(info(path, &v, &e), status);
    MT_EXPECT(strstr(mt_last_error(), text) != NULL, "%s: want '%s' in: %s", path, text,
              mt_last_error());
    mt_error_clear();
}

int main(void) {
    golden("hf_tokenizers", mt_data_hf_tokenizer_info, "tokenizer.json", 3);
    golden("sentencepiece", mt_data_sentencepiece_info, NULL, 2);
    char hf[4096], sp[4096], tmp[] = "/tmp/mt-tokinfo-XXXXXX", cmd[9000], p[4200];
    snprintf(hf, sizeof hf, "%s", mt_test_golden_path("hf_tokenizers"));
    snprintf(sp, sizeof sp, "%s", mt_test_golden_path("sentencepiece"));
    MT_ASSERT(mkdtemp(tmp));
    refused(mt_data_hf_tokenizer_info, "/nonexistent-dir", MT_ERR_IO,
            "cannot read /nonexistent-dir");
    /* WordPiece's tokenizer.json alone in a directory without configs: no eos */
    snprintf(cmd, sizeof cmd, "cp '%s/wordpiece/tokenizer.json' '%s/'", hf, tmp);
    MT_ASSERT(system(cmd) == 0);
    refused(mt_data_hf_tokenizer_info, tmp, MT_ERR_FORMAT, "no eos_token");
    /* a truncated tokenizer.json */
    snprintf(cmd, sizeof cmd, "head -c 100 '%s/wordpiece/tokenizer.json' > '%s/tokenizer.json'", hf,
             tmp);
    MT_ASSERT(system(cmd) == 0);
    refused(mt_data_hf_tokenizer_info, tmp, MT_ERR_IO, "cannot read");
    refused(mt_data_sentencepiece_info, "/nonexistent.model", MT_ERR_IO, "/nonexistent.model");
    snprintf(p, sizeof p, "%s/cut.model", tmp);
    snprintf(cmd, sizeof cmd, "head -c 300 '%s/bpe.model' > '%s'", sp, p);
    MT_ASSERT(system(cmd) == 0);
    refused(mt_data_sentencepiece_info, p, MT_ERR_FORMAT, "cut.model");
    snprintf(p, sizeof p, "%s/text.model", tmp);
    snprintf(cmd, sizeof cmd, "printf 'not a model\\n' > '%s'", p);
    MT_ASSERT(system(cmd) == 0);
    refused(mt_data_sentencepiece_info, p, MT_ERR_FORMAT, "not a ModelProto");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    MT_ASSERT(system(cmd) == 0);
    return mt_test_result();
}
