/* unit: Hugging Face byte-level BPE encoding (mt_data_tokenizer_hf_create: Megatron's
 * HuggingFaceTokenizer in mt-preprocess-data) against transformers itself
 * (golden/hf_encode/gen.py): a tokenizer with Llama-3's pre-tokenizer (the cl100k-style regex),
 * ignore_merges, special tokens and a template that puts <|begin_of_text|> first, and one with
 * GPT-2's ByteLevel regex, on twenty strings (contractions in both cases, digit runs, spaces,
 * tabs and newline runs, code, punctuation runs, Unicode letters and numbers, emoji, special
 * tokens inside the text, empty text, a vocabulary token no merge makes): AutoTokenizer(text)
 * .input_ids, decode, len(tok), eos; the two pre-tokenizers' pieces against the regex module's
 * findall.
 * Refused: a normalizer, another pre-tokenizer pattern, a WordPiece model. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <stdio.h>

#include "tok_golden.h"

#include "../src/data_impl.h" /* the pre-tokenizers' matchers */

/* The pieces of each split string by GPT-2's or Llama-3's matcher against the regex module's
 * findall (exact pieces: a split that the trained merges happen to hide still fails here). */
static void check_splits(json_t *strings, json_t *want, const char *name, int digits) {
    size_t bad = 0, pieces = 0;
    for (size_t s = 0; s < json_array_size(strings); s++) {
        const unsigned char *p =
            (const unsigned char *)json_string_value(json_array_get(strings, s));
        const size_t len = json_string_length(json_array_get(strings, s));
        uint32_t *cp = malloc((len + 1) * sizeof *cp);
        unsigned char *cls = malloc(len + 1);
        size_t *off = malloc((len + 2) * sizeof *off), m = 0;
        for (size_t i = 0; i < len; m++) {
            size_t badlen, k = tok_utf8_next(p + i, len - i, &cp[m], &badlen);
            MT_ASSERT(k > 0);
            off[m] = i, cls[m] = (unsigned char)tok_char_class(cp[m]), i += k;
        }
        off[m] = len;
        json_t *w = json_array_get(want, s);
        size_t k = 0;
        for (size_t i = 0; i < m; k++) {
            size_t n =
                digits ? tok_cl100k_match(cp, cls, m, i, digits) : tok_gpt2_match(cp, cls, m, i);
            json_t *piece = json_array_get(w, k);
            const size_t pl = off[i + n] - off[i];
            if (!(piece && json_string_length(piece) == pl &&
                  memcmp(json_string_value(piece), p + off[i], pl) == 0) &&
                bad++ < 5)
                fprintf(stderr, "  %s piece %zu of \"%s\": \"%.*s\", want \"%s\"\n", name, k,
                        (const char *)p, (int)pl, p + off[i],
                        piece ? json_string_value(piece) : "(none)");
            i += n;
        }
        MT_EXPECT(k == json_array_size(w), "%zu pieces of \"%s\", want %zu", k, (const char *)p,
                  json_array_size(w));
        pieces += k;
        free(cp), free(cls), free(off);
    }
    MT_EXPECT(bad == 0, "%s: %zu pieces differ from the regex module's", name, bad);
    printf("%s %s pre-tokenizer: %zu pieces of %zu strings as the regex module's\n",
           bad ? "FAIL" : "ok  ", name, pieces, json_array_size(strings));
}

static void check(const char *name, json_t *want, json_t *strings) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", mt_test_golden_path("hf_encode"), name);
    mt_data_tokenizer *t;
    MT_CHECK(mt_data_tokenizer_hf_create(dir, &t));
    MT_EXPECT(mt_data_tokenizer_vocab_size(t) ==
                      json_integer_value(json_object_get(want, "vocab_size")) &&
                  mt_data_tokenizer_eod(t) == json_integer_value(json_object_get(want, "eod")),
              "%s: vocab %lld eod %lld", name, (long long)mt_data_tokenizer_vocab_size(t),
              (long long)mt_data_tokenizer_eod(t));
    check_encodes(t, name, strings, json_object_get(want, "ids"), json_object_get(want, "decoded"),
                  "transformers'");
    mt_data_tokenizer_destroy(t);
}

