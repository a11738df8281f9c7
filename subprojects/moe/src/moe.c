/* The front-end: checks shapes, dtypes and devices, then runs the CPU reference or the CUDA
 * kernels (mt/dispatch.h). */
#include <math.h>
#include <mt/dispatch.h>

#include "moe_impl.h"

/* t: contiguous, `dt` (MT_F32 etc.; -1: any float), `ndim` dims of `shape`, on `dev`. */
static mt_status check(const mt_tensor *t, const char *what, int dt, int ndim, const int64_t *shape,
                       mt_device dev) {
    MT_TRY(mt_tensor_check(t, what, ndim));
    MT_REQUIRE(mt_tensor_is_contiguous(t), MT_ERR_INVALID_ARG, "%s must be contiguous", what);
    MT_REQUIRE(dt < 0 ? mt_dtype_is_float(t->dtype) : t->dtype == (mt_dtype)dt, MT_ERR_INVALID_ARG,
               "%s is %s (want %s)", what, mt_dtype_name(t->dtype),
               dt < 0 ? "f32, bf16 or f16" : mt_dtype_name((mt_dtype)dt));
    for (int d = 0; d < ndim; d++)
        MT_REQUIRE(t->shape[d] == shape[d], MT_ERR_INVALID_ARG, "%s has dim %d of %lld, want %lld",
                   what, d, (long long)t->shape[d], (long long)shape[d]);
    MT_REQUIRE(mt_device_eq(t->device, dev), MT_ERR_INVALID_ARG,
               "%s is on another device than the routing's", what);
    return MT_OK;
}
#define SHAPE(...) ((int64_t[]){ __VA_ARGS__ })

/* The router options into a (NULL: Megatron's defaults). */
static mt_status router_opts(moe_args *a, const mt_moe_router *r) {
    a->pre_softmax = r && r->pre_softmax;
    a->scaling = r && r->scaling != 0.0f ? r->scaling : 1.0f;
    MT_REQUIRE(isfinite(a->scaling) && a->scaling > 0.0f, MT_ERR_INVALID_ARG,
               "--moe-router-topk-scaling-factor %g must be positive", (double)a->scaling);
    return MT_OK;
}

mt_status mt_moe_topk(mt_tensor *probs, mt_tensor *idx, mt_tensor *counts, const mt_tensor *logits,
                      const mt_moe_router *router, mt_stream s) {
    MT_TRY(mt_tensor_check(logits, "logits", 2));
    MT_TRY(mt_tensor_check(idx, "idx", 2));
    moe_args a = { .N = logits->shape[0], .E = logits->shape[1], .k = idx->shape[1] };
    MT_TRY(router_opts(&a, router));
    const mt_device d = logits->device;
    MT_TRY(check(logits, "logits", MT_F32, 2, SHAPE(a.N, a.E), d));
    MT_REQUIRE(a.k >= 1 && a.k <= a.E, MT_ERR_INVALID_ARG,
               "--moe-router-topk (%lld) must be in [1, --num-experts (%lld)]", (long long)a.k,
               (long long)a.E);
    MT_TRY(check(probs, "probs", MT_F32, 2, SHAPE(a.N, a.k), d));
    MT_TRY(check(idx, "idx", MT_I32, 2, SHAPE(a.N, a.k), d));
    MT_TRY(check(counts, "counts", MT_I32, 1, SHAPE(a.E), d));
    a.logits = logits->data, a.probs = probs->data, a.idx = idx->data, a.counts = counts->data;
    return MT_DISPATCH(d, moe_topk_cpu(&a), moe_topk_cuda(&a, s));
}

/* idx (N,k) and counts (E) into a (sizes and pointers). */
static mt_status routing(moe_args *a, const mt_tensor *idx, const mt_tensor *counts) {
    MT_TRY(mt_tensor_check(idx, "idx", 2));
    MT_TRY(mt_tensor_check(counts, "counts", 1));
    a->N = idx->shape[0], a->k = idx->shape[1], a->E = counts->shape[0];
    MT_TRY(check(idx, "idx", MT_I32, 2, SHAPE(a->N, a->k), idx->device));
    MT_TRY(check(counts, "counts", MT_I32, 1, SHAPE(a->E), idx->device));
    a->idx_in = idx->data, a->counts_in = counts->data;
    return MT_OK;
}

