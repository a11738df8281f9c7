/* The optimizer: state planning, grad reduction over data parallel (all-reduce, or reduce-scatter
 * for ZeRO-1), grad statistics, clipping, loss-scale handling and the step dispatch. */
#include "optim_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mt/comm.h>

/* One range of the buffer this rank updates: the whole buffer, or its shard of one bucket. */
typedef struct optim_range {
    int64_t start, local, n;
    int64_t pad_in_norm; /* padding elements inside counted groups (subtracted from zeros) */
    int expert;          /* expert parameters (their statistics reduced over expert_mp) */
} optim_range;

struct mt_optim {
    mt_optim_config cfg;
    mt_optim_buffer *b;
    int dp_size, dp_rank, sharded;
    int edp_size, edp_rank, has_expert; /* expert-data-parallel group; any expert bucket */
    int64_t local_numel;
    float *master, *exp_avg, *exp_avg_sq; /* local_numel each (master NULL for f32 params) */
    double *scratch;                      /* device: OPTIM_STATS_BLOCKS * 3 */
    void *bf16_grads;                     /* grad_reduce_in_bf16: the largest bucket, in bf16 */
    optim_range *ranges;
    int n_ranges;
    int64_t steps, skipped;
    double grad_mult; /* mt_optim_set_grad_multiplier (1: none) */
};

static size_t round_bytes(size_t x) {
    return (x + MT_ARENA_ALIGN - 1) / MT_ARENA_ALIGN * MT_ARENA_ALIGN;
}

/* The data-parallel group of bucket k's parameters: its size, this rank's place, the comm. */
static int bucket_expert(const mt_optim_buffer *b, int k) {
    return b->bucket_expert[k];
}

static int group_size(const mt_optim_config *cfg, int expert) {
    struct mt_comm *c = expert ? cfg->expert_dp : cfg->dp;
    return c ? mt_comm_size(c) : 1;
}

static mt_status check_config(const mt_optim_config *cfg, const mt_optim_buffer *b, int *dp_size) {
    MT_REQUIRE(cfg && b, MT_ERR_INVALID_ARG, "NULL config or buffer");
    MT_REQUIRE(cfg->size >= sizeof(mt_optim_config), MT_ERR_INVALID_ARG,
               "config size %zu, expected %zu", cfg->size, sizeof(mt_optim_config));
    MT_REQUIRE(cfg->kind == MT_OPTIM_ADAMW || cfg->kind == MT_OPTIM_SGD, MT_ERR_INVALID_ARG,
               "optimizer kind %d", (int)cfg->kind);
    MT_REQUIRE(b->finalized, MT_ERR_INVALID_ARG, "buffer not finalized");
    /* torch.optim's checks */
    MT_REQUIRE(cfg->adam_beta1 >= 0.0f && cfg->adam_beta1 < 1.0f, MT_ERR_INVALID_ARG,
               "Invalid beta parameter at index 0: %g", (double)cfg->adam_beta1);
    MT_REQUIRE(cfg->adam_beta2 >= 0.0f && cfg->adam_beta2 < 1.0f, MT_ERR_INVALID_ARG,
               "Invalid beta parameter at index 1: %g", (double)cfg->adam_beta2);
    MT_REQUIRE(cfg->adam_eps >= 0.0f, MT_ERR_INVALID_ARG, "Invalid epsilon value: %g",
               (double)cfg->adam_eps);
    MT_REQUIRE(cfg->sgd_momentum >= 0.0f, MT_ERR_INVALID_ARG, "Invalid momentum value: %g",
               (double)cfg->sgd_momentum);
    *dp_size = group_size(cfg, 0);
    int experts = 0;
    for (int k = 0; k < b->n_buckets; k++)
        experts |= bucket_expert(b, k);
    if (cfg->use_distributed_optimizer) {
        MT_REQUIRE(b->cfg.dp_size == *dp_size, MT_ERR_INVALID_ARG,
                   "buffer planned for dp_size %d, data-parallel group has %d", b->cfg.dp_size,
                   *dp_size);
        MT_REQUIRE(!experts || b->cfg.expert_dp_size == group_size(cfg, 1), MT_ERR_INVALID_ARG,
                   "buffer planned for expert_dp_size %d, expert-data-parallel group has %d",
                   b->cfg.expert_dp_size, group_size(cfg, 1));
    }
    return MT_OK;
}

