/* safetensors reader (mmap) and writer, strict about the spec: 8-byte little-endian header length,
 * a JSON object of {dtype, shape, data_offsets} entries and an optional __metadata__ string map,
 * offsets that tile the data buffer exactly. */
#include <mt/tensor.h>

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER 100000000ull

typedef struct st_entry {
    char *name;
    char dtype_str[16];
    int dtype; /* mt_dtype, or -1 for a valid safetensors dtype we do not handle */
    int ndim;
    int64_t shape[MT_MAX_DIMS];
    uint64_t begin, end; /* relative to the data buffer */
} st_entry;

struct mt_safetensors {
    const unsigned char *base; /* the whole file */
    size_t len;
    int mapped;
    uint64_t data_start;
    int n;
    st_entry *e;
    json_t *meta; /* __metadata__ object or NULL */
};

static const struct {
    const char *name;
    int bits;
} st_types[] = {
    { "BOOL", 8 },    { "U8", 8 },          { "I8", 8 },          { "I16", 16 },
    { "U16", 16 },    { "F16", 16 },        { "BF16", 16 },       { "I32", 32 },
    { "U32", 32 },    { "F32", 32 },        { "F64", 64 },        { "I64", 64 },
    { "U64", 64 },    { "C64", 64 },        { "F8_E4M3", 8 },     { "F8_E5M2", 8 },
    { "F8_E8M0", 8 }, { "F8_E4M3FNUZ", 8 }, { "F8_E5M2FNUZ", 8 }, { "F4", 4 },
    { "F6_E2M3", 6 }, { "F6_E3M2", 6 },
};

static int st_bits(const char *name) {
    for (size_t i = 0; i < sizeof st_types / sizeof *st_types; i++)
        if (strcmp(name, st_types[i].name) == 0) return st_types[i].bits;
    return 0;
}

static int by_begin(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end < y->end ? -1 : 1);
}

static mt_status parse_entry(const char *name, json_t *v, st_entry *e) {
    MT_REQUIRE(json_is_object(v), MT_ERR_FORMAT, "safetensors: entry '%s' is not an object", name);
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    MT_REQUIRE(json_is_string(dt), MT_ERR_FORMAT, "safetensors: '%s' has no dtype string", name);
    MT_REQUIRE(json_is_array(shape), MT_ERR_FORMAT, "safetensors: '%s' has no shape array", name);
    MT_REQUIRE(json_is_array(off) && json_array_size(off) == 2, MT_ERR_FORMAT,
               "safetensors: '%s' data_offsets is not [begin, end]", name);
    MT_REQUIRE(json_object_size(v) == 3, MT_ERR_FORMAT,
               "safetensors: '%s' has keys other than dtype, shape, data_offsets", name);
    const char *ds = json_string_value(dt);
    int bits = st_bits(ds);
    MT_REQUIRE(bits > 0, MT_ERR_FORMAT, "safetensors: '%s' has unknown dtype '%s'", name, ds);
    snprintf(e->dtype_str, sizeof e->dtype_str, "%s", ds);
    mt_dtype mdt;
    e->dtype = mt_dtype_parse(ds, &mdt) == MT_OK ? (int)mdt : -1;
    mt_error_clear();
    MT_REQUIRE(json_array_size(shape) <= MT_MAX_DIMS, MT_ERR_UNSUPPORTED,
               "safetensors: '%s' has %zu dims (max %d)", name, json_array_size(shape),
               MT_MAX_DIMS);
    e->ndim = (int)json_array_size(shape);
    uint64_t numel = 1;
    for (int d = 0; d < e->ndim; d++) {
        json_t *s = json_array_get(shape, (size_t)d);
        MT_REQUIRE(json_is_integer(s) && json_integer_value(s) >= 0, MT_ERR_FORMAT,
                   "safetensors: '%s' shape[%d] is not a non-negative integer", name, d);
        e->shape[d] = json_integer_value(s);
        MT_REQUIRE(e->shape[d] == 0 || numel <= UINT64_MAX / 8 / (uint64_t)e->shape[d],
                   MT_ERR_FORMAT, "safetensors: '%s' shape overflows", name);
        numel *= (uint64_t)e->shape[d];
    }
    json_t *b = json_array_get(off, 0), *en = json_array_get(off, 1);
    MT_REQUIRE(json_is_integer(b) && json_is_integer(en) && json_integer_value(b) >= 0 &&
                   json_integer_value(en) >= json_integer_value(b),
               MT_ERR_FORMAT, "safetensors: '%s' data_offsets are not 0 <= begin <= end", name);
    e->begin = (uint64_t)json_integer_value(b);
    e->end = (uint64_t)json_integer_value(en);
    MT_REQUIRE((numel * (uint64_t)bits) % 8 == 0, MT_ERR_FORMAT,
               "safetensors: '%s' (%s) does not end on a byte boundary", name, ds);
    MT_REQUIRE(e->end - e->begin == numel * (uint64_t)bits / 8, MT_ERR_FORMAT,
               "safetensors: '%s' spans %llu bytes but %s%s needs %llu", name,
               (unsigned long long)(e->end - e->begin), ds, "",
               (unsigned long long)(numel * (uint64_t)bits / 8));
    e->name = strdup(name);
    MT_REQUIRE(e->name, MT_ERR_OOM, "name");
    return MT_OK;
}

