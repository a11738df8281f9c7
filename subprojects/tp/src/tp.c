/* mt-tp front-ends: argument checks, the GEMMs and lookups through mt-tensor, the collectives
 * through mt-comm, the cross-entropy's passes dispatched to the CPU reference or CUDA. */
#include <mt/dispatch.h>

#include "tp_impl.h"

int mt_tp_size(const mt_comm *tp) {
    return tp ? mt_comm_size(tp) : 1;
}

int mt_tp_rank(const mt_comm *tp) {
    return tp ? mt_comm_rank(tp) : 0;
}

mt_status mt_tp_partition(const mt_comm *tp, int64_t n, const char *what, int64_t *start,
                          int64_t *len) {
    MT_REQUIRE(start && len, MT_ERR_INVALID_ARG, "NULL argument");
    int size = mt_tp_size(tp);
    MT_REQUIRE(n >= 0 && n % size == 0, MT_ERR_INVALID_ARG,
               "%s (%lld) is not divisible by the tensor-parallel size (%d)", what ? what : "size",
               (long long)n, size);
    *len = n / size;
    *start = (int64_t)mt_tp_rank(tp) * *len;
    return MT_OK;
}

/* ---- regions ---- */

/* full holds n times local's elements, of local's dtype and device, both contiguous */
static mt_status check_split(const mt_comm *tp, const mt_tensor *full, const mt_tensor *local,
                             const char *fname, const char *lname) {
    MT_REQUIRE(full && local, MT_ERR_INVALID_ARG, "NULL argument");
    MT_TRY(mt_tensor_check(full, fname, -1));
    MT_TRY(mt_tensor_check(local, lname, -1));
    MT_REQUIRE(full->dtype == local->dtype && mt_device_eq(full->device, local->device),
               MT_ERR_INVALID_ARG, "%s and %s differ in dtype or device", fname, lname);
    int64_t n = mt_tp_size(tp);
    MT_REQUIRE(mt_tensor_numel(full) == n * mt_tensor_numel(local), MT_ERR_INVALID_ARG,
               "%s has %lld elements, want %lld (%s's %lld times the tensor-parallel size %lld)",
               fname, (long long)mt_tensor_numel(full), (long long)(n * mt_tensor_numel(local)),
               lname, (long long)mt_tensor_numel(local), (long long)n);
    return MT_OK;
}

/* local's block of full, as a 1-d view */
static mt_tensor block_of(const mt_comm *tp, const mt_tensor *full, const mt_tensor *local) {
    int64_t n = mt_tensor_numel(local);
    char *base =
        (char *)full->data + (size_t)mt_tp_rank(tp) * (size_t)n * mt_dtype_size(full->dtype);
    return mt_tensor_1d(base, full->dtype, n, full->device);
}

static mt_status copy_flat(mt_tensor *dst, const mt_tensor *src, mt_stream stream) {
    if (dst->data == src->data) return MT_OK;
    mt_tensor d = mt_tensor_1d(dst->data, dst->dtype, mt_tensor_numel(dst), dst->device);
    mt_tensor s = mt_tensor_1d(src->data, src->dtype, mt_tensor_numel(src), src->device);
    return mt_tensor_copy(&d, &s, stream);
}

mt_status mt_tp_all_reduce(mt_comm *tp, mt_tensor *x, mt_stream stream) {
    MT_REQUIRE(x, MT_ERR_INVALID_ARG, "NULL argument");
    MT_TRY(mt_tensor_check(x, "x", -1));
    if (mt_tp_size(tp) == 1) return MT_OK;
    return mt_comm_allreduce(tp, x, x, MT_REDOP_SUM, stream);
}

mt_status mt_tp_gather_rows(mt_comm *tp, mt_tensor *full, const mt_tensor *local,
                            mt_stream stream) {
    MT_TRY(check_split(tp, full, local, "full", "local"));
    if (mt_tp_size(tp) == 1) return copy_flat(full, local, stream);
    return mt_comm_allgather(tp, full, local, stream);
}