/* This rank's elements of bucket k: its shard with the distributed optimizer, else all. */
static int64_t bucket_local(const mt_optim_config *cfg, const mt_optim_buffer *b, int k) {
    const int64_t n = b->bucket_off[k + 1] - b->bucket_off[k];
    return cfg->use_distributed_optimizer ? n / group_size(cfg, bucket_expert(b, k)) : n;
}

static int64_t local_numel(const mt_optim_config *cfg, const mt_optim_buffer *b) {
    int64_t n = 0;
    for (int k = 0; k < b->n_buckets; k++)
        n += bucket_local(cfg, b, k);
    return n;
}

/* Elements of the bf16 reduction scratch: the largest bucket reduced over more than one rank (0
 * when grads are reduced in fp32). */
static int64_t bf16_scratch_numel(const mt_optim_config *cfg, const mt_optim_buffer *b) {
    int64_t n = 0;
    for (int k = 0; cfg->grad_reduce_in_bf16 && k < b->n_buckets; k++)
        if (group_size(cfg, bucket_expert(b, k)) > 1 && b->bucket_off[k + 1] - b->bucket_off[k] > n)
            n = b->bucket_off[k + 1] - b->bucket_off[k];
    return n;
}

mt_status mt_optim_state_bytes(const mt_optim_config *cfg, const mt_optim_buffer *b,
                               size_t *bytes) {
    int dp;
    MT_TRY(check_config(cfg, b, &dp));
    MT_REQUIRE(bytes, MT_ERR_INVALID_ARG, "bytes is NULL");
    size_t n = (size_t)local_numel(cfg, b) * 4;
    size_t total = round_bytes(n);                                 /* exp_avg */
    if (cfg->kind == MT_OPTIM_ADAMW) total += round_bytes(n);      /* exp_avg_sq */
    if (b->cfg.param_dtype != MT_F32) total += round_bytes(n);     /* master */
    total += round_bytes(OPTIM_STATS_BLOCKS * 3 * sizeof(double)); /* scratch */
    total += round_bytes((size_t)bf16_scratch_numel(cfg, b) * 2);
    *bytes = total;
    return MT_OK;
}

static int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
    int64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0;
}

/* The ranges this rank updates: each bucket's shard (distributed optimizer), else runs of
 * buckets of one kind (the whole buffer without expert parameters). */
static mt_status plan_ranges(mt_optim *o) {
    const mt_optim_buffer *b = o->b;
    o->ranges = calloc((size_t)b->n_buckets, sizeof *o->ranges);
    MT_REQUIRE(o->ranges, MT_ERR_OOM, "%d ranges", b->n_buckets);
    int64_t local = 0;
    o->n_ranges = 0;
    for (int k = 0; k < b->n_buckets; k++) {
        const int ex = bucket_expert(b, k);
        const int64_t s = bucket_local(&o->cfg, b, k);
        optim_range *r = &o->ranges[o->n_ranges];
        if (!o->sharded && o->n_ranges && r[-1].expert == ex) { /* (one run: extended) */
            r[-1].n += s;
            local += s;
            continue;
        }
        r->start = b->bucket_off[k] + (o->sharded ? (ex ? o->edp_rank : o->dp_rank) * s : 0);
        r->n = s;
        r->expert = ex;
        r->local = local;
        local += s;
        o->n_ranges++;
    }
    for (int k = 0; k < o->n_ranges; k++) {
        optim_range *r = &o->ranges[k];
        for (int i = 0; i < b->n_params; i++) {
            const optim_param *p = &b->params[i];
            if (p->in_norm)
                r->pad_in_norm +=
                    overlap(r->start, r->start + r->n, p->offset + p->numel, p->offset + p->padded);
        }
    }
    MT_ASSERT(local == o->local_numel);
    return MT_OK;
}