/* The llama3 tokenizer.json with `from` replaced by `to` (once) is refused, naming `text`. */
static void refused(const char *tmp, const char *from, const char *to, const char *text) {
    char src[4200], dst[4300], cmd[9000];
    snprintf(cmd, sizeof cmd, "cp '%s/llama3/tokenizer_config.json' %s/",
             mt_test_golden_path("hf_encode"), tmp);
    MT_ASSERT(system(cmd) == 0);
    snprintf(src, sizeof src, "%s/llama3/tokenizer.json", mt_test_golden_path("hf_encode"));
    snprintf(dst, sizeof dst, "%s/tokenizer.json", tmp);
    json_t *j = json_load_file(src, 0, NULL);
    MT_ASSERT(j);
    char *s = json_dumps(j, JSON_COMPACT);
    char *at = strstr(s, from);
    MT_ASSERT(at);
    FILE *f = fopen(dst, "w");
    MT_ASSERT(f);
    fwrite(s, 1, (size_t)(at - s), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
    free(s);
    json_decref(j);
    mt_data_tokenizer *t = NULL;
    MT_EXPECT_STATUS(mt_data_tokenizer_hf_create(dst, &t), MT_ERR_UNSUPPORTED);
    MT_EXPECT(t == NULL && strstr(mt_last_error(), text), "want '%s' in: %s", text,
              mt_last_error());
    printf("ok   refused: %s\n", mt_last_error());
    mt_error_clear();
}

/* tok_nfc against Python's unicodedata.normalize("NFC") (decomposition, Hangul, canonical order
 * of marks, composition with blocking and exclusions). */
static void check_nfc(json_t *in, json_t *want) {
    size_t bad = 0;
    for (size_t s = 0; s < json_array_size(in); s++) {
        const char *x = json_string_value(json_array_get(in, s));
        const char *w = json_string_value(json_array_get(want, s));
        size_t lx = strlen(x), lw = strlen(w), n = 0, nw = 0, bl;
        uint32_t *cp = malloc((lx + 1) * sizeof *cp), *cw = malloc((lw + 1) * sizeof *cw);
        for (size_t i = 0; i < lx; n++)
            i += tok_utf8_next((const unsigned char *)x + i, lx - i, &cp[n], &bl);
        for (size_t i = 0; i < lw; nw++)
            i += tok_utf8_next((const unsigned char *)w + i, lw - i, &cw[nw], &bl);
        MT_CHECK(tok_nfc(&cp, &n));
        if (!(n == nw && memcmp(cp, cw, n * sizeof *cp) == 0) && bad++ < 5)
            fprintf(stderr, "  NFC of \"%s\": %zu code points, want %zu (\"%s\")\n", x, n, nw, w);
        free(cp), free(cw);
    }
    MT_EXPECT(bad == 0, "NFC: %zu of %zu strings differ from unicodedata's", bad,
              json_array_size(in));
    printf("%s NFC: %zu strings as unicodedata's\n", bad ? "FAIL" : "ok  ", json_array_size(in));
}

int main(void) {
    char p[4200];
    snprintf(p, sizeof p, "%s/encode.json", mt_test_golden_path("hf_encode"));
    json_t *want = json_load_file(p, 0, NULL);
    MT_ASSERT(want);
    json_t *strings = json_object_get(want, "strings");
    check("llama3", json_object_get(want, "llama3"), strings);
    check("gpt2", json_object_get(want, "gpt2"), strings);
    check("qwen2", json_object_get(want, "qwen2"), strings);
    json_t *ss = json_object_get(want, "split_strings"), *sp = json_object_get(want, "splits");
    check_splits(ss, json_object_get(sp, "llama3"), "llama3", 3);
    check_splits(ss, json_object_get(sp, "qwen2"), "qwen2", 1);
    check_splits(ss, json_object_get(sp, "gpt2"), "gpt2", 0);
    check_nfc(json_object_get(want, "nfc_strings"), json_object_get(want, "nfc"));
    json_decref(want);
    { /* one piece of 300,000 letters (a long run in web text): merged by a heap, not in n^2 */
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/llama3", mt_test_golden_path("hf_encode"));
        mt_data_tokenizer *t;
        MT_CHECK(mt_data_tokenizer_hf_create(dir, &t));
        const size_t len = 300000;
        char *x = malloc(len), *back = NULL;
        for (size_t i = 0; i < len; i++)
            x[i] = "thequickbrownfox"[i % 16];
        int32_t *ids = NULL;
        size_t n = 0, cap = 0, bl = 0, bcap = 0;
        MT_CHECK(mt_data_tokenizer_encode(t, x, len, 0, &ids, &n, &cap));
        MT_CHECK(mt_data_tokenizer_decode(t, ids, n, &back, &bl, &bcap));
        MT_EXPECT(bl == len + 17 && memcmp(back, "<|begin_of_text|>", 17) == 0 &&
                      memcmp(back + 17, x, len) == 0,
                  "a 300,000-letter piece does not decode to itself (%zu ids)", n);
        printf("ok   a 300,000-letter piece: %zu ids, decoded back\n", n);
        free(x), free(back), free(ids);
        mt_data_tokenizer_destroy(t);
    }
    char tmp[] = "/tmp/mt-hfenc-XXXXXX", cmd[200];
    MT_ASSERT(mkdtemp(tmp));
    refused(tmp, "\"normalizer\":null", "\"normalizer\":{\"type\":\"NFKC\"}", "normalizer NFKC");
    refused(tmp, "\\\\p{N}{1,3}", "\\\\p{N}{1,2}", "pattern");
    refused(tmp, "\"type\":\"BPE\"", "\"type\":\"WordPiece\"", "model WordPiece");
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    MT_ASSERT(system(cmd) == 0);
    return mt_test_result();
}
