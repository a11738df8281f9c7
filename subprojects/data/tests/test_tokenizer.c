/* unit: GPT-2 BPE encode == tiktoken's gpt2 on golden/tokenizer_corpus.bin (multilingual, emoji,
 * whitespace runs, digits, contractions, code, invalid UTF-8, <|endoftext|>), decode inverts it;
 * the NullTokenizer; a corrupt vocabulary is MT_ERR_FORMAT. */
#include "data_test.h"

#include <stdint.h>

static char gpt2_buf[2][4096];
static const char *gpt2_file(int which) {
    const char *dir = getenv("MT_GPT2_DIR");
    snprintf(gpt2_buf[which], sizeof gpt2_buf[which], "%s/%s", dir ? dir : "tokenizer/gpt2",
             which ? "vocab.bpe" : "encoder.json");
    return gpt2_buf[which];
}

/* Python's bytes.decode("utf-8", "replace").encode("utf-8"), the text tiktoken saw. */
static size_t replaced(const unsigned char *s, size_t n, char *out) {
    mt_data_tokenizer *t = NULL;
    (void)t;
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t need = c < 0x80                 ? 0
                      : c >= 0xc2 && c <= 0xdf ? 1
                      : c >= 0xe0 && c <= 0xef ? 2
                      : c >= 0xf0 && c <= 0xf4 ? 3
                                               : 99;
        unsigned char lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
        unsigned char hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
        size_t k = 1;
        if (need != 99)
            for (; k <= need && i + k < n && s[i + k] >= lo && s[i + k] <= hi; k++)
                lo = 0x80, hi = 0xbf;
        if (need != 99 && k == need + 1) {
            memcpy(out + m, s + i, k);
            m += k;
            i += k;
        } else {
            memcpy(out + m, "\xef\xbf\xbd", 3);
            m += 3;
            i += k;
        }
    }
    return m;
}

