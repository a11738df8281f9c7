/* unit: mt_data_sentencepiece_info gives what sentencepiece gives for Megatron's Llama2Tokenizer
 * and GPTSentencePieceTokenizer (vocab_size(), eos_id()) on tiny unigram and BPE models
 * (golden/sentencepiece/gen.py: the default eos and a moved one); a missing file, a truncated
 * file and a file that is not a model are errors that name the file. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include "data_test.h"

#include <jansson.h>
#include <stdio.h>

int main(void) {
    char dir[4096], p[4300];
    snprintf(dir, sizeof dir, "%s", mt_test_golden_path("sentencepiece"));
    snprintf(p, sizeof p, "%s/expected.json", dir);
    json_t *want = json_load_file(p, 0, NULL);
    MT_ASSERT(want && json_object_size(want) == 2);
    const char *name;
    json_t *w;
    json_object_foreach(want, name, w) {
        int64_t v = -1, e = -1;
        snprintf(p, sizeof p, "%s/%s", dir, name);
        MT_CHECK(mt_data_sentencepiece_info(p, &v, &e));
        int64_t wv = json_integer_value(json_object_get(w, "vocab_size"));
        int64_t we = json_integer_value(json_object_get(w, "eod"));
        MT_EXPECT(v == wv && e == we, "%s: vocab %lld eod %lld, sentencepiece %lld, %lld", name,
                  (long long)v, (long long)e, (long long)wv, (long long)we);
        printf("ok %s: vocab size %lld, eod %lld\n", name, (long long)v, (long long)e);
    }
    json_decref(want);
    int64_t v, e;
    MT_EXPECT_STATUS(mt_data_sentencepiece_info("/nonexistent.model", &v, &e), MT_ERR_IO);
    MT_EXPECT(strstr(mt_last_error(), "/nonexistent.model") != NULL, "%s", mt_last_error());
    mt_error_clear();
    char tmp[] = "/tmp/mt-sp-XXXXXX", cmd[8400], bad[4200];
    MT_ASSERT(mkdtemp(tmp));
    snprintf(bad, sizeof bad, "%s/cut.model", tmp);
    snprintf(cmd, sizeof cmd, "head -c 300 '%s/bpe.model' > '%s'", dir, bad);
    MT_ASSERT(system(cmd) == 0);
    MT_EXPECT_STATUS(mt_data_sentencepiece_info(bad, &v, &e), MT_ERR_FORMAT);
    MT_EXPECT(strstr(mt_last_error(), "cut.model") != NULL, "%s", mt_last_error());
    mt_error_clear();
    snprintf(bad, sizeof bad, "%s/text.model", tmp);
    snprintf(cmd, sizeof cmd, "printf 'not a model\\n' > '%s'", bad);
    MT_ASSERT(system(cmd) == 0);
    MT_EXPECT_STATUS(mt_data_sentencepiece_info(bad, &v, &e), MT_ERR_FORMAT);
    mt_error_clear();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    MT_ASSERT(system(cmd) == 0);
    return mt_test_result();
}
