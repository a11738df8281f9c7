/* mt-tp: Megatron's tensor-parallel layers (megatron.core.tensor_parallel) over an mt-comm group:
 * column- and row-parallel linears, the vocab-parallel embedding and cross-entropy, and the
 * sequence-parallel regions. The arithmetic is mt-tensor's (the CPU reference or CUDA, by the
 * tensors' device), the communication mt-comm's (MPI for host tensors, NCCL for device tensors,
 * enqueued on `stream`). `tp` NULL, or a group of one, is tensor parallelism 1: every call is its
 * plain mt-tensor op and no collective runs.
 *
 * Tensors are rows of tokens (N, C), N the micro-batch's tokens in any fixed order (the model's
 * (B, T) flattened). Sequence parallelism (`sp` = 1, Megatron's --sequence-parallel) splits those
 * rows into n contiguous blocks, rank r holding block r; without it every rank holds all N. */
#ifndef MT_TP_H
#define MT_TP_H

#include <mt/comm.h>
#include <mt/core.h>
#include <mt/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The group's size and this rank's position in it (1 and 0 for NULL). */
MT_API int mt_tp_size(const mt_comm *tp);
MT_API int mt_tp_rank(const mt_comm *tp);

/* This rank's share of `n` items split evenly over the group, [*start, *start + *len) (Megatron's
 * divide(): n must be a multiple of the group's size; MT_ERR_INVALID_ARG naming `what` and both
 * numbers otherwise). Pure. */
MT_API mt_status mt_tp_partition(const mt_comm *tp, int64_t n, const char *what, int64_t *start,
                                 int64_t *len);

/* ---- regions (megatron.core.tensor_parallel.mappings); contiguous tensors, rows along dim 0 ---- */

/* x = the sum over the group of x, in place: reduce_from_tensor_model_parallel_region's forward,
 * copy_to_tensor_model_parallel_region's backward. */
MT_API mt_status mt_tp_all_reduce(mt_comm *tp, mt_tensor *x, mt_stream stream);
/* full (n * rows, ...) = every rank's local (rows, ...) in rank order: the sequence-parallel
 * gather (gather_from_sequence_parallel_region's forward). */
MT_API mt_status mt_tp_gather_rows(mt_comm *tp, mt_tensor *full, const mt_tensor *local,
                                   mt_stream stream);
/* local (rows, ...) = this rank's block of the sum over the group of full (n * rows, ...): the
 * sequence-parallel reduce-scatter (reduce_scatter_to_sequence_parallel_region's forward). */
MT_API mt_status mt_tp_reduce_scatter_rows(mt_comm *tp, mt_tensor *local, const mt_tensor *full,
                                           mt_stream stream);
/* local = this rank's block of full's rows, a copy (scatter_to_sequence_parallel_region). */
MT_API mt_status mt_tp_scatter_rows(const mt_comm *tp, mt_tensor *local, const mt_tensor *full,
                                    mt_stream stream);

/* ---- ColumnParallelLinear (gather_output = False) ----
 * w (out/n, in) and bias (out/n) are this rank's rows of the full weight and bias (rank r: rows
 * [r out/n, (r+1) out/n)); y (N, out/n) is this rank's columns of the full output. */

/* y = x_all @ w^T [+ bias], through GELU with flags as mt_linear_fwd (pre_gelu: y's shape).
 * sp = 0: x (N, in), the same on every rank, and x_all NULL (x is used). sp = 1: x (N/n, in) this
 * rank's rows; x_all (N, in) receives the gathered input, which the backward needs. */
MT_API mt_status mt_tp_column_fwd(mt_comm *tp, mt_blas *blas, mt_tensor *y, mt_tensor *pre_gelu,
                                  const mt_tensor *x, mt_tensor *x_all, const mt_tensor *w,
                                  const mt_tensor *bias, int flags, int sp, mt_stream stream);