mt_status mt_tp_reduce_scatter_rows(mt_comm *tp, mt_tensor *local, const mt_tensor *full,
                                    mt_stream stream) {
    MT_TRY(check_split(tp, full, local, "full", "local"));
    if (mt_tp_size(tp) == 1) return copy_flat(local, full, stream);
    return mt_comm_reduce_scatter(tp, local, full, MT_REDOP_SUM, stream);
}

mt_status mt_tp_scatter_rows(const mt_comm *tp, mt_tensor *local, const mt_tensor *full,
                             mt_stream stream) {
    MT_TRY(check_split(tp, full, local, "full", "local"));
    mt_tensor b = block_of(tp, full, local);
    return copy_flat(local, &b, stream);
}

/* ---- linears ---- */

/* sp = 1: `all` is given, rows = n times part's; sp = 0: `all` is NULL or part itself */
static mt_status check_sp(const mt_comm *tp, int sp, const mt_tensor *all, const mt_tensor *part,
                          const char *aname, const char *pname) {
    MT_REQUIRE(sp == 0 || sp == 1, MT_ERR_INVALID_ARG, "sp is %d, want 0 or 1", sp);
    MT_REQUIRE(part, MT_ERR_INVALID_ARG, "%s is NULL", pname);
    if (!sp) {
        MT_REQUIRE(!all || all->data == part->data, MT_ERR_INVALID_ARG,
                   "%s is for sequence parallelism only (sp = 0: pass NULL)", aname);
        return MT_OK;
    }
    MT_REQUIRE(all, MT_ERR_INVALID_ARG,
               "sequence parallelism needs %s (the whole micro-batch's rows of %s)", aname, pname);
    return check_split(tp, all, part, aname, pname);
}

mt_status mt_tp_column_fwd(mt_comm *tp, mt_blas *blas, mt_tensor *y, mt_tensor *pre_gelu,
                           const mt_tensor *x, mt_tensor *x_all, const mt_tensor *w,
                           const mt_tensor *bias, int flags, int sp, mt_stream stream) {
    MT_TRY(check_sp(tp, sp, x_all, x, "x_all", "x"));
    if (sp) MT_TRY(mt_tp_gather_rows(tp, x_all, x, stream));
    return mt_linear_fwd(blas, y, pre_gelu, sp ? x_all : x, w, bias, flags, stream);
}

mt_status mt_tp_column_bwd(mt_comm *tp, mt_blas *blas, mt_tensor *dx, mt_tensor *dx_all,
                           mt_tensor *dw, mt_tensor *dbias, const mt_tensor *dy,
                           const mt_tensor *x_all, const mt_tensor *w, int accumulate, int sp,
                           mt_stream stream) {
    MT_TRY(check_sp(tp, sp, dx_all, dx, "dx_all", "dx"));
    mt_tensor *d = sp ? dx_all : dx;
    MT_TRY(mt_linear_bwd(blas, d, dw, dbias, dy, x_all, w, accumulate, stream));
    return sp ? mt_tp_reduce_scatter_rows(tp, dx, dx_all, stream)
              : mt_tp_all_reduce(tp, dx, stream);
}

mt_status mt_tp_async_create(mt_device device, mt_tp_async *out) {
    MT_REQUIRE(out, MT_ERR_INVALID_ARG, "NULL argument");
    *out = (mt_tp_async){ 0 };
    if (!mt_device_is_cuda(device)) return MT_OK;
    mt_status st = mt_stream_create(&out->comm);
    if (st == MT_OK) st = mt_event_create(&out->ready, 0);
    if (st == MT_OK) st = mt_event_create(&out->done, 0);
    if (st != MT_OK) mt_tp_async_destroy(out);
    return st;
}

void mt_tp_async_destroy(mt_tp_async *a) {
    if (!a) return;
    mt_event_destroy(a->ready);
    mt_event_destroy(a->done);
    mt_stream_destroy(a->comm);
    *a = (mt_tp_async){ 0 };
}

