/* mt-optim: contiguous param/grad buffers with buckets, fused AdamW and SGD (CPU reference and
 * CUDA), global-norm clipping, NaN/Inf skipping, loss scaling, Megatron's LR/WD schedules and the
 * distributed optimizer (ZeRO-1 over the data-parallel group). Megatron's flag names in comments. */
#ifndef MT_OPTIM_H
#define MT_OPTIM_H

#include <mt/core.h>
#include <mt/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

struct mt_comm; /* <mt/comm.h>; only pointers are kept here */

/* ---- param and grad buffers ---- */

/* Every parameter of one dtype lives in one contiguous buffer, its gradient in a contiguous fp32
 * buffer of the same layout (Megatron's main_grad). Parameters are laid out in reverse order of
 * registration (the order backward produces their grads), each padded to a multiple of
 * MT_OPTIM_ALIGN elements, and grouped into buckets of about bucket_numel elements (a parameter is
 * never split); each bucket is padded to a multiple of dp_size * 2 * MT_OPTIM_ALIGN elements so its
 * ZeRO-1 shards are equal and aligned. Padding is zero and stays zero. */
typedef struct mt_optim_buffer mt_optim_buffer;

#define MT_OPTIM_ALIGN 64 /* elements */

typedef struct mt_optim_buffer_config {
    size_t size;          /* = sizeof(mt_optim_buffer_config) */
    mt_dtype param_dtype; /* f32 (default), bf16 (--bf16) or f16 (--fp16) */
    mt_device device;     /* where params and grads live */
    int64_t bucket_numel; /* --ddp-bucket-size (elements); <= 0: one bucket */
    int dp_size;          /* data-parallel size the buckets are padded for; < 1: 1 */
    int tp_rank;          /* this rank in its tensor-parallel group (for TP-replicated params) */
    int expert_dp_size;   /* expert-data-parallel size the expert buckets are padded for (expert
                             parallelism: dp_size / expert_model_parallel_size); < 1: dp_size */
} mt_optim_buffer_config;
#define MT_OPTIM_BUFFER_CONFIG_INIT \
    { sizeof(mt_optim_buffer_config), MT_F32, { MT_DEVICE_KIND_CPU, 0 }, 0, 1, 0, 0 }

/* Flags of mt_optim_buffer_add. Without a DECAY flag Megatron's rule applies: no weight decay for
 * 1-D params (biases, norm weights) and names ending in ".bias". */
enum {
    MT_OPTIM_PARAM_DECAY = 1,         /* force weight decay */
    MT_OPTIM_PARAM_NO_DECAY = 2,      /* never weight decay */
    MT_OPTIM_PARAM_SHARED = 4,        /* a tied copy (output layer = embedding on the last stage):
                                         left out of the grad norm and zero count */
    MT_OPTIM_PARAM_TP_REPLICATED = 8, /* the same on every TP rank (not tensor-parallel): counted
                                         in the grad norm on TP rank 0 only */
    MT_OPTIM_PARAM_EXPERT = 16,       /* an expert's (expert parallelism): in buckets of its own,
                                         reduced over the expert-data-parallel group */
};

typedef struct mt_optim_param_info {
    const char *name;
    int ndim;
    int64_t shape[MT_MAX_DIMS];
    int64_t numel;
    int64_t offset; /* first element in the buffer */
    int bucket;
    int decay;   /* 1 if weight decay applies */
    int in_norm; /* 1 if counted in the global grad norm on this rank */
    int expert;  /* 1 for MT_OPTIM_PARAM_EXPERT */
} mt_optim_param_info;

typedef struct mt_optim_bucket {
    int64_t offset, numel; /* elements of the buffer, padding included */
    int expert;            /* 1: expert parameters only (else none) */
    mt_tensor params;      /* 1-D views of the bucket (after bind) */
    mt_tensor grads;
} mt_optim_bucket;

