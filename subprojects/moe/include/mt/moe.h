/* mt-moe: mixture-of-experts routing and token movement, the parts of Megatron's MoE layer around
 * its experts: the top-k router with the softmax score function (TopKRouter), its
 * load-balancing ("aux_loss") and z losses with their gradients, and the dropless permute /
 * unpermute of the token dispatcher (expert parallelism 1). The experts' GEMMs are the caller's:
 * mt-tensor's linears over each expert's rows of the permuted tokens (rows [off_e, off_e +
 * counts[e]), off_e the sum of the counts before e), which mt_moe_topk's counts give.
 * N tokens, E experts, k experts a token; CPU reference and CUDA kernels, one dispatch on the
 * tensors' device; deterministic (fixed orders, no atomics). */
#ifndef MT_MOE_H
#define MT_MOE_H

#include <mt/core.h>
#include <mt/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The router's options (Megatron's TopKRouter; zeros: its defaults). */
typedef struct mt_moe_router {
    /* --moe-router-pre-softmax: the probabilities are the softmax over all E logits at the chosen
     * experts, not renormalised over the k (Qwen-MoE's norm_topk_prob false); off: the softmax
     * over the k chosen logits (= Mixtral's renormalised softmax) */
    int pre_softmax;
    float scaling; /* --moe-router-topk-scaling-factor: the probabilities times this (0: 1) */
    /* --moe-router-num-groups G / --moe-router-group-topk g (0: none): group-limited routing
     * (DeepSeek-V2/V3's device- or node-limited routing, Megatron's group_limited_topk). The E
     * experts are G equal groups; a token takes its k experts from the g groups whose top k / g
     * scores (the logits, or with pre_softmax the softmax) sum highest (ties: the lower group).
     * E % G == 0, 1 <= g <= G <= 64, g <= k <= g E / G. */
    int num_groups, group_topk;
    /* --moe-router-score-function sigmoid (0: softmax): the scores are sigmoid(logits), each
     * token's k largest chosen (and groups ranked by them), its probabilities its chosen scores
     * over their sum (+ 1e-20; k = 1: the score itself), then times the scaling; the aux loss's
     * scores are the sigmoids over their row's sum (Megatron's). Not with pre_softmax. */
    int sigmoid;
    /* --moe-router-enable-expert-bias (sigmoid only; NULL: none): (E) f32 on the logits' device,
     * added to the scores that choose the experts and rank the groups, not to the probabilities
     * (DeepSeek-V3's aux-loss-free balancing; mt_moe_expert_bias_update moves it). */
    const mt_tensor *expert_bias;
    /* --moe-router-load-balancing-type seq_aux_loss (0: aux_loss): the load-balancing loss of each
     * sequence of this many consecutive tokens (its counts a row of (N / seq_length, E)), averaged
     * over the sequences (Megatron's _apply_seq_aux_loss, DeepSeek-V2/V3's) */
    int64_t seq_length;
} mt_moe_router;

/* Top-k routing of logits (N,E) f32: idx (N,k) i32, each token's k largest logits' experts in
 * descending order (ties: the lower expert first; group-limited: of the chosen groups' experts), probs (N,k) f32 their probabilities (router:
 * NULL for Megatron's defaults), counts (E) i32 the tokens routed to each expert. */
MT_API mt_status mt_moe_topk(mt_tensor *probs, mt_tensor *idx, mt_tensor *counts,
                             const mt_tensor *logits, const mt_moe_router *router,
                             mt_stream stream);

/* The dispatch map of idx (N,k) and counts (E) (mt_moe_topk's): rows (N*k) i32, the token of each
 * permuted row, grouped by expert in expert order and within an expert in token order (Megatron's
 * permute); pos (N,k) i32, the permuted row of token n's j-th choice. */
MT_API mt_status mt_moe_dispatch_map(mt_tensor *rows, mt_tensor *pos, const mt_tensor *idx,
                                     const mt_tensor *counts, mt_stream stream);

/* Megatron's token dropping (--moe-expert-capacity-factor, apply_router_token_dropping): the
 * dispatch map of mt_moe_dispatch_map with at most `capacity` of the tokens routed to each expert:
 * past it, those of the smallest probabilities (policy probs; ties: the later token) or the last
 * in token order (by_position) are dropped (pos -1: the combine and its backward skip them, so
 * their probabilities' gradients are 0; the routing itself, its losses included, is unchanged).
 * kept (E) i32: each expert's rows. With pad (--moe-pad-expert-input-to-capacity) every expert's
 * region is min(capacity, N) rows, those past its kept ones -1 (mt_moe_permute writes zeros
 * there; nothing reads them back), so the experts' GEMMs have one shape; rows then holds
 * E * min(capacity, N) entries, else N*k (the first sum(kept) used, the rest -1). probs, idx,
 * counts: mt_moe_topk's; work: (N*k) i32 scratch (each expert's candidates). */