mt_status mt_tp_column_bwd_async(mt_comm *tp, mt_tp_async *a, mt_blas *blas, mt_tensor *dx,
                                 mt_tensor *dx_all, mt_tensor *dw, mt_tensor *dbias,
                                 const mt_tensor *dy, const mt_tensor *x_all, const mt_tensor *w,
                                 int accumulate, int sp, mt_stream stream) {
    if (!a || !a->comm || mt_tp_size(tp) == 1 || !dx)
        return mt_tp_column_bwd(tp, blas, dx, dx_all, dw, dbias, dy, x_all, w, accumulate, sp,
                                stream);
    MT_TRY(check_sp(tp, sp, dx_all, dx, "dx_all", "dx"));
    mt_tensor *d = sp ? dx_all : dx;
    MT_TRY(mt_linear_bwd(blas, d, NULL, NULL, dy, x_all, w, accumulate, stream));
    MT_TRY(mt_event_record(a->ready, stream)); // why: the collective beside the dW GEMM
    MT_TRY(mt_stream_wait_event(a->comm, a->ready));
    MT_TRY(sp ? mt_tp_reduce_scatter_rows(tp, dx, dx_all, a->comm)
              : mt_tp_all_reduce(tp, dx, a->comm));
    MT_TRY(mt_event_record(a->done, a->comm));
    if (dw || dbias) MT_TRY(mt_linear_bwd(blas, NULL, dw, dbias, dy, x_all, w, accumulate, stream));
    return mt_stream_wait_event(stream, a->done);
}

mt_status mt_tp_row_fwd_add(mt_comm *tp, mt_blas *blas, mt_tensor *y, mt_tensor *y_all,
                            const mt_tensor *x, const mt_tensor *w, const mt_tensor *bias,
                            const mt_tensor *resid, int sp, mt_stream stream) {
    MT_TRY(check_sp(tp, sp, y_all, y, "y_all", "y"));
    /* checked on every rank, though only rank 0 adds it */
    MT_REQUIRE(!bias || (w && bias->ndim == 1 && w->ndim == 2 && bias->shape[0] == w->shape[0]),
               MT_ERR_INVALID_ARG, "bias: want (%lld), w's rows",
               w ? (long long)w->shape[0] : -1LL);
    MT_REQUIRE(!resid || mt_tensor_same_shape(resid, y), MT_ERR_INVALID_ARG,
               "resid must have y's shape");
    const int lead = mt_tp_rank(tp) == 0;
    if (sp) {
        MT_TRY(mt_linear_fwd(blas, y_all, NULL, x, w, lead ? bias : NULL, 0, stream));
        MT_TRY(mt_tp_reduce_scatter_rows(tp, y, y_all, stream));
        return resid ? mt_add(y, y, resid, stream) : MT_OK;
    }
    if (lead && resid)
        MT_TRY(mt_linear_fwd_add(blas, y, x, w, bias, resid, stream));
    else
        MT_TRY(mt_linear_fwd(blas, y, NULL, x, w, lead ? bias : NULL, 0, stream));
    return mt_tp_all_reduce(tp, y, stream);
}

mt_status mt_tp_row_fwd(mt_comm *tp, mt_blas *blas, mt_tensor *y, mt_tensor *y_all,
                        const mt_tensor *x, const mt_tensor *w, const mt_tensor *bias, int sp,
                        mt_stream stream) {
    return mt_tp_row_fwd_add(tp, blas, y, y_all, x, w, bias, NULL, sp, stream);
}

mt_status mt_tp_row_bwd(mt_comm *tp, mt_blas *blas, mt_tensor *dx, mt_tensor *dw, mt_tensor *dbias,
                        const mt_tensor *dy, mt_tensor *dy_all, const mt_tensor *x,
                        const mt_tensor *w, int accumulate, int sp, mt_stream stream) {
    MT_TRY(check_sp(tp, sp, dy_all, dy, "dy_all", "dy"));
    if (sp) MT_TRY(mt_tp_gather_rows(tp, dy_all, dy, stream));
    return mt_linear_bwd(blas, dx, dw, dbias, sp ? dy_all : dy, x, w, accumulate, stream);
}

