/* MMIDIDX reader over mmap: the whole index is validated at open so that no later access reads
 * outside either file. Arrays in .idx are unaligned (they start at byte 34), so they are read with
 * memcpy; .bin slices are returned in place. */
#include <mt/data/indexed.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define IDX_MAGIC     "MMIDIDX\x00\x00"
#define IDX_MAGIC_LEN 9
#define IDX_HEADER    34

struct mt_data_indexed {
    const unsigned char *idx, *bin;
    size_t idx_len, bin_len;
    int mapped; /* 1: idx and bin are our mappings */
    mt_data_dtype dtype;
    size_t itemsize;
    int64_t n_seq, n_doc_idx;                              /* S, D */
    const unsigned char *lengths, *pointers, *doc, *modes; /* into idx; modes may be NULL */
};

size_t mt_data_dtype_size(int code) {
    static const size_t sizes[] = { 0, 1, 1, 2, 4, 8, 8, 4, 2 };
    return code >= 1 && code <= 8 ? sizes[code] : 0;
}

mt_data_dtype mt_data_dtype_optimal(int64_t vocab_size) {
    return vocab_size < 65500 ? MT_DATA_U16 : MT_DATA_I32;
}

static uint64_t rd_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int32_t rd_i32(const unsigned char *p) {
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return (int32_t)v;
}

int32_t mt_data_indexed_sequence_length(const mt_data_indexed *ds, int64_t i) {
    return rd_i32(ds->lengths + 4 * i);
}

int64_t mt_data_indexed_sequence_pointer(const mt_data_indexed *ds, int64_t i) {
    return (int64_t)rd_u64(ds->pointers + 8 * i);
}

int64_t mt_data_indexed_document_index(const mt_data_indexed *ds, int64_t k) {
    return (int64_t)rd_u64(ds->doc + 8 * k);
}

int8_t mt_data_indexed_mode(const mt_data_indexed *ds, int64_t i) {
    return ds->modes ? (int8_t)ds->modes[i] : 0;
}

mt_data_dtype mt_data_indexed_dtype(const mt_data_indexed *ds) {
    return ds->dtype;
}

int64_t mt_data_indexed_sequence_count(const mt_data_indexed *ds) {
    return ds->n_seq;
}

int64_t mt_data_indexed_document_count(const mt_data_indexed *ds) {
    return ds->n_doc_idx - 1;
}