MT_API mt_status mt_moe_capacity_map(mt_tensor *rows, mt_tensor *pos, mt_tensor *kept,
                                     mt_tensor *work, const mt_tensor *idx, const mt_tensor *probs,
                                     const mt_tensor *counts, int64_t capacity, int by_position,
                                     int pad, mt_stream stream);

/* xp[r] = x[rows[r]] (zeros where rows[r] is -1): x (N,C), xp (R,C) for rows (R), one dtype. */
MT_API mt_status mt_moe_permute(mt_tensor *xp, const mt_tensor *x, const mt_tensor *rows,
                                mt_stream stream);
/* Its backward: dx[n] = sum over j of dxp[pos[n,j]] (j in order, fp32, rounded once; pos -1:
 * none), added to dx when accumulate. dxp (R,C) with R >= every pos + 1. */
MT_API mt_status mt_moe_permute_bwd(mt_tensor *dx, const mt_tensor *dxp, const mt_tensor *pos,
                                    int accumulate, mt_stream stream);
/* The combine: y[n] = resid[n] + sum over j of probs[n,j] * yp[pos[n,j]] (fp32, rounded once;
 * resid NULL: 0; pos -1: dropped, nothing). yp (R,C), y and resid (N,C), one dtype; probs (N,k)
 * f32. */
MT_API mt_status mt_moe_unpermute(mt_tensor *y, const mt_tensor *yp, const mt_tensor *probs,
                                  const mt_tensor *pos, const mt_tensor *resid, mt_stream stream);
/* Its backward for dy (N,C): dyp[pos[n,j]] = probs[n,j] * dy[n] and dprobs[n,j] = dy[n] .
 * yp[pos[n,j]] (f32); a dropped choice (pos -1) gets dprobs 0, and rows of dyp no choice maps to
 * (padding) are not written. */
MT_API mt_status mt_moe_unpermute_bwd(mt_tensor *dyp, mt_tensor *dprobs, const mt_tensor *dy,
                                      const mt_tensor *yp, const mt_tensor *probs,
                                      const mt_tensor *pos, mt_stream stream);

/* The router's losses without their coefficients, added to out (2) f32: out[0] += Megatron's
 * switch_load_balancing_loss_func / coeff = E / (k N^2) * sum over e of counts[e] * sum over n of
 * q[n][e], q = softmax(logits[n]) (router->sigmoid: sigmoid(logits[n]) over its sum + 1e-20);
 * out[1] += z_loss_func / coeff = mean over n of logsumexp(logits[n])^2. counts are Megatron's
 * for the aux loss: each token's plain top k (no groups; mt_moe_aux_counts). router NULL:
 * softmax. With router->seq_length S (seq_aux_loss): counts (N / S, E), each sequence's, and
 * out[0] += E / (k S^2 (N / S)) * sum over n of counts[n / S] . q[n]. */
MT_API mt_status mt_moe_router_losses(mt_tensor *out, const mt_tensor *logits,
                                      const mt_tensor *counts, int topk,
                                      const mt_moe_router *router, mt_stream stream);
/* The tokens per expert that Megatron's aux loss takes (compute_routing_scores_for_aux_loss):
 * counts (E) i32 of each token's plain top k logits (softmax and sigmoid keep their order; no
 * groups), whatever the routing chose; with seq_length S > 0 (seq_aux_loss) each sequence's,
 * (N / S, E). probs and idx (N,k): scratch (their top k). */
MT_API mt_status mt_moe_aux_counts(mt_tensor *counts, mt_tensor *probs, mt_tensor *idx,
                                   const mt_tensor *logits, int64_t seq_length, mt_stream stream);

/* The router's backward: dlogits (N,E) f32, the gradient of sum(dprobs * probs) + aux_scale *
 * aux + z_scale * z with respect to the logits (probs, idx as mt_moe_topk gave them with the same
 * router options; aux and z as
 * mt_moe_router_losses; the scales are the coefficients times the loss's backward scale, 0 for
 * none). dprobs (N,k) f32. */
MT_API mt_status mt_moe_router_bwd(mt_tensor *dlogits, const mt_tensor *dprobs,
                                   const mt_tensor *probs, const mt_tensor *idx,
                                   const mt_tensor *logits, const mt_tensor *counts,
                                   const mt_moe_router *router, float aux_scale, float z_scale,
                                   mt_stream stream);

