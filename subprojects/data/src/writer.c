/* IndexedDatasetBuilder: tokens stream to .bin as they come; lengths, document indices and modes
 * are kept in memory and written to .idx by finalize, in megatron's exact layout. */
#include <mt/data/indexed.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mt_data_writer {
    FILE *bin;
    char *bin_path;
    mt_data_dtype dtype;
    size_t itemsize;
    int32_t *lengths;
    int8_t *modes;
    int64_t n_seq, cap_seq;
    int64_t *doc;
    int64_t n_doc, cap_doc;
    unsigned char *buf; /* conversion buffer */
    size_t buf_cap;
};

static mt_status grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return MT_OK;
    int64_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    MT_REQUIRE(q, MT_ERR_OOM, "writer: %lld entries", (long long)c);
    *p = q;
    *cap = c;
    return MT_OK;
}

mt_status mt_data_writer_create(const char *bin_path, mt_data_dtype dtype, mt_data_writer **out) {
    MT_REQUIRE(bin_path && out, MT_ERR_INVALID_ARG, "NULL path or out");
    *out = NULL;
    MT_REQUIRE(mt_data_dtype_size(dtype) > 0, MT_ERR_INVALID_ARG, "dtype code %d", (int)dtype);
    mt_data_writer *w = calloc(1, sizeof *w);
    MT_REQUIRE(w, MT_ERR_OOM, "writer");
    w->dtype = dtype;
    w->itemsize = mt_data_dtype_size(dtype);
    w->bin_path = strdup(bin_path);
    w->bin = fopen(bin_path, "wb");
    mt_status st = MT_OK;
    if (!w->bin_path || !w->bin) {
        st = w->bin_path ? MT_ERROR(MT_ERR_IO, "open %s: %s", bin_path, strerror(errno))
                         : MT_ERROR(MT_ERR_OOM, "path");
        mt_data_writer_destroy(w);
        return st;
    }
    MT_TRY_GOTO(grow((void **)&w->doc, &w->cap_doc, 1, sizeof *w->doc), st, fail);
    w->doc[w->n_doc++] = 0;
    *out = w;
    return MT_OK;
fail:
    mt_data_writer_destroy(w);
    return st;
}

void mt_data_writer_destroy(mt_data_writer *w) {
    if (!w) return;
    if (w->bin) fclose(w->bin);
    free(w->bin_path);
    free(w->lengths);
    free(w->modes);
    free(w->doc);
    free(w->buf);
    free(w);
}

/* Converts tokens to the dtype (little-endian host assumed, as numpy's tobytes). */
static mt_status write_tokens(mt_data_writer *w, const int64_t *t, int64_t n) {
    size_t bytes = (size_t)n * w->itemsize;
    if (bytes > w->buf_cap) {
        unsigned char *b = realloc(w->buf, bytes);
        MT_REQUIRE(b, MT_ERR_OOM, "writer buffer of %zu bytes", bytes);
        w->buf = b;
        w->buf_cap = bytes;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t v = t[i];
        unsigned char *p = w->buf + (size_t)i * w->itemsize;
        int ok = 1;
        switch (w->dtype) {
        case MT_DATA_U8:
            ok = v >= 0 && v <= UINT8_MAX;
            *p = (uint8_t)v;
            break;
        case MT_DATA_I8:
            ok = v >= INT8_MIN && v <= INT8_MAX;
            *(int8_t *)p = (int8_t)v;
            break;
        case MT_DATA_I16: {
            int16_t x = (int16_t)v;
            ok = v >= INT16_MIN && v <= INT16_MAX;
            memcpy(p, &x, 2);
        } break;
        case MT_DATA_U16: {
            uint16_t x = (uint16_t)v;
            ok = v >= 0 && v <= UINT16_MAX;
            memcpy(p, &x, 2);
        } break;
        case MT_DATA_I32: {
            int32_t x = (int32_t)v;
            ok = v >= INT32_MIN && v <= INT32_MAX;
            memcpy(p, &x, 4);
        } break;
        case MT_DATA_I64:
            memcpy(p, &v, 8);
            break;
        case MT_DATA_F32: {
            float x = (float)v;
            memcpy(p, &x, 4);
        } break;
        case MT_DATA_F64: {
            double x = (double)v;
            memcpy(p, &x, 8);
        } break;
        }
        MT_REQUIRE(ok, MT_ERR_INVALID_ARG, "writer: token %lld does not fit dtype code %d",
                   (long long)v, (int)w->dtype);
    }
    MT_REQUIRE(fwrite(w->buf, 1, bytes, w->bin) == bytes, MT_ERR_IO, "write %s: %s", w->bin_path,
               strerror(errno));
    return MT_OK;
}

static mt_status push_length(mt_data_writer *w, int64_t len, int8_t mode) {
    MT_REQUIRE(len >= 0 && len <= INT32_MAX, MT_ERR_INVALID_ARG,
               "writer: sequence length %lld is not an int32", (long long)len);
    int64_t cap = w->cap_seq;
    MT_TRY(grow((void **)&w->lengths, &cap, w->n_seq + 1, sizeof *w->lengths));
    cap = w->cap_seq;
    MT_TRY(grow((void **)&w->modes, &cap, w->n_seq + 1, sizeof *w->modes));
    w->cap_seq = cap;
    w->lengths[w->n_seq] = (int32_t)len;
    w->modes[w->n_seq++] = mode;
    return MT_OK;
}

mt_status mt_data_writer_add_item(mt_data_writer *w, const int64_t *tokens, int64_t n,
                                  int8_t mode) {
    MT_REQUIRE(w && (tokens || n == 0) && n >= 0, MT_ERR_INVALID_ARG, "NULL writer or tokens");
    MT_TRY(write_tokens(w, tokens, n));
    return push_length(w, n, mode);
}