/* Creates an empty buffer (cfg NULL: defaults). */
MT_API mt_status mt_optim_buffer_create(const mt_optim_buffer_config *cfg, mt_optim_buffer **out);
/* Frees the buffer's bookkeeping (not the arena it was bound to). NULL is a no-op. */
MT_API void mt_optim_buffer_destroy(mt_optim_buffer *b);
/* Registers parameter `name` (copied) of `shape`; *index (may be NULL) gets its index, in
 * registration order. Only before finalize. Names must be unique. */
MT_API mt_status mt_optim_buffer_add(mt_optim_buffer *b, const char *name, int ndim,
                                     const int64_t *shape, int flags, int *index);
/* Plans the layout and buckets; *bytes (may be NULL) gets the arena bytes mt_optim_buffer_bind
 * needs (params, grads and per-64-element masks, with alignment). No allocation. */
MT_API mt_status mt_optim_buffer_finalize(mt_optim_buffer *b, size_t *bytes);
/* Carves params, grads and masks from `arena` (on the buffer's device) and zeroes them. Blocking.
 * Nothing is allocated afterwards. */
MT_API mt_status mt_optim_buffer_bind(mt_optim_buffer *b, mt_arena *arena);

MT_API int mt_optim_buffer_num_params(const mt_optim_buffer *b);
MT_API int mt_optim_buffer_num_buckets(const mt_optim_buffer *b);
/* Padded number of elements of the whole buffer (after finalize). */
MT_API int64_t mt_optim_buffer_numel(const mt_optim_buffer *b);
/* Index of parameter `name`, MT_ERR_INVALID_ARG when unknown. */
MT_API mt_status mt_optim_buffer_find(const mt_optim_buffer *b, const char *name, int *index);
/* Layout of parameter i (after finalize). */
MT_API mt_status mt_optim_buffer_info(const mt_optim_buffer *b, int i, mt_optim_param_info *out);
/* Views (after bind) of parameter i in its shape: the param (param dtype) and its grad (f32). */
MT_API mt_status mt_optim_buffer_param(const mt_optim_buffer *b, int i, mt_tensor *out);
MT_API mt_status mt_optim_buffer_grad(const mt_optim_buffer *b, int i, mt_tensor *out);
/* Bucket k (after finalize; views after bind). */
MT_API mt_status mt_optim_buffer_bucket(const mt_optim_buffer *b, int k, mt_optim_bucket *out);
/* 1-D views of the whole padded param and grad buffers (after bind). */
MT_API mt_status mt_optim_buffer_params(const mt_optim_buffer *b, mt_tensor *out);
MT_API mt_status mt_optim_buffer_grads(const mt_optim_buffer *b, mt_tensor *out);
/* Zeroes every grad (enqueued on `stream` for a device buffer, else blocking). */
MT_API mt_status mt_optim_buffer_zero_grad(mt_optim_buffer *b, mt_stream stream);

/* ---- loss scaling (--fp16) ---- */

/* Megatron's grad scalers: constant (--loss-scale) or dynamic (--initial-loss-scale 2**32,
 * --min-loss-scale 1, --loss-scale-window 1000, --hysteresis 2; growth x2, backoff x0.5). A plain
 * value: copy it to checkpoint it. */
typedef struct mt_optim_scaler {
    float scale;
    int dynamic;
    float min_scale;
    int window, hysteresis;
    int growth_tracker, hysteresis_tracker;
} mt_optim_scaler;

/* A constant scaler (scale > 0). */
MT_API mt_status mt_optim_scaler_constant(mt_optim_scaler *s, float scale);
/* A dynamic scaler; MT_ERR_INVALID_ARG unless 0 < min_scale <= initial, window, hysteresis > 0. */
MT_API mt_status mt_optim_scaler_dynamic(mt_optim_scaler *s, float initial, float min_scale,
                                         int window, int hysteresis);
/* After a step: found_inf backs off after `hysteresis` such steps in a row (not below min_scale);
 * `window` clean steps in a row double the scale (DynamicGradScaler.update). Constant: no-op. */