mt_status mt_safetensors_parse(const void *buf, size_t len, mt_safetensors **out) {
    MT_REQUIRE(buf && out, MT_ERR_INVALID_ARG, "NULL buffer or out");
    *out = NULL;
    const unsigned char *p = buf;
    MT_REQUIRE(len >= 8, MT_ERR_FORMAT,
               "safetensors: %zu bytes is shorter than the 8-byte header "
               "length",
               len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | p[i];
    MT_REQUIRE(hlen <= ST_MAX_HEADER, MT_ERR_FORMAT, "safetensors: header length %llu exceeds %llu",
               (unsigned long long)hlen, ST_MAX_HEADER);
    MT_REQUIRE(hlen <= len - 8, MT_ERR_FORMAT,
               "safetensors: truncated: header length %llu but only %zu bytes follow",
               (unsigned long long)hlen, len - 8);
    MT_REQUIRE(hlen >= 2 && p[8] == '{', MT_ERR_FORMAT,
               "safetensors: header does not start with '{'");
    json_error_t jerr;
    json_t *root = json_loadb((const char *)p + 8, hlen, JSON_REJECT_DUPLICATES, &jerr);
    MT_REQUIRE(root, MT_ERR_FORMAT, "safetensors: bad header JSON at column %d: %s", jerr.column,
               jerr.text);
    mt_status st = MT_OK;
    mt_safetensors *f = calloc(1, sizeof *f);
    if (!f || !json_is_object(root)) {
        st = f ? MT_ERROR(MT_ERR_FORMAT, "safetensors: header is not a JSON object")
               : MT_ERROR(MT_ERR_OOM, "handle");
        goto fail;
    }
    f->base = p;
    f->len = len;
    f->data_start = 8 + hlen;
    size_t cap = json_object_size(root);
    f->e = calloc(cap ? cap : 1, sizeof *f->e);
    if (!f->e) {
        st = MT_ERROR(MT_ERR_OOM, "entries");
        goto fail;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val)) {
                st = MT_ERROR(MT_ERR_FORMAT, "safetensors: __metadata__ is not an object");
                goto fail;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    st = MT_ERROR(MT_ERR_FORMAT, "safetensors: __metadata__['%s'] is not a string",
                                  mk);
                    goto fail;
                }
            }
            f->meta = json_incref(val);
            continue;
        }
        MT_TRY_GOTO(parse_entry(key, val, &f->e[f->n]), st, fail);
        f->n++;
    }
    /* The entries must tile the data buffer: sorted by offset, no gap, no overlap. */
    qsort(f->e, (size_t)f->n, sizeof *f->e, by_begin);
    uint64_t data_len = len - f->data_start, pos = 0;
    for (int i = 0; i < f->n; i++) {
        if (f->e[i].begin != pos) {
            st = MT_ERROR(MT_ERR_FORMAT, "safetensors: '%s' starts at %llu, expected %llu (%s)",
                          f->e[i].name, (unsigned long long)f->e[i].begin, (unsigned long long)pos,
                          f->e[i].begin < pos ? "overlap" : "gap");
            goto fail;
        }
        pos = f->e[i].end;
    }
    if (pos != data_len) {
        st = MT_ERROR(MT_ERR_FORMAT,
                      "safetensors: tensors end at byte %llu but the data is %llu "
                      "bytes (%s)",
                      (unsigned long long)pos, (unsigned long long)data_len,
                      pos > data_len ? "truncated" : "trailing bytes");
        goto fail;
    }
    json_decref(root);
    *out = f;
    return MT_OK;