/* The expert bias's bookkeeping (Megatron's local_tokens_per_expert): tokens (E) f32 += counts (E)
 * i32, the tokens routed to each expert (after dropping). */
MT_API mt_status mt_moe_expert_bias_tokens(mt_tensor *tokens, const mt_tensor *counts,
                                           mt_stream stream);
/* Megatron's get_updated_expert_bias for L routers at once, once their tokens are summed over the
 * ranks that route (TP x CP x DP): bias (L,E) f32 += sign(mean of the row's tokens - tokens) *
 * rate; tokens (L,E) f32 are then zeroed for the next step. */
MT_API mt_status mt_moe_expert_bias_update(mt_tensor *bias, mt_tensor *tokens, float rate,
                                           mt_stream stream);

/* ---- expert parallelism (Megatron's MoEAlltoAllTokenDispatcher) ----
 * E experts over the ep ranks of an expert-parallel group, rank r holding experts
 * [r E/ep, (r+1) E/ep) (its local experts). Each rank permutes its own tokens by expert
 * (mt_moe_dispatch_map, mt_moe_permute: the rows bound for rank j are consecutive, after rank
 * j-1's) and sends each rank its rows for that rank's experts (mt_moe_ep_exchange). A rank
 * receives from each rank in turn that rank's rows for each of its local experts, and sorts them
 * expert-major (a local expert's rows from rank 0, then from rank 1, ...: Megatron's
 * sort_chunks_by_idxs) for its experts' GEMMs. The way back is the reverse: the unsort, then the
 * exchange with send and recv swapped. counts_all (ep, E) i32 on the host: every rank's tokens
 * per expert (mt_moe_topk's counts, all-gathered in rank order). */

/* send (ep): the rows this rank sends each rank; recv (ep): the rows it receives from each;
 * local (E/ep): the rows of each local expert, from every rank. Any of them may be NULL.
 * MT_ERR_INVALID_ARG unless ep divides E, 0 <= rank < ep and every count is >= 0. */
MT_API mt_status mt_moe_ep_counts(const int32_t *counts_all, int ep, int rank, int experts,
                                  int64_t *send, int64_t *recv, int64_t *local);
/* The sort of the n rows received (n: the sum of recv): rows[r] is the received row that
 * expert-major row r takes (mt_moe_permute(sorted, received, rows)); inverse: rows[q] is the
 * expert-major row that received row q takes back (the unsort, by mt_moe_permute too). */
MT_API mt_status mt_moe_ep_sort(const int32_t *counts_all, int ep, int rank, int experts,
                                int inverse, int32_t *rows, int64_t n);

struct mt_comm; /* <mt/comm.h> */
/* The all-to-all of rows over the expert-parallel group `ep` (mt_comm_alltoallv): src's first
 * sum(send) rows go to the ranks in turn, send[j] rows to rank j; recv[i] rows from rank i land
 * in dst in rank order. src (Rs,C) and dst (Rd,C) one dtype on the comm's side (host or device),
 * Rs >= sum(send), Rd >= sum(recv). The counts must agree pairwise (mt_moe_ep_counts of the same
 * counts_all). */
MT_API mt_status mt_moe_ep_exchange(struct mt_comm *ep, mt_tensor *dst, const mt_tensor *src,
                                    const int64_t *send, const int64_t *recv, mt_stream stream);

/* The exchange and the sort in one, each row sent straight to its place: dispatch moves this
 * rank's permuted rows `in` (N*k,C) to the ranks of their experts, into each rank's `out` in
 * expert-major order (what mt_moe_ep_exchange then mt_moe_permute with mt_moe_ep_sort's map
 * give); combine is its reverse (expert-major `in` back into the permuted `out`, each row to the
 * rank it came from). One send and one receive a (rank, local expert) chunk, batched
 * (mt_comm_p2p_batch: NCCL or MPI), this rank's own chunks copied. counts_all as above, the same
 * on every rank of `ep`; the tensors one dtype and width, with at least the rows the counts
 * place. */
MT_API mt_status mt_moe_ep_dispatch(struct mt_comm *ep, mt_tensor *out, const mt_tensor *in,
                                    const int32_t *counts_all, int experts, mt_stream stream);
MT_API mt_status mt_moe_ep_combine(struct mt_comm *ep, mt_tensor *out, const mt_tensor *in,
                                   const int32_t *counts_all, int experts, mt_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* MT_MOE_H */
