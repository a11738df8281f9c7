/* Token (+ position) embedding forward and deterministic backward: validation and dispatch. */
#include "ops_impl.h"

static mt_status check_ids(const mt_tensor *ids, mt_device dev) {
    MT_TRY(mt_tensor_check(ids, "ids", -1));
    MT_REQUIRE(ids->ndim >= 1, MT_ERR_INVALID_ARG, "ids: needs at least one dim");
    MT_REQUIRE(ids->dtype == MT_I32 || ids->dtype == MT_I64, MT_ERR_UNSUPPORTED,
               "ids: dtype %s, want i32 or i64", mt_dtype_name(ids->dtype));
    MT_REQUIRE(mt_device_eq(ids->device, dev), MT_ERR_INVALID_ARG,
               "ids and the tables are on different devices");
    return MT_OK;
}

/* x (ids..., C): the activations (out or dout) matching ids. */
static mt_status check_act(const mt_tensor *x, const mt_tensor *ids, const char *what) {
    MT_TRY(mt_tensor_check(x, what, ids->ndim + 1));
    MT_REQUIRE(mt_dtype_is_float(x->dtype), MT_ERR_UNSUPPORTED, "%s: dtype %s is not a float type",
               what, mt_dtype_name(x->dtype));
    for (int d = 0; d < ids->ndim; d++)
        MT_REQUIRE(x->shape[d] == ids->shape[d], MT_ERR_INVALID_ARG, "%s dim %d is %lld, ids %lld",
                   what, d, (long long)x->shape[d], (long long)ids->shape[d]);
    return MT_OK;
}

/* table (rows, C) of x's dtype (grad = 1: or f32) on x's device. */
static mt_status check_table(const mt_tensor *w, const mt_tensor *x, int64_t min_rows, int grad,
                             const char *what) {
    MT_TRY(mt_tensor_check(w, what, 2));
    MT_REQUIRE(w->shape[1] == x->shape[x->ndim - 1], MT_ERR_INVALID_ARG,
               "%s has %lld channels, want %lld", what, (long long)w->shape[1],
               (long long)x->shape[x->ndim - 1]);
    MT_REQUIRE(w->shape[0] >= min_rows, MT_ERR_INVALID_ARG, "%s has %lld rows, want >= %lld", what,
               (long long)w->shape[0], (long long)min_rows);
    MT_REQUIRE(w->dtype == x->dtype || (grad && w->dtype == MT_F32), MT_ERR_INVALID_ARG,
               "%s is %s, want %s%s", what, mt_dtype_name(w->dtype), mt_dtype_name(x->dtype),
               grad ? " or f32" : "");
    MT_REQUIRE(mt_device_eq(w->device, x->device), MT_ERR_INVALID_ARG, "%s is on another device",
               what);
    return MT_OK;
}

/* pos: ids' shape and dtype, with a position table. */
static mt_status check_pos(const mt_tensor *pos, const mt_tensor *ids, const mt_tensor *table) {
    MT_REQUIRE(table, MT_ERR_INVALID_ARG, "position ids without a position table");
    MT_TRY(mt_tensor_check(pos, "pos", ids->ndim));
    MT_REQUIRE(pos->dtype == ids->dtype && mt_device_eq(pos->device, ids->device),
               MT_ERR_INVALID_ARG, "pos must have ids' dtype (%s) and device",
               mt_dtype_name(ids->dtype));
    for (int d = 0; d < ids->ndim; d++)
        MT_REQUIRE(pos->shape[d] == ids->shape[d], MT_ERR_INVALID_ARG,
                   "pos dim %d is %lld, ids %lld", d, (long long)pos->shape[d],
                   (long long)ids->shape[d]);
    return MT_OK;
}

/* The forward's checks and dispatch; shard: a vocab shard's table from id v0 (no position table). */
static mt_status embedding_fwd(mt_tensor *out, const mt_tensor *ids, const mt_tensor *wte,
                               const mt_tensor *wpe, const mt_tensor *pos, int64_t v0, int shard,
                               mt_stream stream) {
    MT_REQUIRE(out && ids && wte, MT_ERR_INVALID_ARG, "NULL argument");
    MT_TRY(check_ids(ids, out->device));
    MT_TRY(check_act(out, ids, "out"));
    MT_TRY(check_table(wte, out, 1, 0, "wte"));
    if (wpe) MT_TRY(check_table(wpe, out, pos ? 1 : ids->shape[ids->ndim - 1], 0, "wpe"));
    if (pos) MT_TRY(check_pos(pos, ids, wpe));
    MT_REQUIRE(v0 >= 0, MT_ERR_INVALID_ARG, "vocab_start %lld is negative", (long long)v0);
    return MT_DISPATCH(out->device, embedding_fwd_cpu(out, ids, wte, wpe, pos, v0, shard),
                       embedding_fwd_cuda(out, ids, wte, wpe, pos, v0, stream));
}