int main(void) {
    mt_data_tokenizer *t;
    MT_CHECK(mt_data_tokenizer_gpt2_create(gpt2_file(0), gpt2_file(1), &t));
    MT_EXPECT(mt_data_tokenizer_vocab_size(t) == 50257 && mt_data_tokenizer_eod(t) == 50256,
              "gpt2 vocab size and eod");
    size_t n_ids, n_counts, len;
    int64_t *ref = golden_i64("tokenizer_ids.npy", &n_ids, NULL);
    int64_t *counts = golden_i64("tokenizer_counts.npy", &n_counts, NULL);
    unsigned char *corpus = slurp(mt_test_golden_path("tokenizer_corpus.bin"), &len);
    MT_ASSERT(corpus);
    int32_t *ids = NULL;
    char *text = NULL, *want = malloc(3 * len + 1);
    size_t cap = 0, tcap = 0, at = 0, ref_at = 0, bad_cases = 0;
    int64_t *got64 = malloc((n_ids + 1) * sizeof *got64);
    size_t got_n = 0;
    for (size_t c = 0; c < n_counts; c++) {
        MT_ASSERT(at + 5 <= len);
        uint32_t l = (uint32_t)corpus[at] | (uint32_t)corpus[at + 1] << 8 |
                     (uint32_t)corpus[at + 2] << 16 | (uint32_t)corpus[at + 3] << 24;
        int special = corpus[at + 4];
        const char *s = (const char *)corpus + at + 5;
        at += 5 + l;
        size_t n = 0, tl = 0;
        MT_CHECK(mt_data_tokenizer_encode(t, s, l, special, &ids, &n, &cap));
        int same = n == (size_t)counts[c];
        for (size_t i = 0; same && i < n; i++)
            same = ids[i] == ref[ref_at + i];
        if (!same && bad_cases++ < 5) {
            fprintf(stderr, "  case %zu (%u bytes) '%.60s': got %zu ids, want %lld\n", c, l, s, n,
                    (long long)counts[c]);
            for (size_t i = 0; i < n && i < (size_t)counts[c]; i++)
                if (ids[i] != ref[ref_at + i]) {
                    fprintf(stderr, "    first diff at %zu: got %d want %lld\n", i, ids[i],
                            (long long)ref[ref_at + i]);
                    break;
                }
        }
        for (size_t i = 0; i < n && got_n <= n_ids; i++)
            got64[got_n++] = ids[i];
        ref_at += (size_t)counts[c];
        MT_CHECK(mt_data_tokenizer_decode(t, ids, n, &text, &tl, &tcap));
        size_t wl = replaced((const unsigned char *)s, l, want);
        MT_EXPECT(tl == wl && memcmp(text, want, wl) == 0, "decode(encode(case %zu))", c);
    }
    MT_EXPECT(bad_cases == 0, "%zu of %zu cases differ from tiktoken", bad_cases, n_counts);
    MT_EXPECT(got_n == n_ids, "%zu ids, want %zu", got_n, n_ids);
    mt_test_equal_i64("all ids", got64, ref, got_n < n_ids ? got_n : n_ids);
    int32_t bad_id = 50257;
    size_t tl = 0;
    MT_EXPECT_STATUS(mt_data_tokenizer_decode(t, &bad_id, 1, &text, &tl, &tcap),
                     MT_ERR_INVALID_ARG);
    { /* one pre-token of 300,000 letters (a long run in web text): merged by a heap, not in
       * n^2; decodes back */
        const size_t big = 300000;
        char *x = malloc(big);
        for (size_t i = 0; i < big; i++)
            x[i] = "thequickbrownfox"[i % 16];
        size_t nb = 0;
        tl = 0;
        MT_CHECK(mt_data_tokenizer_encode(t, x, big, 0, &ids, &nb, &cap));
        MT_CHECK(mt_data_tokenizer_decode(t, ids, nb, &text, &tl, &tcap));
        MT_EXPECT(tl == big && memcmp(text, x, big) == 0, "a 300,000-letter pre-token (%zu ids)",
                  nb);
        free(x);
    }
    mt_data_tokenizer_destroy(t);

    /* NullTokenizer: "[int(x) for x in text.split(' ')]", vocab_size + 1, eod = vocab_size */
    MT_CHECK(mt_data_tokenizer_null_create(1000, &t));
    MT_EXPECT(mt_data_tokenizer_vocab_size(t) == 1001 && mt_data_tokenizer_eod(t) == 1000,
              "null vocab and eod");
    size_t n = 0;
    MT_CHECK(mt_data_tokenizer_encode(t, "5 17 -3 999\n", 12, 0, &ids, &n, &cap));
    MT_EXPECT(n == 4 && ids[0] == 5 && ids[1] == 17 && ids[2] == -3 && ids[3] == 999, "null ids");
    n = 0;
    MT_EXPECT_STATUS(mt_data_tokenizer_encode(t, "1  2", 4, 0, &ids, &n, &cap), MT_ERR_INVALID_ARG);
    tl = 0;
    const int32_t two[] = { 12, 7 };
    MT_CHECK(mt_data_tokenizer_decode(t, two, 2, &text, &tl, &tcap));
    MT_EXPECT(tl == 4 && memcmp(text, "12 7", 4) == 0, "null decode");
    mt_data_tokenizer_destroy(t);

    /* a merge that disagrees with encoder.json is MT_ERR_FORMAT */
    FILE *f = fopen("test_tok_bad.bpe", "w");
    fputs("#version: 0.2\n\xc4\xa0 a\n", f); /* "Ġ a" is not id 256 */
    fclose(f);
    MT_EXPECT_STATUS(mt_data_tokenizer_gpt2_create(gpt2_file(0), "test_tok_bad.bpe", &t),
                     MT_ERR_FORMAT);
    f = fopen("test_tok_bad.json", "w");
    fputs("{\"a\": 0, \"b\": ", f);
    fclose(f);
    MT_EXPECT_STATUS(mt_data_tokenizer_gpt2_create("test_tok_bad.json", gpt2_file(1), &t),
                     MT_ERR_FORMAT);
    free(ids);
    free(text);
    free(want);
    free(ref);
    free(counts);
    free(corpus);
    free(got64);
    return mt_test_result();
}
