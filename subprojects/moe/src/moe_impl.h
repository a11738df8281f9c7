/* Private: the CPU reference and the CUDA kernels share these signatures (CUDA adds the stream).
 * Arguments are validated by the front-end (moe.c): shapes consistent, contiguous, one device. */
#ifndef MT_MOE_IMPL_H
#define MT_MOE_IMPL_H

#include <math.h>
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
    int groups, group_topk;   /* router: group-limited routing (0: none) */
    int sigmoid;              /* router: sigmoid scores (0: softmax) */
    const float *bias;        /* router: the expert bias (E), added to the routing scores */
    float rate;               /* expert bias update: its step */
    int64_t seq;              /* seq_aux_loss: the aux loss's counts per sequence of seq tokens */
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
mt_status moe_expert_bias_tokens_cpu(const moe_args *a); /* probs (E) += counts_in */
mt_status moe_expert_bias_update_cpu(const moe_args *a); /* probs: bias, dlogits: tokens (N,E) */

mt_status moe_topk_cuda(const moe_args *a, mt_stream s);
mt_status moe_dispatch_map_cuda(const moe_args *a, mt_stream s);
mt_status moe_capacity_map_cuda(const moe_args *a, mt_stream s);
mt_status moe_permute_cuda(const moe_args *a, mt_stream s);
mt_status moe_permute_bwd_cuda(const moe_args *a, mt_stream s);
mt_status moe_unpermute_cuda(const moe_args *a, mt_stream s);
mt_status moe_unpermute_bwd_cuda(const moe_args *a, mt_stream s);
mt_status moe_router_losses_cuda(const moe_args *a, mt_stream s);
mt_status moe_router_bwd_cuda(const moe_args *a, mt_stream s);
mt_status moe_expert_bias_tokens_cuda(const moe_args *a, mt_stream s);
mt_status moe_expert_bias_update_cuda(const moe_args *a, mt_stream s);

/* ---- group-limited routing, shared by the CPU reference and the CUDA kernel ---- */
#ifdef __CUDACC__
#define MOE_HD __host__ __device__
#else
#define MOE_HD
#endif

/* One row's softmax statistics: its largest logit and the sum of exp(l - max), in expert order. */
static inline MOE_HD void moe_row_stats(const float *l, int64_t E, float *mx, float *sum) {
    float m = -INFINITY, t = 0.0f;
    for (int64_t e = 0; e < E; e++)
        m = l[e] > m ? l[e] : m;
    for (int64_t e = 0; e < E; e++)
        t += expf(l[e] - m);
    *mx = m, *sum = t;
}

/* A token's score of expert e: the logit (a softmax router's order), or its sigmoid. */
static inline MOE_HD float moe_score(const moe_args *a, const float *l, int64_t e) {
    return a->sigmoid ? 1.0f / (1.0f + expf(-l[e])) : l[e];
}

/* The score that chooses expert e (and ranks its group): moe_score plus the expert bias. */
static inline MOE_HD float moe_rscore(const moe_args *a, const float *l, int64_t e) {
    return a->bias ? moe_score(a, l, e) + a->bias[e] : moe_score(a, l, e);
}

/* The tokens per expert that token n's aux loss takes: its sequence's (seq_aux_loss), else the
 * batch's; and the aux loss's denominator, k N^2, or k S^2 (N / S) per sequence of S. */
static inline MOE_HD const int32_t *moe_aux_row(const moe_args *a, int64_t n) {
    return a->counts_in + (a->seq ? n / a->seq * a->E : 0);
}
static inline MOE_HD double moe_aux_den(const moe_args *a) {
    return a->seq ? (double)a->k * a->seq * a->seq * (double)(a->N / a->seq)
                  : (double)a->k * a->N * a->N;
}

/* Whether (v, i) comes after (w, j) in descending order, ties: the lower index first. */
static inline MOE_HD int moe_after(float v, int64_t i, float w, int64_t j) {
    return v < w || (v == w && i > j);
}

/* The groups a token with logits l (E) may take, as a bit mask: the group_topk groups whose top
 * k / group_topk scores (moe_rscore, or with pre_softmax softmax(l), from the row's
 * moe_row_stats mx and sum) sum highest, each group's largest first; every group without group-limited
 * routing. */
