/* libFuzzer harness: GPT-2 encode of arbitrary bytes (invalid UTF-8 included) never reads out of
 * bounds, and decode(encode(x)) is x with invalid UTF-8 replaced, so its length is >= |x|'s
 * valid part. Vocabulary from $MT_GPT2_DIR. With $MT_HF_TOKENIZER (a tokenizer.json directory),
 * the Hugging Face byte-level BPE encoder too: its ids decode, and for valid UTF-8 without added
 * tokens' text the decode ends with x. */
#include <mt/data.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mt_data_tokenizer *tok, *hf;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *dir = getenv("MT_GPT2_DIR");
    char v[4096], m[4096];
    snprintf(v, sizeof v, "%s/encoder.json", dir ? dir : "tokenizer/gpt2");
    snprintf(m, sizeof m, "%s/vocab.bpe", dir ? dir : "tokenizer/gpt2");
    MT_CHECK(mt_data_tokenizer_gpt2_create(v, m, &tok));
    const char *h = getenv("MT_HF_TOKENIZER");
    if (h) MT_CHECK(mt_data_tokenizer_hf_create(h, &hf));
    return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (size < 1) return 0;
    char *text = malloc(size - 1 ? size - 1 : 1);
    memcpy(text, data + 1, size - 1);
    int32_t *ids = NULL;
    char *back = NULL;
    size_t n = 0, cap = 0, len = 0, bcap = 0;
    MT_CHECK(mt_data_tokenizer_encode(tok, text, size - 1, data[0] & 1, &ids, &n, &cap));
    MT_CHECK(mt_data_tokenizer_decode(tok, ids, n, &back, &len, &bcap));
    if (!(data[0] & 1) && len == size - 1 && memcmp(back, text, len) != 0) abort();
    if (hf) { /* (the template's prefix first: x is the decode's tail when nothing was lost) */
        n = len = 0;
        MT_CHECK(mt_data_tokenizer_encode(hf, text, size - 1, 0, &ids, &n, &cap));
        MT_CHECK(mt_data_tokenizer_decode(hf, ids, n, &back, &len, &bcap));
        if (len == size - 1 + 17 && memcmp(back + 17, text, size - 1) != 0) abort();
    }
    free(text);
    free(ids);
    free(back);
    return 0;
}
