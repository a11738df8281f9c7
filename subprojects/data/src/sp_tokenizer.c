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

int sp_pb_next(const unsigned char **p, const unsigned char *end, sp_pb_field *f) {
    uint64_t key;
    if (!varint(p, end, &key)) return 0;
    f->num = (unsigned)(key >> 3), f->wt = (unsigned)(key & 7), f->data = NULL, f->len = 0,
    f->v = 0;
    switch (f->wt) {
    case 0:
        return varint(p, end, &f->v);
    case 1:
    case 5: {
        size_t n = f->wt == 1 ? 8 : 4;
        if ((size_t)(end - *p) < n) return 0;
        f->data = *p, f->len = n;
        *p += n;
        return 1;
    }
    case 2:
        if (!varint(p, end, &f->v) || f->v > (uint64_t)(end - *p)) return 0;
        f->data = *p, f->len = (size_t)f->v;
        *p += f->len;
        return 1;
    default:
        return 0; /* groups (3, 4) are not in ModelProto */
    }
}

mt_status sp_model_parse(const unsigned char *buf, size_t len, const char *name,
                         int64_t *vocab_size, int64_t *eod) {
    const unsigned char *p = buf, *end = buf + len;
    int64_t pieces = 0, eos = 2; /* TrainerSpec's default eos_id */
    sp_pb_field f, g;
    int ok = 1;
    while (ok && p < end) {
        ok = sp_pb_next(&p, end, &f);
        pieces += ok && f.num == 1 && f.wt == 2;
        if (!ok || f.num != 2 || f.wt != 2) continue;
        for (const unsigned char *q = f.data; ok && q < f.data + f.len;) { /* TrainerSpec */
            ok = sp_pb_next(&q, f.data + f.len, &g);
            if (ok && g.num == 42 && g.wt == 0)
                eos = (int64_t)(int32_t)(uint32_t)g.v; /* int32: negatives as 64-bit varints */
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