MT_API void mt_optim_scaler_update(mt_optim_scaler *s, int found_inf);

/* ---- optimizers ---- */

typedef enum mt_optim_kind {
    MT_OPTIM_ADAMW = 0, /* --optimizer adam: decoupled weight decay, bias correction */
    MT_OPTIM_SGD = 1,   /* --optimizer sgd: momentum, L2 weight decay added to the grad (torch) */
} mt_optim_kind;

typedef struct mt_optim_config {
    size_t size; /* = sizeof(mt_optim_config) */
    mt_optim_kind kind;
    float adam_beta1, adam_beta2, adam_eps; /* --adam-beta1 0.9, --adam-beta2 0.999, --adam-eps */
    float sgd_momentum;                     /* --sgd-momentum 0.9 */
    float clip_grad;                        /* --clip-grad 1.0; <= 0: no clipping */
    int log_num_zeros_in_grad;              /* count zero grads (--log-num-zeros-in-grad) */
    int check_for_nan_in_grad;              /* skip steps with Inf/NaN grads (default 1; Megatron's
                                  --check-for-nan-in-loss-and-grad). 0, with no clipping, scaler
                                  or zero count, leaves out the statistics pass */
    int use_distributed_optimizer;          /* shard master weights and state over `dp` */
    struct mt_comm *dp; /* data-parallel group: grads averaged over it; NULL: one rank */
    struct mt_comm *mp; /* model-parallel group the grad norm, zero count and Inf/NaN are reduced
                           over; NULL: this rank alone */
    int overlap_param_gather; /* with use_distributed_optimizer: mt_optim_step leaves the params'
                                 all-gather to the caller (mt_optim_gather_bucket per bucket), to
                                 overlap it with the next forward (--overlap-param-gather) */
    int grad_reduce_in_bf16;  /* average the grads over `dp` in bf16 (--grad-reduce-in-bf16): each
                                 bucket is rounded to bf16, reduced, and widened back into the fp32
                                 grads (half the bytes on the wire) */
    /* Expert parallelism (MT_OPTIM_PARAM_EXPERT buckets), Megatron's expert groups: an expert's
     * grads are summed over `expert_dp` (the ranks holding the same experts) and divided by the
     * size of `dp` (each expert saw the tokens of its expert-parallel group's data-parallel
     * ranks), its shards with the distributed optimizer over `expert_dp`, and its grad norm and
     * Inf/NaN reduced over `expert_mp` (tensor x expert x pipeline parallel) where the others'
     * go over `mp`. NULL: one rank. */
    struct mt_comm *expert_dp;
    struct mt_comm *expert_mp;
} mt_optim_config;
#define MT_OPTIM_CONFIG_INIT                                                                     \
    {                                                                                            \
        sizeof(mt_optim_config), MT_OPTIM_ADAMW, 0.9f, 0.999f, 1e-8f, 0.9f, 1.0f, 0, 1, 0, NULL, \
            NULL, 0, 0, NULL, NULL                                                               \
    }

typedef struct mt_optim mt_optim;

typedef struct mt_optim_step_info {
    int skipped;         /* 1: Inf/NaN in the grads, no update was made */
    double grad_norm;    /* global L2 norm of the unscaled grads before clipping (NaN if skipped) */
    int64_t num_zeros;   /* zero grads (with log_num_zeros_in_grad; -1 otherwise) */
    float loss_scale;    /* the scale this step's grads were unscaled with (1 without scaler) */
    int64_t num_skipped; /* skipped steps so far (number of skipped iterations) */
} mt_optim_step_info;

/* Bytes of arena that mt_optim_create carves for optimizer state over `b`: fp32 master weights
 * (non-f32 params), AdamW moments or the SGD momentum (this rank's shard with
 * use_distributed_optimizer), a reduction scratch and, with grad_reduce_in_bf16 over more than
 * one rank, a bf16 copy of the largest bucket. */
