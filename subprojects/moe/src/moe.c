/* The front-end: checks shapes, dtypes and devices, then runs the CPU reference or the CUDA
 * kernels (mt/dispatch.h). */
#include <math.h>
#include <stdlib.h>

#include <mt/comm.h>
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
    a->sigmoid = r && r->sigmoid;
    MT_REQUIRE(!a->pre_softmax || !a->sigmoid, MT_ERR_INVALID_ARG,
               "--moe-router-pre-softmax is the softmax score function's (not with sigmoid)");
    a->scaling = r && r->scaling != 0.0f ? r->scaling : 1.0f;
    if (r && r->expert_bias) {
        MT_REQUIRE(a->sigmoid, MT_ERR_INVALID_ARG,
                   "Expert bias for aux-loss-free routing only supports sigmoid score function.");
        MT_TRY(mt_tensor_check(r->expert_bias, "expert_bias", 1));
        MT_REQUIRE(r->expert_bias->dtype == MT_F32 && r->expert_bias->shape[0] == a->E &&
                       mt_tensor_is_contiguous(r->expert_bias),
                   MT_ERR_INVALID_ARG, "expert_bias must be (%lld) f32, contiguous",
                   (long long)a->E);
        a->bias = r->expert_bias->data;
    }
    MT_REQUIRE(isfinite(a->scaling) && a->scaling > 0.0f, MT_ERR_INVALID_ARG,
               "--moe-router-topk-scaling-factor %g must be positive", (double)a->scaling);
    a->groups = r ? r->num_groups : 0, a->group_topk = r ? r->group_topk : 0;
    if (!a->groups && !a->group_topk) return MT_OK;
    MT_REQUIRE(a->groups > 0 && a->groups <= 64 && a->E % a->groups == 0, MT_ERR_INVALID_ARG,
               "--moe-router-num-groups %d: must divide --num-experts (%lld), at most 64",
               a->groups, (long long)a->E);
    MT_REQUIRE(a->group_topk >= 1 && a->group_topk <= a->groups, MT_ERR_INVALID_ARG,
               "--moe-router-group-topk (%d) should be in [1, --moe-router-num-groups (%d)]",
               a->group_topk, a->groups);
    MT_REQUIRE(a->k >= a->group_topk && a->k <= a->group_topk * (a->E / a->groups),
               MT_ERR_INVALID_ARG,
               "--moe-router-topk (%lld) must be in [--moe-router-group-topk (%d), the %lld "
               "experts of the chosen groups]",
               (long long)a->k, a->group_topk, (long long)(a->group_topk * (a->E / a->groups)));
    return MT_OK;
}

/* Top-k routing (router NULL: plain) with the counts of the whole batch (seq 0: (E)) or of each
 * sequence of seq tokens ((N / seq, E)). */
static mt_status topk_run(mt_tensor *probs, mt_tensor *idx, mt_tensor *counts,
                          const mt_tensor *logits, const mt_moe_router *router, int64_t seq,
                          mt_stream s) {
    MT_TRY(mt_tensor_check(logits, "logits", 2));
    MT_TRY(mt_tensor_check(idx, "idx", 2));
    moe_args a = { .N = logits->shape[0], .E = logits->shape[1], .k = idx->shape[1], .seq = seq };
    MT_TRY(router_opts(&a, router));
    MT_REQUIRE(seq >= 0 && (!seq || a.N % seq == 0), MT_ERR_INVALID_ARG,
               "seq_aux_loss: %lld tokens are not sequences of %lld", (long long)a.N,
               (long long)seq);
    const mt_device d = logits->device;
    MT_TRY(check(logits, "logits", MT_F32, 2, SHAPE(a.N, a.E), d));
    MT_REQUIRE(a.k >= 1 && a.k <= a.E, MT_ERR_INVALID_ARG,
               "--moe-router-topk (%lld) must be in [1, --num-experts (%lld)]", (long long)a.k,
               (long long)a.E);
    MT_TRY(check(probs, "probs", MT_F32, 2, SHAPE(a.N, a.k), d));
    MT_TRY(check(idx, "idx", MT_I32, 2, SHAPE(a.N, a.k), d));
    if (seq)
        MT_TRY(check(counts, "counts", MT_I32, 2, SHAPE(a.N / seq, a.E), d));
    else
        MT_TRY(check(counts, "counts", MT_I32, 1, SHAPE(a.E), d));
    a.logits = logits->data, a.probs = probs->data, a.idx = idx->data, a.counts = counts->data;
    return MT_DISPATCH(d, moe_topk_cpu(&a), moe_topk_cuda(&a, s));
}

