/* Private: the CPU reference and the CUDA kernels share these signatures (CUDA adds the stream).
 * Arguments are validated by the front-end (moe.c): shapes consistent, contiguous, one device. */
#ifndef MT_MOE_IMPL_H
#define MT_MOE_IMPL_H

#include <mt/moe.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One call's sizes and buffers (unused ones NULL). */
typedef struct moe_args {
    int64_t N, E, k, C; /* tokens, experts, choices a token, row width (permute/unpermute) */
    mt_dtype dtype;     /* of the rows */
    const float *logits, *probs_in, *dprobs;
    const int32_t *idx_in, *counts_in, *rows_in, *pos_in;
    float *probs, *dlogits, *dprobs_out, *losses;
    int32_t *idx, *counts, *rows, *pos;
    const void *x, *resid; /* rows in */
    void *y;               /* rows out */
    const void *x2;        /* unpermute_bwd: yp */
    void *y2;              /* unpermute_bwd: dyp */
    int accumulate;
    float aux_scale, z_scale;
    int64_t R;                /* rows of the permuted tensors (permute and its kin) */
    int64_t capacity, region; /* capacity map: the capacity, each expert's padded rows (0: none) */
    int by_position;          /* capacity map: drop the last tokens, not the least likely */
    int pre_softmax;          /* router: the softmax over all experts, not over the k */
    float scaling;            /* router: the probabilities' factor */
    int32_t *scratch;         /* capacity map: N*k ints of workspace (the CUDA kernel's) */
} moe_args;

mt_status moe_topk_cpu(const moe_args *a);
mt_status moe_dispatch_map_cpu(const moe_args *a);
mt_status moe_capacity_map_cpu(const moe_args *a);
mt_status moe_permute_cpu(const moe_args *a);
mt_status moe_permute_bwd_cpu(const moe_args *a);
mt_status moe_unpermute_cpu(const moe_args *a);
mt_status moe_unpermute_bwd_cpu(const moe_args *a);
mt_status moe_router_losses_cpu(const moe_args *a);
mt_status moe_router_bwd_cpu(const moe_args *a);

mt_status moe_topk_cuda(const moe_args *a, mt_stream s);
mt_status moe_dispatch_map_cuda(const moe_args *a, mt_stream s);
mt_status moe_capacity_map_cuda(const moe_args *a, mt_stream s);
mt_status moe_permute_cuda(const moe_args *a, mt_stream s);
mt_status moe_permute_bwd_cuda(const moe_args *a, mt_stream s);
mt_status moe_unpermute_cuda(const moe_args *a, mt_stream s);
mt_status moe_unpermute_bwd_cuda(const moe_args *a, mt_stream s);
mt_status moe_router_losses_cuda(const moe_args *a, mt_stream s);
mt_status moe_router_bwd_cuda(const moe_args *a, mt_stream s);

#ifdef __cplusplus
}
#endif

#endif /* MT_MOE_IMPL_H */
