/* Private: the model's parameter specs and planned activations. */
#ifndef MT_MODEL_IMPL_H
#define MT_MODEL_IMPL_H

#include <mt/attention.h>
#include <mt/model.h>

#define MT_MODEL_MAX_PARAMS 4096
#define MT_MODEL_NAME_LEN   96

typedef struct param_spec {
    char name[MT_MODEL_NAME_LEN];
    int ndim;
    int64_t shape[2];
    int64_t offset, numel; /* in elements of the weight/grad buffers */
    float std;
    int ones, no_wd;
    /* tensor parallelism: split along `axis` (-1: whole), whose full length is nblk blocks blk[],
     * each split evenly over the ranks (a rank holds part r of every block, in block order) */
    int axis, nblk;
    int64_t blk[3];
    int64_t full[2]; /* the unsharded shape */
    int shared;      /* the last pipeline stage's copy of the tied embedding */
} param_spec;

/* The tensor-parallel size (1 without) and this rank's share of the heads, query groups, MLP
 * width (F) and padded vocabulary. */
static inline int tp_n(const mt_model_config *c) {
    return c->tensor_model_parallel_size > 1 ? c->tensor_model_parallel_size : 1;
}
static inline int64_t local_heads(const mt_model_config *c) {
    return c->num_attention_heads / tp_n(c);
}
static inline int64_t local_groups(const mt_model_config *c) {
    return c->num_query_groups / tp_n(c);
}
static inline int64_t local_ffn(const mt_model_config *c) {
    return c->ffn_hidden_size / tp_n(c);
}
static inline int64_t local_vocab(const mt_model_config *c) {
    return c->padded_vocab_size / tp_n(c);
}
/* Pipeline parallelism: the number of stages (1 without), this model's decoder layers
 * [stage_l0, stage_l0 + stage_nl) (global numbers: names, dropout sites and levels keep them),
 * whether it is the first (embeddings) and the last (final norm, output layer, loss) stage, and
 * its activation slots (micro-batches in flight under 1F1B: P - rank). */
static inline int pp_n(const mt_model_config *c) {
    return c->pipeline_model_parallel_size > 1 ? c->pipeline_model_parallel_size : 1;
}
/* Stage r's first layer and layer count under a split the config allows (mt_model_stage_layers
 * checks it): the first and/or last stage's count if set, the others' the rest evenly. */