mt_status mt_moe_topk(mt_tensor *probs, mt_tensor *idx, mt_tensor *counts, const mt_tensor *logits,
                      const mt_moe_router *router, mt_stream s) {
    return topk_run(probs, idx, counts, logits, router, 0, s);
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

mt_status mt_moe_aux_counts(mt_tensor *counts, mt_tensor *probs, mt_tensor *idx,
                            const mt_tensor *logits, int64_t seq_length, mt_stream s) {
    MT_REQUIRE(seq_length >= 0, MT_ERR_INVALID_ARG, "seq_aux_loss: sequences of %lld",
               (long long)seq_length);
    return topk_run(probs, idx, counts, logits, NULL, seq_length, s); /* (plain: logits' order) */
}

/* The aux loss's counts per sequence (router->seq_length) into a: their shape checked. */
static mt_status aux_seq(moe_args *a, const mt_moe_router *r, const mt_tensor *counts) {
    a->seq = r ? r->seq_length : 0;
    if (!a->seq) return check(counts, "counts", MT_I32, 1, SHAPE(a->E), counts->device);
    MT_REQUIRE(a->seq > 0 && a->N % a->seq == 0, MT_ERR_INVALID_ARG,
               "seq_aux_loss: %lld tokens are not sequences of %lld", (long long)a->N,
               (long long)a->seq);
    return check(counts, "counts", MT_I32, 2, SHAPE(a->N / a->seq, a->E), counts->device);
}

mt_status mt_moe_router_losses(mt_tensor *out, const mt_tensor *logits, const mt_tensor *counts,
                               int topk, const mt_moe_router *router, mt_stream s) {
    MT_TRY(mt_tensor_check(logits, "logits", 2));
    moe_args a = { .N = logits->shape[0], .E = logits->shape[1], .k = topk };
    a.sigmoid = router && router->sigmoid;
    const mt_device d = logits->device;
    MT_TRY(check(logits, "logits", MT_F32, 2, SHAPE(a.N, a.E), d));
    MT_TRY(mt_tensor_check(counts, "counts", router && router->seq_length ? 2 : 1));
    MT_TRY(aux_seq(&a, router, counts));
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
    if (router && router->seq_length) { /* (seq_aux_loss: counts (N / S, E)) */
        MT_TRY(mt_tensor_check(idx, "idx", 2));
        MT_TRY(mt_tensor_check(logits, "logits", 2));
        MT_TRY(mt_tensor_check(counts, "counts", 2));
        a.N = idx->shape[0], a.k = idx->shape[1], a.E = logits->shape[1];
        MT_TRY(check(idx, "idx", MT_I32, 2, SHAPE(a.N, a.k), idx->device));
        MT_TRY(aux_seq(&a, router, counts));
        a.idx_in = idx->data, a.counts_in = counts->data;
    } else {
        MT_TRY(routing(&a, idx, counts));
    }
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

mt_status mt_moe_expert_bias_tokens(mt_tensor *tokens, const mt_tensor *counts, mt_stream s) {
    MT_TRY(mt_tensor_check(counts, "counts", 1));
    moe_args a = { .E = counts->shape[0] };
    MT_TRY(check(counts, "counts", MT_I32, 1, SHAPE(a.E), counts->device));
    MT_TRY(check(tokens, "tokens", MT_F32, 1, SHAPE(a.E), counts->device));
    a.counts_in = counts->data, a.probs = tokens->data;
    return MT_DISPATCH(counts->device, moe_expert_bias_tokens_cpu(&a),
                       moe_expert_bias_tokens_cuda(&a, s));
}

mt_status mt_moe_expert_bias_update(mt_tensor *bias, mt_tensor *tokens, float rate, mt_stream s) {
    MT_TRY(mt_tensor_check(bias, "expert_bias", 2));
    moe_args a = { .N = bias->shape[0], .E = bias->shape[1], .rate = rate };
    MT_REQUIRE(isfinite(rate) && rate >= 0.0f, MT_ERR_INVALID_ARG,
               "--moe-router-bias-update-rate %g must not be negative", (double)rate);
    MT_TRY(check(bias, "expert_bias", MT_F32, 2, SHAPE(a.N, a.E), bias->device));
    MT_TRY(check(tokens, "tokens", MT_F32, 2, SHAPE(a.N, a.E), bias->device));
    a.probs = bias->data, a.dlogits = tokens->data;
    return MT_DISPATCH(bias->device, moe_expert_bias_update_cpu(&a),
                       moe_expert_bias_update_cuda(&a, s));
}

/* ---- expert parallelism: the plan on the host, the exchange over mt-comm ---- */

static mt_status ep_check(const int32_t *counts_all, int ep, int rank, int E) {
    MT_REQUIRE(counts_all, MT_ERR_INVALID_ARG, "counts_all is NULL");
    MT_REQUIRE(ep >= 1 && E >= 1 && E % ep == 0, MT_ERR_INVALID_ARG,
               "%d experts do not split over %d expert-parallel ranks", E, ep);
    MT_REQUIRE(rank >= 0 && rank < ep, MT_ERR_INVALID_ARG, "rank %d of %d", rank, ep);
    for (int i = 0; i < ep * E; i++)
        MT_REQUIRE(counts_all[i] >= 0, MT_ERR_INVALID_ARG, "rank %d's count of expert %d is %d",
                   i / E, i % E, (int)counts_all[i]);
    return MT_OK;
}

mt_status mt_moe_ep_counts(const int32_t *counts_all, int ep, int rank, int experts, int64_t *send,
                           int64_t *recv, int64_t *local) {
    MT_TRY(ep_check(counts_all, ep, rank, experts));
    const int El = experts / ep;
    for (int le = 0; local && le < El; le++)
        local[le] = 0;
    for (int j = 0; j < ep; j++) {
        int64_t s = 0, r = 0;
        for (int le = 0; le < El; le++) {
            s += counts_all[rank * experts + j * El + le];              /* mine, for j's experts */
            const int64_t c = counts_all[j * experts + rank * El + le]; /* j's, for mine */
            r += c;
            if (local) local[le] += c;
        }
        if (send) send[j] = s;
        if (recv) recv[j] = r;
    }
    return MT_OK;
}

mt_status mt_moe_ep_sort(const int32_t *counts_all, int ep, int rank, int experts, int inverse,
                         int32_t *rows, int64_t n) {
    MT_TRY(ep_check(counts_all, ep, rank, experts));
    MT_REQUIRE(rows || n == 0, MT_ERR_INVALID_ARG, "rows is NULL");
    const int El = experts / ep;
    const int32_t *c = counts_all + rank * El; /* c[j * experts + le]: from j for local le */
    int64_t *at = malloc(((size_t)ep * El + 1) * sizeof *at), total = 0;
    MT_REQUIRE(at, MT_ERR_OOM, "offsets of %d chunks", ep * El);
    for (int j = 0; j < ep; j++) /* (the received order: rank j's chunk of local expert le) */
        for (int le = 0; le < El; le++)
            at[j * El + le] = total, total += c[j * experts + le];
    mt_status st = total == n ? MT_OK
                              : MT_ERROR(MT_ERR_INVALID_ARG, "%lld rows given, %lld received",
                                         (long long)n, (long long)total);
    if (st == MT_OK && n > INT32_MAX) st = MT_ERROR(MT_ERR_UNSUPPORTED, "%lld rows", (long long)n);
    int64_t out = 0; /* expert-major row: local expert le's rows from rank 0, 1, ... */
    for (int le = 0; le < El && st == MT_OK; le++)
        for (int j = 0; j < ep; j++)
            for (int64_t t = 0, in = at[j * El + le]; t < c[j * experts + le]; t++, out++) {
                if (inverse)
                    rows[in + t] = (int32_t)out;
                else
                    rows[out] = (int32_t)(in + t);
            }
    free(at);
    return st;
}

/* The rows an exchange moves: a and b contiguous (rows, C), one dtype and width. */
static mt_status ep_rows(const mt_tensor *a, const char *an, const mt_tensor *b, const char *bn) {
    MT_TRY(mt_tensor_check(a, an, 2));
    MT_TRY(mt_tensor_check(b, bn, 2));
    MT_REQUIRE(mt_tensor_is_contiguous(a) && mt_tensor_is_contiguous(b), MT_ERR_INVALID_ARG,
               "%s and %s must be contiguous", an, bn);
    MT_REQUIRE(a->dtype == b->dtype && a->shape[1] == b->shape[1], MT_ERR_INVALID_ARG,
               "%s (%s, %lld columns) and %s (%s, %lld columns) differ", an,
               mt_dtype_name(a->dtype), (long long)a->shape[1], bn, mt_dtype_name(b->dtype),
               (long long)b->shape[1]);
    return MT_OK;
}

mt_status mt_moe_ep_exchange(struct mt_comm *ep, mt_tensor *dst, const mt_tensor *src,
                             const int64_t *send, const int64_t *recv, mt_stream s) {
    MT_REQUIRE(ep && send && recv, MT_ERR_INVALID_ARG, "NULL group or counts");
    MT_TRY(ep_rows(src, "src", dst, "dst"));
    const int n = mt_comm_size(ep);
    const int64_t C = src->shape[1];
    int64_t *sc = malloc(2 * (size_t)n * sizeof *sc), *rc = sc + n, ts = 0, tr = 0; /* elements */
    MT_REQUIRE(sc, MT_ERR_OOM, "counts of %d ranks", n);
    for (int j = 0; j < n; j++) {
        sc[j] = send[j] * C, rc[j] = recv[j] * C;
        ts += send[j], tr += recv[j];
    }
    mt_tensor sv, dv; /* (the rows sent and received) */
    mt_status st =
        ts <= src->shape[0] && tr <= dst->shape[0]
            ? MT_OK
            : MT_ERROR(MT_ERR_INVALID_ARG, "%lld rows to send from %lld, %lld to receive into %lld",
                       (long long)ts, (long long)src->shape[0], (long long)tr,
                       (long long)dst->shape[0]);
    if (st == MT_OK) st = mt_tensor_slice(src, 0, 0, ts, &sv);
    if (st == MT_OK) st = mt_tensor_slice(dst, 0, 0, tr, &dv);
    if (st == MT_OK) st = mt_comm_alltoallv(ep, &dv, rc, &sv, sc, s);
    free(sc);
    return st;
}

/* mt_moe_ep_dispatch (combine 0) and mt_moe_ep_combine (1): this rank's chunk with rank j for
 * local expert le of j (sending) or of this rank (receiving) is one send and one receive. The
 * permuted side holds this rank's rows by global expert (P: offsets); the expert-major side its
 * experts' rows by (local expert, source rank) (Q). */
static mt_status ep_chunks(struct mt_comm *ep, mt_tensor *out, const mt_tensor *in,
                           const int32_t *c, int E, int combine, mt_stream s) {
    MT_REQUIRE(ep, MT_ERR_INVALID_ARG, "NULL group");
    const int n = mt_comm_size(ep), me = mt_comm_rank(ep);
    MT_TRY(ep_check(c, n, me, E));
    MT_TRY(ep_rows(in, "in", out, "out"));
    const int El = E / n;
    const mt_tensor *perm = combine ? out : in, *loc = combine ? in : out;
    int64_t *P = malloc(((size_t)E + 1 + (size_t)El * n) * sizeof *P), *Q = P + E + 1;
    mt_p2p_op *ops = malloc(2 * (size_t)E * sizeof *ops + 1);
    mt_tensor *views = malloc(2 * (size_t)E * sizeof *views + 1);
    mt_status st = P && ops && views ? MT_OK : MT_ERROR(MT_ERR_OOM, "chunks of %d experts", E);
    if (st != MT_OK) goto done;
    P[0] = 0;
    for (int e = 0; e < E; e++)
        P[e + 1] = P[e] + c[me * E + e];
    int64_t q = 0;
    for (int le = 0; le < El; le++)
        for (int i = 0; i < n; i++)
            Q[le * n + i] = q, q += c[i * E + me * El + le];
    if (P[E] > perm->shape[0] || q > loc->shape[0]) {
        st = MT_ERROR(MT_ERR_INVALID_ARG,
                      "the counts place %lld permuted rows (%lld given) and %lld expert rows "
                      "(%lld given)",
                      (long long)P[E], (long long)perm->shape[0], (long long)q,
                      (long long)loc->shape[0]);
        goto done;
    }
    int k = 0;
    for (int j = 0; j < n && st == MT_OK; j++)
        for (int le = 0; le < El && st == MT_OK; le++) {
            const int64_t ns = c[me * E + j * El + le]; /* mine, for j's expert le */
            const int64_t nr = c[j * E + me * El + le]; /* j's, for my expert le */
            /* pv: my rows for j's expert le (permuted side); lv: j's rows for my expert le
             * (expert side). Dispatch sends pv and receives lv; combine the reverse. */
            mt_tensor pv, lv;
            st = mt_tensor_slice(perm, 0, P[j * El + le], ns, &pv);
            if (st == MT_OK) st = mt_tensor_slice(loc, 0, Q[le * n + j], nr, &lv);
            if (st != MT_OK) break;
            if (j == me) { /* (this rank's own rows: copied; ns == nr) */
                if (ns) st = combine ? mt_tensor_copy(&pv, &lv, s) : mt_tensor_copy(&lv, &pv, s);
                continue;
            }
            const mt_tensor *snd = combine ? &lv : &pv, *rcv = combine ? &pv : &lv;
            if (snd->shape[0]) {
                views[k] = *snd;
                ops[k] = (mt_p2p_op){ MT_P2P_SEND, &views[k], j };
                k++;
            }
            if (rcv->shape[0]) {
                views[k] = *rcv;
                ops[k] = (mt_p2p_op){ MT_P2P_RECV, &views[k], j };
                k++;
            }
        }
    if (st == MT_OK) st = mt_comm_p2p_batch(ep, ops, k, s);
done:
    free(P);
    free(ops);
    free(views);
    return st;
}

mt_status mt_moe_ep_dispatch(struct mt_comm *ep, mt_tensor *out, const mt_tensor *in,
                             const int32_t *counts_all, int experts, mt_stream s) {
    return ep_chunks(ep, out, in, counts_all, experts, 0, s);
}

mt_status mt_moe_ep_combine(struct mt_comm *ep, mt_tensor *out, const mt_tensor *in,
                            const int32_t *counts_all, int experts, mt_stream s) {
    return ep_chunks(ep, out, in, counts_all, experts, 1, s);
}