static inline MOE_HD uint64_t moe_group_mask(const moe_args *a, const float *l, float mx,
                                             float sum) {
    if (!a->groups) return ~(uint64_t)0;
    const int64_t per = a->E / a->groups, m = a->k / a->group_topk;
    float gs[64];
    for (int g = 0; g < a->groups; g++) { /* its m largest, in turn */
        float s = 0.0f, pv = 0.0f;
        int64_t pi = -1;
        for (int64_t i = 0; i < m; i++) {
            int64_t b = -1;
            for (int64_t e = g * per; e < (g + 1) * per; e++)
                if ((pi < 0 || moe_after(moe_rscore(a, l, e), e, pv, pi)) &&
                    (b < 0 || moe_after(moe_rscore(a, l, b), b, moe_rscore(a, l, e), e)))
                    b = e;
            s += a->pre_softmax ? expf(l[b] - mx) / sum : moe_rscore(a, l, b);
            pv = moe_rscore(a, l, b), pi = b;
        }
        gs[g] = s;
    }
    uint64_t mask = 0;
    for (int i = 0; i < a->group_topk; i++) { /* the largest groups left */
        int b = -1;
        for (int g = 0; g < a->groups; g++)
            if (!(mask >> g & 1) && (b < 0 || moe_after(gs[b], b, gs[g], g))) b = g;
        mask |= (uint64_t)1 << b;
    }
    return mask;
}

/* The expert a token takes j-th (ids before it in id[0, j)): the largest routing score among the
 * allowed groups' experts not yet taken, ties: the lower expert. */
static inline MOE_HD int32_t moe_pick(const moe_args *a, const float *l, uint64_t groups,
                                      const int32_t *id, int64_t j) {
    const int64_t per = a->groups ? a->E / a->groups : a->E;
    int32_t best = -1;
    float bv = 0.0f;
    for (int64_t e = 0; e < a->E; e++) {
        int taken = !(groups >> (e / per) & 1);
        for (int64_t i = 0; i < j; i++)
            taken |= id[i] == e;
        const float v = moe_rscore(a, l, e);
        if (!taken && (best < 0 || v > bv)) best = (int32_t)e, bv = v;
    }
    return best;
}

/* ---- sigmoid scores (Megatron's score_function sigmoid), shared by CPU and CUDA ---- */

/* A token's k probabilities: its chosen scores over their sum + 1e-20 (k = 1: the score), times
 * the scaling. */
static inline MOE_HD void moe_sigmoid_probs(const moe_args *a, const float *l, const int32_t *id,
                                            float *p) {
    float t = 0.0f;
    for (int64_t j = 0; j < a->k; j++)
        t += p[j] = moe_score(a, l, id[j]);
    for (int64_t j = 0; j < a->k; j++)
        p[j] = (a->k > 1 ? p[j] / (t + 1e-20f) : p[j]) * a->scaling;
}

/* The sum of a row's sigmoids (the aux loss's scores are each over it + 1e-20). */
static inline MOE_HD float moe_sigmoid_sum(const moe_args *a, const float *l) {
    float t = 0.0f;
    for (int64_t e = 0; e < a->E; e++)
        t += moe_score(a, l, e);
    return t + 1e-20f;
}

/* One token's logits' gradient dl (E) with sigmoid scores sg: from the probabilities, at each
 * chosen e (T the chosen scores' sum + 1e-20, g = dp times the scaling) g_e / T - sum_j g_j
 * sg_j / T^2 (k = 1: g_e), times sg_e (1 - sg_e); the aux loss's c sg_e (1 - sg_e) (counts_e -
 * sum_i q_i counts_i) / t, q = sg / t (t: moe_sigmoid_sum); the z loss's z_scale 2 lse
 * softmax(l)_e / N (mx, sum: the row's moe_row_stats). */
static inline MOE_HD void moe_sigmoid_bwd_row(const moe_args *a, const float *l, const float *dp,
                                              const int32_t *id, float mx, float sum, float *dl) {
    const float c = a->aux_scale * (float)a->E / (float)moe_aux_den(a);
    const float t = moe_sigmoid_sum(a, l), lse = mx + logf(sum);
    const int32_t *cnt = moe_aux_row(a, (l - a->logits) / a->E);
    float sc = 0.0f, ts = 0.0f, gs = 0.0f;
    for (int64_t e = 0; e < a->E; e++)
        sc += moe_score(a, l, e) / t * (float)cnt[e];
    for (int64_t e = 0; e < a->E; e++) {
        const float sg = moe_score(a, l, e);
        dl[e] = c * sg * (1.0f - sg) * ((float)cnt[e] - sc) / t +
                a->z_scale * 2.0f * lse * (expf(l[e] - mx) / sum) / (float)a->N;
    }
    for (int64_t j = 0; j < a->k; j++) {
        const float sg = moe_score(a, l, id[j]);
        ts += sg, gs += dp[j] * sg;
    }
    ts += 1e-20f;
    for (int64_t j = 0; j < a->k; j++) {
        const float sg = moe_score(a, l, id[j]);
        const float ds = a->k > 1 ? dp[j] / ts - gs / (ts * ts) : dp[j];
        dl[id[j]] += ds * a->scaling * sg * (1.0f - sg);
    }
}

#ifdef __cplusplus
}
#endif

#endif /* MT_MOE_IMPL_H */