static inline void stage_range(const mt_model_config *c, int r, int *l0, int *nl) {
    const int V = c->virtual_pipeline_model_parallel_size;
    if (V > 1 && (c->num_layers_in_first_pipeline_stage || c->num_layers_in_last_pipeline_stage)) {
        /* (uneven and interleaved, megatron.core's get_transformer_layer_offset: every round of
         * chunks holds the ranks' shares over V, in rank order) */
        const int P = pp_n(c) / V, F = c->num_layers_in_first_pipeline_stage,
                  E = c->num_layers_in_last_pipeline_stage, left = P - (F > 0) - (E > 0);
        const int mid = left > 0 ? (c->num_layers - F - E) / left / V : 0;
        const int f = F ? F / V : mid, e = E ? E / V : mid, rank = r % P;
        *nl = rank == 0 ? f : rank == P - 1 ? e : mid;
        *l0 = r / P * (f + (P - 2) * mid + e) + (rank == 0 ? 0 : f + (rank - 1) * mid);
        return;
    }
    const int P = pp_n(c), F = c->num_layers_in_first_pipeline_stage,
              E = c->num_layers_in_last_pipeline_stage;
    const int left = P - (F > 0) - (E > 0);
    const int mid = left > 0 ? (c->num_layers - F - E) / left : 0;
    const int first = F ? F : mid; /* the first stage's count (= mid when no end is set) */
    *nl = r == 0 ? first : r == P - 1 && E ? E : mid;
    *l0 = r == 0 ? 0 : first + (r - 1) * mid;
}
static inline int stage_nl(const mt_model_config *c) { /* (of a finalized config) */
    int l0, nl;
    stage_range(c, pp_n(c) > 1 ? c->pipeline_model_parallel_rank : 0, &l0, &nl);
    return nl;
}
static inline int stage_l0(const mt_model_config *c) {
    int l0, nl;
    stage_range(c, pp_n(c) > 1 ? c->pipeline_model_parallel_rank : 0, &l0, &nl);
    return l0;
}
static inline int first_stage(const mt_model_config *c) {
    return pp_n(c) == 1 || c->pipeline_model_parallel_rank == 0;
}
static inline int last_stage(const mt_model_config *c) {
    return pp_n(c) == 1 || c->pipeline_model_parallel_rank == pp_n(c) - 1;
}
static inline int pp_slots(const mt_model_config *c) {
    if (c->pipeline_num_slots > 0) return c->pipeline_num_slots;
    return pp_n(c) > 1 ? pp_n(c) - c->pipeline_model_parallel_rank : 1;
}
/* Mixture of experts: the experts (0: dense MLPs), the choices a token, an expert's MLP width. */
static inline int moe_n(const mt_model_config *c) {
    return c->num_moe_experts;
}
static inline int64_t moe_k(const mt_model_config *c) {
    return c->moe_router_topk;
}
static inline int64_t local_moe_ffn(const mt_model_config *c) { /* (each expert's share) */
    return c->moe_ffn_hidden_size / tp_n(c);
}
/* Whether layer l's MLP is MoE (--moe-layer-freq: moe_dense_layer marks the dense ones; an MTP
 * depth's layer is the decoder's last layer's kind, as megatron.core's MTP block spec), whether
 * some layer's is, and whether some layer's MLP is dense. */
static inline int moe_layer(const mt_model_config *c, int l) {
    if (l >= c->num_layers) l = c->num_layers - 1; /* (an MTP depth's layer: the last layer's) */
    return c->num_moe_experts > 0 && !(l < MT_MODEL_MAX_LAYERS && c->moe_dense_layer[l]);
}
static inline int any_moe_layer(const mt_model_config *c) {
    for (int l = 0; l < c->num_layers; l++)
        if (moe_layer(c, l)) return 1;
    return 0;
}
static inline int any_dense_layer(const mt_model_config *c) {
    for (int l = 0; l < c->num_layers; l++)
        if (!moe_layer(c, l)) return 1;
    return 0;
}
/* The shared experts' width (0: none) and this rank's share of it. */
static inline int64_t shared_n(const mt_model_config *c) {
    return c->num_moe_experts ? c->moe_shared_expert_intermediate_size : 0;
}
static inline int64_t local_shared_ffn(const mt_model_config *c) {
    return shared_n(c) / tp_n(c);
}
/* Token dropping: an expert's capacity for N tokens (Megatron's get_capacity of N * topk), the
 * padded region of each expert (0 without padding), the permuted rows. */
static inline int64_t moe_capacity(const mt_model_config *c, int64_t N) {
    const double v = (double)N * (double)moe_k(c) / moe_n(c) * c->moe_expert_capacity_factor;
    const int64_t cap = (int64_t)v;
    return cap < v ? cap + 1 : cap;
}
static inline int64_t moe_region(const mt_model_config *c, int64_t N) {
    if (c->moe_expert_capacity_factor <= 0.0f || !c->moe_pad_expert_input_to_capacity) return 0;
    return moe_capacity(c, N) < N ? moe_capacity(c, N) : N;
}
static inline int64_t moe_rows(const mt_model_config *c, int64_t N) {
    return moe_region(c, N) ? moe_n(c) * moe_region(c, N) : N * moe_k(c);
}

/* Expert parallelism: its ranks (1: none), this rank's experts [moe_first, + moe_local), and the
 * rows they can receive: each of the ep ranks' N tokens sends each rank at most min(k, its
 * experts) rows, or padded to capacity each rank its region for each of them (without expert
 * parallelism: the permuted rows). */