mt_status mt_moe_dispatch_map(mt_tensor *rows, mt_tensor *pos, const mt_tensor *idx,
                              const mt_tensor *counts, mt_stream s) {
    moe_args a = { 0 };
    MT_TRY(routing(&a, idx, counts));
    MT_TRY(check(rows, "rows", MT_I32, 1, SHAPE(a.N * a.k), idx->device));
    MT_TRY(check(pos, "pos", MT_I32, 2, SHAPE(a.N, a.k), idx->device));
    a.rows = rows->data, a.pos = pos->data;
    return MT_DISPATCH(idx->device, moe_dispatch_map_cpu(&a), moe_dispatch_map_cuda(&a, s));
}

mt_status mt_moe_capacity_map(mt_tensor *rows, mt_tensor *pos, mt_tensor *kept, mt_tensor *work,
                              const mt_tensor *idx, const mt_tensor *probs, const mt_tensor *counts,
                              int64_t capacity, int by_position, int pad, mt_stream s) {
    moe_args a = { 0 };
    MT_TRY(routing(&a, idx, counts));
    const mt_device d = idx->device;
    MT_REQUIRE(capacity >= 1, MT_ERR_INVALID_ARG, "expert capacity %lld must be positive",
               (long long)capacity);
    a.capacity = capacity, a.by_position = by_position != 0;
    a.region = pad ? (capacity < a.N ? capacity : a.N) : 0;
    a.R = pad ? a.E * a.region : a.N * a.k;
    MT_TRY(check(probs, "probs", MT_F32, 2, SHAPE(a.N, a.k), d));
    MT_TRY(check(rows, "rows", MT_I32, 1, SHAPE(a.R), d));
    MT_TRY(check(pos, "pos", MT_I32, 2, SHAPE(a.N, a.k), d));
    MT_TRY(check(kept, "kept", MT_I32, 1, SHAPE(a.E), d));
    MT_TRY(check(work, "work", MT_I32, 1, SHAPE(a.N * a.k), d));
    a.probs_in = probs->data, a.rows = rows->data, a.pos = pos->data, a.counts = kept->data;
    a.scratch = work->data;
    return MT_DISPATCH(d, moe_capacity_map_cpu(&a), moe_capacity_map_cuda(&a, s));
}

mt_status mt_moe_permute(mt_tensor *xp, const mt_tensor *x, const mt_tensor *rows, mt_stream s) {
    MT_TRY(mt_tensor_check(x, "x", 2));
    MT_TRY(mt_tensor_check(xp, "xp", 2));
    MT_TRY(mt_tensor_check(rows, "rows", 1));
    moe_args a = { .N = x->shape[0], .C = x->shape[1], .dtype = x->dtype };
    const int64_t R = rows->shape[0];
    a.R = R;
    MT_TRY(check(x, "x", -1, 2, SHAPE(a.N, a.C), x->device));
    MT_TRY(check(xp, "xp", (int)x->dtype, 2, SHAPE(R, a.C), x->device));
    MT_TRY(check(rows, "rows", MT_I32, 1, SHAPE(R), x->device));
    a.x = x->data, a.y = xp->data, a.rows_in = rows->data;
    return MT_DISPATCH(x->device, moe_permute_cpu(&a), moe_permute_cuda(&a, s));
}

/* pos (N,k) and a (N,C) and a (R,C) tensor of one float dtype into a (R: the permuted rows,
 * N*k, fewer with dropped tokens, or the padded regions'). */
static mt_status rows_pos(moe_args *a, const mt_tensor *pos, const mt_tensor *t, const char *tn,
                          const mt_tensor *tp, const char *tpn) {
    MT_TRY(mt_tensor_check(pos, "pos", 2));
    MT_TRY(mt_tensor_check(t, tn, 2));
    MT_TRY(mt_tensor_check(tp, tpn, 2));
    a->N = pos->shape[0], a->k = pos->shape[1], a->C = t->shape[1], a->dtype = t->dtype;
    a->R = tp->shape[0];
    const mt_device d = pos->device;
    MT_TRY(check(pos, "pos", MT_I32, 2, SHAPE(a->N, a->k), d));
    MT_TRY(check(t, tn, -1, 2, SHAPE(a->N, a->C), d));
    MT_TRY(check(tp, tpn, (int)t->dtype, 2, SHAPE(a->R, a->C), d));
    a->pos_in = pos->data;
    return MT_OK;
}