MT_API mt_status mt_optim_state_bytes(const mt_optim_config *cfg, const mt_optim_buffer *b,
                                      size_t *bytes);
/* Creates an optimizer over bound buffer `b` (kept; must outlive it), carving its state from
 * `arena` (on b's device), zeroing the moments and copying the params into the master weights.
 * Blocking. With use_distributed_optimizer, b's dp_size must equal the size of cfg->dp. */
MT_API mt_status mt_optim_create(const mt_optim_config *cfg, mt_optim_buffer *b, mt_arena *arena,
                                 mt_optim **out);
/* NULL is a no-op; the arena is the caller's. */
MT_API void mt_optim_destroy(mt_optim *o);

/* Averages the grads of bucket k over the data-parallel group: all-reduce, or with
 * use_distributed_optimizer reduce-scatter into this rank's shard (other shards are then stale);
 * in bf16 with grad_reduce_in_bf16 (calls on one stream may share its scratch: they are ordered).
 * An expert bucket: over `expert_dp`, times expert_dp's size / dp's size. Call for every bucket
 * (in order, as backward finishes them) before mt_optim_step. Device: enqueued on `stream`; host:
 * blocking. No-op without `dp` (and, for an expert bucket, with expert_dp's size = dp's). */
MT_API mt_status mt_optim_reduce_bucket(mt_optim *o, int k, mt_stream stream);
/* mt_optim_reduce_bucket for every bucket. */
MT_API mt_status mt_optim_reduce_grads(mt_optim *o, mt_stream stream);

/* One optimizer step with learning rate `lr` and weight decay `wd` (from the schedule): unscales
 * the grads by the scaler's scale (scaler NULL: 1), checks for Inf/NaN (then skips, updates the
 * scaler and counts), computes the global grad norm (and zeros), clips to clip_grad, updates the
 * fp32 master weights and state and writes the params back in their dtype; with
 * use_distributed_optimizer each rank updates its shard and the params are all-gathered (unless
 * overlap_param_gather: see mt_optim_gather_bucket). The grads
 * are read, not modified. Blocking when the statistics are computed (the norm decides the clip
 * factor on the host), else enqueued on `stream`. */
MT_API mt_status mt_optim_step(mt_optim *o, double lr, double wd, mt_optim_scaler *scaler,
                               mt_optim_step_info *info, mt_stream stream);
/* With use_distributed_optimizer: all-gathers bucket k's params from every rank's updated shard
 * (mt_optim_step does it for every bucket unless overlap_param_gather is set; then call it for
 * every bucket after a step that was not skipped, before anything reads the bucket's params).
 * Device: enqueued on `stream`; host: blocking. No-op when not sharded. */
MT_API mt_status mt_optim_gather_bucket(mt_optim *o, int k, mt_stream stream);
/* The steps from now on use the grads times `mult` (with the scaler's unscaling; the grad norm,
 * the clipping and the update all see the product): Megatron's --calculate-per-token-loss, whose
 * grads are sums over tokens divided by the global batch's token count after the reduction.
 * 1 (the default) is none. */
MT_API void mt_optim_set_grad_multiplier(mt_optim *o, double mult);
/* Steps taken so far (not counting skipped ones): AdamW's bias-correction step. */
MT_API int64_t mt_optim_num_steps(const mt_optim *o);
/* Sets the step count (restoring a checkpoint together with the state from mt_optim_state). */
MT_API mt_status mt_optim_set_num_steps(mt_optim *o, int64_t steps);
/* 1-D fp32 views of this rank's state: master weights (empty for f32 params, which are their own
 * master weights), exp_avg (AdamW m or SGD momentum), exp_avg_sq (AdamW v; empty for SGD). With
 * use_distributed_optimizer they hold this rank's shards, bucket after bucket. */
MT_API mt_status mt_optim_state(const mt_optim *o, mt_tensor *master, mt_tensor *exp_avg,
                                mt_tensor *exp_avg_sq);

