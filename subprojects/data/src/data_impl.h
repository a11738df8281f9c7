/* Private helpers shared by the data sources. */
#ifndef MT_DATA_IMPL_H
#define MT_DATA_IMPL_H

#include <mt/data.h>

/* Lower-case hex MD5 of data[0..len) into out (32 chars + NUL). */
void data_md5_hex(const void *data, size_t len, char out[33]);

/* mt_data_sentencepiece_info's reader over a model file's bytes (`name` for the errors). */
mt_status sp_model_parse(const unsigned char *buf, size_t len, const char *name,
                         int64_t *vocab_size, int64_t *eod);

#endif /* MT_DATA_IMPL_H */