static inline int ep_n(const mt_model_config *c) {
    return c->expert_model_parallel_size > 1 ? c->expert_model_parallel_size : 1;
}
static inline int moe_local(const mt_model_config *c) {
    return moe_n(c) / ep_n(c);
}
static inline int moe_first(const mt_model_config *c) {
    return ep_n(c) > 1 ? c->expert_model_parallel_rank * moe_local(c) : 0;
}
static inline int64_t moe_expert_rows(const mt_model_config *c, int64_t N) {
    const int64_t k = moe_k(c) < moe_local(c) ? moe_k(c) : moe_local(c);
    if (ep_n(c) == 1) return moe_rows(c, N);
    return moe_region(c, N) ? ep_n(c) * moe_local(c) * moe_region(c, N) : ep_n(c) * N * k;
}

/* Context parallelism: its ranks (1: none). */
static inline int cp_n(const mt_model_config *c) {
    return c->context_parallel_size > 1 ? c->context_parallel_size : 1;
}

/* Context parallelism on CUDA, whose chunks (seq_length / 2 tokens) are not a multiple of
 * MT_ATTN_PREFIX_ALIGN: mt-attention's forward over a key prefix would take its kernel for
 * decoding's few rows, so the model pads each chunk's queries in front to the square (cp_qp). */
static inline int cp_padded(const mt_model_config *c, mt_device dev) {
    return cp_n(c) > 1 && mt_device_is_cuda(dev) && c->seq_length / 2 % MT_ATTN_PREFIX_ALIGN != 0;
}

/* Context parallelism on CUDA without padding: a rank's two chunks' attention kernels run side
 * by side, the second on a side stream (mt_model.cp_side). why: each chunk's grid alone leaves
 * SMs idle (at T 8192, B 1, 16 heads its blocks fit in one wave; the rank's share of the work
 * took as long as one GPU's whole attention, the longest block setting the time). */
static inline int cp_two_streams(const mt_model_config *c, mt_device dev) {
    return cp_n(c) > 1 && mt_device_is_cuda(dev) && !cp_padded(c, dev) &&
           mt_env_int("MT_CP_STREAMS", 1) != 0; /* (0: one stream, for comparisons) */
}

/* Whether layer l attends through the sliding window (window_size, not one of the
 * full_attention_layer ones; an MTP depth's layer: the last layer's kind). */
static inline int window_layer(const mt_model_config *c, int l) {
    if (l >= c->num_layers) l = c->num_layers - 1;
    return c->window_size > 0 && !(l < MT_MODEL_MAX_LAYERS && c->full_attention_layer[l]);
}

/* Multi-token prediction's depths (0: none). Depth k+1's transformer layer is layer
 * num_layers + k of the layer tables (lp, the activation sets: one stage, one slot). */
static inline int mtp_n(const mt_model_config *c) {
    return c->mtp_num_layers > 0 ? c->mtp_num_layers : 0;
}

/* The token rows of the residual stream a rank holds: N, or N / tp with sequence parallelism. */
static inline int64_t local_rows(const mt_model_config *c, int64_t N) {
    return c->sequence_parallel ? N / tp_n(c) : N;
}