mt_status mt_embedding_fwd_pos(mt_tensor *out, const mt_tensor *ids, const mt_tensor *wte,
                               const mt_tensor *wpe, const mt_tensor *pos, mt_stream stream) {
    return embedding_fwd(out, ids, wte, wpe, pos, 0, 0, stream);
}

mt_status mt_embedding_fwd_shard(mt_tensor *out, const mt_tensor *ids, const mt_tensor *wte,
                                 int64_t vocab_start, const mt_tensor *wpe, const mt_tensor *pos,
                                 mt_stream stream) {
    return embedding_fwd(out, ids, wte, wpe, pos, vocab_start, 1, stream);
}

mt_status mt_embedding_fwd(mt_tensor *out, const mt_tensor *ids, const mt_tensor *wte,
                           const mt_tensor *wpe, mt_stream stream) {
    return mt_embedding_fwd_pos(out, ids, wte, wpe, NULL, stream);
}

mt_status mt_embedding_bwd_workspace(const mt_tensor *ids, int64_t V, mt_device dev,
                                     size_t *bytes) {
    MT_REQUIRE(ids && bytes, MT_ERR_INVALID_ARG, "NULL argument");
    *bytes = 0;
    if (!mt_device_is_cuda(dev)) return MT_OK;
    return MT_DISPATCH(dev, MT_OK, embedding_bwd_cuda_workspace(mt_tensor_numel(ids), V, bytes));
}

/* The backward's checks and dispatch; shard as embedding_fwd. */
static mt_status embedding_bwd(mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout,
                               const mt_tensor *ids, const mt_tensor *pos, int64_t v0, int shard,
                               void *ws, size_t ws_bytes, mt_stream stream) {
    MT_REQUIRE(dwte && dout && ids, MT_ERR_INVALID_ARG, "NULL argument");
    MT_TRY(check_ids(ids, dout->device));
    MT_TRY(check_act(dout, ids, "dout"));
    MT_TRY(check_table(dwte, dout, 1, 1, "dwte"));
    if (dwpe) {
        MT_TRY(check_table(dwpe, dout, pos ? 1 : ids->shape[ids->ndim - 1], 1, "dwpe"));
        MT_REQUIRE(dwpe->dtype == dwte->dtype, MT_ERR_INVALID_ARG, "dwpe is %s, dwte %s",
                   mt_dtype_name(dwpe->dtype), mt_dtype_name(dwte->dtype));
    }
    if (pos) MT_TRY(check_pos(pos, ids, dwpe));
    MT_REQUIRE(v0 >= 0, MT_ERR_INVALID_ARG, "vocab_start %lld is negative", (long long)v0);
    if (mt_device_is_cuda(dout->device)) {
        size_t need = 0;
        int64_t V = dwte->shape[0];
        if (pos && dwpe->shape[0] > V) V = dwpe->shape[0];
        MT_TRY(mt_embedding_bwd_workspace(ids, V, dout->device, &need));
        MT_REQUIRE(ws_bytes >= need && (ws || need == 0), MT_ERR_INVALID_ARG,
                   "workspace of %zu bytes, need %zu (mt_embedding_bwd_workspace)", ws_bytes, need);
    }
    return MT_DISPATCH(dout->device, embedding_bwd_cpu(dwte, dwpe, dout, ids, pos, v0, shard),
                       embedding_bwd_cuda(dwte, dwpe, dout, ids, pos, v0, ws, ws_bytes, stream));
}

mt_status mt_embedding_bwd_pos(mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout,
                               const mt_tensor *ids, const mt_tensor *pos, void *ws,
                               size_t ws_bytes, mt_stream stream) {
    return embedding_bwd(dwte, dwpe, dout, ids, pos, 0, 0, ws, ws_bytes, stream);
}

mt_status mt_embedding_bwd_shard(mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout,
                                 const mt_tensor *ids, int64_t vocab_start, const mt_tensor *pos,
                                 void *ws, size_t ws_bytes, mt_stream stream) {
    return embedding_bwd(dwte, dwpe, dout, ids, pos, vocab_start, 1, ws, ws_bytes, stream);
}

mt_status mt_embedding_bwd(mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout,
                           const mt_tensor *ids, void *ws, size_t ws_bytes, mt_stream stream) {
    return mt_embedding_bwd_pos(dwte, dwpe, dout, ids, NULL, ws, ws_bytes, stream);
}