mt_status mt_moe_permute_bwd(mt_tensor *dx, const mt_tensor *dxp, const mt_tensor *pos,
                             int accumulate, mt_stream s) {
    moe_args a = { 0 };
    MT_TRY(rows_pos(&a, pos, dx, "dx", dxp, "dxp"));
    a.x = dxp->data, a.y = dx->data, a.accumulate = accumulate != 0;
    return MT_DISPATCH(pos->device, moe_permute_bwd_cpu(&a), moe_permute_bwd_cuda(&a, s));
}

mt_status mt_moe_unpermute(mt_tensor *y, const mt_tensor *yp, const mt_tensor *probs,
                           const mt_tensor *pos, const mt_tensor *resid, mt_stream s) {
    moe_args a = { 0 };
    MT_TRY(rows_pos(&a, pos, y, "y", yp, "yp"));
    MT_TRY(check(probs, "probs", MT_F32, 2, SHAPE(a.N, a.k), pos->device));
    if (resid) MT_TRY(check(resid, "resid", (int)y->dtype, 2, SHAPE(a.N, a.C), pos->device));
    a.x = yp->data, a.y = y->data, a.probs_in = probs->data, a.resid = resid ? resid->data : NULL;
    return MT_DISPATCH(pos->device, moe_unpermute_cpu(&a), moe_unpermute_cuda(&a, s));
}

mt_status mt_moe_unpermute_bwd(mt_tensor *dyp, mt_tensor *dprobs, const mt_tensor *dy,
                               const mt_tensor *yp, const mt_tensor *probs, const mt_tensor *pos,
                               mt_stream s) {
    moe_args a = { 0 };
    MT_TRY(rows_pos(&a, pos, dy, "dy", yp, "yp"));
    MT_TRY(check(dyp, "dyp", (int)dy->dtype, 2, SHAPE(a.R, a.C), pos->device));
    MT_TRY(check(probs, "probs", MT_F32, 2, SHAPE(a.N, a.k), pos->device));
    MT_TRY(check(dprobs, "dprobs", MT_F32, 2, SHAPE(a.N, a.k), pos->device));
    a.x = dy->data, a.x2 = yp->data, a.y2 = dyp->data, a.probs_in = probs->data;
    a.dprobs_out = dprobs->data;
    return MT_DISPATCH(pos->device, moe_unpermute_bwd_cpu(&a), moe_unpermute_bwd_cuda(&a, s));
}

mt_status mt_moe_router_losses(mt_tensor *out, const mt_tensor *logits, const mt_tensor *counts,
                               int topk, mt_stream s) {
    MT_TRY(mt_tensor_check(logits, "logits", 2));
    moe_args a = { .N = logits->shape[0], .E = logits->shape[1], .k = topk };
    const mt_device d = logits->device;
    MT_TRY(check(logits, "logits", MT_F32, 2, SHAPE(a.N, a.E), d));
    MT_TRY(check(counts, "counts", MT_I32, 1, SHAPE(a.E), d));
    MT_TRY(check(out, "out", MT_F32, 1, SHAPE(2), d));
    MT_REQUIRE(topk >= 1 && topk <= a.E, MT_ERR_INVALID_ARG, "topk %d not in [1, %lld]", topk,
               (long long)a.E);
    a.logits = logits->data, a.counts_in = counts->data, a.losses = out->data;
    return MT_DISPATCH(d, moe_router_losses_cpu(&a), moe_router_losses_cuda(&a, s));
}

mt_status mt_moe_router_bwd(mt_tensor *dlogits, const mt_tensor *dprobs, const mt_tensor *probs,
                            const mt_tensor *idx, const mt_tensor *logits, const mt_tensor *counts,
                            const mt_moe_router *router, float aux_scale, float z_scale,
                            mt_stream s) {
    moe_args a = { 0 };
    MT_TRY(routing(&a, idx, counts));
    MT_TRY(router_opts(&a, router));
    const mt_device d = idx->device;
    MT_TRY(check(logits, "logits", MT_F32, 2, SHAPE(a.N, a.E), d));
    MT_TRY(check(dlogits, "dlogits", MT_F32, 2, SHAPE(a.N, a.E), d));
    MT_TRY(check(probs, "probs", MT_F32, 2, SHAPE(a.N, a.k), d));
    MT_TRY(check(dprobs, "dprobs", MT_F32, 2, SHAPE(a.N, a.k), d));
    a.dlogits = dlogits->data, a.dprobs = dprobs->data, a.probs_in = probs->data;
    a.logits = logits->data, a.aux_scale = aux_scale, a.z_scale = z_scale;
    return MT_DISPATCH(d, moe_router_bwd_cpu(&a), moe_router_bwd_cuda(&a, s));
}