typedef struct layer_acts {
    mt_tensor resid_in; /* (N,C) residual stream entering the layer */
    mt_tensor ln1, ln1_mean, ln1_rstd;
    mt_tensor qkv; /* (N,(H+2G)D): q heads | k heads | v heads, RoPE applied */
    /* qk_layernorm: the q and k heads before their norms, (N*H, D) and (N*G, D), and the norms'
     * statistics per head row */
    mt_tensor q_raw, k_raw, q_mean, q_rstd, k_mean, k_rstd;
    mt_tensor atty;      /* (N,HD) attention output before linear_proj */
    mt_tensor lse;       /* (B,H,T) */
    mt_tensor resid_mid; /* (N,C) resid_in + attention */
    mt_tensor ln2, ln2_mean, ln2_rstd;
    mt_tensor fc1_pre; /* (N,F) before GELU, or (N,2F) gate|up for SwiGLU (MoE: (N*k, ...) of
                          the permuted rows, each expert's consecutive) */
    mt_tensor fc1_act; /* (N,F) */
    /* mixture of experts: the router's logits (N,E) f32, each token's top-k probabilities (N,k)
     * f32 and experts (N,k) i32, the tokens per expert (E) i32 (and their host copy, counts_h),
     * the dispatch map (rows (N*k), pos (N,k) i32), the permuted inputs and the experts' outputs
     * (N*k,C) */
    mt_tensor router_logits, moe_probs, moe_idx, moe_counts, moe_rows, moe_pos, moe_xp, moe_yp;
    mt_tensor moe_kept; /* token dropping: the rows each expert keeps (E) i32 */
    /* context parallelism with the router's losses: the tokens per expert (E) i32 summed over the
     * group (the sequences' counts, Megatron's tp_cp reduce of tokens_per_expert) */
    mt_tensor moe_counts_cp;
    /* group-limited routing with the router's losses: the load-balancing loss's tokens per expert
     * (E) i32, each token's plain top k (mt_moe_aux_counts) */
    mt_tensor moe_aux_counts;
    int32_t *counts_h; /* the experts' row counts (kept ones with dropping) on the host; with
                           expert parallelism every rank's (ep,E), rank-major */
    /* the rows this rank's experts run on (fc1's input): moe_xp, or with expert parallelism the
     * rows received, expert-major (moe_expert_rows) */
    mt_tensor moe_xe;
    /* the shared experts (every token's rows): fc1's output, the activation, and with the gate
     * fc2's output (N,C) (this rank's partial sum under tensor parallelism) and the gate's
     * sigmoid (N,1) f32 */
    mt_tensor sh_pre, sh_act, sh_y, sh_g;
    /* multi-latent attention (qkv: the heads as the attention takes them, (N, 3 H D) with D =
     * qk_head_dim + qk_pos_emb_head_dim, each query and key head its rotary channels first, each
     * value head zero-padded; atty: the attention's padded output (N, H D)): q_lora_rank's latent
     * (N, Rq) and its norm's output and statistics; the queries (N, H Dq) (linear_q_proj's or
     * linear_q_up_proj's output); linear_kv_down_proj's output (N, Rkv + rope), its first Rkv
     * columns apart (kv_c), their norm's output and statistics; linear_kv_up_proj's output
     * (N, H (qk_head_dim + v_head_dim)); linear_proj's input, the values' channels of atty
     * (N, H v_head_dim) */
    mt_tensor mla_qc, mla_qn, mla_q_mean, mla_q_rstd, mla_q, mla_kvl, mla_kc, mla_kn, mla_k_mean;
    mt_tensor mla_k_rstd, mla_kv, mla_o;
} layer_acts;

/* Multi-token prediction, depth k+1 (mt_model_config.mtp_num_layers): the tokens, learned
 * positions and targets rolled left by k+1 (B,T) i32; the embedding of those tokens (after its
 * dropout) (Nl,C); the two norms' statistics; eh_proj's input [enorm | hnorm] (Nl,2C); the
 * transformer layer's output (Nl,C); final_layernorm's output (the next depth's input, the
 * head's) and statistics; that output's gradient (Nl,C). */
typedef struct mtp_acts {
    mt_tensor tok, pos, tgt, emb, en_mean, en_rstd, hn_mean, hn_rstd, cat, out;
    mt_tensor fin, fin_mean, fin_rstd, dh;
} mtp_acts;

