/* Private helpers shared by the data sources. */
#ifndef MT_DATA_IMPL_H
#define MT_DATA_IMPL_H

#include <mt/data.h>

/* Lower-case hex MD5 of data[0..len) into out (32 chars + NUL). */
void data_md5_hex(const void *data, size_t len, char out[33]);

/* mt_data_sentencepiece_info's reader over a model file's bytes (`name` for the errors). */
/* A protobuf field read by sp_pb_next from [*p, end): its number, wire type, and varint value
 * (wire type 0) or payload (1, 2, 5); 0 when truncated or of another wire type. */
typedef struct sp_pb_field {
    unsigned num, wt;
    uint64_t v;
    const unsigned char *data;
    size_t len;
} sp_pb_field;
int sp_pb_next(const unsigned char **p, const unsigned char *end, sp_pb_field *f);
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

/* A binary heap of `type` in an array the caller sizes, `before(a, b)` when a pops first:
 * name##_push(h, &n, x) and name##_pop(h, &n). The BPE encoders' (tokenizer.c, hf_encode.c,
 * sp_encode.c) candidate merges: n-1 pairs, then at most two a merge, so 3n + 1 entries. */
#define TOK_HEAP(name, type, before)                         \
    static void name##_push(type *h, size_t *n, type x) {    \
        size_t i = (*n)++;                                   \
        while (i > 0 && before(&x, &h[(i - 1) / 2])) {       \
            h[i] = h[(i - 1) / 2];                           \
            i = (i - 1) / 2;                                 \
        }                                                    \
        h[i] = x;                                            \
    }                                                        \
    static type name##_pop(type *h, size_t *n) {             \
        type top = h[0], x = h[--*n];                        \
        size_t i = 0;                                        \
        for (;;) {                                           \
            size_t c = 2 * i + 1;                            \
            if (c >= *n) break;                              \
            if (c + 1 < *n && before(&h[c + 1], &h[c])) c++; \
            if (!before(&h[c], &x)) break;                   \
            h[i] = h[c];                                     \
            i = c;                                           \
        }                                                    \
        if (*n) h[i] = x;                                    \
        return top;                                          \
    }

/* Shared by the byte-level BPE tokenizers (tokenizer.c, hf_encode.c). */
enum { /* tok_char_class: the regexes' \p{L}, \p{N}, \s and the rest */
    CH_OTHER = 0,
    CH_LETTER,
    CH_NUMBER,
    CH_SPACE
};
int tok_char_class(uint32_t cp);
/* FNV-1a of p[0..n): the encoders' byte-string maps. */
uint64_t tok_hash(const char *p, size_t n);
/* Appends v[0..k) to *ids (a malloc'd buffer of *cap entries, grown; *ids may start NULL). */
mt_status tok_push_ids(int32_t **ids, size_t *n, size_t *cap, const int32_t *v, size_t k);
/* GPT-2's bytes_to_unicode inverse: code point -> byte, or -1. */
int tok_cp_to_byte(uint32_t cp);
/* One UTF-8 sequence at p[0..n): its length, or 0 when invalid (*bad: the bytes to replace). */
size_t tok_utf8_next(const unsigned char *p, size_t n, uint32_t *cp, size_t *bad);
/* Length in code points of GPT-2's pre-tokenizer match at c[i..n) (classes cls). */
size_t tok_gpt2_match(const uint32_t *c, const unsigned char *cls, size_t n, size_t i);
/* The same for Llama-3's (digits 3) or Qwen2's (digits 1) cl100k-style pattern (hf_encode.c). */
size_t tok_cl100k_match(const uint32_t *c, const unsigned char *cls, size_t n, size_t i,
                        int digits);
/* The code points (*cps)[0..*n) in Unicode normalization form C (nfc.c; may reallocate). */
mt_status tok_nfc(uint32_t **cps, size_t *n);

/* A Hugging Face tokenizer (hf_tokenizer.c): path (a directory, or its tokenizer.json) to the
 * tokenizer.json's name, the configs' directory and the parsed JSON (the caller's to free); what
 * training needs of it (mt_data_hf_tokenizer_info's vocab_size and eod). */
struct json_t;
mt_status hf_tokenizer_open(const char *path, struct json_t **tok, char *file, size_t file_len,
                            char *dir, size_t dir_len);
mt_status hf_tokenizer_info_of(struct json_t *tok, const char *file, const char *dir,
                               int64_t *vocab_size, int64_t *eod);

/* Hugging Face byte-level BPE encoding (hf_encode.c) of a tokenizer.json, read once: the model,
 * and its vocab_size and eod as mt_data_hf_tokenizer_info gives them. */
typedef struct hf_model hf_model;
mt_status hf_model_load(const char *path, hf_model **out, int64_t *vocab_size, int64_t *eod);
void hf_model_free(hf_model *m);
mt_status hf_encode(hf_model *m, const char *text, size_t len, int32_t **ids, size_t *n,
                    size_t *cap);
mt_status hf_decode(const hf_model *m, const int32_t *ids, size_t n_ids, char **text, size_t *len,
                    size_t *cap);

#endif /* MT_DATA_IMPL_H */