static mt_status validate(mt_data_indexed *ds, int multimodal) {
    const unsigned char *p = ds->idx;
    size_t len = ds->idx_len;
    MT_REQUIRE(len >= IDX_HEADER, MT_ERR_FORMAT,
               "indexed: .idx header: %zu bytes is shorter than the 34-byte header", len);
    MT_REQUIRE(memcmp(p, IDX_MAGIC, IDX_MAGIC_LEN) == 0, MT_ERR_FORMAT,
               "indexed: .idx magic is not MMIDIDX");
    uint64_t version = rd_u64(p + 9);
    MT_REQUIRE(version == 1, MT_ERR_FORMAT, "indexed: .idx version is %llu (want 1)",
               (unsigned long long)version);
    int code = p[17];
    ds->itemsize = mt_data_dtype_size(code);
    MT_REQUIRE(ds->itemsize > 0, MT_ERR_FORMAT, "indexed: .idx dtype code %d is not 1..8", code);
    ds->dtype = (mt_data_dtype)code;
    uint64_t s = rd_u64(p + 18), d = rd_u64(p + 26);
    /* why: bound S and D by the file size before any multiplication can overflow */
    MT_REQUIRE(s <= len / 12, MT_ERR_FORMAT,
               "indexed: .idx sequence_count %llu does not fit in %zu bytes", (unsigned long long)s,
               len);
    MT_REQUIRE(d >= 1 && d <= len / 8, MT_ERR_FORMAT,
               "indexed: .idx document_count %llu is 0 or does not fit in %zu bytes",
               (unsigned long long)d, len);
    uint64_t need = IDX_HEADER + 12 * s + 8 * d + (multimodal ? s : 0);
    MT_REQUIRE(len >= need, MT_ERR_FORMAT,
               "indexed: .idx truncated: sequence_count %llu and document_count %llu need %llu "
               "bytes, file has %zu",
               (unsigned long long)s, (unsigned long long)d, (unsigned long long)need, len);
    MT_REQUIRE(len == need || (!multimodal && len == need + s), MT_ERR_FORMAT,
               "indexed: .idx has %zu trailing bytes after document_indices", len - (size_t)need);
    ds->n_seq = (int64_t)s;
    ds->n_doc_idx = (int64_t)d;
    ds->lengths = p + IDX_HEADER;
    ds->pointers = ds->lengths + 4 * s;
    ds->doc = ds->pointers + 8 * s;
    ds->modes = multimodal ? ds->doc + 8 * d : NULL;

    for (int64_t i = 0; i < ds->n_seq; i++) {
        int32_t l = mt_data_indexed_sequence_length(ds, i);
        uint64_t ptr = rd_u64(ds->pointers + 8 * i);
        MT_REQUIRE(l >= 0, MT_ERR_FORMAT, "indexed: .idx sequence_lengths[%lld] = %d is negative",
                   (long long)i, l);
        MT_REQUIRE(ptr % ds->itemsize == 0 && ptr <= ds->bin_len &&
                       (uint64_t)l * ds->itemsize <= ds->bin_len - ptr,
                   MT_ERR_FORMAT,
                   "indexed: .idx sequence_pointers[%lld] = %llu (+%d items) is misaligned or "
                   "past the %zu-byte .bin",
                   (long long)i, (unsigned long long)ptr, l, ds->bin_len);
    }
    MT_REQUIRE(mt_data_indexed_document_index(ds, 0) == 0, MT_ERR_FORMAT,
               "indexed: .idx document_indices[0] = %lld (want 0)",
               (long long)mt_data_indexed_document_index(ds, 0));
    for (int64_t k = 1; k < ds->n_doc_idx; k++) {
        uint64_t a = rd_u64(ds->doc + 8 * (k - 1)), b = rd_u64(ds->doc + 8 * k);
        MT_REQUIRE(a <= b && b <= s, MT_ERR_FORMAT,
                   "indexed: .idx document_indices[%lld] = %lld is decreasing or past "
                   "sequence_count %llu",
                   (long long)k, (long long)b, (unsigned long long)s);
    }
    MT_REQUIRE((uint64_t)mt_data_indexed_document_index(ds, d - 1) == s, MT_ERR_FORMAT,
               "indexed: .idx document_indices[-1] = %lld != sequence_count %llu",
               (long long)mt_data_indexed_document_index(ds, d - 1), (unsigned long long)s);
    return MT_OK;
}

mt_status mt_data_indexed_from_memory(const void *idx, size_t idx_len, const void *bin,
                                      size_t bin_len, int multimodal, mt_data_indexed **out) {
    MT_REQUIRE(out && (idx || !idx_len) && (bin || !bin_len), MT_ERR_INVALID_ARG,
               "NULL buffer or out");
    *out = NULL;
    mt_data_indexed *ds = calloc(1, sizeof *ds);
    MT_REQUIRE(ds, MT_ERR_OOM, "indexed handle");
    ds->idx = idx;
    ds->idx_len = idx_len;
    ds->bin = bin;
    ds->bin_len = bin_len;
    mt_status st = validate(ds, multimodal);
    if (st != MT_OK) {
        free(ds);
        return st;
    }
    *out = ds;
    return MT_OK;
}

static mt_status map_file(const char *path, const unsigned char **base, size_t *len) {
    int fd = open(path, O_RDONLY);
    MT_REQUIRE(fd >= 0, MT_ERR_IO, "open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return MT_ERROR(MT_ERR_IO, "stat %s: %s", path, strerror(errno));
    }
    *len = (size_t)sb.st_size;
    *base = NULL;
    if (*len > 0) {
        void *m = mmap(NULL, *len, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            close(fd);
            return MT_ERROR(MT_ERR_IO, "mmap %s: %s", path, strerror(errno));
        }
        *base = m;
    }
    close(fd);
    return MT_OK;
}

