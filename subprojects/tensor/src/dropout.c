/* Dropout: validation and device dispatch. */
#include "ops_impl.h"

mt_status mt_dropout_check(const mt_dropout_config *cfg, mt_device device) {
    MT_REQUIRE(cfg, MT_ERR_INVALID_ARG, "dropout config is NULL");
    MT_REQUIRE(cfg->p >= 0.0f && cfg->p < 1.0f, MT_ERR_INVALID_ARG,
               "dropout probability %g is outside [0, 1)", (double)cfg->p);
    if (cfg->p == 0.0f) return MT_OK;
    const mt_tensor *sm = cfg->sample;
    MT_REQUIRE(sm && sm->data && sm->dtype == MT_I64 && sm->ndim == 1 && sm->shape[0] > 0 &&
                   mt_tensor_is_contiguous(sm) && mt_device_eq(sm->device, device),
               MT_ERR_INVALID_ARG,
               "dropout needs sample ids: contiguous (B) i64, B > 0, on the data's device");
    return MT_OK;
}

mt_status mt_dropout(mt_tensor *out, const mt_tensor *x, const mt_tensor *resid,
                     const mt_dropout_config *cfg, mt_stream stream) {
    MT_TRY(mt_tensor_check(out, "out", -1));
    MT_TRY(mt_tensor_check(x, "x", -1));
    MT_REQUIRE(mt_dtype_is_float(x->dtype), MT_ERR_UNSUPPORTED, "x: dtype %s is not a float type",
               mt_dtype_name(x->dtype));
    const mt_tensor *t[2] = { out, resid };
    const char *names[2] = { "out", "resid" };
    for (int i = 0; i < 2; i++) {
        if (!t[i]) continue;
        MT_TRY(mt_tensor_check(t[i], names[i], -1));
        MT_REQUIRE(mt_tensor_numel(t[i]) == mt_tensor_numel(x) && t[i]->dtype == x->dtype &&
                       mt_device_eq(t[i]->device, x->device) && mt_tensor_is_contiguous(t[i]),
                   MT_ERR_INVALID_ARG,
                   "%s must be contiguous with x's %lld elements, dtype %s and device", names[i],
                   (long long)mt_tensor_numel(x), mt_dtype_name(x->dtype));
    }
    MT_REQUIRE(mt_tensor_is_contiguous(x), MT_ERR_INVALID_ARG, "x must be contiguous");
    MT_TRY(mt_dropout_check(cfg, x->device));
    const mt_tensor *sm = cfg->sample;
    const int64_t n = mt_tensor_numel(x);
    MT_REQUIRE(cfg->offset >= 0 && cfg->row >= 0 && (cfg->row > 0 || cfg->offset == 0),
               MT_ERR_INVALID_ARG, "dropout window: offset %lld, row %lld (a window needs row > 0)",
               (long long)cfg->offset, (long long)cfg->row);
    if (cfg->p > 0.0f && !cfg->row)
        MT_REQUIRE(n % sm->shape[0] == 0, MT_ERR_INVALID_ARG,
                   "x's %lld elements are not %lld equal rows (one per sample id)", (long long)n,
                   (long long)sm->shape[0]);
    if (cfg->p > 0.0f && cfg->row)
        MT_REQUIRE(cfg->offset + n <= sm->shape[0] * cfg->row, MT_ERR_INVALID_ARG,
                   "dropout window [%lld, +%lld) past the %lld x %lld elements of the sample ids' "
                   "rows",
                   (long long)cfg->offset, (long long)n, (long long)sm->shape[0],
                   (long long)cfg->row);
    if (mt_tensor_numel(x) == 0) return MT_OK;
    return MT_DISPATCH(x->device, dropout_cpu(out, x, resid, cfg),
                       dropout_cuda(out, x, resid, cfg, stream));
}