fail:
    json_decref(root);
    mt_safetensors_close(f);
    return st;
}

mt_status mt_safetensors_open(const char *path, mt_safetensors **out) {
    MT_REQUIRE(path && out, MT_ERR_INVALID_ARG, "NULL path or out");
    *out = NULL;
    int fd = open(path, O_RDONLY);
    MT_REQUIRE(fd >= 0, MT_ERR_IO, "cannot open %s", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return MT_ERROR(MT_ERR_IO, "cannot stat %s", path);
    }
    size_t len = (size_t)sb.st_size;
    void *m = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    MT_REQUIRE(!len || m != MAP_FAILED, MT_ERR_IO, "cannot map %s", path);
    static const unsigned char empty[1];
    mt_status st = mt_safetensors_parse(len ? m : empty, len, out);
    if (st != MT_OK) {
        if (len) munmap(m, len);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", mt_last_error());
        return MT_ERROR(st, "%s: %s", path, msg);
    }
    (*out)->mapped = len > 0;
    return MT_OK;
}

void mt_safetensors_close(mt_safetensors *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++)
        free(f->e[i].name);
    free(f->e);
    json_decref(f->meta);
    if (f->mapped) munmap((void *)f->base, f->len);
    free(f);
}

int mt_safetensors_count(const mt_safetensors *f) {
    return f->n;
}

const char *mt_safetensors_name(const mt_safetensors *f, int i) {
    return i >= 0 && i < f->n ? f->e[i].name : NULL;
}

static const st_entry *find(const mt_safetensors *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->e[i].name, name) == 0) return &f->e[i];
    return NULL;
}

mt_status mt_safetensors_get(const mt_safetensors *f, const char *name, mt_tensor *out) {
    const st_entry *e = find(f, name);
    MT_REQUIRE(e, MT_ERR_INVALID_ARG, "safetensors: no tensor '%s'", name);
    MT_REQUIRE(e->dtype >= 0, MT_ERR_UNSUPPORTED, "safetensors: '%s' has dtype %s", name,
               e->dtype_str);
    *out = mt_tensor_make((void *)(f->base + f->data_start + e->begin), (mt_dtype)e->dtype, e->ndim,
                          e->shape, MT_DEVICE_CPU);
    return MT_OK;
}

mt_status mt_safetensors_extent(const mt_safetensors *f, const char *name, uint64_t *offset,
                                uint64_t *nbytes) {
    const st_entry *e = find(f, name);
    MT_REQUIRE(e, MT_ERR_INVALID_ARG, "safetensors: no tensor '%s'", name);
    *offset = f->data_start + e->begin;
    *nbytes = e->end - e->begin;
    return MT_OK;
}

const char *mt_safetensors_metadata(const mt_safetensors *f, const char *key) {
    return f->meta ? json_string_value(json_object_get(f->meta, key)) : NULL;
}

