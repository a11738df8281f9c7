/* libFuzzer harness: any byte string as .idx (its last two bytes pick the .bin size and the
 * multimodal flag) must open cleanly or fail with a status, and every access the reader then
 * allows must stay inside both buffers (AddressSanitizer checks). */
#include <mt/data.h>

#include <stdlib.h>
#include <string.h>

static unsigned char bin[255 * 16];

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (size < 2) return 0;
    size_t bin_len = (size_t)data[size - 1] * 16;
    int multimodal = data[size - 2] & 1;
    unsigned char *idx = malloc(size - 2); /* exact-size copy so ASan sees any overrun */
    if (!idx) return 0;
    memcpy(idx, data, size - 2);
    unsigned char *b = malloc(bin_len ? bin_len : 1);
    memcpy(b, bin, bin_len);
    mt_data_indexed *ds = NULL;
    if (mt_data_indexed_from_memory(idx, size - 2, b, bin_len, multimodal, &ds) == MT_OK) {
        int64_t s = mt_data_indexed_sequence_count(ds), d = mt_data_indexed_document_count(ds);
        int64_t out[255 * 16], n;
        for (int64_t i = 0; i < s; i++) {
            (void)mt_data_indexed_mode(ds, i);
            if (mt_data_indexed_get_i64(ds, i, 0, -1, out, &n) != MT_OK) abort();
            mt_data_indexed_get_i64(ds, i, 1, 1, out, &n);
        }
        for (int64_t k = 0; k <= d; k++)
            (void)mt_data_indexed_document_index(ds, k);
        mt_data_indexed_close(ds);
    }
    free(idx);
    free(b);
    return 0;
}
