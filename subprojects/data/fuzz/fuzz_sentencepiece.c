/* libFuzzer harness: any byte string as a SentencePiece model must give a vocabulary size and an
 * eod inside it, or fail with a status; the protobuf reader must stay inside the buffer
 * (AddressSanitizer checks). The encoder's loader (sp_encode.c) must load it or fail, and a model
 * it loads must encode texts (with spaces, multi-byte and invalid UTF-8) into ids inside the
 * vocabulary and decode them, the charsmap's double array walked inside its units. */
#include <stdlib.h>
#include <string.h>

#include "../src/data_impl.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    unsigned char *buf = malloc(size ? size : 1); /* exact-size copy so ASan sees any overrun */
    if (!buf) return 0;
    memcpy(buf, data, size);
    int64_t v = -1, e = -1;
    if (sp_model_parse(buf, size, "fuzz", &v, &e) == MT_OK && !(v > 0 && e >= 0 && e < v)) abort();
    mt_error_clear();
    sp_model *m;
    if (sp_model_from_bytes(buf, size, "fuzz", &m) == MT_OK) { /* (buf is the model's now) */
        static const char *texts[] = { "  Hello  world\t\n",
                                       "\xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x98\x80",
                                       "a\xff\xc3(b \xed\xa0\x80", "" };
        int32_t *ids = NULL;
        char *text = NULL;
        size_t cap = 0, tcap = 0;
        for (int i = 0; i < 4; i++) {
            size_t n = 0, tl = 0;
            if (sp_encode(m, texts[i], strlen(texts[i]), &ids, &n, &cap) != MT_OK) continue;
            for (size_t j = 0; j < n; j++)
                if (ids[j] < 0 || ids[j] >= sp_model_size(m)) abort();
            if (sp_decode(m, ids, n, &text, &tl, &tcap) != MT_OK) abort();
        }
        free(ids), free(text);
        sp_model_free(m);
    }
    mt_error_clear();
    return 0;
}