/* ---- LR and WD schedules (megatron-core OptimizerParamScheduler) ---- */

typedef enum mt_lr_decay_style {
    MT_LR_CONSTANT = 0,
    MT_LR_LINEAR, /* Megatron's default */
    MT_LR_COSINE,
    MT_LR_INVERSE_SQRT,
    MT_LR_WSD,
} mt_lr_decay_style;

typedef enum mt_lr_wsd_style {
    MT_WSD_EXPONENTIAL = 0, /* Megatron's default --lr-wsd-decay-style */
    MT_WSD_LINEAR,
    MT_WSD_COSINE,
    MT_WSD_MINUS_SQRT,
} mt_lr_wsd_style;

typedef enum mt_wd_incr_style {
    MT_WD_CONSTANT = 0,
    MT_WD_LINEAR,
    MT_WD_COSINE,
} mt_wd_incr_style;

/* Steps are what the caller counts: Megatron counts samples (iterations x global batch size). */
typedef struct mt_optim_sched {
    size_t size;            /* = sizeof(mt_optim_sched) */
    double init_lr;         /* --lr-warmup-init */
    double max_lr, min_lr;  /* --lr, --min-lr */
    double lr_warmup_steps; /* may be fractional (--lr-warmup-fraction) */
    double lr_decay_steps;  /* > lr_warmup_steps */
    mt_lr_decay_style lr_decay_style;
    double wsd_decay_steps; /* WSD: the annealing steps at the end */
    mt_lr_wsd_style lr_wsd_decay_style;
    double start_wd, end_wd; /* --start-weight-decay, --end-weight-decay */
    double wd_incr_steps;
    mt_wd_incr_style wd_incr_style;
} mt_optim_sched;
#define MT_OPTIM_SCHED_INIT                                                                     \
    {                                                                                           \
        sizeof(mt_optim_sched), 0.0, 0.0, 0.0, 0.0, 1.0, MT_LR_LINEAR, 0.0, MT_WSD_EXPONENTIAL, \
            0.01, 0.01, 1.0, MT_WD_CONSTANT                                                     \
    }

/* Megatron's iteration-based setup (training.py get_optimizer_param_scheduler): decay steps =
 * lr_decay_iters (<= 0: train_iters) x gbs, warmup = lr_warmup_fraction x decay steps when
 * fraction >= 0, else lr_warmup_iters x gbs; wd_incr_steps = train_iters x gbs; wsd_decay_steps =
 * lr_wsd_decay_iters x gbs. Fills the step fields of `s` only. */
MT_API mt_status mt_optim_sched_from_iters(mt_optim_sched *s, int64_t train_iters,
                                           int64_t lr_decay_iters, int64_t lr_warmup_iters,
                                           double lr_warmup_fraction, int64_t lr_wsd_decay_iters,
                                           int64_t global_batch_size);
/* Checks the asserts of OptimizerParamScheduler.__init__ (MT_ERR_INVALID_ARG naming the field). */
MT_API mt_status mt_optim_sched_check(const mt_optim_sched *s);
/* Learning rate and weight decay after `num_steps` steps (get_lr / get_wd). Pure. */
MT_API double mt_optim_sched_lr(const mt_optim_sched *s, double num_steps);
MT_API double mt_optim_sched_wd(const mt_optim_sched *s, double num_steps);
/* Parses "constant", "linear", "cosine", "inverse-square-root", "WSD" / "exponential", "linear",
 * "cosine", "minus_sqrt" / "constant", "linear", "cosine" (MT_ERR_INVALID_ARG otherwise). */
MT_API mt_status mt_lr_decay_style_parse(const char *s, mt_lr_decay_style *out);
MT_API mt_status mt_lr_wsd_style_parse(const char *s, mt_lr_wsd_style *out);
MT_API mt_status mt_wd_incr_style_parse(const char *s, mt_wd_incr_style *out);

#ifdef __cplusplus
}
#endif

#endif /* MT_OPTIM_H */