/* The backward: dw (+)= dy^T x_all and dbias (+)= dy's column sums (this rank's rows; no
 * communication), dx = the sum over the group of dy @ w: sp = 0: dx (N, in), all-reduced, dx_all
 * NULL; sp = 1: computed into dx_all (N, in) and reduce-scattered into dx (N/n, in). x_all is the
 * forward's whole input (sp = 0: x). accumulate as mt_linear_bwd; dw, dbias may be NULL. */
MT_API mt_status mt_tp_column_bwd(mt_comm *tp, mt_blas *blas, mt_tensor *dx, mt_tensor *dx_all,
                                  mt_tensor *dw, mt_tensor *dbias, const mt_tensor *dy,
                                  const mt_tensor *x_all, const mt_tensor *w, int accumulate,
                                  int sp, mt_stream stream);

/* Megatron's asynchronous tensor-parallel all-reduce: a side stream and two events with which
 * mt_tp_column_bwd_async runs dX's all-reduce (sp = 0) or reduce-scatter (sp = 1) beside the
 * weight-gradient GEMM. Create it once per device (CUDA; on the CPU it holds nothing and the
 * calls run in order). */
typedef struct mt_tp_async {
    mt_stream comm;
    mt_event ready, done;
} mt_tp_async;
MT_API mt_status mt_tp_async_create(mt_device device, mt_tp_async *out);
MT_API void mt_tp_async_destroy(mt_tp_async *a); /* zeroes it; NULL is a no-op */
/* mt_tp_column_bwd with the collective overlapped: dX's GEMM on `stream`, its collective on
 * a->comm once `stream` reaches it, dw and dbias's GEMMs on `stream`, which then waits for the
 * collective (so what follows on `stream` sees dx as mt_tp_column_bwd leaves it). The same
 * values as mt_tp_column_bwd. `a` NULL, or host tensors: mt_tp_column_bwd. Recordable in a CUDA
 * graph (the side stream forks from `stream` and joins it). */
MT_API mt_status mt_tp_column_bwd_async(mt_comm *tp, mt_tp_async *a, mt_blas *blas, mt_tensor *dx,
                                        mt_tensor *dx_all, mt_tensor *dw, mt_tensor *dbias,
                                        const mt_tensor *dy, const mt_tensor *x_all,
                                        const mt_tensor *w, int accumulate, int sp,
                                        mt_stream stream);

/* ---- RowParallelLinear (input_is_parallel = True) ----
 * w (out, in/n) is this rank's columns of the full weight (rank r: [r in/n, (r+1) in/n)), x (N,
 * in/n) this rank's columns of the input (a column-parallel linear's output); bias (out) is whole
 * on every rank. */

/* y = the sum over the group of x @ w^T, + bias (added once, by rank 0's GEMM epilogue before the
 * sum: Megatron adds it after; the same value up to the order of one rounding). sp = 0: y (N,
 * out), all-reduced, y_all NULL; sp = 1: the sum goes through y_all (N, out) and is
 * reduce-scattered into y (N/n, out). */
MT_API mt_status mt_tp_row_fwd(mt_comm *tp, mt_blas *blas, mt_tensor *y, mt_tensor *y_all,
                               const mt_tensor *x, const mt_tensor *w, const mt_tensor *bias,
                               int sp, mt_stream stream);
/* As mt_tp_row_fwd, plus a residual: y = resid + the sum (resid y's shape, not y itself; sp = 0:
 * rank 0's GEMM adds it with the bias, as mt_linear_fwd_add; sp = 1: added to this rank's rows
 * after the reduce-scatter). A transformer layer's projection and its residual add in one. */
MT_API mt_status mt_tp_row_fwd_add(mt_comm *tp, mt_blas *blas, mt_tensor *y, mt_tensor *y_all,
                                   const mt_tensor *x, const mt_tensor *w, const mt_tensor *bias,
                                   const mt_tensor *resid, int sp, mt_stream stream);