mt_status mt_data_indexed_open(const char *prefix, int multimodal, mt_data_indexed **out) {
    MT_REQUIRE(prefix && out, MT_ERR_INVALID_ARG, "NULL prefix or out");
    *out = NULL;
    size_t n = strlen(prefix) + 5;
    char *path = malloc(n);
    MT_REQUIRE(path, MT_ERR_OOM, "path");
    const unsigned char *idx = NULL, *bin = NULL;
    size_t idx_len = 0, bin_len = 0;
    mt_status st;
    snprintf(path, n, "%s.idx", prefix);
    MT_TRY_GOTO(map_file(path, &idx, &idx_len), st, fail);
    snprintf(path, n, "%s.bin", prefix);
    MT_TRY_GOTO(map_file(path, &bin, &bin_len), st, fail);
    MT_TRY_GOTO(mt_data_indexed_from_memory(idx, idx_len, bin, bin_len, multimodal, out), st, fail);
    (*out)->mapped = 1;
    free(path);
    return MT_OK;
fail:
    if (st == MT_ERR_FORMAT) {
        char msg[512]; /* why: mt_last_error() is the buffer MT_ERROR writes into */
        snprintf(msg, sizeof msg, "%s", mt_last_error());
        MT_ERROR(st, "%s (in %s)", msg, prefix);
    }
    if (idx) munmap((void *)idx, idx_len);
    if (bin) munmap((void *)bin, bin_len);
    free(path);
    return st;
}

void mt_data_indexed_close(mt_data_indexed *ds) {
    if (!ds) return;
    if (ds->mapped) {
        if (ds->idx) munmap((void *)ds->idx, ds->idx_len);
        if (ds->bin) munmap((void *)ds->bin, ds->bin_len);
    }
    free(ds);
}

mt_status mt_data_indexed_get(const mt_data_indexed *ds, int64_t i, int64_t offset, int64_t length,
                              const void **tokens, int64_t *n) {
    MT_REQUIRE(ds && tokens && n, MT_ERR_INVALID_ARG, "NULL dataset or out");
    MT_REQUIRE(i >= 0 && i < ds->n_seq, MT_ERR_INVALID_ARG, "sequence %lld not in [0, %lld)",
               (long long)i, (long long)ds->n_seq);
    int64_t l = mt_data_indexed_sequence_length(ds, i);
    if (length < 0) length = l - offset;
    MT_REQUIRE(offset >= 0 && length >= 0 && offset <= l && length <= l - offset,
               MT_ERR_INVALID_ARG, "slice [%lld, +%lld) of sequence %lld (length %lld)",
               (long long)offset, (long long)length, (long long)i, (long long)l);
    *tokens = ds->bin + mt_data_indexed_sequence_pointer(ds, i) + offset * (int64_t)ds->itemsize;
    *n = length;
    return MT_OK;
}

static int64_t f64_to_i64(double v) {
    return v > -9.2e18 && v < 9.2e18 ? (int64_t)v : 0; /* NaN and huge: 0, never UB */
}

mt_status mt_data_indexed_get_i64(const mt_data_indexed *ds, int64_t i, int64_t offset,
                                  int64_t length, int64_t *out, int64_t *n) {
    const void *p;
    MT_TRY(mt_data_indexed_get(ds, i, offset, length, &p, n));
    for (int64_t k = 0; k < *n; k++) {
        switch (ds->dtype) {
        case MT_DATA_U8:
            out[k] = ((const uint8_t *)p)[k];
            break;
        case MT_DATA_I8:
            out[k] = ((const int8_t *)p)[k];
            break;
        case MT_DATA_I16:
            out[k] = ((const int16_t *)p)[k];
            break;
        case MT_DATA_I32:
            out[k] = ((const int32_t *)p)[k];
            break;
        case MT_DATA_I64:
            out[k] = ((const int64_t *)p)[k];
            break;
        case MT_DATA_F64:
            out[k] = f64_to_i64(((const double *)p)[k]);
            break;
        case MT_DATA_F32:
            out[k] = f64_to_i64(((const float *)p)[k]);
            break;
        case MT_DATA_U16:
            out[k] = ((const uint16_t *)p)[k];
            break;
        }
    }
    return MT_OK;
}
