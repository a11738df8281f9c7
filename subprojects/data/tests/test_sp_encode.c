/* unit: SentencePiece encoding (mt_data_tokenizer_sentencepiece_create: Megatron's
 * Llama2Tokenizer and GPTSentencePieceTokenizer in mt-preprocess-data) against sentencepiece
 * itself (golden/sentencepiece/gen_encode.py): four models (BPE as Llama-2's: identity normalizer,
 * spaces kept, byte fallback, a user-defined symbol; BPE and unigram with the nmt_nfkc charsmap
 * and unk runs; unigram with byte fallback and whitespace as a suffix) on twenty strings (extra,
 * leading and trailing spaces, tabs and newlines, digits, accents, CJK, emoji, fullwidth forms and
 * ligatures, unknown characters, combining marks, the user-defined symbol), the ids of
 * sp.encode() and the text of sp.decode(). Also bos first with add_bos, invalid UTF-8 (U+FFFD, as
 * sentencepiece's normalizer), and refused files. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <stdio.h>

#include "tok_golden.h"

static const char *models[] = { "enc_bpe_llama", "enc_bpe_nfkc", "enc_uni_nfkc", "enc_uni_bytes" };

static void check_model(const char *name, json_t *want, json_t *strings, json_t *raw) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.model", mt_test_golden_path("sentencepiece"), name);
    mt_data_tokenizer *t, *tb;
    MT_CHECK(mt_data_tokenizer_sentencepiece_create(path, 0, &t));
    MT_CHECK(mt_data_tokenizer_sentencepiece_create(path, 1, &tb));
    MT_EXPECT(mt_data_tokenizer_vocab_size(t) ==
                  json_integer_value(json_object_get(want, "pieces")),
              "%s: %lld pieces", name, (long long)mt_data_tokenizer_vocab_size(t));
    MT_EXPECT(mt_data_tokenizer_eod(t) == json_integer_value(json_object_get(want, "eos")),
              "%s: eod %lld", name, (long long)mt_data_tokenizer_eod(t));
    check_encodes(t, name, strings, json_object_get(want, "ids"), json_object_get(want, "decoded"),
                  "sentencepiece's");
    int32_t *got = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < json_array_size(strings); i++) { /* add_bos: bos, then the same */
        json_t *s = json_array_get(strings, i);
        size_t nb = 0;
        MT_CHECK(mt_data_tokenizer_encode(tb, json_string_value(s), json_string_length(s), 0, &got,
                                          &nb, &cap));
        MT_EXPECT(nb == json_array_size(json_array_get(json_object_get(want, "ids"), i)) + 1 &&
                      got[0] == json_integer_value(json_object_get(want, "bos")),
                  "%s: add_bos gave %zu ids", name, nb);
    }
    /* invalid UTF-8 (bytes to sentencepiece): a bad byte is U+FFFD, not normalized */
    json_t *raw_ids = json_object_get(want, "raw_ids");
    size_t rbad = 0;
    for (size_t i = 0; i < json_array_size(raw); i++) {
        const char *hex = json_string_value(json_array_get(raw, i));
        char bytes[256];
        size_t nb = strlen(hex) / 2, n = 0;
        for (size_t j = 0; j < nb; j++) {
            unsigned v;
            MT_ASSERT(sscanf(hex + 2 * j, "%2x", &v) == 1);
            bytes[j] = (char)v;
        }
        MT_CHECK(mt_data_tokenizer_encode(t, bytes, nb, 0, &got, &n, &cap));
        ids_match(name, hex, got, n, json_array_get(raw_ids, i), &rbad);
    }
    MT_EXPECT(rbad == 0, "%s: %zu byte strings with invalid UTF-8 encode differently", name, rbad);
    free(got);
    mt_data_tokenizer_destroy(t);
    mt_data_tokenizer_destroy(tb);
}

int main(void) {
    char p[4200];
    snprintf(p, sizeof p, "%s/encode.json", mt_test_golden_path("sentencepiece"));
    json_t *want = json_load_file(p, 0, NULL);
    MT_ASSERT(want);
    json_t *strings = json_object_get(want, "strings"), *raw = json_object_get(want, "raw");
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        check_model(models[i], json_object_get(want, models[i]), strings, raw);
    json_decref(want);
    /* refused: a missing file, a truncated model, a file that is not a model */
    char dir[] = "/tmp/mt-spenc-XXXXXX", src[4200], cmd[9000];
    MT_ASSERT(mkdtemp(dir));
    mt_data_tokenizer *t = NULL;
    MT_EXPECT_STATUS(mt_data_tokenizer_sentencepiece_create("/nonexistent.model", 0, &t),
                     MT_ERR_IO);
    MT_EXPECT(t == NULL && strstr(mt_last_error(), "/nonexistent.model"), "%s", mt_last_error());
    snprintf(src, sizeof src, "%s/enc_bpe_llama.model", mt_test_golden_path("sentencepiece"));
    snprintf(cmd, sizeof cmd, "head -c 3000 '%s' > %s/cut.model && echo hello > %s/text.model", src,
             dir, dir);
    MT_ASSERT(system(cmd) == 0);
    const char *bad[] = { "cut.model", "text.model" };
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, bad[i]);
        MT_EXPECT_STATUS(mt_data_tokenizer_sentencepiece_create(p, 0, &t), MT_ERR_FORMAT);
        MT_EXPECT(strstr(mt_last_error(), bad[i]) != NULL, "%s", mt_last_error());
        printf("ok   %s refused: %s\n", bad[i], mt_last_error());
        mt_error_clear();
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    MT_ASSERT(system(cmd) == 0);
    return mt_test_result();
}