typedef struct acts {
    layer_acts *layer; /* views, slot-major ([slot * stage_nl + l - stage_l0]: layer_of); the
                          recomputed layers share the rc sets (resid_in of a group's first layer
                          excepted: that is the kept input) */
    layer_acts *rc;    /* n_rc scratch sets reused by the recomputed layers (with MoE and dense
                          layers both: n_rc of each, the dense layers' after the MoE layers') */
    int n_rc;
    mt_tensor resid_final; /* (Nl,C) the last layer's output (a pipeline stage's, sent on) */
    mt_tensor lnf, lnf_mean, lnf_rstd, logits, losses, stats;
    /* since the last mt_model_take_loss: each token's loss summed over the micro-batches (N) and
     * the count of counted tokens (1), both f32 */
    mt_tensor loss_sum, loss_count;
    mt_tensor dres, dln, datty, dqkv, dfc1_act, dfc1_pre, norm_scratch, ws;
    mt_tensor moe_dfc1_act, moe_dfc1_pre; /* (the experts' rows: dfc1_act's and dfc1_pre's) */
    /* recompute_mlp_act: every layer's fc1_act (N,F), and the MoE layers' (the experts' rows) */
    mt_tensor mlp_act, moe_mlp_act;
    mt_tensor ln_out; /* recompute_layernorm: every layer's ln1 and ln2 (N,C) */
    mt_tensor dloss;  /* logits_chunks > 1 or per_token_loss: each token's loss gradient (N) f32 */
    mt_tensor drop;   /* hidden_dropout: a projection's output before its dropout and residual
                          add (forward), its gradient after the dropout (backward) (N,C) */
    mt_tensor tp_stats; /* tensor parallelism: the vocab-parallel cross-entropy's (3N) f32 */
    /* sequence parallelism: the residual stream and the norms hold this rank's N/tp token rows.
     * ln_all: a layer's norm output gathered over the group (N,C) for the column-parallel linear
     * that reads it, gathered again before its weight gradient (Megatron's: not kept per layer);
     * lnf_all: the final norm's, kept for the output layer's backward */
    mt_tensor ln_all, lnf_all;
    mt_tensor sp_all;  /* sequence parallelism: (N,C) scratch of the gathers and reduce-scatters */
    mt_tensor qk_grad; /* tensor parallelism, qk_layernorm: a layer's q and k norm weight and bias
                           gradients (4D) f32, summed over the group before they are added */
    /* mixture of experts: the router losses' sums (2) f32 (mt_model_take_moe_losses); backward
     * scratch: the combine's dyp and permute's dxp (N*k,C), dprobs (N,k) f32, the logits'
     * gradient (N,E) f32 and in the model dtype */
    mt_tensor moe_loss, moe_dyp, moe_dxp, moe_dprobs, moe_dlogits, moe_dlogits_dt;
    mt_tensor moe_aux_probs, moe_aux_idx; /* (mt_moe_aux_counts's scratch: (N,k) f32, i32) */
    /* MoE under tensor parallelism or hidden dropout: the combine's output before the residual
     * add (N,C): this rank's partial sum (summed over the group), dropped before the add */
    mt_tensor moe_y;
    mt_tensor moe_work; /* token dropping: the capacity map's workspace (N*k) i32 */
    /* expert parallelism (else views of the above): the experts' outputs (moe_ye) and the
     * gradients of their outputs and inputs (moe_dye, moe_dxe), expert-major, (moe_expert_rows,
     * C). Every rank's tokens per expert (ep,E) i32 */
    mt_tensor moe_ye, moe_dye, moe_dxe, moe_counts_all;
    /* the shared experts: their combine's identity map (N,1) i32 and unit weights (N,1) f32
     * (shared_constants), its output (N,C), fc2's output without the gate (N,C), the gate's logits
     * and then their gradient (N,1) f32; backward scratch: fc2's output's gradient (N,C), the
     * gate's (N,1) f32, the logits' gradient in the model dtype, the activation's and fc1's */
    mt_tensor sh_pos, sh_ones, sh_out, sh_y, sh_logit, sh_dy, sh_dg, sh_dlogit_dt, sh_dact, sh_dpre;
    /* context parallelism: a layer's keys|values (B,T,2G,D) as this rank holds them (kvl; the
     * reduce-scattered gradient in the backward), every rank's gathered (kva, (cp,B,T,2G,D); the
     * gradient rank-major before its reduce-scatter), in sequence order (kv, (B,cp T,2G,D)), their
     * gradient (dkv) and one chunk's part of it (tmp), both (B,cp T,2G,D) */
    mt_tensor cp_kvl, cp_kva, cp_kv, cp_dkv, cp_tmp;
    /* context parallelism on CUDA: a chunk's queries padded to the keys' length, their output
     * (B, cp T, H, D) and lse (B, H, cp T) (the forward over a key prefix, as a square) */
    mt_tensor cp_qp, cp_op, cp_lp;
    /* context parallelism on a side stream (cp_side): the second chunk's dk, dv and workspace */
    mt_tensor cp_tmp2, ws2;
    /* multi-latent attention's backward scratch: linear_proj's input's gradient (N, H v), the
     * queries' (N, H Dq), linear_kv_up_proj's output's, linear_kv_down_proj's output's, the
     * q latent's norm's output's and input's (N, Rq) and the kv latent's (N, Rkv), the rotary
     * key's (N, rope); a zero (mla_zero, 1 element: the value heads' padding, broadcast) and the
     * heads' ones (H) for the rotary key's gradient, summed over the heads */
    mt_tensor mla_do, mla_dq, mla_dkv, mla_dkvl, mla_dqn, mla_dqc, mla_dkn, mla_dkc, mla_dpe;
    mt_tensor mla_zero, mla_ones;
    mt_tensor mla_shares; /* mla_dkn, mla_dpe and mla_dqn's storage, in that order (one span) */
    /* recompute_mla_up_proj: every layer's packed heads (N, 3 H D) and up-projected queries and
     * keys|values, refilled before each attention backward */
    mt_tensor mla_up_qkv, mla_up_q, mla_up_kv;
    /* multi-token prediction: each depth's (mtp_n), the gradient its first depth's hnorm gives
     * the final norm's output (Nl,C), eh_proj's input gradient (Nl,2C), a scratch (Nl,C), the
     * rolls' fill values (B) i32 (zeros, then the ignore index), and the depths' token losses
     * summed over the micro-batches (D,N) and their counts (D) f32 */
    mtp_acts *mtp;
    mt_tensor mtp_dh0, mtp_dcat, mtp_tmp, mtp_fill, mtp_sum, mtp_count;
    mt_tensor mtp_pos0; /* (learned positions: 0..T-1 in every row, rolled when none are set) */
} acts;