/* ---- vocab-parallel embedding ---- */

mt_status mt_tp_embedding_fwd(mt_comm *tp, mt_tensor *out, mt_tensor *out_all, const mt_tensor *ids,
                              const mt_tensor *wte, const mt_tensor *wpe, const mt_tensor *pos,
                              int sp, mt_stream stream) {
    MT_TRY(check_sp(tp, sp, out_all, out, "out_all", "out"));
    MT_REQUIRE(wte && wte->ndim == 2, MT_ERR_INVALID_ARG, "wte: want (rows, C)");
    MT_REQUIRE(!pos || wpe, MT_ERR_INVALID_ARG, "position ids without a position table");
    if (mt_tp_size(tp) == 1) return mt_embedding_fwd_pos(out, ids, wte, wpe, pos, stream);
    mt_tensor *o = sp ? out_all : out;
    const int lead = mt_tp_rank(tp) == 0; /* adds the positions, once */
    MT_TRY(mt_embedding_fwd_shard(o, ids, wte, mt_tp_rank(tp) * wte->shape[0], lead ? wpe : NULL,
                                  lead ? pos : NULL, stream));
    return sp ? mt_tp_reduce_scatter_rows(tp, out, out_all, stream)
              : mt_tp_all_reduce(tp, out, stream);
}

mt_status mt_tp_embedding_bwd_workspace(const mt_tensor *ids, const mt_tensor *dwte,
                                        const mt_tensor *dwpe, size_t *bytes) {
    MT_REQUIRE(ids && dwte && dwte->ndim == 2, MT_ERR_INVALID_ARG, "NULL argument or dwte not 2-d");
    int64_t rows = dwte->shape[0];
    if (dwpe && dwpe->ndim == 2 && dwpe->shape[0] > rows) rows = dwpe->shape[0];
    return mt_embedding_bwd_workspace(ids, rows, dwte->device, bytes);
}

mt_status mt_tp_embedding_bwd(mt_comm *tp, mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout,
                              mt_tensor *dout_all, const mt_tensor *ids, const mt_tensor *pos,
                              void *ws, size_t ws_bytes, int sp, mt_stream stream) {
    MT_TRY(check_sp(tp, sp, dout_all, dout, "dout_all", "dout"));
    MT_REQUIRE(dwte && dwte->ndim == 2, MT_ERR_INVALID_ARG, "dwte: want (rows, C)");
    if (mt_tp_size(tp) == 1)
        return mt_embedding_bwd_pos(dwte, dwpe, dout, ids, pos, ws, ws_bytes, stream);
    if (sp) MT_TRY(mt_tp_gather_rows(tp, dout_all, dout, stream));
    return mt_embedding_bwd_shard(dwte, dwpe, sp ? dout_all : dout, ids,
                                  mt_tp_rank(tp) * dwte->shape[0], pos, ws, ws_bytes, stream);
}

/* ---- vocab-parallel cross-entropy ---- */

