/* Private: the buffer's layout and the argument blocks that the CPU references and the CUDA
 * launchers share (CUDA adds the stream). Arguments are already validated. */
#ifndef MT_OPTIM_IMPL_H
#define MT_OPTIM_IMPL_H

#include <mt/optim.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct optim_param {
    char *name;
    int ndim;
    int64_t shape[MT_MAX_DIMS];
    int64_t numel, padded, offset;
    int bucket, decay, in_norm, expert;
} optim_param;

struct mt_optim_buffer {
    mt_optim_buffer_config cfg;
    optim_param *params;
    int n_params, cap_params;
    int64_t *bucket_off; /* n_buckets + 1 boundaries */
    int *bucket_expert;  /* per bucket: 1 if it holds expert parameters */
    int n_buckets;
    int64_t numel; /* padded total */
    int finalized;
    void *param_data;
    float *grad_data;
    uint32_t *wd_mask, *norm_mask; /* bit g of word g/32: 64-element group g (on the device) */
    size_t mask_words;
};

/* One contiguous range [start, start+n) of the buffer; the state arrays start at local index 0.
 * Every boundary is a multiple of MT_OPTIM_ALIGN, so kernels load 4 elements at a time. */
typedef struct optim_step_args {
    mt_optim_kind kind;
    int64_t n, start;        /* elements, and the buffer index of element 0 (for the masks) */
    const uint32_t *wd_mask; /* NULL: every element decays */
    void *param;             /* n params (param_dtype), written from master when master != NULL */
    mt_dtype param_dtype;
    float *master;     /* n fp32 master weights; NULL: param is f32 and updated in place */
    const float *grad; /* n grads (still multiplied by the loss scale) */
    float *exp_avg;    /* AdamW m / SGD momentum */
    float *exp_avg_sq; /* AdamW v */
    float lr, wd, beta1, beta2, eps, momentum;
    float step_size, bc2_sqrt; /* lr / (1 - beta1^t), sqrt(1 - beta2^t) */
    float inv_scale, clip;     /* g = (g * inv_scale) * clip */
} optim_step_args;

/* Sum of squares (fp64) of the grads where norm_mask is set, zero count there, and 1 in
 * *nonfinite if any grad of the range is Inf or NaN. */
typedef struct optim_stats_args {
    int64_t n, start;
    const uint32_t *norm_mask;
    const float *grad;
} optim_stats_args;

typedef struct optim_stats {
    double sumsq;
    double zeros;
    double nonfinite;
} optim_stats;

mt_status optim_step_cpu(const optim_step_args *a);
mt_status optim_stats_cpu(const optim_stats_args *a, optim_stats *out);
mt_status optim_step_cuda(const optim_step_args *a, mt_stream stream);
/* scratch: OPTIM_STATS_BLOCKS * 3 doubles of device memory; the result is copied to the host. */
mt_status optim_stats_cuda(const optim_stats_args *a, double *scratch, optim_stats *out,
                           mt_stream stream);

#define OPTIM_STATS_BLOCKS 1024

static inline int optim_mask_bit(const uint32_t *mask, int64_t i) {
    int64_t g = i / MT_OPTIM_ALIGN;
    return (int)((mask[g >> 5] >> (g & 31)) & 1u);
}

#ifdef __cplusplus
}
#endif

#include <mt/dispatch.h> /* MT_DISPATCH */

#endif /* MT_OPTIM_IMPL_H */