/* Multi-token prediction, a depth's own parameters (its transformer layer's: lp[num_layers + k]):
 * enorm, hnorm, eh_proj and final_layernorm (the biases NULL with RMSNorm). */
typedef struct mtp_params {
    mt_model_param *en_w, *en_b, *hn_w, *hn_b, *eh_w, *fn_w, *fn_b;
} mtp_params;

typedef struct layer_params {
    mt_model_param *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    mt_model_param *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
    mt_model_param *qn_w, *qn_b, *kn_w, *kn_b; /* qk_layernorm */
    /* mixture of experts (E experts; the biases NULL without add_bias_linear) */
    mt_model_param *router_w, **exp_fc1, **exp_fc2, **exp_fc1_b, **exp_fc2_b;
    mt_model_param *sh_fc1, *sh_fc2, *sh_gate; /* the shared experts (NULL: none, no gate) */
    /* multi-latent attention: linear_q_proj, or with q_lora_rank linear_q_up_proj (mla_q), its
     * linear_q_down_proj (mla_qd) and norm; linear_kv_down_proj, linear_kv_up_proj's norm and
     * weight */
    mt_model_param *mla_q, *mla_qd, *mla_qn_w, *mla_qn_b, *mla_kvd, *mla_kvn_w, *mla_kvn_b;
    mt_model_param *mla_kvu;
} layer_params;

/* What a captured forward_backward (or inference forward) depends on besides the model's own
 * buffers. */
