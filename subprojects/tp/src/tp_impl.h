/* Private: the vocab-parallel cross-entropy's three passes, CPU reference and CUDA. stats is
 * (3, N) f32: row 0 the rows' max, row 1 their sum of exp(x - max), row 2 the target's logit (0
 * where this rank does not hold it); each pass reads the rows the previous collectives finished.
 * Columns c of logits are vocabulary ids v0 + c; those >= V are padding. */
#ifndef MT_TP_IMPL_H
#define MT_TP_IMPL_H

#include <mt/tp.h>

#ifdef __cplusplus
extern "C" {
#endif

/* This rank's real columns are [0, this): those whose id v0 + c is below V. */
static inline int64_t tp_real_cols(const mt_tensor *logits, int64_t v0, int64_t V) {
    int64_t c = V - v0;
    return c < 0 ? 0 : c < logits->shape[1] ? c : logits->shape[1];
}

/* stats[0][n] = max over this rank's real columns of row n (-inf when it holds none). */
mt_status tp_xent_max_cpu(mt_tensor *stats, const mt_tensor *logits, int64_t v0, int64_t V);
/* stats[1][n] = sum of exp(x - stats[0][n]) over them; stats[2][n] = the target's logit if held. */
mt_status tp_xent_sum_cpu(mt_tensor *stats, const mt_tensor *logits, const mt_tensor *targets,
                          int64_t v0, int64_t V, int64_t ignore_index);
/* losses and (dlogits != NULL) the gradient from the finished stats. */
mt_status tp_xent_finish_cpu(mt_tensor *losses, mt_tensor *dlogits, const mt_tensor *logits,
                             const mt_tensor *targets, const mt_tensor *dloss,
                             const mt_tensor *stats, int64_t v0, int64_t V, int64_t ignore_index);

mt_status tp_xent_max_cuda(mt_tensor *stats, const mt_tensor *logits, int64_t v0, int64_t V,
                           mt_stream stream);
mt_status tp_xent_sum_cuda(mt_tensor *stats, const mt_tensor *logits, const mt_tensor *targets,
                           int64_t v0, int64_t V, int64_t ignore_index, mt_stream stream);
mt_status tp_xent_finish_cuda(mt_tensor *losses, mt_tensor *dlogits, const mt_tensor *logits,
                              const mt_tensor *targets, const mt_tensor *dloss,
                              const mt_tensor *stats, int64_t v0, int64_t V, int64_t ignore_index,
                              mt_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* MT_TP_IMPL_H */
