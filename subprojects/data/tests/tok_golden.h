/* Shared by the encoder tests (test_sp_encode, test_hf_encode): a tokenizer's encodes and
 * decodes against a reference's, kept in JSON. */
#ifndef TOK_GOLDEN_H
#define TOK_GOLDEN_H

#include <jansson.h>

#include "data_test.h"

/* got[0..n) against the JSON array w; the first five differences (counted in *bad) printed. */
static inline int ids_match(const char *name, const char *what, const int32_t *got, size_t n,
                            json_t *w, size_t *bad) {
    int same = n == json_array_size(w);
    for (size_t j = 0; same && j < n; j++)
        same = got[j] == json_integer_value(json_array_get(w, j));
    if (!same && (*bad)++ < 5) {
        fprintf(stderr, "  %s \"%s\": got", name, what);
        for (size_t j = 0; j < n; j++)
            fprintf(stderr, " %d", got[j]);
        fprintf(stderr, "\n  want");
        for (size_t j = 0; j < json_array_size(w); j++)
            fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(w, j)));
        fprintf(stderr, "\n");
    }
    return same;
}

/* Each of `strings` encoded by t against ids[i] and, where they agree, decoded against
 * decoded[i]; prints a summary line. Returns how many differ (an MT_EXPECT failure too). */
static inline size_t check_encodes(mt_data_tokenizer *t, const char *name, json_t *strings,
                                   json_t *ids, json_t *decoded, const char *reference) {
    int32_t *got = NULL;
    char *text = NULL;
    size_t cap = 0, tcap = 0, bad = 0, total = 0;
    for (size_t i = 0; i < json_array_size(strings); i++) {
        json_t *s = json_array_get(strings, i);
        size_t n = 0, tl = 0;
        MT_CHECK(mt_data_tokenizer_encode(t, json_string_value(s), json_string_length(s), 0, &got,
                                          &n, &cap));
        total += n;
        if (!ids_match(name, json_string_value(s), got, n, json_array_get(ids, i), &bad)) continue;
        MT_CHECK(mt_data_tokenizer_decode(t, got, n, &text, &tl, &tcap));
        json_t *d = json_array_get(decoded, i);
        MT_EXPECT(tl == json_string_length(d) && memcmp(text, json_string_value(d), tl) == 0,
                  "%s: decode of \"%s\" is \"%.*s\", want \"%s\"", name, json_string_value(s),
                  (int)tl, text, json_string_value(d));
    }
    MT_EXPECT(bad == 0, "%s: %zu of %zu strings encode differently", name, bad,
              json_array_size(strings));
    printf("%s %s: %zu strings, %zu ids as %s\n", bad ? "FAIL" : "ok  ", name,
           json_array_size(strings), total, reference);
    free(got), free(text);
    return bad;
}

#endif /* TOK_GOLDEN_H */
