/* Megatron's Llama2Tokenizer and GPTSentencePieceTokenizer as far as training on preprocessed
 * data needs them: the vocabulary size (the model's piece count) and eod (its eos_id), read from
 * the SentencePiece model file (a protobuf ModelProto: pieces are field 1, the TrainerSpec field
 * 2, whose eos_id is field 42, default 2). The encoder is sp_encode.c. */
#include <stdio.h>
#include <stdlib.h>

#include "data_impl.h"

/* A protobuf varint at *p (< end); 0 when truncated. */
static int varint(const unsigned char **p, const unsigned char *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        unsigned char c = *(*p)++;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) return 1;
    }
    return 0;
}

/* Skips one field's value of wire type `wt`; 0 when it runs past end or the type is unknown. */
static int skip(const unsigned char **p, const unsigned char *end, unsigned wt) {
    uint64_t n;
    switch (wt) {
    case 0:
        return varint(p, end, &n);
    case 1:
        n = 8;
        break;
    case 2:
        if (!varint(p, end, &n)) return 0;
        break;
    case 5:
        n = 4;
        break;
    default:
        return 0; /* groups (3, 4) are not in ModelProto */
    }
    if (n > (uint64_t)(end - *p)) return 0;
    *p += n;
    return 1;
}

mt_status sp_model_parse(const unsigned char *buf, size_t len, const char *name,
                         int64_t *vocab_size, int64_t *eod) {
    const unsigned char *p = buf, *end = buf + len;
    int64_t pieces = 0, eos = 2; /* TrainerSpec's default eos_id */
    int ok = 1;
    while (ok && p < end) {
        uint64_t key, n;
        ok = varint(&p, end, &key);
        unsigned field = (unsigned)(key >> 3), wt = (unsigned)(key & 7);
        if (!ok) break;
        if (field == 2 && wt == 2) { /* the TrainerSpec: look for eos_id */
            ok = varint(&p, end, &n) && n <= (uint64_t)(end - p);
            const unsigned char *q = p, *qend = ok ? p + n : p;
            while (ok && q < qend) {
                uint64_t k2, v;
                ok = varint(&q, qend, &k2);
                if (ok && k2 >> 3 == 42 && (k2 & 7) == 0) {
                    ok = varint(&q, qend, &v);
                    eos = (int64_t)(int32_t)(uint32_t)v; /* int32: negatives as 64-bit varints */
                } else if (ok) {
                    ok = skip(&q, qend, (unsigned)(k2 & 7));
                }
            }
            p = qend;
        } else {
            pieces += field == 1 && wt == 2;
            ok = skip(&p, end, wt);
        }
    }
    MT_REQUIRE(ok && pieces > 0, MT_ERR_FORMAT,
               "SentencePiece model %s: not a ModelProto (truncated or corrupt; %lld pieces read)",
               name, (long long)pieces);
    MT_REQUIRE(eos >= 0 && eos < pieces, MT_ERR_FORMAT,
               "SentencePiece model %s: eos_id %lld (Megatron's eod) is not one of its %lld pieces",
               name, (long long)eos, (long long)pieces);
    *vocab_size = pieces;
    *eod = eos;
    return MT_OK;
}

mt_status sp_read_file(const char *file, unsigned char **out, size_t *out_len) {
    FILE *f = fopen(file, "rb");
    MT_REQUIRE(f, MT_ERR_IO, "SentencePiece model %s: cannot open", file);
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len == cap) {
            unsigned char *nb = realloc(buf, cap = cap ? 2 * cap : 1 << 16);
            if (!nb) {
                free(buf);
                fclose(f);
                return MT_ERROR(MT_ERR_OOM, "SentencePiece model %s", file);
            }
            buf = nb;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    fclose(f);
    *out = buf, *out_len = len;
    return MT_OK;
}

mt_status mt_data_sentencepiece_info(const char *model_file, int64_t *vocab_size, int64_t *eod) {
    MT_REQUIRE(model_file && vocab_size && eod, MT_ERR_INVALID_ARG, "NULL argument");
    unsigned char *buf;
    size_t len;
    MT_TRY(sp_read_file(model_file, &buf, &len));
    mt_status st = sp_model_parse(buf, len, model_file, vocab_size, eod);
    free(buf);
    return st;
}