static mt_status check_xent(const mt_comm *tp, const mt_tensor *losses, const mt_tensor *dlogits,
                            const mt_tensor *logits, const mt_tensor *targets,
                            const mt_tensor *dloss, int64_t V, const mt_tensor *stats) {
    MT_REQUIRE(losses && logits && targets && stats, MT_ERR_INVALID_ARG, "NULL argument");
    MT_TRY(mt_tensor_check(logits, "logits", 2));
    MT_REQUIRE(mt_dtype_is_float(logits->dtype), MT_ERR_UNSUPPORTED, "logits: dtype %s",
               mt_dtype_name(logits->dtype));
    int64_t N = logits->shape[0], cols = logits->shape[1];
    mt_device dev = logits->device;
    MT_TRY(mt_tensor_check(targets, "targets", 1));
    MT_REQUIRE(targets->shape[0] == N && (targets->dtype == MT_I32 || targets->dtype == MT_I64),
               MT_ERR_INVALID_ARG, "targets: want (%lld) i32 or i64", (long long)N);
    MT_TRY(mt_tensor_check(losses, "losses", 1));
    MT_REQUIRE(losses->shape[0] == N && losses->dtype == MT_F32, MT_ERR_INVALID_ARG,
               "losses: want (%lld) f32", (long long)N);
    MT_TRY(mt_tensor_check(stats, "stats", 2));
    MT_REQUIRE(stats->shape[0] == 3 && stats->shape[1] == N && stats->dtype == MT_F32,
               MT_ERR_INVALID_ARG, "stats: want (3, %lld) f32", (long long)N);
    int64_t vp = cols * mt_tp_size(tp);
    MT_REQUIRE(V >= 1 && V <= vp, MT_ERR_INVALID_ARG,
               "V = %lld real columns, want 1 .. %lld (the group's %lld columns)", (long long)V,
               (long long)vp, (long long)vp);
    if (dlogits) {
        MT_TRY(mt_tensor_check(dlogits, "dlogits", 2));
        MT_REQUIRE(mt_tensor_same_shape(dlogits, logits) && dlogits->dtype == logits->dtype,
                   MT_ERR_INVALID_ARG, "dlogits must have logits' shape and dtype");
        MT_REQUIRE(dloss, MT_ERR_INVALID_ARG, "dlogits needs dloss");
        MT_TRY(mt_tensor_check(dloss, "dloss", 1));
        MT_REQUIRE(dloss->shape[0] == N && dloss->dtype == MT_F32, MT_ERR_INVALID_ARG,
                   "dloss: want (%lld) f32", (long long)N);
        MT_REQUIRE(mt_device_eq(dlogits->device, dev) && mt_device_eq(dloss->device, dev),
                   MT_ERR_INVALID_ARG, "dlogits and dloss must be on logits' device");
    }
    MT_REQUIRE(mt_device_eq(targets->device, dev) && mt_device_eq(losses->device, dev) &&
                   mt_device_eq(stats->device, dev),
               MT_ERR_INVALID_ARG, "targets, losses and stats must be on logits' device");
    return MT_OK;
}

mt_status mt_tp_xent(mt_comm *tp, mt_tensor *losses, mt_tensor *dlogits, const mt_tensor *logits,
                     const mt_tensor *targets, const mt_tensor *dloss, int64_t V,
                     int64_t ignore_index, mt_tensor *stats, mt_stream stream) {
    MT_TRY(check_xent(tp, losses, dlogits, logits, targets, dloss, V, stats));
    int64_t N = logits->shape[0], v0 = mt_tp_rank(tp) * logits->shape[1];
    mt_device dev = logits->device;
    int multi = mt_tp_size(tp) > 1;
    mt_tensor mx = mt_tensor_1d(stats->data, MT_F32, N, dev);
    mt_tensor sums = mt_tensor_1d((float *)stats->data + N, MT_F32, 2 * N, dev);
    MT_TRY(MT_DISPATCH(dev, tp_xent_max_cpu(stats, logits, v0, V),
                       tp_xent_max_cuda(stats, logits, v0, V, stream)));
    if (multi) MT_TRY(mt_comm_allreduce(tp, &mx, &mx, MT_REDOP_MAX, stream));
    MT_TRY(MT_DISPATCH(dev, tp_xent_sum_cpu(stats, logits, targets, v0, V, ignore_index),
                       tp_xent_sum_cuda(stats, logits, targets, v0, V, ignore_index, stream)));
    if (multi) MT_TRY(mt_comm_allreduce(tp, &sums, &sums, MT_REDOP_SUM, stream));
    return MT_DISPATCH(
        dev,
        tp_xent_finish_cpu(losses, dlogits, logits, targets, dloss, stats, v0, V, ignore_index),
        tp_xent_finish_cuda(losses, dlogits, logits, targets, dloss, stats, v0, V, ignore_index,
                            stream));
}
