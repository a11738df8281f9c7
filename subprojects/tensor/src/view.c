/* dtypes and tensor views. */
#include <mt/tensor.h>

#include <stdio.h>
#include <strings.h>

static const struct {
    const char *name, *st;
    size_t size;
    int is_float;
} dtypes[MT_DTYPE_COUNT] = {
    [MT_F32] = { "f32", "F32", 4, 1 }, [MT_BF16] = { "bf16", "BF16", 2, 1 },
    [MT_F16] = { "f16", "F16", 2, 1 }, [MT_I32] = { "i32", "I32", 4, 0 },
    [MT_I64] = { "i64", "I64", 8, 0 }, [MT_U16] = { "u16", "U16", 2, 0 },
    [MT_U8] = { "u8", "U8", 1, 0 },
};

static int valid(mt_dtype dt) {
    return (int)dt >= 0 && dt < MT_DTYPE_COUNT;
}

size_t mt_dtype_size(mt_dtype dt) {
    return valid(dt) ? dtypes[dt].size : 0;
}

const char *mt_dtype_name(mt_dtype dt) {
    return valid(dt) ? dtypes[dt].name : "?";
}

const char *mt_dtype_st_name(mt_dtype dt) {
    return valid(dt) ? dtypes[dt].st : "?";
}

int mt_dtype_is_float(mt_dtype dt) {
    return valid(dt) && dtypes[dt].is_float;
}

mt_status mt_dtype_parse(const char *name, mt_dtype *out) {
    for (int i = 0; i < MT_DTYPE_COUNT; i++) {
        if (strcasecmp(name, dtypes[i].name) == 0 || strcasecmp(name, dtypes[i].st) == 0) {
            *out = (mt_dtype)i;
            return MT_OK;
        }
    }
    return MT_ERROR(MT_ERR_UNSUPPORTED, "dtype '%s' is not supported", name);
}

mt_tensor mt_tensor_make(void *data, mt_dtype dtype, int ndim, const int64_t *shape,
                         mt_device device) {
    mt_tensor t;
    memset(&t, 0, sizeof t);
    MT_ASSERT(ndim >= 0 && ndim <= MT_MAX_DIMS);
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    t.device = device;
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.stride[i] = s;
        s *= shape[i];
    }
    return t;
}

mt_tensor mt_tensor_1d(void *data, mt_dtype dt, int64_t d0, mt_device dev) {
    return mt_tensor_make(data, dt, 1, (int64_t[]){ d0 }, dev);
}
mt_tensor mt_tensor_2d(void *data, mt_dtype dt, int64_t d0, int64_t d1, mt_device dev) {
    return mt_tensor_make(data, dt, 2, (int64_t[]){ d0, d1 }, dev);
}
mt_tensor mt_tensor_3d(void *data, mt_dtype dt, int64_t d0, int64_t d1, int64_t d2, mt_device dev) {
    return mt_tensor_make(data, dt, 3, (int64_t[]){ d0, d1, d2 }, dev);
}
mt_tensor mt_tensor_4d(void *data, mt_dtype dt, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                       mt_device dev) {
    return mt_tensor_make(data, dt, 4, (int64_t[]){ d0, d1, d2, d3 }, dev);
}

int64_t mt_tensor_numel(const mt_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

size_t mt_tensor_nbytes(const mt_tensor *t) {
    return (size_t)mt_tensor_numel(t) * mt_dtype_size(t->dtype);
}

int mt_tensor_is_contiguous(const mt_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return 0;
        s *= t->shape[i];
    }
    return 1;
}

