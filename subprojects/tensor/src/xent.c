/* Fused softmax cross-entropy over a padded vocab: validation and device dispatch. */
#include "ops_impl.h"

/* f32 operand t of numel elements on the device of `ref` (logits or targets). */
static mt_status check_f32(const mt_tensor *t, const char *what, int64_t numel, mt_device dev,
                           const char *ref) {
    MT_TRY(mt_tensor_check(t, what, -1));
    MT_REQUIRE(t->dtype == MT_F32, MT_ERR_UNSUPPORTED, "%s: dtype %s, want f32", what,
               mt_dtype_name(t->dtype));
    MT_REQUIRE(mt_tensor_numel(t) == numel, MT_ERR_INVALID_ARG, "%s has %lld elements, want %lld",
               what, (long long)mt_tensor_numel(t), (long long)numel);
    MT_REQUIRE(mt_device_eq(t->device, dev), MT_ERR_INVALID_ARG,
               "%s and %s are on different devices", what, ref);
    return MT_OK;
}

static mt_status check(const mt_tensor *dlogits, const mt_tensor *losses, const mt_tensor *stats,
                       const mt_tensor *logits, const mt_tensor *targets, const mt_tensor *dloss,
                       int64_t V) {
    MT_TRY(mt_tensor_check(logits, "logits", 2));
    MT_REQUIRE(mt_dtype_is_float(logits->dtype), MT_ERR_UNSUPPORTED,
               "logits: dtype %s is not a float type", mt_dtype_name(logits->dtype));
    int64_t N = logits->shape[0], Vp = logits->shape[1];
    MT_REQUIRE(V >= 1 && V <= Vp, MT_ERR_INVALID_ARG,
               "V = %lld, want 1 <= V <= %lld (logits dim 1)", (long long)V, (long long)Vp);
    MT_TRY(mt_tensor_check(targets, "targets", -1));
    MT_REQUIRE(targets->dtype == MT_I32 || targets->dtype == MT_I64, MT_ERR_UNSUPPORTED,
               "targets: dtype %s, want i32 or i64", mt_dtype_name(targets->dtype));
    MT_REQUIRE(mt_tensor_numel(targets) == N, MT_ERR_INVALID_ARG,
               "targets has %lld elements, logits %lld rows", (long long)mt_tensor_numel(targets),
               (long long)N);
    MT_REQUIRE(mt_device_eq(targets->device, logits->device), MT_ERR_INVALID_ARG,
               "targets and logits are on different devices");
    MT_TRY(check_f32(losses, "losses", N, logits->device, "logits"));
    if (stats) MT_TRY(check_f32(stats, "stats", 2, logits->device, "logits"));
    if (dloss) MT_TRY(check_f32(dloss, "dloss", N, logits->device, "logits"));
    if (dlogits) {
        MT_TRY(mt_tensor_check(dlogits, "dlogits", 2));
        MT_REQUIRE(mt_tensor_same_shape(dlogits, logits) && dlogits->dtype == logits->dtype &&
                       mt_device_eq(dlogits->device, logits->device),
                   MT_ERR_INVALID_ARG, "dlogits differs from logits in shape, dtype or device");
        MT_REQUIRE(dloss || stats, MT_ERR_INVALID_ARG,
                   "the mean's gradient (dloss == NULL) needs stats for the token count");
    }
    return MT_OK;
}

mt_status mt_xent_fwd(mt_tensor *losses, mt_tensor *stats, const mt_tensor *logits,
                      const mt_tensor *targets, int64_t V, int64_t ignore_index, mt_stream stream) {
    MT_TRY(check(NULL, losses, stats, logits, targets, NULL, V));
    return MT_DISPATCH(
        logits->device, xent_cpu(NULL, losses, stats, logits, targets, NULL, 0.0f, V, ignore_index),
        xent_cuda(NULL, losses, stats, logits, targets, NULL, 0.0f, V, ignore_index, stream));
}

mt_status mt_xent_fwd_bwd(mt_tensor *dlogits, mt_tensor *losses, mt_tensor *stats,
                          const mt_tensor *logits, const mt_tensor *targets, const mt_tensor *dloss,
                          float dmean, int64_t V, int64_t ignore_index, mt_stream stream) {
    MT_REQUIRE(dlogits, MT_ERR_INVALID_ARG, "dlogits is NULL");
    MT_TRY(check(dlogits, losses, stats, logits, targets, dloss, V));
    return MT_DISPATCH(
        logits->device,
        xent_cpu(dlogits, losses, stats, logits, targets, dloss, dmean, V, ignore_index),
        xent_cuda(dlogits, losses, stats, logits, targets, dloss, dmean, V, ignore_index, stream));
}

mt_status mt_xent_stats(mt_tensor *stats, mt_tensor *dloss, const mt_tensor *losses,
                        const mt_tensor *targets, float dmean, int64_t ignore_index,
                        mt_stream stream) {
    MT_TRY(mt_tensor_check(targets, "targets", -1));
    MT_REQUIRE(targets->dtype == MT_I32 || targets->dtype == MT_I64, MT_ERR_UNSUPPORTED,
               "targets: dtype %s, want i32 or i64", mt_dtype_name(targets->dtype));
    int64_t N = mt_tensor_numel(targets);
    MT_REQUIRE(stats, MT_ERR_INVALID_ARG, "stats is NULL");
    MT_TRY(check_f32(stats, "stats", 2, targets->device, "targets"));
    if (dloss) MT_TRY(check_f32(dloss, "dloss", N, targets->device, "targets"));
    if (losses) MT_TRY(check_f32(losses, "losses", N, targets->device, "targets"));
    return MT_DISPATCH(targets->device,
                       xent_stats_cpu(stats, dloss, losses, targets, dmean, ignore_index),
                       xent_stats_cuda(stats, dloss, losses, targets, dmean, ignore_index, stream));
}
