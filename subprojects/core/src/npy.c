/* .npy reader and writer: magic, version, a Python-dict header, then raw C-order data. */
#include <mt/npy.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalize */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

double mt_npy_get(const mt_npy *a, size_t i) {
    const char *p = (const char *)a->data + i * a->itemsize;
    char kind = a->descr[1];
    switch (kind) {
    case 'f':
        if (a->itemsize == 8) {
            double v;
            memcpy(&v, p, 8);
            return v;
        } else if (a->itemsize == 4) {
            float v;
            memcpy(&v, p, 4);
            return v;
        } else {
            uint16_t v;
            memcpy(&v, p, 2);
            return half_to_float(v);
        }
    case 'i': {
        int64_t v = 0;
        if (a->itemsize == 1) v = *(const int8_t *)p;
        if (a->itemsize == 2) {
            int16_t t;
            memcpy(&t, p, 2);
            v = t;
        }
        if (a->itemsize == 4) {
            int32_t t;
            memcpy(&t, p, 4);
            v = t;
        }
        if (a->itemsize == 8) memcpy(&v, p, 8);
        return (double)v;
    }
    case 'u':
    case 'b': {
        uint64_t v = 0;
        memcpy(&v, p, a->itemsize); // why: little-endian host, zero-extended
        return (double)v;
    }
    }
    return 0.0;
}

/* Finds 'key': in the header dict and returns a pointer just past the colon. */
static const char *dict_value(const char *hdr, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(hdr, pat);
    if (!p) return NULL;
    p = strchr(p + strlen(pat), ':');
    if (!p) return NULL;
    p++;
    while (*p == ' ')
        p++;
    return p;
}

mt_status mt_npy_load(const char *path, mt_npy *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    MT_REQUIRE(f, MT_ERR_IO, "cannot open %s", path);
    mt_status st = MT_OK;
    char *hdr = NULL;
    unsigned char pre[10];
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        st = MT_ERROR(MT_ERR_FORMAT, "%s: not a .npy file (bad magic)", path);
        goto done;
    }
    size_t hlen;
    if (pre[6] == 1) {
        if (fread(pre + 8, 1, 2, f) != 2) goto truncated;
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        unsigned char l[4];
        if (fread(l, 1, 4, f) != 4) goto truncated;
        hlen = (size_t)l[0] | (size_t)l[1] << 8 | (size_t)l[2] << 16 | (size_t)l[3] << 24;
    } else {
        st = MT_ERROR(MT_ERR_FORMAT, "%s: unknown .npy version %d", path, pre[6]);
        goto done;
    }
    if (hlen > (1u << 20)) {
        st = MT_ERROR(MT_ERR_FORMAT, "%s: header length %zu is absurd", path, hlen);
        goto done;
    }
    hdr = malloc(hlen + 1);
    if (!hdr || fread(hdr, 1, hlen, f) != hlen) goto truncated;
    hdr[hlen] = '\0';

    const char *d = dict_value(hdr, "descr");
    if (!d || *d != '\'') {
        st = MT_ERROR(MT_ERR_FORMAT, "%s: header has no 'descr' string", path);
        goto done;
    }
    size_t dl = strcspn(d + 1, "'");
    if (dl < 3 || dl >= sizeof out->descr) {
        st = MT_ERROR(MT_ERR_UNSUPPORTED, "%s: dtype %.*s is not a simple numeric type", path,
                      (int)dl, d + 1);
        goto done;
    }
    memcpy(out->descr, d + 1, dl);
    if (out->descr[0] == '>') {
        st = MT_ERROR(MT_ERR_UNSUPPORTED, "%s: big-endian data", path);
        goto done;
    }
    if (!strchr("fiub", out->descr[1])) {
        st = MT_ERROR(MT_ERR_UNSUPPORTED, "%s: dtype %s is not numeric", path, out->descr);
        goto done;
    }
    out->itemsize = (size_t)atoi(out->descr + 2);
    if (out->itemsize == 0 || out->itemsize > 8) {
        st = MT_ERROR(MT_ERR_FORMAT, "%s: bad item size in %s", path, out->descr);
        goto done;
    }
    const char *fo = dict_value(hdr, "fortran_order");
    if (!fo || strncmp(fo, "False", 5) != 0) {
        st = MT_ERROR(MT_ERR_UNSUPPORTED, "%s: Fortran-order arrays are not supported", path);
        goto done;
    }
    const char *sh = dict_value(hdr, "shape");
    if (!sh || *sh != '(') {
        st = MT_ERROR(MT_ERR_FORMAT, "%s: header has no shape tuple", path);
        goto done;
    }
    sh++;
    out->count = 1;
    while (*sh && *sh != ')') {
        while (*sh == ' ' || *sh == ',')
            sh++;
        if (*sh == ')') break;
        char *end;
        long long v = strtoll(sh, &end, 10);
        if (end == sh || v < 0 || out->ndim == MT_NPY_MAX_DIMS) {
            st = MT_ERROR(MT_ERR_FORMAT, "%s: bad shape in header", path);
            goto done;
        }
        out->shape[out->ndim++] = v;
        out->count *= (size_t)v;
        sh = end;
    }
    out->data = malloc(out->count * out->itemsize + 1);
    if (!out->data) {
        st = MT_ERROR(MT_ERR_OOM, "%s: %zu elements", path, out->count);
        goto done;
    }
    if (fread(out->data, out->itemsize, out->count, f) != out->count) goto truncated;
    goto done;
truncated:
    st = MT_ERROR(MT_ERR_FORMAT, "%s: file is truncated", path);
done:
    free(hdr);
    fclose(f);
    if (st != MT_OK) mt_npy_free(out);
    return st;
}

void mt_npy_free(mt_npy *a) {
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

mt_status mt_npy_save(const char *path, const char *descr, int ndim, const int64_t *shape,
                      const void *data) {
    MT_REQUIRE(ndim >= 0 && ndim <= MT_NPY_MAX_DIMS && descr && strlen(descr) >= 3,
               MT_ERR_INVALID_ARG, "bad descr or ndim %d", ndim);
    char hdr[256];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%lld,%s", (long long)shape[i],
                      i + 1 < ndim ? " " : "");
        count *= (size_t)shape[i];
    }
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "), }");
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    MT_REQUIRE(f, MT_ERR_IO, "cannot create %s", path);
    unsigned short hl = (unsigned short)(n + pad + 1);
    unsigned char pre[10] = {
        0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff), (unsigned char)(hl >> 8)
    };
    size_t itemsize = (size_t)atoi(descr + 2);
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)n, f) == (size_t)n;
    for (size_t i = 0; ok && i < pad; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && (count == 0 || fwrite(data, itemsize, count, f) == count);
    ok = (fclose(f) == 0) && ok;
    MT_REQUIRE(ok, MT_ERR_IO, "write failed: %s", path);
    return MT_OK;
}