int mt_tensor_same_shape(const mt_tensor *a, const mt_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

const char *mt_tensor_str(const mt_tensor *t, char *buf, size_t len) {
    int n = snprintf(buf, len, "%s[", mt_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim && n < (int)len; i++)
        n += snprintf(buf + n, len - (size_t)n, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    if (n < (int)len)
        snprintf(buf + n, len - (size_t)n, "]@%s:%d", mt_device_is_cuda(t->device) ? "cuda" : "cpu",
                 t->device.index);
    return buf;
}

mt_status mt_tensor_reshape(const mt_tensor *t, int ndim, const int64_t *shape, mt_tensor *out) {
    MT_REQUIRE(mt_tensor_is_contiguous(t), MT_ERR_INVALID_ARG, "reshape of a strided tensor");
    MT_REQUIRE(ndim >= 0 && ndim <= MT_MAX_DIMS, MT_ERR_INVALID_ARG, "ndim %d", ndim);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    MT_REQUIRE(n == mt_tensor_numel(t), MT_ERR_INVALID_ARG, "reshape from %lld to %lld elements",
               (long long)mt_tensor_numel(t), (long long)n);
    *out = mt_tensor_make(t->data, t->dtype, ndim, shape, t->device);
    return MT_OK;
}

mt_status mt_tensor_slice(const mt_tensor *t, int dim, int64_t start, int64_t len, mt_tensor *out) {
    MT_REQUIRE(dim >= 0 && dim < t->ndim, MT_ERR_INVALID_ARG, "slice dim %d of a %d-d tensor", dim,
               t->ndim);
    MT_REQUIRE(start >= 0 && len >= 0 && start + len <= t->shape[dim], MT_ERR_INVALID_ARG,
               "slice [%lld, %lld) of a dim of size %lld", (long long)start,
               (long long)(start + len), (long long)t->shape[dim]);
    mt_tensor r = *t;
    r.data = (char *)t->data + (size_t)(start * t->stride[dim]) * mt_dtype_size(t->dtype);
    r.shape[dim] = len;
    *out = r;
    return MT_OK;
}

mt_status mt_tensor_alloc(mt_arena *a, mt_dtype dtype, int ndim, const int64_t *shape,
                          mt_tensor *out) {
    MT_REQUIRE(mt_dtype_size(dtype) > 0, MT_ERR_INVALID_ARG, "invalid dtype %d", (int)dtype);
    MT_REQUIRE(ndim >= 0 && ndim <= MT_MAX_DIMS, MT_ERR_INVALID_ARG, "ndim %d", ndim);
    mt_tensor t = mt_tensor_make(NULL, dtype, ndim, shape, mt_arena_device(a));
    MT_TRY(mt_arena_alloc(a, mt_tensor_nbytes(&t), &t.data));
    *out = t;
    return MT_OK;
}

mt_status mt_tensor_copy(mt_tensor *dst, const mt_tensor *src, mt_stream s) {
    MT_TRY(mt_tensor_check(dst, "dst", -1));
    MT_TRY(mt_tensor_check(src, "src", -1));
    MT_REQUIRE(dst->dtype == src->dtype && mt_tensor_numel(dst) == mt_tensor_numel(src),
               MT_ERR_INVALID_ARG, "copy %s[%lld] into %s[%lld]", mt_dtype_name(src->dtype),
               (long long)mt_tensor_numel(src), mt_dtype_name(dst->dtype),
               (long long)mt_tensor_numel(dst));
    return mt_memcpy(dst->data, dst->device, src->data, src->device, mt_tensor_nbytes(src), s);
}

mt_status mt_tensor_check(const mt_tensor *t, const char *what, int ndim) {
    MT_REQUIRE(t, MT_ERR_INVALID_ARG, "%s is NULL", what);
    MT_REQUIRE(mt_dtype_size(t->dtype) > 0, MT_ERR_INVALID_ARG, "%s has an invalid dtype", what);
    MT_REQUIRE(ndim < 0 || t->ndim == ndim, MT_ERR_INVALID_ARG, "%s is %d-d, expected %d-d", what,
               t->ndim, ndim);
    MT_REQUIRE(t->data || mt_tensor_numel(t) == 0, MT_ERR_INVALID_ARG, "%s has no data", what);
    MT_REQUIRE(mt_tensor_is_contiguous(t), MT_ERR_INVALID_ARG, "%s is not contiguous", what);
    return MT_OK;
}