/* The backward: dy_all = dy (sp = 0: dy (N, out), dy_all NULL) or the gathered dy (sp = 1: dy
 * (N/n, out), dy_all (N, out) receives it); dx (N, in/n) = dy_all @ w, dw (+)= dy_all^T x,
 * dbias (+)= dy_all's column sums (the same on every rank: no reduction of the bias gradient). */
MT_API mt_status mt_tp_row_bwd(mt_comm *tp, mt_blas *blas, mt_tensor *dx, mt_tensor *dw,
                               mt_tensor *dbias, const mt_tensor *dy, mt_tensor *dy_all,
                               const mt_tensor *x, const mt_tensor *w, int accumulate, int sp,
                               mt_stream stream);

/* ---- VocabParallelEmbedding ----
 * wte (Vp/n, C) is this rank's rows of the (padded) vocabulary's table, rank r holding ids [r Vp/n,
 * (r+1) Vp/n). */

/* out = wte_full[ids] (+ wpe[pos], the position table (P, C), whole on every rank and added once,
 * by rank 0 before the sum; pos as mt_embedding_fwd_pos, NULL: each token's index along ids' last
 * dim; wpe NULL: none): each rank looks up the ids it holds (zeros for the others) and the group
 * sums. sp = 0: out (N, C), all-reduced, out_all NULL; sp = 1: out_all (N, C) scratch,
 * reduce-scattered into out (N/n, C). ids i32 or i64 (N, or (B, T) with out (B, T, C)), the same
 * on every rank. */
MT_API mt_status mt_tp_embedding_fwd(mt_comm *tp, mt_tensor *out, mt_tensor *out_all,
                                     const mt_tensor *ids, const mt_tensor *wte,
                                     const mt_tensor *wpe, const mt_tensor *pos, int sp,
                                     mt_stream stream);
/* Workspace bytes for mt_tp_embedding_bwd (the device's sort; 0 on the CPU); dwpe may be NULL. */
MT_API mt_status mt_tp_embedding_bwd_workspace(const mt_tensor *ids, const mt_tensor *dwte,
                                               const mt_tensor *dwpe, size_t *bytes);
/* dwte (+)= this rank's rows of the scatter-add of dout_all over ids, in token order, and dwpe
 * (+)= its scatter-add over the positions (every rank the same; NULL: none): sp = 0: dout (N, C),
 * dout_all NULL; sp = 1: dout (N/n, C) gathered into dout_all (N, C) first. */
MT_API mt_status mt_tp_embedding_bwd(mt_comm *tp, mt_tensor *dwte, mt_tensor *dwpe,
                                     const mt_tensor *dout, mt_tensor *dout_all,
                                     const mt_tensor *ids, const mt_tensor *pos, void *ws,
                                     size_t ws_bytes, int sp, mt_stream stream);

/* ---- vocab_parallel_cross_entropy ---- */

/* Softmax cross-entropy over a vocabulary split by columns: logits (N, Vp/n) this rank's columns
 * [r Vp/n, (r+1) Vp/n) of the padded vocabulary, of which the first V overall are real (the
 * padding is ignored); targets (N) i32/i64 in [0, V) or ignore_index, the same on every rank.
 * losses (N) f32 = logsumexp over all real columns - the target's logit (0 for ignored tokens), on
 * every rank. With dlogits (logits' shape and dtype, may alias logits; NULL: losses only): this
 * rank's columns of (softmax - onehot(target)) * dloss[n] (dloss (N) f32; 0 for ignored tokens and
 * padding). stats: (3, N) f32 scratch on logits' device. Two all-reduces (N floats by max, 2N by
 * sum), in fp32, as Megatron. */
MT_API mt_status mt_tp_xent(mt_comm *tp, mt_tensor *losses, mt_tensor *dlogits,
                            const mt_tensor *logits, const mt_tensor *targets,
                            const mt_tensor *dloss, int64_t V, int64_t ignore_index,
                            mt_tensor *stats, mt_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* MT_TP_H */
