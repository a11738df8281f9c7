/* libFuzzer harness: any byte string as a SentencePiece model must give a vocabulary size and an
 * eod inside it, or fail with a status; the protobuf reader must stay inside the buffer
 * (AddressSanitizer checks). */
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
    free(buf);
    return 0;
}