typedef struct graph_key {
    const void *tokens, *targets, *positions, *sample_ids, *kv;
    mt_stream stream;
    float loss_scale;
    mt_model_grad_ready_fn ready_fn; /* what the capture recorded of the callbacks' work */
    void *ready_ctx;
    mt_model_param_wait_fn wait_fn;
    void *wait_ctx;
} graph_key;

/* One captured step: a graph for the backward that writes the grads, one for the one that adds,
 * each without and with a grad-ready callback (a data-parallel trainer sets it for the last
 * micro-batch only) and a param-wait callback */
#define MODEL_GRAPH_SLOTS 8
typedef struct graph_slot {
    int seen;      /* a call with key ran eagerly */
    graph_key key; /* what the graph (or the eager call before it) was made for */
    mt_graph *graph;
} graph_slot;

struct mt_model {
    mt_model_config cfg;
    int B;
    mt_device dev;
    mt_blas *blas;
    /* MoE: the experts' GEMMs, whose row counts change at every step: a handle of their own,
     * without autotuning (each new shape's plan would be timed: 14x slower steps on an H100),
     * whose plan cache theirs do not churn. (cublasGemmEx instead of the plans' heuristic was
     * tried: 17% slower at 8 experts of 2048 x 5632, no faster at 16 of 1024 x 1408.) */
    mt_blas *blas_x;
    mt_comm *tp;         /* tensor-parallel group (NULL: TP 1) */
    mt_comm *ep;         /* expert-parallel group (mt_model_set_expert_group; NULL: none) */
    mt_comm *cp;         /* context-parallel group (mt_model_set_context_group; NULL: none) */
    int tpr;             /* this rank's place in it */
    mt_tp_async tpa;     /* CUDA, MT_TP_ASYNC=1: the column-parallel backwards' collectives
                            beside their dW GEMMs (off by default: no faster on GPT-2 124M at
                            TP 2 and 4 on H100s, 1-3% slower) */
    mt_tp_async *tpa_on; /* &tpa when used, else NULL */
    /* cp_two_streams: the second chunk's stream (NULL: none), forked from the layer's stream and
     * joined to it by the two events */
    mt_stream cp_side;
    mt_event cp_fork, cp_join;
    int nparams;
    param_spec *spec;
    mt_model_param *params;
    mt_arena *w_arena, *g_arena, *a_arena;
    mt_model_slots shared; /* the activation slots in the caller's memory (base NULL: in a_arena) */
    size_t ws_bytes;
    acts a;
    layer_params *lp; /* (num_layers + mtp_n: the MTP depths' transformer layers last) */
    mtp_params *mp;   /* multi-token prediction: each depth's (NULL: none) */
    mt_model_param *wte, *wpe, *lnf_w, *lnf_b, *out_w;
    mt_model_param *mtp_wte; /* multi-token prediction: the embedding it reads (the last stage's) */
    mt_tensor mtp_in_tok, mtp_in_tgt; /* mt_model_set_mtp_inputs (data NULL: the model rolls) */
    const float *mtp_mult;            /* its scales, a depth's (mtp_n; NULL: ones) */
    int n_loss;                       /* micro-batches in loss_sum */
    /* pipeline parallelism: the slot the forward or backward running now uses, and each slot's
     * tokens (the embedding backward's; slot 0 without pipeline parallelism); pp_fwd: the last stage's pp_forward of a
     * training micro-batch ran (its pp_backward comes next) */
    int slot, nslots, pp_fwd;
    mt_tensor *slot_tokens;
    mt_tensor pos;    /* mt_model_set_positions (data NULL: 0..T-1 in every sequence) */
    mt_tensor ks;     /* mt_model_set_key_starts (data NULL: no document masks) */
    mt_tensor win_ks; /* (B,T) i32 max(0, t - window_size) (win_arena; data NULL: no window) */
    mt_arena *win_arena;
    mt_tensor ids;     /* mt_model_set_sample_ids (data NULL: none) */
    int train;         /* the forward running now is forward_backward's (dropout on) */
    int recomputing;   /* a full recomputation's forward runs (MoE: no router losses counted) */
    float loss_scale;  /* the training forward's (MoE: the router losses' backward scale) */
    int mtp_ran;       /* the last forward ran the MTP depths (their gradients are in) */
    int n_moe;         /* mixture of experts: layer forwards in a->moe_loss */
    int32_t *moe_host; /* mixture of experts: every activation set's tokens per expert */
    mt_model_param **moe_params; /* the layers' expert tables (lp's exp_fc1, exp_fc2, biases) */
    mt_prof *prof;               /* not owned; NULL: no timing */
    mt_model_grad_ready_fn ready_fn;
    void *ready_ctx;
    mt_model_param_wait_fn wait_fn; /* mt_model_set_param_wait */
    void *wait_ctx;
    int graphs;          /* mt_model_set_cuda_graphs */
    int grads_discarded; /* mt_model_discard_grads: the next backward writes, not adds */
    graph_slot gs[MODEL_GRAPH_SLOTS]; /* [grads_discarded + 2 * (ready_fn != NULL) +
                                         4 * (wait_fn != NULL)] */
    /* inference (mt_model_create_inference, _view; mt_model_set_kv_cache) */
    int no_grads;           /* no gradients: forwards only */
    int view;               /* the weights are another model's */
    mt_model_kv_cache *kv;  /* NULL: no KV cache */
    mt_tensor kv_positions; /* (B,T) i32: row b's pos[b] + t (kv_arena) */
    mt_tensor kv_len;       /* (B) i32: pos[b] + T, the keys after this forward (kv_arena) */
    mt_arena *kv_arena;
    graph_slot gf; /* mt_model_forward's graph (inference models with graphs on) */
    /* the expert bias (cfg.moe_router_enable_expert_bias): n_eb routers (this model's MoE
     * layers), their biases and counted tokens (n_eb, E) f32 (eb_arena; a view: its source's
     * biases and no tokens), eb_row[l] layer l's row (-1: none), eb_view[i] row i, eb_name[i]
     * its name */
    int n_eb;
    mt_tensor eb_bias, eb_tokens;
    int *eb_row;
    mt_tensor *eb_view;
    char (*eb_name)[MT_MODEL_NAME_LEN];
    mt_arena *eb_arena;
};

