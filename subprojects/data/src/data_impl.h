/* Private helpers shared by the data sources. */
#ifndef MT_DATA_IMPL_H
#define MT_DATA_IMPL_H

#include <mt/data.h>

/* Lower-case hex MD5 of data[0..len) into out (32 chars + NUL). */
void data_md5_hex(const void *data, size_t len, char out[33]);

/* mt_data_sentencepiece_info's reader over a model file's bytes (`name` for the errors). */
mt_status sp_model_parse(const unsigned char *buf, size_t len, const char *name,
                         int64_t *vocab_size, int64_t *eod);

/* A whole file into a malloc'd buffer (errors name it as a SentencePiece model). */
mt_status sp_read_file(const char *file, unsigned char **buf, size_t *len);

/* SentencePiece encoding (sp_encode.c): the model, its encode (ids appended to *ids as
 * mt_data_tokenizer_encode does) and decode, its piece count, bos and eos ids. */
typedef struct sp_model sp_model;
mt_status sp_model_load(const char *file, sp_model **out);
/* The same from a model's bytes (malloc'd; the model owns them, also on failure). */
mt_status sp_model_from_bytes(unsigned char *bytes, size_t len, const char *name, sp_model **out);
void sp_model_free(sp_model *m);
mt_status sp_encode(const sp_model *m, const char *text, size_t len, int32_t **ids, size_t *n,
                    size_t *cap);
mt_status sp_decode(const sp_model *m, const int32_t *ids, size_t n_ids, char **text, size_t *len,
                    size_t *cap);
int sp_model_size(const sp_model *m);
int sp_model_bos(const sp_model *m);
int sp_model_eos(const sp_model *m);

#endif /* MT_DATA_IMPL_H */
