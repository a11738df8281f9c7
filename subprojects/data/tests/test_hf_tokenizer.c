/* unit: mt_data_hf_tokenizer_info gives what transformers gives for Megatron's
 * HuggingFaceTokenizer (len(AutoTokenizer), eos_token_id) on tiny BPE, Unigram and WordPiece
 * tokenizers (golden/hf_tokenizers/gen.py: added tokens past the vocabulary and inside it, eos
 * named by tokenizer_config.json as a string or an AddedToken, or by special_tokens_map.json),
 * from the directory or the tokenizer.json; a missing file, no eos and a corrupt file are errors
 * that name the problem. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include "data_test.h"

#include <jansson.h>
#include <stdio.h>

int main(void) {
    char dir[4096], p[4300];
    snprintf(dir, sizeof dir, "%s", mt_test_golden_path("hf_tokenizers"));
    snprintf(p, sizeof p, "%s/expected.json", dir);
    json_t *want = json_load_file(p, 0, NULL);
    MT_ASSERT(want && json_object_size(want) == 3);
    const char *name;
    json_t *w;
    json_object_foreach(want, name, w) {
        int64_t v = -1, e = -1, v2 = -1, e2 = -1;
        snprintf(p, sizeof p, "%s/%s", dir, name);
        MT_CHECK(mt_data_hf_tokenizer_info(p, &v, &e));
        snprintf(p, sizeof p, "%s/%s/tokenizer.json", dir, name);
        MT_CHECK(mt_data_hf_tokenizer_info(p, &v2, &e2));
        int64_t wv = json_integer_value(json_object_get(w, "vocab_size"));
        int64_t we = json_integer_value(json_object_get(w, "eod"));
        MT_EXPECT(v == wv && e == we && v2 == wv && e2 == we,
                  "%s: vocab %lld eod %lld (from the file: %lld, %lld), transformers %lld, %lld",
                  name, (long long)v, (long long)e, (long long)v2, (long long)e2, (long long)wv,
                  (long long)we);
        printf("ok %s: vocab size %lld, eod %lld\n", name, (long long)v, (long long)e);
    }
    json_decref(want);
    int64_t v, e;
    /* no tokenizer.json */
    MT_EXPECT_STATUS(mt_data_hf_tokenizer_info("/nonexistent-dir", &v, &e), MT_ERR_IO);
    MT_EXPECT(strstr(mt_last_error(), "cannot read /nonexistent-dir") != NULL,
              "error names the path: %s", mt_last_error());
    mt_error_clear();
    /* WordPiece's tokenizer.json alone in a directory without configs: no eos */
    char tmp[] = "/tmp/mt-hftok-XXXXXX";
    MT_ASSERT(mkdtemp(tmp));
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "cp '%s/wordpiece/tokenizer.json' '%s/'", dir, tmp);
    MT_ASSERT(system(cmd) == 0);
    MT_EXPECT_STATUS(mt_data_hf_tokenizer_info(tmp, &v, &e), MT_ERR_FORMAT);
    MT_EXPECT(strstr(mt_last_error(), "no eos_token") != NULL, "%s", mt_last_error());
    mt_error_clear();
    /* a truncated tokenizer.json */
    snprintf(cmd, sizeof cmd, "head -c 100 '%s/wordpiece/tokenizer.json' > '%s/tokenizer.json'",
             dir, tmp);
    MT_ASSERT(system(cmd) == 0);
    MT_EXPECT_STATUS(mt_data_hf_tokenizer_info(tmp, &v, &e), MT_ERR_IO);
    MT_EXPECT(strstr(mt_last_error(), "cannot read") != NULL, "%s", mt_last_error());
    mt_error_clear();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    MT_ASSERT(system(cmd) == 0);
    return mt_test_result();
}