/* Every layer's keys and values: k[l], v[l] (B, max_len, local kv heads, kv channels). */
struct mt_model_kv_cache {
    mt_model_config cfg; /* the config of the model it was made for */
    int B, max_len;
    mt_device dev;
    mt_arena *arena;
    mt_tensor *k, *v;
};

/* Whether layer l is recomputed (full granularity) and, if so, its group [*g0, *g1]: layers
 * recomputed together from the input kept for g0, in scratch sets 0..g1-g0. */
static inline int recompute_group(const mt_model_config *c, int l, int *g0, int *g1) {
    /* (Megatron's: counted in each pipeline stage's layers) */
    int n = c->recompute_num_layers, l0 = stage_l0(c), end = l0 + stage_nl(c);
    if (c->recompute_granularity != MT_RECOMPUTE_FULL || l >= c->num_layers) return 0; /* (MTP) */
    if (c->recompute_method == MT_RECOMPUTE_BLOCK) {
        *g0 = *g1 = l;
        return l - l0 < n;
    }
    *g0 = l - (l - l0) % n;
    *g1 = *g0 + n - 1 < end - 1 ? *g0 + n - 1 : end - 1;
    return 1;
}

/* Layer l's activations in the slot running now (an MTP depth's layer, l >= num_layers: its one
 * set after every slot's, on the last stage: a micro-batch's depths run forward and backward in
 * its forward). */
static inline layer_acts *layer_of(const mt_model *m, int l) {
    const int L = m->cfg.num_layers;
    if (l >= L) return &m->a.layer[m->nslots * stage_nl(&m->cfg) + l - L];
    return &m->a.layer[m->slot * stage_nl(&m->cfg) + l - stage_l0(&m->cfg)];
}

#endif /* MT_MODEL_IMPL_H */