mt_status mt_optim_create(const mt_optim_config *cfg, mt_optim_buffer *b, mt_arena *arena,
                          mt_optim **out) {
    MT_REQUIRE(out, MT_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    int dp;
    MT_TRY(check_config(cfg, b, &dp));
    MT_REQUIRE(b->param_data, MT_ERR_INVALID_ARG, "buffer not bound");
    MT_REQUIRE(arena && mt_device_eq(mt_arena_device(arena), b->cfg.device), MT_ERR_INVALID_ARG,
               "arena missing or not on the buffer's device");
    mt_optim *o = calloc(1, sizeof *o);
    MT_REQUIRE(o, MT_ERR_OOM, "optimizer header");
    o->cfg = *cfg;
    o->b = b;
    o->grad_mult = 1.0;
    o->dp_size = dp;
    o->dp_rank = cfg->dp ? mt_comm_rank(cfg->dp) : 0;
    o->edp_size = group_size(cfg, 1);
    o->edp_rank = cfg->expert_dp ? mt_comm_rank(cfg->expert_dp) : 0;
    for (int k = 0; k < b->n_buckets; k++)
        o->has_expert |= bucket_expert(b, k);
    o->sharded = cfg->use_distributed_optimizer && (dp > 1 || (o->has_expert && o->edp_size > 1));
    o->local_numel = local_numel(cfg, b);
    mt_status st = plan_ranges(o);
    size_t n = (size_t)o->local_numel * 4;
    mt_device dev = b->cfg.device;
    void *p;
    MT_TRY_GOTO(mt_arena_alloc(arena, n, &p), st, fail);
    o->exp_avg = p;
    MT_TRY_GOTO(mt_memset_zero(p, dev, n, NULL), st, fail);
    if (cfg->kind == MT_OPTIM_ADAMW) {
        MT_TRY_GOTO(mt_arena_alloc(arena, n, &p), st, fail);
        o->exp_avg_sq = p;
        MT_TRY_GOTO(mt_memset_zero(p, dev, n, NULL), st, fail);
    }
    if (b->cfg.param_dtype != MT_F32) {
        MT_TRY_GOTO(mt_arena_alloc(arena, n, &p), st, fail);
        o->master = p;
        size_t es = mt_dtype_size(b->cfg.param_dtype);
        for (int k = 0; k < o->n_ranges; k++) { /* master = float(param) */
            const optim_range *r = &o->ranges[k];
            mt_tensor src =
                mt_tensor_1d((char *)b->param_data + r->start * es, b->cfg.param_dtype, r->n, dev);
            mt_tensor dst = mt_tensor_1d(o->master + r->local, MT_F32, r->n, dev);
            MT_TRY_GOTO(mt_cast(&dst, &src, NULL), st, fail);
        }
        if (mt_device_is_cuda(dev)) MT_TRY_GOTO(mt_stream_sync(NULL), st, fail);
    }
    MT_TRY_GOTO(mt_arena_alloc(arena, OPTIM_STATS_BLOCKS * 3 * sizeof(double), &p), st, fail);
    o->scratch = p;
    const int64_t nb16 = bf16_scratch_numel(cfg, b);
    if (nb16 > 0) {
        MT_TRY_GOTO(mt_arena_alloc(arena, (size_t)nb16 * 2, &p), st, fail);
        o->bf16_grads = p;
    }
    *out = o;
    return MT_OK;
fail:
    mt_optim_destroy(o);
    return st;
}

void mt_optim_destroy(mt_optim *o) {
    if (!o) return;
    free(o->ranges);
    free(o);
}

void mt_optim_set_grad_multiplier(mt_optim *o, double mult) {
    if (o) o->grad_mult = mult;
}

int64_t mt_optim_num_steps(const mt_optim *o) {
    return o ? o->steps : 0;
}

mt_status mt_optim_set_num_steps(mt_optim *o, int64_t steps) {
    MT_REQUIRE(o && steps >= 0, MT_ERR_INVALID_ARG, "NULL optimizer or negative step count");
    o->steps = steps;
    return MT_OK;
}

mt_status mt_optim_state(const mt_optim *o, mt_tensor *master, mt_tensor *exp_avg,
                         mt_tensor *exp_avg_sq) {
    MT_REQUIRE(o, MT_ERR_INVALID_ARG, "optimizer is NULL");
    mt_device dev = o->b->cfg.device;
    int64_t n = o->local_numel;
    if (master) *master = mt_tensor_1d(o->master, MT_F32, o->master ? n : 0, dev);
    if (exp_avg) *exp_avg = mt_tensor_1d(o->exp_avg, MT_F32, n, dev);
    if (exp_avg_sq) *exp_avg_sq = mt_tensor_1d(o->exp_avg_sq, MT_F32, o->exp_avg_sq ? n : 0, dev);
    return MT_OK;
}

mt_status mt_optim_reduce_bucket(mt_optim *o, int k, mt_stream stream) {
    MT_REQUIRE(o, MT_ERR_INVALID_ARG, "optimizer is NULL");
    MT_REQUIRE(k >= 0 && k < o->b->n_buckets, MT_ERR_INVALID_ARG, "bucket %d of %d", k,
               o->b->n_buckets);
    mt_optim_bucket bk;
    MT_TRY(mt_optim_buffer_bucket(o->b, k, &bk));
    struct mt_comm *comm = bk.expert ? o->cfg.expert_dp : o->cfg.dp;
    const int n = bk.expert ? o->edp_size : o->dp_size, me = bk.expert ? o->edp_rank : o->dp_rank;
    /* (an expert's grads: summed over expert_dp, divided by dp's size: the average times this) */
    const double mult = bk.expert ? (double)n / o->dp_size : 1.0;
    if (!comm || n == 1)
        return mult != 1.0 ? mt_scale(&bk.grads, &bk.grads, (float)mult, stream) : MT_OK;
    mt_tensor g = bk.grads; /* what is reduced: the grads, or their bf16 copy */
    if (o->bf16_grads) {
        g = mt_tensor_1d(o->bf16_grads, MT_BF16, bk.numel, o->b->cfg.device);
        MT_TRY(mt_cast(&g, &bk.grads, stream));
    }
    int64_t s = bk.numel / n, at = (int64_t)me * s;
    mt_tensor shard, out = bk.grads; /* what this rank keeps, and where it goes */
    if (!o->sharded) {
        MT_TRY(mt_comm_allreduce(comm, &g, &g, MT_REDOP_AVG, stream));
        shard = g;
    } else {
        MT_TRY(mt_tensor_slice(&g, 0, at, s, &shard));
        MT_TRY(mt_comm_reduce_scatter(comm, &shard, &g, MT_REDOP_AVG, stream));
        MT_TRY(mt_tensor_slice(&bk.grads, 0, at, s, &out));
    }
    if (o->bf16_grads) MT_TRY(mt_cast(&out, &shard, stream));
    return mult != 1.0 ? mt_scale(&out, &out, (float)mult, stream) : MT_OK;
}

mt_status mt_optim_gather_bucket(mt_optim *o, int k, mt_stream stream) {
    MT_REQUIRE(o, MT_ERR_INVALID_ARG, "optimizer is NULL");
    MT_REQUIRE(k >= 0 && k < o->b->n_buckets, MT_ERR_INVALID_ARG, "bucket %d of %d", k,
               o->b->n_buckets);
    if (!o->sharded) return MT_OK;
    mt_optim_bucket bk;
    MT_TRY(mt_optim_buffer_bucket(o->b, k, &bk));
    const int n = bk.expert ? o->edp_size : o->dp_size, me = bk.expert ? o->edp_rank : o->dp_rank;
    if (n == 1) return MT_OK;
    int64_t sn = bk.numel / n;
    mt_tensor shard;
    MT_TRY(mt_tensor_slice(&bk.params, 0, (int64_t)me * sn, sn, &shard));
    return mt_comm_allgather(bk.expert ? o->cfg.expert_dp : o->cfg.dp, &bk.params, &shard, stream);
}

mt_status mt_optim_reduce_grads(mt_optim *o, mt_stream stream) {
    MT_REQUIRE(o, MT_ERR_INVALID_ARG, "optimizer is NULL");
    for (int k = 0; k < o->b->n_buckets; k++)
        MT_TRY(mt_optim_reduce_bucket(o, k, stream));
    return MT_OK;
}

/* Sums the statistics over `comm` in rank order (fp64, so every layout adds the same partials the
 * same way): an all-gather of the raw doubles, on the host or through the device scratch. */
static mt_status reduce_stats(mt_optim *o, struct mt_comm *comm, optim_stats *s, mt_stream stream) {
    int n = mt_comm_size(comm);
    if (n == 1) return MT_OK;
    MT_REQUIRE(n * 3 <= OPTIM_STATS_BLOCKS * 3, MT_ERR_UNSUPPORTED, "group of %d ranks", n);
    double mine[3] = { s->sumsq, s->zeros, s->nonfinite };
    double *all = malloc((size_t)n * 3 * sizeof *all);
    MT_REQUIRE(all, MT_ERR_OOM, "stats of %d ranks", n);
    mt_status st;
    if (mt_comm_has_host(comm)) {
        mt_tensor src = mt_tensor_1d(mine, MT_U8, 24, MT_DEVICE_CPU);
        mt_tensor dst = mt_tensor_1d(all, MT_U8, 24 * (int64_t)n, MT_DEVICE_CPU);
        st = mt_comm_allgather(comm, &dst, &src, stream);
    } else {
        mt_device dev = o->b->cfg.device;
        mt_tensor src = mt_tensor_1d(o->scratch, MT_U8, 24, dev);
        mt_tensor dst = mt_tensor_1d(o->scratch + 3, MT_U8, 24 * (int64_t)n, dev);
        st = mt_memcpy(o->scratch, dev, mine, MT_DEVICE_CPU, 24, stream);
        if (st == MT_OK) st = mt_comm_allgather(comm, &dst, &src, stream);
        if (st == MT_OK) st = mt_memcpy(all, MT_DEVICE_CPU, o->scratch + 3, dev, 24 * n, stream);
        if (st == MT_OK) st = mt_comm_wait(comm, stream);
    }
    if (st == MT_OK) {
        s->sumsq = s->zeros = s->nonfinite = 0.0;
        for (int r = 0; r < n; r++) {
            s->sumsq += all[3 * r];
            s->zeros += all[3 * r + 1];
            s->nonfinite += all[3 * r + 2];
        }
    }
    free(all);
    return st;
}

/* The statistics of the grads: each kind's (dense, expert) summed over the shards of its
 * data-parallel group and over its model-parallel group, then added. */
static mt_status grad_stats(mt_optim *o, optim_stats *s, mt_stream stream) {
    const mt_optim_buffer *b = o->b;
    optim_stats kind[2];
    memset(kind, 0, sizeof kind);
    for (int k = 0; k < o->n_ranges; k++) {
        const optim_range *r = &o->ranges[k];
        optim_stats_args a = { r->n, r->start, b->norm_mask, b->grad_data + r->start };
        optim_stats rs, *t = &kind[r->expert];
        MT_TRY(MT_DISPATCH(b->cfg.device, optim_stats_cpu(&a, &rs),
                           optim_stats_cuda(&a, o->scratch, &rs, stream)));
        t->sumsq += rs.sumsq;
        t->zeros += rs.zeros - (double)r->pad_in_norm; // why: padding is zero but no grad
        t->nonfinite += rs.nonfinite;
    }
    if (o->sharded && o->cfg.dp) MT_TRY(reduce_stats(o, o->cfg.dp, &kind[0], stream));
    if (o->cfg.mp) MT_TRY(reduce_stats(o, o->cfg.mp, &kind[0], stream));
    if (o->has_expert) {
        if (o->sharded && o->cfg.expert_dp)
            MT_TRY(reduce_stats(o, o->cfg.expert_dp, &kind[1], stream));
        if (o->cfg.expert_mp) MT_TRY(reduce_stats(o, o->cfg.expert_mp, &kind[1], stream));
    }
    s->sumsq = kind[0].sumsq + kind[1].sumsq;
    s->zeros = kind[0].zeros + kind[1].zeros;
    s->nonfinite = kind[0].nonfinite + kind[1].nonfinite;
    return MT_OK;
}

mt_status mt_optim_step(mt_optim *o, double lr, double wd, mt_optim_scaler *scaler,
                        mt_optim_step_info *info, mt_stream stream) {
    MT_REQUIRE(o, MT_ERR_INVALID_ARG, "optimizer is NULL");
    MT_REQUIRE(lr >= 0.0 && wd >= 0.0, MT_ERR_INVALID_ARG, "lr %g, wd %g", lr, wd);
    const mt_optim_buffer *b = o->b;
    mt_optim_step_info inf = { 0, NAN, -1, scaler ? scaler->scale : 1.0f, 0 };
    optim_stats s = { 0.0, 0.0, 0.0 };
    int need_stats = o->cfg.check_for_nan_in_grad || o->cfg.clip_grad > 0.0f || scaler ||
                     o->cfg.log_num_zeros_in_grad;
    if (need_stats) MT_TRY(grad_stats(o, &s, stream));
    int found_inf = s.nonfinite > 0.0;
    if (scaler) mt_optim_scaler_update(scaler, found_inf);
    if (found_inf) { /* Megatron: skip the update, count it */
        o->skipped++;
        inf.skipped = 1;
        inf.num_skipped = o->skipped;
        if (info) *info = inf;
        return MT_OK;
    }
    double inv_scale = o->grad_mult / (double)inf.loss_scale;
    if (need_stats) inf.grad_norm = sqrt(s.sumsq) * inv_scale;
    if (o->cfg.log_num_zeros_in_grad) inf.num_zeros = (int64_t)s.zeros;
    double clip = 1.0;
    if (o->cfg.clip_grad > 0.0f) {
        double coeff = o->cfg.clip_grad / (inf.grad_norm + 1.0e-6); /* clip_grad_by_total_norm */
        if (coeff < 1.0) clip = coeff;
    }
    o->steps++;
    double t = (double)o->steps;
    optim_step_args a;
    memset(&a, 0, sizeof a);
    a.kind = o->cfg.kind;
    a.wd_mask = b->wd_mask;
    a.param_dtype = b->cfg.param_dtype;
    a.lr = (float)lr;
    a.wd = (float)wd;
    a.beta1 = o->cfg.adam_beta1;
    a.beta2 = o->cfg.adam_beta2;
    a.eps = o->cfg.adam_eps;
    a.momentum = o->cfg.sgd_momentum;
    a.step_size = (float)(lr / (1.0 - pow(o->cfg.adam_beta1, t)));
    a.bc2_sqrt = (float)sqrt(1.0 - pow(o->cfg.adam_beta2, t));
    a.inv_scale = (float)inv_scale;
    a.clip = (float)clip;
    size_t es = mt_dtype_size(b->cfg.param_dtype);
    for (int k = 0; k < o->n_ranges; k++) {
        const optim_range *r = &o->ranges[k];
        a.n = r->n;
        a.start = r->start;
        a.param = (char *)b->param_data + r->start * es;
        a.master = o->master ? o->master + r->local : NULL;
        a.grad = b->grad_data + r->start;
        a.exp_avg = o->exp_avg + r->local;
        a.exp_avg_sq = o->exp_avg_sq ? o->exp_avg_sq + r->local : NULL;
        MT_TRY(MT_DISPATCH(b->cfg.device, optim_step_cpu(&a), optim_step_cuda(&a, stream)));
    }
    if (o->sharded && !o->cfg.overlap_param_gather) /* every rank gets every shard's update */
        for (int k = 0; k < b->n_buckets; k++)
            MT_TRY(mt_optim_gather_bucket(o, k, stream));
    inf.num_skipped = o->skipped;
    if (info) *info = inf;
    return MT_OK;
}