/* Write order: element size descending, then name (the sort key carries what it compares:
 * several threads may save at once, so no file-scope context). */
typedef struct st_order {
    size_t esize;
    const char *name;
    int idx;
} st_order;
static int by_size_then_name(const void *a, const void *b) {
    const st_order *x = a, *y = b;
    if (x->esize != y->esize) return x->esize > y->esize ? -1 : 1;
    return strcmp(x->name, y->name);
}

mt_status mt_safetensors_save(const char *path, const mt_safetensors_item *items, int n,
                              const char *const *meta, int n_meta) {
    MT_REQUIRE(path && (n == 0 || items) && n >= 0 && n_meta >= 0, MT_ERR_INVALID_ARG,
               "bad arguments");
    st_order *order = malloc(sizeof *order * (size_t)(n ? n : 1));
    MT_REQUIRE(order, MT_ERR_OOM, "order");
    for (int i = 0; i < n; i++) {
        const mt_tensor *t = items[i].tensor;
        mt_status st = mt_tensor_check(t, items[i].name ? items[i].name : "tensor", -1);
        if (st == MT_OK && (!items[i].name || strcmp(items[i].name, "__metadata__") == 0))
            st = MT_ERROR(MT_ERR_INVALID_ARG, "item %d has a reserved or NULL name", i);
        if (st == MT_OK && mt_device_is_cuda(t->device))
            st = MT_ERROR(MT_ERR_INVALID_ARG, "'%s' is on the GPU; copy it to the host first",
                          items[i].name);
        if (st != MT_OK) {
            free(order);
            return st;
        }
        order[i] = (st_order){ mt_dtype_size(t->dtype), items[i].name, i };
    }
    qsort(order, (size_t)n, sizeof *order, by_size_then_name);
    json_t *root = json_object();
    mt_status st = MT_OK;
    if (n_meta > 0) {
        json_t *m = json_object();
        for (int k = 0; k < n_meta; k++)
            json_object_set_new(m, meta[2 * k], json_string(meta[2 * k + 1]));
        json_object_set_new(root, "__metadata__", m);
    }
    uint64_t off = 0;
    for (int j = 0; j < n; j++) {
        const mt_safetensors_item *it = &items[order[j].idx];
        if (json_object_get(root, it->name)) {
            st = MT_ERROR(MT_ERR_INVALID_ARG, "duplicate tensor name '%s'", it->name);
            break;
        }
        json_t *e = json_object(), *shape = json_array();
        for (int d = 0; d < it->tensor->ndim; d++)
            json_array_append_new(shape, json_integer(it->tensor->shape[d]));
        uint64_t nb = mt_tensor_nbytes(it->tensor);
        json_object_set_new(e, "dtype", json_string(mt_dtype_st_name(it->tensor->dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets",
                            json_pack("[II]", (json_int_t)off, (json_int_t)(off + nb)));
        json_object_set_new(root, it->name, e);
        off += nb;
    }
    char *hdr = st == MT_OK ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (st != MT_OK || !hdr) {
        free(order);
        return st != MT_OK ? st : MT_ERROR(MT_ERR_OOM, "header");
    }
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        free(hdr);
        free(order);
        return MT_ERROR(MT_ERR_IO, "cannot create %s", path);
    }
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int ok = fwrite(lenb, 1, 8, fp) == 8 && fwrite(hdr, 1, hl, fp) == hl;
    for (size_t i = hl; ok && i < padded; i++)
        ok = fputc(' ', fp) != EOF;
    for (int j = 0; ok && j < n; j++) {
        const mt_tensor *t = items[order[j].idx].tensor;
        size_t nb = mt_tensor_nbytes(t);
        ok = nb == 0 || fwrite(t->data, 1, nb, fp) == nb;
    }
    ok = (fclose(fp) == 0) && ok;
    free(hdr);
    free(order);
    MT_REQUIRE(ok, MT_ERR_IO, "write failed: %s", path);
    return MT_OK;
}