mt_status mt_data_writer_end_document(mt_data_writer *w) {
    MT_REQUIRE(w, MT_ERR_INVALID_ARG, "NULL writer");
    MT_TRY(grow((void **)&w->doc, &w->cap_doc, w->n_doc + 1, sizeof *w->doc));
    w->doc[w->n_doc++] = w->n_seq;
    return MT_OK;
}

mt_status mt_data_writer_add_document(mt_data_writer *w, const int64_t *tokens,
                                      const int64_t *lengths, int64_t n_lengths) {
    MT_REQUIRE(w && (lengths || n_lengths == 0) && n_lengths >= 0, MT_ERR_INVALID_ARG,
               "NULL writer or lengths");
    int64_t total = 0;
    for (int64_t i = 0; i < n_lengths; i++) {
        MT_REQUIRE(lengths[i] >= 0, MT_ERR_INVALID_ARG, "lengths[%lld] < 0", (long long)i);
        total += lengths[i];
    }
    MT_REQUIRE(tokens || total == 0, MT_ERR_INVALID_ARG, "NULL tokens");
    MT_TRY(write_tokens(w, tokens, total));
    for (int64_t i = 0; i < n_lengths; i++)
        MT_TRY(push_length(w, lengths[i], 0));
    return mt_data_writer_end_document(w);
}

mt_status mt_data_writer_add_index(mt_data_writer *w, const char *prefix) {
    MT_REQUIRE(w && prefix, MT_ERR_INVALID_ARG, "NULL writer or prefix");
    mt_data_indexed *ds;
    MT_TRY(mt_data_indexed_open(prefix, 0, &ds));
    mt_status st = MT_OK;
    if (mt_data_indexed_dtype(ds) != w->dtype) {
        st = MT_ERROR(MT_ERR_INVALID_ARG, "add_index %s: dtype code %d != writer's %d", prefix,
                      (int)mt_data_indexed_dtype(ds), (int)w->dtype);
        goto done;
    }
    int64_t offset = w->n_seq, s = mt_data_indexed_sequence_count(ds);
    for (int64_t i = 0; i < s; i++) {
        const void *p;
        int64_t n;
        MT_TRY_GOTO(mt_data_indexed_get(ds, i, 0, -1, &p, &n), st, done);
        size_t bytes = (size_t)n * w->itemsize;
        if (fwrite(p, 1, bytes, w->bin) != bytes) {
            st = MT_ERROR(MT_ERR_IO, "write %s: %s", w->bin_path, strerror(errno));
            goto done;
        }
        MT_TRY_GOTO(push_length(w, n, 0), st, done);
    }
    int64_t d = mt_data_indexed_document_count(ds);
    MT_TRY_GOTO(grow((void **)&w->doc, &w->cap_doc, w->n_doc + d, sizeof *w->doc), st, done);
    for (int64_t k = 1; k <= d; k++)
        w->doc[w->n_doc++] = offset + mt_data_indexed_document_index(ds, k);
done:
    mt_data_indexed_close(ds);
    return st;
}

static mt_status put(FILE *f, const void *p, size_t n, const char *path) {
    MT_REQUIRE(fwrite(p, 1, n, f) == n, MT_ERR_IO, "write %s: %s", path, strerror(errno));
    return MT_OK;
}

static mt_status put_u64(FILE *f, uint64_t v, const char *path) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return put(f, b, 8, path);
}

mt_status mt_data_writer_finalize(mt_data_writer *w, const char *idx_path, int multimodal) {
    MT_REQUIRE(w && idx_path && w->bin, MT_ERR_INVALID_ARG, "NULL or finalized writer");
    int rc = fclose(w->bin);
    w->bin = NULL;
    MT_REQUIRE(rc == 0, MT_ERR_IO, "close %s: %s", w->bin_path, strerror(errno));
    FILE *f = fopen(idx_path, "wb");
    MT_REQUIRE(f, MT_ERR_IO, "open %s: %s", idx_path, strerror(errno));
    mt_status st;
    unsigned char code = (unsigned char)w->dtype;
    MT_TRY_GOTO(put(f, "MMIDIDX\x00\x00", 9, idx_path), st, fail);
    MT_TRY_GOTO(put_u64(f, 1, idx_path), st, fail);
    MT_TRY_GOTO(put(f, &code, 1, idx_path), st, fail);
    MT_TRY_GOTO(put_u64(f, (uint64_t)w->n_seq, idx_path), st, fail);
    MT_TRY_GOTO(put_u64(f, (uint64_t)w->n_doc, idx_path), st, fail);
    for (int64_t i = 0; i < w->n_seq; i++) {
        unsigned char b[4];
        uint32_t v = (uint32_t)w->lengths[i];
        for (int k = 0; k < 4; k++)
            b[k] = (unsigned char)(v >> (8 * k));
        MT_TRY_GOTO(put(f, b, 4, idx_path), st, fail);
    }
    uint64_t ptr = 0;
    for (int64_t i = 0; i < w->n_seq; i++) {
        MT_TRY_GOTO(put_u64(f, ptr, idx_path), st, fail);
        ptr += (uint64_t)w->lengths[i] * w->itemsize;
    }
    for (int64_t k = 0; k < w->n_doc; k++)
        MT_TRY_GOTO(put_u64(f, (uint64_t)w->doc[k], idx_path), st, fail);
    if (multimodal && w->n_seq) MT_TRY_GOTO(put(f, w->modes, (size_t)w->n_seq, idx_path), st, fail);
    rc = fclose(f);
    MT_REQUIRE(rc == 0, MT_ERR_IO, "close %s: %s", idx_path, strerror(errno));
    return MT_OK;
fail:
    fclose(f);
    return st;
}
