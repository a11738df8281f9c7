/* .npy files as tensor views. */
#include <mt/tensor.h>

#include <string.h>

static const struct {
    const char *descr;
    mt_dtype dt;
} npy_types[] = { { "<f4", MT_F32 }, { "<f2", MT_F16 }, { "<i4", MT_I32 }, { "<i8", MT_I64 },
                  { "<u2", MT_U16 }, { "|u1", MT_U8 },  { "<u1", MT_U8 } };

mt_status mt_tensor_from_npy(const mt_npy *a, mt_tensor *out) {
    for (size_t i = 0; i < sizeof npy_types / sizeof *npy_types; i++) {
        if (strcmp(a->descr, npy_types[i].descr) == 0) {
            MT_REQUIRE(a->ndim <= MT_MAX_DIMS, MT_ERR_UNSUPPORTED, "npy of %d dims", a->ndim);
            *out = mt_tensor_make(a->data, npy_types[i].dt, a->ndim, a->shape, MT_DEVICE_CPU);
            return MT_OK;
        }
    }
    return MT_ERROR(MT_ERR_UNSUPPORTED, "npy dtype %s has no tensor dtype", a->descr);
}

mt_status mt_tensor_save_npy(const char *path, const mt_tensor *t) {
    MT_TRY(mt_tensor_check(t, "t", -1));
    MT_REQUIRE(!mt_device_is_cuda(t->device), MT_ERR_INVALID_ARG, "save_npy needs a host tensor");
    static const char *descr[MT_DTYPE_COUNT] = {
        [MT_F32] = "<f4", [MT_BF16] = "<u2", [MT_F16] = "<f2", [MT_I32] = "<i4",
        [MT_I64] = "<i8", [MT_U16] = "<u2",  [MT_U8] = "|u1"
    };
    return mt_npy_save(path, descr[t->dtype], t->ndim, t->shape, t->data);
}
