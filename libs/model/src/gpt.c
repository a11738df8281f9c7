/* The decoder forward and backward (GPT-2 and Llama style): embedding, pre-norm layers of
 * attention and MLP with fused residual adds, final norm, output layer and cross-entropy. The
 * linears, the embedding and the cross-entropy are mt-tp's (Megatron's tensor-parallel layers:
 * with no group, TP 1, each is its plain mt-tensor op): linear_qkv, linear_fc1 and the output
 * layer column-parallel, linear_proj and linear_fc2 row-parallel, the embedding and the
 * cross-entropy vocab-parallel. The row-parallel backwards are mt-tensor's own GEMMs (local, fused
 * with the GELU's backward), after dY's gather under sequence parallelism. */
#include "model_impl.h"

#include <mt/moe.h>

#include <stddef.h>
#include <string.h>

#define W(p) ((p) ? &(p)->weight : NULL)
/* One operation, timed as region `name` when a profiler is set (mt_model_set_profiler). */
#define OP(name, expr)                           \
    do {                                         \
        MT_TRY(mt_prof_begin(m->prof, name, s)); \
        MT_TRY(expr);                            \
        MT_TRY(mt_prof_end(m->prof, s));         \
    } while (0)
#define G(p) ((p) ? &(p)->grad : NULL)

/* Sequence parallelism: whether it is on. */
static int sp(const mt_model *m) {
    return m->cfg.sequence_parallel;
}

/* A layer norm's output as a column-parallel linear's backward reads it: under sequence
 * parallelism gathered again into ln_all (the forward keeps only this rank's rows). */
static mt_status ln_rows(mt_model *m, mt_tensor *ln, const mt_tensor **x, mt_stream s) {
    *x = ln;
    if (!sp(m)) return MT_OK;
    *x = &m->a.ln_all;
    return mt_tp_gather_rows(m->tp, &m->a.ln_all, ln, s);
}

/* Views of one layer's fused qkv (N,(H+2G)D) as q (B,T,H,D), k and v (B,T,G,D). */
static mt_status qkv_views(const mt_model *m, const mt_tensor *qkv, mt_tensor *q, mt_tensor *k,
                           mt_tensor *v) {
    const mt_model_config *c = &m->cfg;
    int64_t H = local_heads(c), G = local_groups(c);
    mt_tensor all;
    MT_TRY(mt_tensor_reshape(qkv, 4, (int64_t[]){ m->B, c->seq_length, H + 2 * G, c->kv_channels },
                             &all));
    MT_TRY(mt_tensor_slice(&all, 2, 0, H, q));
    MT_TRY(mt_tensor_slice(&all, 2, H, G, k));
    return mt_tensor_slice(&all, 2, H + G, G, v);
}

static mt_status as_bthd(const mt_model *m, const mt_tensor *x, int64_t heads, mt_tensor *out) {
    return mt_tensor_reshape(
        x, 4, (int64_t[]){ m->B, m->cfg.seq_length, heads, m->cfg.kv_channels }, out);
}

/* The norm of x (the residual stream: the projections' GEMMs add it, so no fused residual here). */
static mt_status norm_fwd(const mt_model *m, mt_tensor *out, mt_tensor *mean, mt_tensor *rstd,
                          const mt_tensor *x, const mt_model_param *w, const mt_model_param *b,
                          mt_stream s) {
    if (m->cfg.normalization == MT_NORM_LAYERNORM)
        return mt_layernorm_fwd(out, NULL, mean, rstd, x, NULL, W(w), W(b), m->cfg.norm_epsilon, s);
    return mt_rmsnorm_fwd(out, NULL, rstd, x, NULL, W(w), m->cfg.norm_epsilon, s);
}

/* The norm's backward; the column sums of its dx also give sum_b's gradient (NULL: none): the
 * bias of the linear layer whose output dx is the gradient of, in the same pass. */
static mt_status norm_bwd(mt_model *m, mt_tensor *dx, mt_model_param *w, mt_model_param *b,
                          mt_model_param *sum_b, const mt_tensor *dout, const mt_tensor *x,
                          const mt_tensor *mean, const mt_tensor *rstd, const mt_tensor *dresid,
                          mt_stream s) {
    if (m->cfg.normalization == MT_NORM_LAYERNORM)
        return mt_layernorm_bwd(dx, G(w), G(b), G(sum_b), &m->a.norm_scratch, dout, x, W(w), mean,
                                rstd, dresid, !m->grads_discarded, s);
    return mt_rmsnorm_bwd(dx, G(w), G(sum_b), &m->a.norm_scratch, dout, x, W(w), rstd, dresid,
                          !m->grads_discarded, s);
}

/* The position ids (mt_model_set_positions; over a KV cache pos..pos+T-1), or NULL for 0..T-1. */
static const mt_tensor *positions(const mt_model *m) {
    return m->pos.data ? &m->pos : m->kv ? &m->kv_positions : NULL;
}

/* RoPE on the q or k heads x: each head's first int(kv_channels x rotary_percent) channels (the
 * whole head by default), or multi-latent attention's rotary channels (the first
 * qk_pos_emb_head_dim of each head as the model lays them out; interleaved pairs). */
static mt_status rope(mt_model *m, mt_tensor *x, int backward, mt_stream s) {
    const mt_model_config *c = &m->cfg;
    const mt_tensor *p = positions(m);
    const int mla = c->multi_latent_attention;
    const int rd = mla ? c->qk_pos_emb_head_dim : (int)(c->kv_channels * c->rotary_percent);
    const int il = mla ? 1 : c->rotary_interleaved;
    const mt_rope_scaling *sc = &c->rope_scaling;
    mt_rope_scaling lr;
    if (sc->type == MT_ROPE_SCALING_LONGROPE && c->rope_long_factors[0] > 0.0 &&
        (m->kv ? m->kv->max_len : c->seq_length) > sc->original_max_position_embeddings) {
        lr = *sc; /* (LongRoPE's long factors: a context beyond the original) */
        memcpy(lr.ext_factors, c->rope_long_factors, sizeof lr.ext_factors);
        sc = &lr;
    }
    if (backward) return mt_rope_scaled_bwd(x, x, p, rd, c->rotary_base, il, sc, s);
    return mt_rope_scaled_fwd(x, x, p, rd, c->rotary_base, il, sc, s);
}

/* ---- multi-latent attention ---- */

/* A (d0, d1, d2) view of t's elements from `off` on with strides (s0, s1, s2) (t contiguous). */
static mt_tensor strided(const mt_tensor *t, int64_t off, int64_t d0, int64_t d1, int64_t d2,
                         int64_t s0, int64_t s1, int64_t s2) {
    mt_tensor v = mt_tensor_3d((char *)t->data + off * (int64_t)mt_dtype_size(t->dtype), t->dtype,
                               d0, d1, d2, t->device);
    v.stride[0] = s0, v.stride[1] = s1, v.stride[2] = s2;
    return v;
}

static mt_status copy_to(mt_tensor dst, mt_tensor src, mt_stream s) {
    return mt_copy(&dst, &src, s);
}

/* The heads as the attention takes them, from MLA's projections, into la->qkv (N, 3, H, D): each
 * query head [rotary | rest] from linear_q(_up)_proj's [rest | rotary]; each key head the shared
 * rotary key and linear_kv_up_proj's key channels; each value head its value channels, then
 * zeros. why the rotary channels first: RoPE takes a head's leading channels, and the dot
 * products do not depend on the channels' order. */
static mt_status mla_pack(mt_model *m, layer_acts *la, mt_stream s) {
    const mt_model_config *c = &m->cfg;
    const int64_t N = (int64_t)m->B * c->seq_length, H = local_heads(c), D = c->kv_channels;
    const int64_t dn = c->qk_head_dim, dr = c->qk_pos_emb_head_dim, dv = c->v_head_dim;
    const int64_t R = c->kv_lora_rank, row = 3 * H * D, kv = dn + dv;
    mt_tensor *q = &la->qkv;
    MT_TRY(copy_to(strided(q, 0, N, H, dr, row, D, 1),
                   strided(&la->mla_q, dn, N, H, dr, H * D, D, 1), s));
    MT_TRY(copy_to(strided(q, dr, N, H, dn, row, D, 1),
                   strided(&la->mla_q, 0, N, H, dn, H * D, D, 1), s));
    MT_TRY(copy_to(strided(q, H * D, N, H, dr, row, D, 1),
                   strided(&la->mla_kvl, R, N, H, dr, R + dr, 0, 1), s));
    MT_TRY(copy_to(strided(q, H * D + dr, N, H, dn, row, D, 1),
                   strided(&la->mla_kv, 0, N, H, dn, H * kv, kv, 1), s));
    MT_TRY(copy_to(strided(q, 2 * H * D, N, H, dv, row, D, 1),
                   strided(&la->mla_kv, dn, N, H, dv, H * kv, kv, 1), s));
    if (D == dv) return MT_OK;
    return copy_to(strided(q, 2 * H * D + dv, N, H, D - dv, row, D, 1),
                   strided(&m->a.mla_zero, 0, N, H, D - dv, 0, 0, 0), s);
}

/* MLA's up-projections from the kept latents (without a query latent, linear_q_proj from the
 * normed input x) and mla_pack's heads: the forward's, and recompute_mla_up_proj's again before
 * the attention backward. */
static mt_status mla_up(mt_model *m, layer_acts *la, const layer_params *lp, const mt_tensor *x,
                        mt_stream s) {
    MT_TRY(mt_linear_fwd(m->blas, &la->mla_q, NULL, m->cfg.q_lora_rank ? &la->mla_qn : x,
                         W(lp->mla_q), NULL, 0, s));
    MT_TRY(mt_linear_fwd(m->blas, &la->mla_kv, NULL, &la->mla_kn, W(lp->mla_kvu), NULL, 0, s));
    return mla_pack(m, la, s);
}

/* MLA's projections of the layer's normed input (under sequence parallelism every rank's rows,
 * gathered into ln_all: the down-projections are whole on every rank) and mla_pack's heads. */
static mt_status mla_fwd(mt_model *m, layer_acts *la, const layer_params *lp, mt_stream s) {
    const mt_model_config *c = &m->cfg;
    const int64_t N = (int64_t)m->B * c->seq_length, R = c->kv_lora_rank;
    const int64_t dr = c->qk_pos_emb_head_dim;
    const mt_tensor *x = &la->ln1;
    if (sp(m)) {
        MT_TRY(mt_tp_gather_rows(m->tp, &m->a.ln_all, &la->ln1, s));
        x = &m->a.ln_all;
    }
    if (c->q_lora_rank) {
        MT_TRY(mt_linear_fwd(m->blas, &la->mla_qc, NULL, x, W(lp->mla_qd), NULL, 0, s));
        MT_TRY(norm_fwd(m, &la->mla_qn, &la->mla_q_mean, &la->mla_q_rstd, &la->mla_qc, lp->mla_qn_w,
                        lp->mla_qn_b, s));
    }
    MT_TRY(mt_linear_fwd(m->blas, &la->mla_kvl, NULL, x, W(lp->mla_kvd), NULL, 0, s));
    MT_TRY(copy_to(strided(&la->mla_kc, 0, N, 1, R, R, R, 1),
                   strided(&la->mla_kvl, 0, N, 1, R, R + dr, R, 1), s));
    MT_TRY(norm_fwd(m, &la->mla_kn, &la->mla_k_mean, &la->mla_k_rstd, &la->mla_kc, lp->mla_kvn_w,
                    lp->mla_kvn_b, s));
    return mla_up(m, la, lp, x, s);
}

/* linear_proj's input: the value channels of the attention's padded output. */
static mt_status mla_out(mt_model *m, layer_acts *la, mt_stream s) {
    const mt_model_config *c = &m->cfg;
    const int64_t N = (int64_t)m->B * c->seq_length, H = local_heads(c), D = c->kv_channels;
    const int64_t dv = c->v_head_dim;
    return copy_to(strided(&la->mla_o, 0, N, H, dv, H * dv, dv, 1),
                   strided(&la->atty, 0, N, H, dv, H * D, D, 1), s);
}

/* linear_proj's input's gradient (a->mla_do) as the attention's output's (a->datty), whose
 * padding was zeroed when the model was made. */
static mt_status mla_out_bwd(mt_model *m, mt_stream s) {
    const mt_model_config *c = &m->cfg;
    const int64_t N = (int64_t)m->B * c->seq_length, H = local_heads(c), D = c->kv_channels;
    const int64_t dv = c->v_head_dim;
    acts *a = &m->a;
    return copy_to(strided(&a->datty, 0, N, H, dv, H * D, D, 1),
                   strided(&a->mla_do, 0, N, H, dv, H * dv, dv, 1), s);
}

/* MLA's backward from the heads' gradient a->dqkv (RoPE's backward done) to a->dln, the normed
 * input's (x: that input as the forward read it, every row). Under tensor parallelism this rank's
 * heads give a share of the latents' and the rotary key's gradients, summed over the group before
 * the latents' norms; the whole down-projections' input gradient is then the same on every rank,
 * so each rank adds 1/tp of it to its heads' share of linear_q_proj's before the one all-reduce
 * (reduce-scatter with sequence parallelism) that a column-parallel linear's backward makes. */
static mt_status mla_bwd(mt_model *m, layer_acts *la, const layer_params *lp, const mt_tensor *x,
                         int acc, mt_stream s) {
    const mt_model_config *c = &m->cfg;
    acts *a = &m->a;
    const int64_t N = (int64_t)m->B * c->seq_length, H = local_heads(c), D = c->kv_channels;
    const int64_t dn = c->qk_head_dim, dr = c->qk_pos_emb_head_dim, dv = c->v_head_dim;
    const int64_t R = c->kv_lora_rank, row = 3 * H * D, kv = dn + dv;
    const int tp = tp_n(c);
    const mt_tensor *g = &a->dqkv;
    MT_TRY(copy_to(strided(&a->mla_dq, dn, N, H, dr, H * D, D, 1),
                   strided(g, 0, N, H, dr, row, D, 1), s));
    MT_TRY(copy_to(strided(&a->mla_dq, 0, N, H, dn, H * D, D, 1),
                   strided(g, dr, N, H, dn, row, D, 1), s));
    MT_TRY(copy_to(strided(&a->mla_dkv, 0, N, H, dn, H * kv, kv, 1),
                   strided(g, H * D + dr, N, H, dn, row, D, 1), s));
    MT_TRY(copy_to(strided(&a->mla_dkv, dn, N, H, dv, H * kv, kv, 1),
                   strided(g, 2 * H * D, N, H, dv, row, D, 1), s));
    /* the shared rotary key's gradient: its heads' summed, ones (1, H) times each row's (H, dr) */
    mt_tensor dpe = strided(&a->mla_dpe, 0, N, 1, dr, dr, dr, 1);
    mt_tensor dk = strided(g, H * D, N, H, dr, row, D, 1);
    MT_TRY(mt_gemm(m->blas, &dpe, NULL, &a->mla_ones, &dk, NULL, 0, 1.0f, 0.0f, s));
    MT_TRY(mt_linear_bwd(m->blas, &a->mla_dkn, G(lp->mla_kvu), NULL, &a->mla_dkv, &la->mla_kn,
                         W(lp->mla_kvu), acc, s));
    if (c->q_lora_rank)
        MT_TRY(mt_linear_bwd(m->blas, &a->mla_dqn, G(lp->mla_q), NULL, &a->mla_dq, &la->mla_qn,
                             W(lp->mla_q), acc, s));
    if (tp > 1) MT_TRY(mt_tp_all_reduce(m->tp, &a->mla_shares, s)); /* (the heads' shares) */
    MT_TRY(norm_bwd(m, &a->mla_dkc, lp->mla_kvn_w, lp->mla_kvn_b, NULL, &a->mla_dkn, &la->mla_kc,
                    &la->mla_k_mean, &la->mla_k_rstd, NULL, s));
    MT_TRY(copy_to(strided(&a->mla_dkvl, 0, N, 1, R, R + dr, R, 1),
                   strided(&a->mla_dkc, 0, N, 1, R, R, R, 1), s));
    MT_TRY(copy_to(strided(&a->mla_dkvl, R, N, 1, dr, R + dr, dr, 1), dpe, s));
    /* the input's gradient over every row (sequence parallelism: into sp_all, then scattered) */
    mt_tensor *dx = sp(m) ? &a->sp_all : &a->dln;
    const float share = 1.0f / (float)tp; /* (the whole linears' part of each rank's sum) */
    MT_TRY(mt_linear_bwd(m->blas, NULL, G(lp->mla_kvd), NULL, &a->mla_dkvl, x, W(lp->mla_kvd), acc,
                         s));
    MT_TRY(mt_gemm(m->blas, dx, NULL, &a->mla_dkvl, W(lp->mla_kvd), NULL, 0, share, 0.0f, s));
    const mt_tensor *dq = &a->mla_dq; /* (the queries' input's gradient: a share of dx next) */
    mt_model_param *wq = lp->mla_q;
    float qs = 1.0f; /* (linear_q_proj: this rank's heads' part) */
    if (c->q_lora_rank) {
        MT_TRY(norm_bwd(m, &a->mla_dqc, lp->mla_qn_w, lp->mla_qn_b, NULL, &a->mla_dqn, &la->mla_qc,
                        &la->mla_q_mean, &la->mla_q_rstd, NULL, s));
        dq = &a->mla_dqc, wq = lp->mla_qd, qs = share;
    }
    MT_TRY(mt_linear_bwd(m->blas, NULL, G(wq), NULL, dq, x, W(wq), acc, s));
    MT_TRY(mt_gemm(m->blas, dx, NULL, dq, W(wq), NULL, 0, qs, 1.0f, s));
    if (tp == 1) return MT_OK;
    return sp(m) ? mt_tp_reduce_scatter_rows(m->tp, &a->dln, dx, s)
                 : mt_tp_all_reduce(m->tp, &a->dln, s);
}

/* Dropout sites (mt_model_config.hidden_dropout): 0 the embeddings, 1 + 3l layer l's attention
 * weights, 2 + 3l its linear_proj, 3 + 3l its linear_fc2. */
enum {
    SITE_EMB = 0,
    SITE_ATTN = 1,
    SITE_PROJ = 2,
    SITE_FC2 = 3
};

/* The dropout at `site` with probability p: p 0 (none) outside forward_backward. */
static mt_dropout_config drop_cfg(const mt_model *m, float p, uint32_t site) {
    mt_dropout_config d = { .p = m->train ? p : 0.0f,
                            .seed = m->cfg.seed,
                            .site = site,
                            .sample = m->ids.data ? &m->ids : NULL };
    return d;
}

/* The hidden dropout at `site` on the residual stream's rows (sequence parallelism: this rank's
 * window of the micro-batch's (B, T*C) elements, so the masks are TP 1's). */
static mt_dropout_config hidden_cfg(const mt_model *m, uint32_t site) {
    mt_dropout_config d = drop_cfg(m, m->cfg.hidden_dropout, site);
    if (sp(m)) {
        const int64_t row = (int64_t)m->cfg.seq_length * m->cfg.hidden_size;
        d.row = row;
        d.offset = (int64_t)m->tpr * m->B * row / tp_n(&m->cfg);
    }
    return d;
}

/* Whether the hidden dropout runs now (a forward_backward with hidden_dropout > 0). */
static int hidden_drop(const mt_model *m) {
    return m->train && m->cfg.hidden_dropout > 0.0f;
}

/* The attention's config for layer l (its dropout site: under tensor parallelism each rank's
 * heads draw from sites of their own past the model's 3L + 1, Megatron's model-parallel RNG). */
static mt_attn_config attn_cfg(const mt_model *m, int l) {
    mt_attn_config ac = MT_ATTN_CONFIG_INIT;
    ac.causal = 1;
    ac.deterministic = m->cfg.deterministic;
    /* (document masks, with the window if any; else the sliding window's own, but over a KV
     * cache, which is not longer than the window) */
    ac.key_start = m->ks.data                                             ? &m->ks
                   : m->win_ks.data && !m->kv && window_layer(&m->cfg, l) ? &m->win_ks
                                                                          : NULL;
    const uint32_t site = (uint32_t)(SITE_ATTN + 3 * l + m->tpr * (3 * m->cfg.num_layers + 1));
    ac.dropout = drop_cfg(m, m->cfg.attention_dropout, site);
    const mt_rope_scaling *sc = &m->cfg.rope_scaling;
    if (m->cfg.multi_latent_attention && sc->type == MT_ROPE_SCALING_YARN) {
        /* (Megatron's MLA and DeepSeek's: YaRN's mscale on the softmax too, squared) */
        const double ms = mt_rope_yarn_mscale(sc->factor, sc->mscale_all_dim);
        ac.scale =
            (float)(ms * ms / sqrt((double)(m->cfg.qk_head_dim + m->cfg.qk_pos_emb_head_dim)));
    }
    return ac;
}

/* A row-parallel projection: y = resid + dropout(x @ w^T + b) at `site`, the product summed
 * over the tensor-parallel group: the residual add in the GEMM without hidden dropout, else the
 * GEMM into a->drop and mt_dropout's fused add. */
static mt_status linear_drop_add(mt_model *m, mt_tensor *y, const mt_tensor *x,
                                 const mt_model_param *w, const mt_model_param *b,
                                 const mt_tensor *resid, uint32_t site, mt_stream s) {
    if (!hidden_drop(m)) /* (sequence parallelism: the sum reduce-scattered through sp_all) */
        return mt_tp_row_fwd_add(m->tp, m->blas, y, sp(m) ? &m->a.sp_all : NULL, x, W(w), W(b),
                                 resid, sp(m), s);
    MT_TRY(mt_tp_row_fwd(m->tp, m->blas, &m->a.drop, sp(m) ? &m->a.sp_all : NULL, x, W(w), W(b),
                         sp(m), s));
    mt_dropout_config d = hidden_cfg(m, site);
    return mt_dropout(y, &m->a.drop, resid, &d, s);
}

/* The gradient a projection at `site` sees under hidden dropout: dres's dropout into a->drop. */
static mt_status drop_grad(mt_model *m, uint32_t site, const mt_tensor **dy, mt_stream s) {
    mt_dropout_config d = hidden_cfg(m, site);
    MT_TRY(mt_dropout(&m->a.drop, &m->a.dres, NULL, &d, s));
    *dy = &m->a.drop;
    return MT_OK;
}

static mt_status check_ids(const mt_model *m, const mt_tensor *t, const char *what) {
    MT_TRY(mt_tensor_check(t, what, 2));
    MT_REQUIRE(t->dtype == MT_I32 && t->shape[0] == m->B && t->shape[1] == m->cfg.seq_length &&
                   mt_device_eq(t->device, m->dev),
               MT_ERR_INVALID_ARG, "%s must be i32 (%d,%d) on the model's device", what, m->B,
               m->cfg.seq_length);
    return MT_OK;
}

/* One layer's forward from its resid_in into layer l's activations. The projections add the
 * residual stream in their GEMMs: resid_mid = resid_in + proj(attention), and next = resid_mid +
 * fc2(MLP), the next layer's resid_in (or resid_final), skipped when next is NULL (a
 * recomputation needs only what the backward reads, and the next layer's input is not among
 * it). */
/* qk_layernorm, forward: each q and k head (views into qkv) normalised in place; the inputs kept
 * in q_raw and k_raw with the norms' statistics for the backward. */
static mt_status qk_norm_fwd(mt_model *m, layer_acts *la, const layer_params *lp, mt_tensor *q,
                             mt_tensor *k, mt_stream s) {
    const mt_model_config *c = &m->cfg;
    const int rms = c->normalization == MT_NORM_RMSNORM;
    MT_TRY(mt_head_norm_fwd(q, &la->q_raw, rms ? NULL : &la->q_mean, &la->q_rstd, W(lp->qn_w),
                            W(lp->qn_b), rms, c->norm_epsilon, s));
    return mt_head_norm_fwd(k, &la->k_raw, rms ? NULL : &la->k_mean, &la->k_rstd, W(lp->kn_w),
                            W(lp->kn_b), rms, c->norm_epsilon, s);
}

/* qk_layernorm, backward: dq and dk (views into dqkv) from the normalised heads' gradients to
 * the raw heads', and the norms' weight (and bias) gradients. Under tensor parallelism each rank
 * sees its own heads: the norms' gradients (whole on every rank) are this layer's sums over the
 * group, formed in a->qk_grad and then added. */
static mt_status qk_norm_bwd(mt_model *m, layer_acts *la, const layer_params *lp, mt_tensor *dq,
                             mt_tensor *dk, mt_stream s) {
    const mt_model_config *c = &m->cfg;
    const int rms = c->normalization == MT_NORM_RMSNORM, acc = !m->grads_discarded;
    const int64_t D = c->kv_channels;
    mt_tensor g[4], *dst[4] = { G(lp->qn_w), G(lp->qn_b), G(lp->kn_w), G(lp->kn_b) };
    for (int i = 0; i < 4; i++) {
        g[i] = dst[i] ? *dst[i] : (mt_tensor){ 0 };
        if (m->tp && dst[i]) MT_TRY(mt_tensor_slice(&m->a.qk_grad, 0, i * D, D, &g[i]));
    }
    const int gacc = m->tp ? 0 : acc;
#define GP(i) (dst[i] ? &g[i] : NULL)
    MT_TRY(mt_head_norm_bwd(dq, GP(0), GP(1), &m->a.norm_scratch, &la->q_raw, W(lp->qn_w),
                            rms ? NULL : &la->q_mean, &la->q_rstd, rms, gacc, s));
    MT_TRY(mt_head_norm_bwd(dk, GP(2), GP(3), &m->a.norm_scratch, &la->k_raw, W(lp->kn_w),
                            rms ? NULL : &la->k_mean, &la->k_rstd, rms, gacc, s));
#undef GP
    if (!m->tp) return MT_OK;
    MT_TRY(mt_tp_all_reduce(m->tp, &m->a.qk_grad, s));
    for (int i = 0; i < 4; i++)
        if (dst[i]) MT_TRY(acc ? mt_axpy(dst[i], 1.0f, &g[i], s) : mt_copy(dst[i], &g[i], s));
    return MT_OK;
}

/* Rows [off, off + n) of a (rows, cols) tensor. */
static mt_status rows_of(const mt_tensor *t, int64_t off, int64_t n, mt_tensor *out) {
    return mt_tensor_slice(t, 0, off, n, out);
}

/* Mixture of experts: this rank's expert e's rows of the experts' tensors (each expert's after
 * the earlier experts'): its padded region, or its tokens (kept ones with dropping); with expert
 * parallelism expert moe_first + e's tokens of every rank. */
static int64_t expert_n(const mt_model *m, const layer_acts *la, int e) {
    const mt_model_config *c = &m->cfg;
    const int64_t region = moe_region(c, (int64_t)m->B * c->seq_length);
    int64_t n = 0;
    for (int r = 0; r < ep_n(c) && !region; r++)
        n += la->counts_h[r * moe_n(c) + moe_first(c) + e];
    return region ? region * ep_n(c) : n;
}

/* Expert parallelism, out (this rank's experts' rows, expert-major) from in (this rank's rows
 * permuted by expert, N*k): each row sent to the rank of its expert, straight to its place
 * (Megatron's token dispatch; in the backward, the combine's gradient). */
static mt_status ep_dispatch(mt_model *m, const layer_acts *la, mt_tensor *out, const mt_tensor *in,
                             mt_stream s) {
    return mt_moe_ep_dispatch(m->ep, out, in, la->counts_h, moe_n(&m->cfg), s);
}

/* Expert parallelism, the way back: out (N*k, as this rank permuted them) from in (this rank's
 * experts' rows, expert-major), each row to the rank it came from (the experts' outputs; in the
 * backward, their inputs' gradient). */
static mt_status ep_return(mt_model *m, const layer_acts *la, mt_tensor *out, const mt_tensor *in,
                           mt_stream s) {
    return mt_moe_ep_combine(m->ep, out, in, la->counts_h, moe_n(&m->cfg), s);
}

/* Layer l's router options (mt-moe's: the config's, and its expert bias). */
static mt_moe_router router_of(const mt_model *m, int l) {
    const mt_model_config *c = &m->cfg;
    const int b = m->n_eb ? m->eb_row[l] : -1;
    return (mt_moe_router){ c->moe_router_pre_softmax,
                            c->moe_router_topk_scaling_factor,
                            c->moe_router_num_groups,
                            c->moe_router_group_topk,
                            c->moe_router_score_sigmoid,
                            b >= 0 ? &m->eb_view[b] : NULL,
                            c->moe_router_seq_aux ? c->seq_length : 0 };
}

/* Mixture of experts: expert e's fc2 bias as its forward adds it: on one tensor-parallel rank
 * only (the combine is summed over the group), NULL without biases. */
static const mt_tensor *fc2_b(const mt_model *m, const layer_params *lp, int e) {
    return m->tpr == 0 ? W(lp->exp_fc2_b[e]) : NULL;
}

/* Mixture of experts: whether the router losses run (in a training forward, not recomputed). */
static int moe_losses_on(const mt_model *m) {
    return m->cfg.moe_aux_loss_coeff > 0.0f || m->cfg.moe_z_loss_coeff > 0.0f;
}

/* Mixture of experts: whether the load-balancing loss takes other tokens per expert than the
 * routing's: Megatron's are each token's plain top k, which group-limited routing need not
 * choose (mt_moe_aux_counts). */
static int aux_counts_apart(const mt_model_config *c) {
    return c->moe_router_num_groups > 0 || c->moe_router_seq_aux;
}

/* Mixture of experts: the tokens per expert that the load-balancing loss takes (context
 * parallelism: the sequences', over the group). */
static const mt_tensor *loss_counts(const mt_model *m, const layer_acts *la) {
    return cp_n(&m->cfg) > 1           ? &la->moe_counts_cp
           : aux_counts_apart(&m->cfg) ? &la->moe_aux_counts
                                       : &la->moe_counts;
}

/* Mixture of experts: the experts' GEMMs that experts_gemm runs. */
enum {
    EXP_FWD,
    EXP_DX,
    EXP_DW
};

/* Mixture of experts without biases (SwiGLU experts): each expert's linear over its rows of the
 * permuted tensors, all experts' as grouped GEMMs (one launch where cuBLAS has it, instead of one
 * GEMM and one cuBLASLt plan per expert and row count). EXP_FWD: out = in w_e^T; EXP_DX:
 * out = in w_e; EXP_DW: w_e's grad (+)= in^T x (out unused). Experts without rows are skipped. */
static mt_status experts_gemm(const mt_model *m, const layer_acts *la, int op, mt_tensor *out,
                              const mt_tensor *in, const mt_tensor *x, mt_model_param *const *w,
                              int acc, mt_stream s) {
    enum {
        CHUNK = 64
    };
    mt_tensor cs[CHUNK], as[CHUNK], bs[CHUNK];
    mt_tensor *cp[CHUNK];
    const mt_tensor *ap[CHUNK], *bp[CHUNK];
    const int E = moe_local(&m->cfg);
    const int flags = op == EXP_FWD ? MT_GEMM_TRANS_B : op == EXP_DW ? MT_GEMM_TRANS_A : 0;
    int n = 0;
    int64_t off = 0;
    for (int e = 0; e < E; off += expert_n(m, la, e++)) {
        const int64_t rows = expert_n(m, la, e);
        if (rows) {
            MT_TRY(rows_of(in, off, rows, &as[n]));
            ap[n] = &as[n];
            if (op == EXP_DW) {
                MT_TRY(rows_of(x, off, rows, &bs[n]));
                cp[n] = G(w[e]), bp[n] = &bs[n];
            } else {
                MT_TRY(rows_of(out, off, rows, &cs[n]));
                cp[n] = &cs[n], bp[n] = W(w[e]);
            }
            n++;
        }
        if (n == CHUNK || (e == E - 1 && n)) {
            MT_TRY(mt_gemm_grouped(m->blas_x, n, cp, ap, bp, flags, 1.0f,
                                   op == EXP_DW && acc ? 1.0f : 0.0f, s));
            n = 0;
        }
    }
    return MT_OK;
}

/* Mixture of experts: the experts' SwiGLU over the rows they have (expert parallelism: fewer than
 * their buffers'), forward (fc1_act) or backward (dfc1_pre). */
static mt_status experts_swiglu(mt_model *m, const layer_acts *la, int backward, mt_stream s) {
    acts *a = &m->a;
    int64_t n = 0;
    for (int e = 0; e < moe_local(&m->cfg); e++)
        n += expert_n(m, la, e);
    if (!n) return MT_OK;
    mt_tensor pre, act, dpre, dact;
    MT_TRY(rows_of(&la->fc1_pre, 0, n, &pre));
    if (!backward) {
        MT_TRY(rows_of(&la->fc1_act, 0, n, &act));
        return mt_swiglu_fwd(&act, &pre, NULL, s);
    }
    MT_TRY(rows_of(&a->moe_dfc1_pre, 0, n, &dpre));
    MT_TRY(rows_of(&a->moe_dfc1_act, 0, n, &dact));
    return mt_swiglu_bwd(&dpre, NULL, &dact, &pre, NULL, s);
}

/* Mixture of experts: whether experts_gemm runs the experts' linears (SwiGLU, no biases). */
static int experts_grouped(const mt_model *m, const layer_params *lp) {
    return m->cfg.swiglu && !lp->exp_fc1_b[0] && !lp->exp_fc2_b[0];
}

/* The shared experts' forward from x_in (every token's ln2): fc1, the activation, fc2 into
 * la->sh_y or a->sh_y (this rank's partial sum under tensor parallelism), and with the gate its
 * sigmoid into la->sh_g. Their output is the combine of that row times the gate (or 1): *y and
 * *g. */
static mt_status shared_fwd(mt_model *m, layer_acts *la, const layer_params *lp,
                            const mt_tensor *x_in, const mt_tensor **y, const mt_tensor **g,
                            mt_stream s) {
    const mt_model_config *c = &m->cfg;
    acts *a = &m->a;
    if (c->swiglu) {
        OP("fwd.gemm.shared_fc1",
           mt_linear_fwd(m->blas, &la->sh_pre, NULL, x_in, W(lp->sh_fc1), NULL, 0, s));
        OP("fwd.swiglu", mt_swiglu_fwd(&la->sh_act, &la->sh_pre, NULL, s));
    } else {
        OP("fwd.gemm.shared_fc1+gelu", mt_linear_fwd(m->blas, &la->sh_act, &la->sh_pre, x_in,
                                                     W(lp->sh_fc1), NULL, MT_GEMM_GELU, s));
    }
    mt_tensor *out = c->moe_shared_expert_gate ? &la->sh_y : &a->sh_y;
    OP("fwd.gemm.shared_fc2",
       mt_linear_fwd(m->blas, out, NULL, &la->sh_act, W(lp->sh_fc2), NULL, 0, s));
    *y = out, *g = &a->sh_ones;
    if (!c->moe_shared_expert_gate) return MT_OK;
    OP("fwd.gemm.shared_gate", mt_gemm(m->blas, &a->sh_logit, NULL, x_in, W(lp->sh_gate), NULL,
                                       MT_GEMM_TRANS_B, 1.0f, 0.0f, s));
    OP("fwd.shared_gate", mt_sigmoid_fwd(&la->sh_g, &a->sh_logit, s));
    *g = &la->sh_g;
    return MT_OK;
}

/* The MoE MLP's forward from ln2: the router's logits, top-k and dispatch map (the tokens per
 * expert come to the host: the experts' row counts), the permuted rows through each expert's
 * fc1, activation and fc2, and (next != NULL) the combine with the residual add into next. */
static mt_status moe_fwd(mt_model *m, int l, layer_acts *la, const layer_params *lp,
                         mt_tensor *next, mt_stream s) {
    const mt_model_config *c = &m->cfg;
    const int E = moe_local(c); /* (this rank's experts) */
    MT_REQUIRE(ep_n(c) == 1 || m->ep, MT_ERR_INVALID_ARG,
               "expert parallelism of %d: no group given (mt_model_set_expert_group)", ep_n(c));
    /* (sequence parallelism: every rank routes the whole micro-batch's tokens, gathered) */
    const mt_tensor *x_in = sp(m) ? &m->a.ln_all : &la->ln2;
    if (sp(m)) OP("fwd.tp.gather", mt_tp_gather_rows(m->tp, &m->a.ln_all, &la->ln2, s));
    const mt_tensor *sh_y = NULL, *sh_g = NULL; /* (the shared experts first, Megatron's order) */
    if (shared_n(c)) MT_TRY(shared_fwd(m, la, lp, x_in, &sh_y, &sh_g, s));
    OP("fwd.moe.router", mt_gemm(m->blas, &la->router_logits, NULL, x_in, W(lp->router_w), NULL,
                                 MT_GEMM_TRANS_B, 1.0f, 0.0f, s));
    const mt_moe_router router = router_of(m, l);
    OP("fwd.moe.route",
       mt_moe_topk(&la->moe_probs, &la->moe_idx, &la->moe_counts, &la->router_logits, &router, s));
    const mt_tensor *ac = &la->moe_counts; /* (the load-balancing loss's tokens per expert) */
    if (m->train && moe_losses_on(m) && aux_counts_apart(c)) {
        OP("fwd.moe.counts",
           mt_moe_aux_counts(&la->moe_aux_counts, &m->a.moe_aux_probs, &m->a.moe_aux_idx,
                             &la->router_logits, router.seq_length, s));
        ac = &la->moe_aux_counts;
    }
    /* (context parallelism: the load-balancing loss takes the sequences' counts, Megatron's;
     * recomputed too, as the backward reads them) */
    if (m->train && moe_losses_on(m) && cp_n(c) > 1)
        OP("fwd.moe.counts", mt_comm_allreduce(m->cp, &la->moe_counts_cp, ac, MT_REDOP_SUM, s));
    if (m->train && !m->recomputing && moe_losses_on(m)) {
        OP("fwd.moe.losses",
           mt_moe_router_losses(&m->a.moe_loss, &la->router_logits, loss_counts(m, la),
                                c->moe_router_topk, &router, s));
        m->n_moe++;
    }
    const int64_t Nt = (int64_t)m->B * c->seq_length; /* (the tokens routed) */
    const int drop = c->moe_expert_capacity_factor > 0.0f;
    if (drop)
        OP("fwd.moe.map",
           mt_moe_capacity_map(&la->moe_rows, &la->moe_pos, &la->moe_kept, &m->a.moe_work,
                               &la->moe_idx, &la->moe_probs, &la->moe_counts, moe_capacity(c, Nt),
                               c->moe_token_drop_position, c->moe_pad_expert_input_to_capacity, s));
    else
        OP("fwd.moe.map",
           mt_moe_dispatch_map(&la->moe_rows, &la->moe_pos, &la->moe_idx, &la->moe_counts, s));
    OP("fwd.moe.permute", mt_moe_permute(&la->moe_xp, x_in, &la->moe_rows, s));
    const mt_tensor *counts = drop ? &la->moe_kept : &la->moe_counts;
    if (m->n_eb && m->train && !m->recomputing) { /* (the expert bias's tokens, kept ones) */
        mt_tensor row = mt_tensor_1d((float *)m->eb_tokens.data + (size_t)m->eb_row[l] * moe_n(c),
                                     MT_F32, moe_n(c), m->dev);
        OP("fwd.moe.counts", mt_moe_expert_bias_tokens(&row, counts, s));
    }
    const int64_t region = moe_region(c, Nt);
    if (m->ep && !region) { /* (expert parallelism: every rank's, rank-major) */
        OP("fwd.moe.counts", mt_comm_allgather(m->ep, &m->a.moe_counts_all, counts, s));
        counts = &m->a.moe_counts_all;
    }
    for (int i = 0; m->ep && region && i < moe_n(c) * ep_n(c); i++) /* (padded: every region's) */
        la->counts_h[i] = (int32_t)region;
    if (!region) { /* the experts' row counts to the host (padded: fixed) */
        MT_TRY(mt_memcpy(la->counts_h, MT_DEVICE_CPU, counts->data, m->dev,
                         (size_t)moe_n(c) * ep_n(c) * sizeof(int32_t), s));
        MT_TRY(mt_stream_sync(s));
    }
    /* (expert parallelism: the experts' rows arrive from every rank, their outputs go back) */
    mt_tensor *ye = m->ep ? &m->a.moe_ye : &la->moe_yp;
    if (m->ep) OP("fwd.moe.dispatch", ep_dispatch(m, la, &la->moe_xe, &la->moe_xp, s));
    const int grouped = experts_grouped(m, lp);
    if (grouped) {
        OP("fwd.gemm.fc1",
           experts_gemm(m, la, EXP_FWD, &la->fc1_pre, &la->moe_xe, NULL, lp->exp_fc1, 0, s));
        OP("fwd.swiglu", experts_swiglu(m, la, 0, s));
        OP("fwd.gemm.fc2", experts_gemm(m, la, EXP_FWD, ye, &la->fc1_act, NULL, lp->exp_fc2, 0, s));
    }
    for (int pass = 0; pass < 2 && !grouped; pass++) { /* fc1 (GELU fused); SwiGLU; fc2 */
        if (pass == 1 && c->swiglu) OP("fwd.swiglu", experts_swiglu(m, la, 0, s));
        int64_t off = 0;
        for (int e = 0; e < E; off += expert_n(m, la, e++)) {
            const int64_t n = expert_n(m, la, e);
            mt_tensor x, h, act, y;
            if (!n) continue;
            MT_TRY(rows_of(&la->moe_xe, off, n, &x));
            MT_TRY(rows_of(&la->fc1_pre, off, n, &h));
            MT_TRY(rows_of(&la->fc1_act, off, n, &act));
            MT_TRY(rows_of(ye, off, n, &y));
            if (pass == 0 && c->swiglu)
                OP("fwd.gemm.fc1", mt_linear_fwd(m->blas_x, &h, NULL, &x, W(lp->exp_fc1[e]),
                                                 W(lp->exp_fc1_b[e]), 0, s));
            else if (pass == 0) /* (under moe_act: the GELU the backward repeats bitwise) */
                OP("fwd.gemm.fc1+gelu",
                   mt_linear_fwd(m->blas_x, &act, &h, &x, W(lp->exp_fc1[e]), W(lp->exp_fc1_b[e]),
                                 MT_GEMM_GELU | (c->recompute_mlp_act ? MT_GEMM_GELU_RECOMPUTE : 0),
                                 s));
            else
                OP("fwd.gemm.fc2", mt_linear_fwd(m->blas_x, &y, NULL, &act, W(lp->exp_fc2[e]),
                                                 fc2_b(m, lp, e), 0, s));
        }
    }
    if (m->ep) OP("fwd.moe.return", ep_return(m, la, &la->moe_yp, ye, s));
    if (!next) return MT_OK;
    const int fused = !m->tp && !hidden_drop(m);           /* the residual add in the combine */
    const mt_tensor *base = fused ? &la->resid_mid : NULL; /* (what the combine adds to) */
    if (sh_y) { /* the shared experts' output (times the gate) added first */
        OP("fwd.moe.shared", mt_moe_unpermute(&m->a.sh_out, sh_y, sh_g, &m->a.sh_pos, base, s));
        base = &m->a.sh_out;
    }
    if (fused) {
        OP("fwd.moe.combine",
           mt_moe_unpermute(next, &la->moe_yp, &la->moe_probs, &la->moe_pos, base, s));
        return MT_OK;
    }
    /* tensor parallelism: each rank's experts' shares summed over the group (the row-parallel
     * fc2's reduction, after the combine: N rows, not N*k; with sequence parallelism
     * reduce-scattered into this rank's rows); hidden dropout at linear_fc2's site */
    OP("fwd.moe.combine",
       mt_moe_unpermute(&m->a.moe_y, &la->moe_yp, &la->moe_probs, &la->moe_pos, base, s));
    const mt_tensor *y = &m->a.moe_y;
    if (sp(m)) {
        OP("fwd.tp.moe", mt_tp_reduce_scatter_rows(m->tp, next, &m->a.moe_y, s));
        y = next;
    } else {
        OP("fwd.tp.moe", mt_tp_all_reduce(m->tp, &m->a.moe_y, s));
    }
    if (!hidden_drop(m)) return mt_add(next, &la->resid_mid, y, s);
    mt_dropout_config d = hidden_cfg(m, (uint32_t)(SITE_FC2 + 3 * l));
    return mt_dropout(next, y, &la->resid_mid, &d, s);
}

/* The shared experts' backward from dy (the MoE output's gradient, every token's row): with the
 * gate its gradient into a->sh_logit (f32) and fc2's output's into a->sh_dy; fc2's and the
 * activation's, into a->sh_dpre (fc1's dx and dW: moe_bwd's, beside the experts' and the
 * router's). */
static mt_status shared_bwd(mt_model *m, layer_acts *la, const layer_params *lp,
                            const mt_tensor *dy, int acc, mt_stream s) {
    const mt_model_config *c = &m->cfg;
    acts *a = &m->a;
    if (c->moe_shared_expert_gate) {
        OP("bwd.moe.shared",
           mt_moe_unpermute_bwd(&a->sh_dy, &a->sh_dg, dy, &la->sh_y, &la->sh_g, &a->sh_pos, s));
        /* (tensor parallelism: sh_y is this rank's share, so is the gate's gradient) */
        OP("bwd.tp.moe", mt_tp_all_reduce(m->tp, &a->sh_dg, s));
        OP("bwd.shared_gate", mt_sigmoid_bwd(&a->sh_logit, &a->sh_dg, &la->sh_g, s));
        dy = &a->sh_dy;
    }
    if (c->swiglu) {
        OP("bwd.gemm.shared_fc2", mt_linear_bwd(m->blas, &a->sh_dact, G(lp->sh_fc2), NULL, dy,
                                                &la->sh_act, W(lp->sh_fc2), acc, s));
        OP("bwd.swiglu", mt_swiglu_bwd(&a->sh_dpre, NULL, &a->sh_dact, &la->sh_pre, NULL, s));
        return MT_OK;
    }
    OP("bwd.gemm.shared_fc2+dgelu",
       mt_linear_bwd_dgelu(m->blas, &a->sh_dpre, NULL, &la->sh_pre, G(lp->sh_fc2), NULL, dy,
                           &la->sh_act, W(lp->sh_fc2), acc, s));
    return MT_OK;
}

/* The MoE MLP's backward from a->dres (the layer output's gradient) into a->dln (ln2's): the
 * combine's, each expert's fc2 and fc1 (an expert without tokens: its grads zeroed when
 * written), the permutation's, and the router's with the aux and z losses (scaled as the loss:
 * the training forward's loss_scale, times the micro-batch's tokens with per-token loss). */
static mt_status moe_bwd(mt_model *m, int l, layer_acts *la, const layer_params *lp, int acc,
                         mt_stream s) {
    const mt_model_config *c = &m->cfg;
    acts *a = &m->a;
    const int E = moe_local(c);     /* (this rank's experts) */
    const mt_tensor *dy = &a->dres; /* (hidden dropout: the dropped gradient) */
    if (hidden_drop(m)) OP("bwd.dropout", drop_grad(m, (uint32_t)(SITE_FC2 + 3 * l), &dy, s));
    if (sp(m)) { /* (every row's gradient: the combine ran over the whole micro-batch) */
        OP("bwd.tp.gather", mt_tp_gather_rows(m->tp, &a->sp_all, dy, s));
        dy = &a->sp_all;
    }
    if (moe_region(c, (int64_t)m->B * c->seq_length)) /* (its padding rows: not written) */
        MT_TRY(mt_fill(&a->moe_dyp, 0.0f, s));
    OP("bwd.moe.combine", mt_moe_unpermute_bwd(&a->moe_dyp, &a->moe_dprobs, dy, &la->moe_yp,
                                               &la->moe_probs, &la->moe_pos, s));
    /* (tensor parallelism: each rank's yp is its share, so are the probabilities' gradients) */
    OP("bwd.tp.moe", mt_tp_all_reduce(m->tp, &a->moe_dprobs, s));
    if (shared_n(c)) MT_TRY(shared_bwd(m, la, lp, dy, acc, s));
    /* (expert parallelism: the outputs' gradients go where the experts are, moe_dye) */
    if (m->ep) OP("bwd.moe.dispatch", ep_dispatch(m, la, &a->moe_dye, &a->moe_dyp, s));
    if (c->recompute_mlp_act && c->swiglu) /* (moe_act: the shared activation refilled) */
        OP("bwd.recompute.act", experts_swiglu(m, la, 0, s));
    for (int e = 0; e < E && !acc; e++) /* (an expert without tokens: its grads zeroed) */
        if (!expert_n(m, la, e)) {
            MT_TRY(mt_fill(G(lp->exp_fc1[e]), 0.0f, s));
            MT_TRY(mt_fill(G(lp->exp_fc2[e]), 0.0f, s));
            if (lp->exp_fc1_b[e]) MT_TRY(mt_fill(G(lp->exp_fc1_b[e]), 0.0f, s));
            if (lp->exp_fc2_b[e]) MT_TRY(mt_fill(G(lp->exp_fc2_b[e]), 0.0f, s));
        }
    const int grouped = experts_grouped(m, lp);
    if (grouped) {
        OP("bwd.gemm.fc2",
           experts_gemm(m, la, EXP_DX, &a->moe_dfc1_act, &a->moe_dye, NULL, lp->exp_fc2, acc, s));
        OP("bwd.gemm.fc2",
           experts_gemm(m, la, EXP_DW, NULL, &a->moe_dye, &la->fc1_act, lp->exp_fc2, acc, s));
        OP("bwd.swiglu", experts_swiglu(m, la, 1, s));
        OP("bwd.gemm.fc1",
           experts_gemm(m, la, EXP_DX, &a->moe_dxe, &a->moe_dfc1_pre, NULL, lp->exp_fc1, acc, s));
        OP("bwd.gemm.fc1",
           experts_gemm(m, la, EXP_DW, NULL, &a->moe_dfc1_pre, &la->moe_xe, lp->exp_fc1, acc, s));
    }
    for (int pass = 0; pass < 2 && !grouped; pass++) { /* fc2 (GELU's fused); SwiGLU's; fc1 */
        if (pass == 1 && c->swiglu) OP("bwd.swiglu", experts_swiglu(m, la, 1, s));
        int64_t off = 0;
        for (int e = 0; e < E; off += expert_n(m, la, e++)) {
            const int64_t n = expert_n(m, la, e);
            mt_tensor x, h, act, dy, dact, dh, dx;
            if (!n) continue;
            MT_TRY(rows_of(&la->moe_xe, off, n, &x));
            MT_TRY(rows_of(&la->fc1_pre, off, n, &h));
            MT_TRY(rows_of(&la->fc1_act, off, n, &act));
            MT_TRY(rows_of(&a->moe_dye, off, n, &dy));
            MT_TRY(rows_of(&a->moe_dfc1_pre, off, n, &dh));
            MT_TRY(rows_of(&a->moe_dxe, off, n, &dx));
            if (pass == 0 && c->swiglu) {
                MT_TRY(rows_of(&a->moe_dfc1_act, off, n, &dact));
                OP("bwd.gemm.fc2",
                   mt_linear_bwd(m->blas_x, &dact, G(lp->exp_fc2[e]), G(lp->exp_fc2_b[e]), &dy,
                                 &act, W(lp->exp_fc2[e]), acc, s));
            } else if (pass == 0 && c->recompute_mlp_act) { /* (the GELU again, into act) */
                OP("bwd.gemm.fc2+dgelu",
                   mt_linear_bwd_dgelu_recompute(m->blas_x, &dh, G(lp->exp_fc1_b[e]), &h,
                                                 G(lp->exp_fc2[e]), G(lp->exp_fc2_b[e]), &dy, &act,
                                                 W(lp->exp_fc2[e]), acc, s));
            } else if (pass == 0) {
                OP("bwd.gemm.fc2+dgelu",
                   mt_linear_bwd_dgelu(m->blas_x, &dh, G(lp->exp_fc1_b[e]), &h, G(lp->exp_fc2[e]),
                                       G(lp->exp_fc2_b[e]), &dy, &act, W(lp->exp_fc2[e]), acc, s));
            } else {
                OP("bwd.gemm.fc1", mt_linear_bwd(m->blas_x, &dx, G(lp->exp_fc1[e]),
                                                 c->swiglu ? G(lp->exp_fc1_b[e]) : NULL, &dh, &x,
                                                 W(lp->exp_fc1[e]), acc, s));
            }
        }
    }
    /* (expert parallelism: the inputs' gradients back to the ranks of their tokens) */
    if (m->ep) OP("bwd.moe.return", ep_return(m, la, &a->moe_dxp, &a->moe_dxe, s));
    /* (tensor parallelism: the experts' input gradient summed, with sequence parallelism
     * reduce-scattered into this rank's rows, before the router's, whole on every rank, is
     * added) */
    mt_tensor *dx = sp(m) ? &a->moe_y : &a->dln; /* (every token's row) */
    OP("bwd.moe.permute", mt_moe_permute_bwd(dx, &a->moe_dxp, &la->moe_pos, 0, s));
    if (shared_n(c)) /* (the shared experts' fc1: this rank's share too) */
        OP("bwd.gemm.shared_fc1",
           mt_gemm(m->blas, dx, NULL, &a->sh_dpre, W(lp->sh_fc1), NULL, 0, 1.0f, 1.0f, s));
    if (sp(m))
        OP("bwd.tp.moe", mt_tp_reduce_scatter_rows(m->tp, &a->dln, &a->moe_y, s));
    else
        OP("bwd.tp.moe", mt_tp_all_reduce(m->tp, &a->dln, s));
    const float scale =
        m->loss_scale * (c->per_token_loss ? (float)((int64_t)m->B * c->seq_length) : 1.0f);
    const mt_moe_router router = router_of(m, l);
    /* (context parallelism: the loss over the ranks' N = cp x the local tokens, E / (k N^2)
     * sum_e counts_e sum_n p_ne, is the sum of the ranks' parts, the local formula / cp^2 each;
     * the gradients are averaged over the group, so each rank's part counts cp times: 1 / cp) */
    OP("bwd.moe.router", mt_moe_router_bwd(&a->moe_dlogits, &a->moe_dprobs, &la->moe_probs,
                                           &la->moe_idx, &la->router_logits, loss_counts(m, la),
                                           &router, c->moe_aux_loss_coeff * scale / (float)cp_n(c),
                                           c->moe_z_loss_coeff * scale, s));
    mt_tensor *dl = &a->moe_dlogits;
    if (c->dtype != MT_F32) { /* (the router's GEMMs in the model dtype) */
        MT_TRY(mt_cast(&a->moe_dlogits_dt, &a->moe_dlogits, s));
        dl = &a->moe_dlogits_dt;
    }
    mt_tensor dl_rows = *dl; /* (sequence parallelism: this rank's rows of the router's dx) */
    const int64_t Nl = a->dln.shape[0];
    if (sp(m)) MT_TRY(rows_of(dl, m->tpr * Nl, Nl, &dl_rows));
    OP("bwd.gemm.router",
       mt_gemm(m->blas, &a->dln, NULL, &dl_rows, W(lp->router_w), NULL, 0, 1.0f, 1.0f, s));
    mt_tensor *gl = &a->sh_logit; /* (the gate's logits' gradient, whole on every rank) */
    if (c->moe_shared_expert_gate) {
        if (c->dtype != MT_F32) {
            MT_TRY(mt_cast(&a->sh_dlogit_dt, &a->sh_logit, s));
            gl = &a->sh_dlogit_dt;
        }
        mt_tensor gl_rows = *gl;
        if (sp(m)) MT_TRY(rows_of(gl, m->tpr * Nl, Nl, &gl_rows));
        OP("bwd.gemm.shared_gate",
           mt_gemm(m->blas, &a->dln, NULL, &gl_rows, W(lp->sh_gate), NULL, 0, 1.0f, 1.0f, s));
    }
    if (c->recompute_layernorm) /* (ln2 dropped after the forward: the router's dW reads it) */
        OP("bwd.recompute.norm",
           norm_fwd(m, &la->ln2, NULL, NULL, &la->resid_mid, lp->ln2_w, lp->ln2_b, s));
    const mt_tensor *x_in; /* (the whole micro-batch's ln2, gathered again) */
    OP("bwd.tp.gather", ln_rows(m, &la->ln2, &x_in, s));
    OP("bwd.gemm.router",
       mt_linear_bwd(m->blas, NULL, G(lp->router_w), NULL, dl, x_in, W(lp->router_w), acc, s));
    if (shared_n(c))
        OP("bwd.gemm.shared_fc1", mt_linear_bwd(m->blas, NULL, G(lp->sh_fc1), NULL, &a->sh_dpre,
                                                x_in, W(lp->sh_fc1), acc, s));
    if (c->moe_shared_expert_gate)
        OP("bwd.gemm.shared_gate",
           mt_linear_bwd(m->blas, NULL, G(lp->sh_gate), NULL, gl, x_in, W(lp->sh_gate), acc, s));
    return MT_OK;
}

/* Context parallelism: this rank's chunk h of a sequence (0: the first half of its tokens, global
 * chunk r; 1: the second, chunk 2 cp - 1 - r), and views of it: x's rows (a (B,T,...) tensor),
 * its half of lse's storage ((B,H,T/2) contiguous), the keys and values of the sequence up to it
 * (of a->cp_kv, or of kv: (B, cp T, 2G, D)). */
static int cp_chunk(const mt_model *m, int rank, int h) {
    return h ? 2 * cp_n(&m->cfg) - 1 - rank : rank;
}

static mt_status cp_rows(const mt_model *m, const mt_tensor *x, int h, mt_tensor *out) {
    const int64_t c2 = m->cfg.seq_length / 2;
    return mt_tensor_slice(x, 1, h * c2, c2, out);
}

static mt_tensor cp_lse(const mt_model *m, const mt_tensor *lse, int h) {
    const int64_t B = lse->shape[0], H = lse->shape[1], c2 = lse->shape[2] / 2;
    return mt_tensor_make((float *)lse->data + h * B * H * c2, MT_F32, 3, (int64_t[]){ B, H, c2 },
                          m->dev);
}

static mt_status cp_prefix(const mt_model *m, const mt_tensor *kv, int h, mt_tensor *k,
                           mt_tensor *v) {
    const int64_t c2 = m->cfg.seq_length / 2, G = kv->shape[2] / 2;
    mt_tensor p;
    MT_TRY(mt_tensor_slice(kv, 1, 0, (cp_chunk(m, m->cfg.context_parallel_rank, h) + 1) * c2, &p));
    MT_TRY(mt_tensor_slice(&p, 2, 0, G, k));
    return mt_tensor_slice(&p, 2, G, G, v);
}

/* Rank j's block of a->cp_kva as (B,T,2G,D). */
static mt_tensor cp_block(const mt_model *m, int j) {
    const acts *a = &m->a;
    const int64_t *sh = a->cp_kvl.shape, n = sh[0] * sh[1] * sh[2] * sh[3];
    return mt_tensor_make((char *)a->cp_kva.data + j * n * (int64_t)mt_dtype_size(m->cfg.dtype),
                          m->cfg.dtype, 4, sh, m->dev);
}

/* Context parallelism: this layer's keys and values of every rank in sequence order (a->cp_kv):
 * this rank's copied out of qkv, all-gathered, each rank's two chunks put in their places.
 * back: the reverse for their gradient: a->cp_dkv's chunks to their ranks' blocks, the sum over
 * the ranks reduce-scattered (into a->cp_kvl), then into dk and dv. */
static mt_status cp_exchange(mt_model *m, mt_tensor *k, mt_tensor *v, int back, mt_stream s) {
    acts *a = &m->a;
    const int64_t G = k->shape[2], n = mt_tensor_numel(&a->cp_kvl);
    mt_tensor kl, vl, flat = mt_tensor_1d(a->cp_kvl.data, m->cfg.dtype, n, m->dev);
    MT_TRY(mt_tensor_slice(&a->cp_kvl, 2, 0, G, &kl));
    MT_TRY(mt_tensor_slice(&a->cp_kvl, 2, G, G, &vl));
    if (!back) {
        MT_TRY(mt_copy(&kl, k, s));
        MT_TRY(mt_copy(&vl, v, s));
        MT_TRY(mt_comm_allgather(m->cp, &a->cp_kva, &flat, s));
    }
    for (int j = 0; j < cp_n(&m->cfg); j++)
        for (int h = 0; h < 2; h++) {
            mt_tensor blk = cp_block(m, j), x, g;
            const int64_t c2 = m->cfg.seq_length / 2;
            MT_TRY(cp_rows(m, &blk, h, &x));
            MT_TRY(
                mt_tensor_slice(back ? &a->cp_dkv : &a->cp_kv, 1, cp_chunk(m, j, h) * c2, c2, &g));
            MT_TRY(back ? mt_copy(&x, &g, s) : mt_copy(&g, &x, s));
        }
    if (!back) return MT_OK;
    MT_TRY(mt_comm_reduce_scatter(m->cp, &flat, &a->cp_kva, MT_REDOP_SUM, s));
    MT_TRY(mt_copy(k, &kl, s));
    return mt_copy(v, &vl, s);
}

/* cp_two_streams: the side stream waits for s's work so far; s for the side stream's. */
static mt_status cp_fork(mt_model *m, mt_stream s) {
    MT_TRY(mt_event_record(m->cp_fork, s));
    return mt_stream_wait_event(m->cp_side, m->cp_fork);
}
static mt_status cp_join(mt_model *m, mt_stream s) {
    MT_TRY(mt_event_record(m->cp_join, m->cp_side));
    return mt_stream_wait_event(s, m->cp_join);
}

/* a->cp_dkv += t's rows of a chunk's key prefix (kn keys of each sequence). */
static mt_status cp_add_prefix(mt_model *m, const mt_tensor *t, int64_t kn, mt_stream s) {
    acts *a = &m->a;
    const int64_t row = a->cp_dkv.shape[1] * a->cp_dkv.shape[2] * a->cp_dkv.shape[3];
    const int64_t n = kn * a->cp_dkv.shape[2] * a->cp_dkv.shape[3];
    const size_t es = mt_dtype_size(m->cfg.dtype);
    for (int64_t b = 0; b < m->B; b++) { /* (each sequence's prefix is contiguous) */
        mt_tensor d = mt_tensor_1d((char *)a->cp_dkv.data + b * row * es, m->cfg.dtype, n, m->dev);
        mt_tensor x = mt_tensor_1d((char *)t->data + b * row * es, m->cfg.dtype, n, m->dev);
        MT_TRY(mt_axpy(&d, 1.0f, &x, s));
    }
    return MT_OK;
}

/* Context parallelism, the attention forward: each chunk's queries over the sequence's keys up to
 * theirs (the keys all-gathered). */
static mt_status cp_attn_fwd(mt_model *m, mt_tensor *y, mt_tensor *lse, const mt_tensor *q,
                             mt_tensor *k, mt_tensor *v, const mt_attn_config *ac, mt_stream s) {
    MT_REQUIRE(m->cp, MT_ERR_INVALID_ARG,
               "context parallelism of %d: no group given (mt_model_set_context_group)",
               cp_n(&m->cfg));
    MT_REQUIRE(!ac->key_start, MT_ERR_UNSUPPORTED,
               "document masks with context parallelism are not supported yet");
    acts *a = &m->a;
    MT_TRY(cp_exchange(m, k, v, 0, s));
    const int two = m->cp_side != NULL; /* (cp_two_streams) */
    if (two) MT_TRY(cp_fork(m, s));
    for (int h = 0; h < 2; h++) {
        mt_tensor qh, yh, kh, vh, lh = cp_lse(m, lse, h);
        MT_TRY(cp_rows(m, q, h, &qh));
        MT_TRY(cp_rows(m, y, h, &yh));
        MT_TRY(cp_prefix(m, &a->cp_kv, h, &kh, &vh));
        const int64_t L = kh.shape[1], c2 = qh.shape[1];
        if (L == c2 || !cp_padded(&m->cfg, m->dev)) {
            MT_TRY(mt_attn_fwd(&yh, &lh, &qh, &kh, &vh, ac, two && h ? m->cp_side : s));
            continue;
        }
        /* cp_padded: the queries padded in front to the square, whose tensor-core kernels run it
         * (mt-attention's forward over a key prefix not in whole tiles is a kernel for decoding's
         * few rows); the padded rows' outputs are not used */
        const int64_t H = qh.shape[2], D = qh.shape[3]; /* (contiguous (B,L,...) in the buffers) */
        mt_tensor qp =
            mt_tensor_make(a->cp_qp.data, m->cfg.dtype, 4, (int64_t[]){ m->B, L, H, D }, m->dev);
        mt_tensor op =
            mt_tensor_make(a->cp_op.data, m->cfg.dtype, 4, (int64_t[]){ m->B, L, H, D }, m->dev);
        mt_tensor lp = mt_tensor_make(a->cp_lp.data, MT_F32, 3, (int64_t[]){ m->B, H, L }, m->dev),
                  t;
        MT_TRY(mt_fill(&qp, 0.0f, s));
        MT_TRY(mt_tensor_slice(&qp, 1, L - c2, c2, &t));
        MT_TRY(mt_copy(&t, &qh, s));
        MT_TRY(mt_attn_fwd(&op, &lp, &qp, &kh, &vh, ac, s));
        MT_TRY(mt_tensor_slice(&op, 1, L - c2, c2, &t));
        MT_TRY(mt_copy(&yh, &t, s));
        MT_TRY(mt_tensor_slice(&lp, 2, L - c2, c2, &t));
        MT_TRY(mt_copy(&lh, &t, s));
    }
    return two ? cp_join(m, s) : MT_OK;
}

/* Context parallelism, the attention backward: the keys gathered again, each chunk's gradients
 * (its dq; the keys' and values' up to it, summed in a->cp_dkv), which go back to their ranks. */
static mt_status cp_attn_bwd(mt_model *m, mt_tensor *dq, mt_tensor *dk, mt_tensor *dv,
                             const mt_tensor *dy, const mt_tensor *q, mt_tensor *k, mt_tensor *v,
                             const mt_tensor *y, const mt_tensor *lse, const mt_attn_config *ac,
                             mt_stream s) {
    acts *a = &m->a;
    MT_TRY(cp_exchange(m, k, v, 0, s));
    MT_TRY(mt_fill(&a->cp_dkv, 0.0f, s));
    /* cp_two_streams: the second chunk on the side stream, into its own dk, dv and workspace,
     * added once joined */
    const int two = m->cp_side != NULL;
    if (two) MT_TRY(cp_fork(m, s));
    int64_t kn[2];
    for (int h = 0; h < 2; h++) {
        mt_tensor qh, yh, dqh, dyh, kh, vh, dkh, dvh, lh = cp_lse(m, lse, h);
        const int side = two && h;
        const mt_tensor *tmp = side ? &a->cp_tmp2 : &a->cp_tmp;
        MT_TRY(cp_rows(m, q, h, &qh));
        MT_TRY(cp_rows(m, y, h, &yh));
        MT_TRY(cp_rows(m, dq, h, &dqh));
        MT_TRY(cp_rows(m, dy, h, &dyh));
        MT_TRY(cp_prefix(m, &a->cp_kv, h, &kh, &vh));
        MT_TRY(cp_prefix(m, tmp, h, &dkh, &dvh));
        MT_TRY(mt_attn_bwd(&dqh, &dkh, &dvh, &dyh, &qh, &kh, &vh, &yh, &lh, ac,
                           side ? a->ws2.data : a->ws.data, m->ws_bytes, side ? m->cp_side : s));
        kn[h] = kh.shape[1];
        if (!side) MT_TRY(cp_add_prefix(m, tmp, kn[h], s));
    }
    if (two) {
        MT_TRY(cp_join(m, s));
        MT_TRY(cp_add_prefix(m, &a->cp_tmp2, kn[1], s));
    }
    return cp_exchange(m, dk, dv, 1, s);
}

/* Inference over a KV cache (mt_model_set_kv_cache): layer l's k and v of the T tokens into the
 * cache's rows [pos, pos+T), then q's attention over its rows [0, pos+T) (causal: each query the
 * last of its keys, mt-attention's bottom-right alignment). pos + T comes from the device (kv_len),
 * so a CUDA graph of the forward replays at any position. */
static mt_status kv_attn(mt_model *m, int l, mt_tensor *y, mt_tensor *lse, const mt_tensor *q,
                         const mt_tensor *k, const mt_tensor *v, const mt_attn_config *ac,
                         mt_stream s) {
    MT_TRY(mt_attn_kv_append(&m->kv->k[l], &m->kv->v[l], k, v, &m->kv_len, s));
    mt_attn_config c = *ac;
    c.key_len = &m->kv_len;
    return mt_attn_fwd(y, lse, q, &m->kv->k[l], &m->kv->v[l], &c, s);
}

static mt_status layer_fwd(mt_model *m, int l, mt_tensor *next, mt_stream s) {
    const mt_model_config *c = &m->cfg;
    acts *a = &m->a;
    layer_acts *la = layer_of(m, l);
    layer_params *lp = &m->lp[l];
    mt_attn_config ac = attn_cfg(m, l);
    OP("fwd.norm",
       norm_fwd(m, &la->ln1, &la->ln1_mean, &la->ln1_rstd, &la->resid_in, lp->ln1_w, lp->ln1_b, s));
    if (c->multi_latent_attention)
        OP("fwd.mla", mla_fwd(m, la, lp, s));
    else
        OP("fwd.gemm.qkv",
           mt_tp_column_fwd(m->tp, m->blas, &la->qkv, NULL, &la->ln1, sp(m) ? &a->ln_all : NULL,
                            W(lp->qkv_w), W(lp->qkv_b), 0, sp(m), s));
    mt_tensor q, k, v, y;
    MT_TRY(qkv_views(m, &la->qkv, &q, &k, &v));
    if (c->qk_layernorm) OP("fwd.qk_norm", qk_norm_fwd(m, la, lp, &q, &k, s));
    if (c->position_embedding_type == MT_POS_ROPE) {
        OP("fwd.rope", rope(m, &q, 0, s));
        OP("fwd.rope", rope(m, &k, 0, s));
    }
    MT_TRY(as_bthd(m, &la->atty, local_heads(c), &y));
    if (m->kv) /* (inference: the tokens' keys and values into the cache, attention over it) */
        OP("fwd.attn", kv_attn(m, l, &y, &la->lse, &q, &k, &v, &ac, s));
    else if (cp_n(c) > 1) /* (context parallelism: over every rank's keys up to each chunk) */
        OP("fwd.attn", cp_attn_fwd(m, &y, &la->lse, &q, &k, &v, &ac, s));
    else
        OP("fwd.attn", mt_attn_fwd(&y, &la->lse, &q, &k, &v, &ac, s));
    if (c->multi_latent_attention) OP("fwd.mla", mla_out(m, la, s));
    OP("fwd.gemm.proj",
       linear_drop_add(m, &la->resid_mid, c->multi_latent_attention ? &la->mla_o : &la->atty,
                       lp->proj_w, lp->proj_b, &la->resid_in, (uint32_t)(SITE_PROJ + 3 * l), s));
    OP("fwd.norm", norm_fwd(m, &la->ln2, &la->ln2_mean, &la->ln2_rstd, &la->resid_mid, lp->ln2_w,
                            lp->ln2_b, s));
    if (moe_layer(c, l)) return moe_fwd(m, l, la, lp, next, s);
    if (c->swiglu) {
        OP("fwd.gemm.fc1",
           mt_tp_column_fwd(m->tp, m->blas, &la->fc1_pre, NULL, &la->ln2, sp(m) ? &a->ln_all : NULL,
                            W(lp->fc1_w), W(lp->fc1_b), 0, sp(m), s));
        OP("fwd.swiglu", mt_swiglu_fwd(&la->fc1_act, &la->fc1_pre, NULL, s));
    } else { /* under mlp_act: the GELU that the backward's dx GEMM repeats bitwise */
        const int fl = MT_GEMM_GELU | (c->recompute_mlp_act ? MT_GEMM_GELU_RECOMPUTE : 0);
        OP("fwd.gemm.fc1+gelu",
           mt_tp_column_fwd(m->tp, m->blas, &la->fc1_act, &la->fc1_pre, &la->ln2,
                            sp(m) ? &a->ln_all : NULL, W(lp->fc1_w), W(lp->fc1_b), fl, sp(m), s));
    }
    if (!next) return MT_OK;
    OP("fwd.gemm.fc2", linear_drop_add(m, next, &la->fc1_act, lp->fc2_w, lp->fc2_b, &la->resid_mid,
                                       (uint32_t)(SITE_FC2 + 3 * l), s));
    return MT_OK;
}

/* Tells the param-wait callback (mt_model_set_param_wait) that a level's params are next. */
static mt_status params_needed(mt_model *m, int level, mt_stream s) {
    return m->wait_fn ? m->wait_fn(m->wait_ctx, level, s) : MT_OK;
}

/* The output layer's logits of the final norm's output. */
static mt_status lm_head_fwd(mt_model *m, mt_stream s) {
    acts *a = &m->a;
    OP("fwd.gemm.lmhead",
       mt_tp_column_fwd(m->tp, m->blas, &a->logits, NULL, &a->lnf, sp(m) ? &a->lnf_all : NULL,
                        W(m->out_w), NULL, 0, sp(m), s));
    return MT_OK;
}

/* The forward up to the final norm, and the output layer's logits when lm_head (else the caller
 * runs the output layer on slices: lm_head_slices). */
static mt_status forward(mt_model *m, const mt_tensor *tokens, int lm_head, mt_stream s) {
    const mt_model_config *c = &m->cfg;
    acts *a = &m->a;
    const int l0 = stage_l0(c), l1 = l0 + stage_nl(c);
    mt_tensor *in = &layer_of(m, l0)->resid_in; /* (a later pipeline stage's: received) */
    MT_TRY(params_needed(m, -1, s));
    if (first_stage(c)) {
        MT_TRY(check_ids(m, tokens, "tokens"));
        m->slot_tokens[m->slot] = *tokens;
        mt_tensor emb3; /* the embedding is the first layer's resid_in (sequence parallelism: its
                           rows, the whole micro-batch's going through sp_all) */
        const int64_t bt[3] = { m->B, c->seq_length, c->hidden_size };
        MT_TRY(mt_tensor_reshape(sp(m) ? &a->sp_all : in, 3, bt, &emb3));
        OP("fwd.embedding",
           mt_tp_embedding_fwd(m->tp, sp(m) ? in : &emb3, sp(m) ? &emb3 : NULL, tokens, W(m->wte),
                               W(m->wpe), m->wpe ? positions(m) : NULL, sp(m), s));
        if (hidden_drop(m)) {
            mt_dropout_config d = hidden_cfg(m, SITE_EMB); /* (this rank's rows) */
            OP("fwd.dropout", mt_dropout(in, in, NULL, &d, s));
        }
    }
    /* recomputed layers write into shared scratch sets: only their resid_in survives */
    for (int l = l0; l < l1; l++) {
        MT_TRY(params_needed(m, l, s));
        MT_TRY(layer_fwd(m, l, l + 1 < l1 ? &layer_of(m, l + 1)->resid_in : &a->resid_final, s));
    }
    if (!last_stage(c)) return MT_OK; /* (resid_final goes on to the next stage) */
    const int L = c->num_layers;
    MT_TRY(params_needed(m, L, s));
    OP("fwd.norm",
       norm_fwd(m, &a->lnf, &a->lnf_mean, &a->lnf_rstd, &a->resid_final, m->lnf_w, m->lnf_b, s));
    return lm_head ? lm_head_fwd(m, s) : MT_OK;
}

/* Full recompute: before the backward of group [g0, g1] (reached at g1), runs its layers' forward
 * again from the kept resid_in of g0. The norm of the kept sum is bitwise the forward's: the
 * projections' GEMMs store the residual stream rounded to the storage dtype, and the norms read
 * that stored value in both passes. */
static mt_status recompute(mt_model *m, int g0, int g1, mt_stream s) {
    mt_status st = MT_OK;
    m->recomputing = 1;
    for (int j = g0; j <= g1 && st == MT_OK; j++)
        st = layer_fwd(m, j, j < g1 ? &layer_of(m, j + 1)->resid_in : NULL, s);
    m->recomputing = 0;
    return st;
}

/* The micro-batch's per-token losses (0 for ignored tokens) and its count into the accumulators
 * that mt_model_take_loss_sum reads: the mean over several micro-batches is then over all their
 * counted tokens (Megatron's reported loss: the sum over the global batch / its token count). */
static mt_status add_loss(mt_model *m, mt_stream s) {
    mt_tensor count;
    MT_TRY(mt_tensor_slice(&m->a.stats, 0, 1, 1, &count));
    MT_TRY(mt_axpy(&m->a.loss_sum, 1.0f, &m->a.losses, s));
    MT_TRY(mt_axpy(&m->a.loss_count, 1.0f, &count, s));
    m->n_loss++;
    return MT_OK;
}

static mt_status targets_flat(const mt_model *m, const mt_tensor *targets, mt_tensor *flat) {
    MT_TRY(check_ids(m, targets, "targets"));
    return mt_tensor_reshape(targets, 1, (int64_t[]){ (int64_t)m->B * m->cfg.seq_length }, flat);
}

/* Each token's loss gradient into a->dloss (ignored tokens get none from the cross-entropy):
 * loss_scale / the micro-batch's count of counted tokens (the mean's), or loss_scale itself with
 * per_token_loss (the sum's). */
static mt_status loss_grad(mt_model *m, const mt_tensor *t, float loss_scale, mt_stream s) {
    if (m->cfg.per_token_loss) return mt_fill(&m->a.dloss, loss_scale, s);
    return mt_xent_stats(&m->a.stats, &m->a.dloss, NULL, t, loss_scale, MT_XENT_IGNORE_INDEX, s);
}

/* The cross-entropy of n rows of logits `lg` into their losses `lo`; with g (each row's loss
 * gradient) also the logits' gradient, in place. Under tensor parallelism the vocab-parallel one
 * over this rank's columns (mt_tp_xent: the losses on every rank). */
static mt_status xent_rows(mt_model *m, mt_tensor *lo, mt_tensor *lg, const mt_tensor *tc,
                           const mt_tensor *g, mt_stream s) {
    const int64_t V = m->cfg.vocab_size, n = lg->shape[0];
    if (m->tp) {
        mt_tensor st, st2;
        MT_TRY(mt_tensor_slice(&m->a.tp_stats, 0, 0, 3 * n, &st));
        MT_TRY(mt_tensor_reshape(&st, 2, (int64_t[]){ 3, n }, &st2));
        return mt_tp_xent(m->tp, lo, g ? lg : NULL, lg, tc, g, V, MT_XENT_IGNORE_INDEX, &st2, s);
    }
    if (!g) return mt_xent_fwd(lo, NULL, lg, tc, V, MT_XENT_IGNORE_INDEX, s);
    return mt_xent_fwd_bwd(lg, lo, NULL, lg, tc, g, 0.0f, V, MT_XENT_IGNORE_INDEX, s);
}

/* The output layer and the cross-entropy of xin (N,C) (this rank's rows under sequence
 * parallelism) against targets t, on row slices of the tokens (a->logits' rows), one slice's
 * logits at a time; with train, also the loss gradient (loss_grad, over the whole batch before
 * the first slice, as the one-call mean) and the output layer's backward: dxout receives each
 * slice's rows, the weight gradient adds up over the slices (acc: onto what it holds; else the
 * first slice writes it). The losses in a->losses and a->stats. */
static mt_status head_slices(mt_model *m, const mt_tensor *xin, mt_tensor *dxout,
                             const mt_tensor *t, int train, float loss_scale, int acc,
                             mt_stream s) {
    acts *a = &m->a;
    const int64_t N = t->shape[0], R = a->logits.shape[0];
    /* sequence parallelism: the slices are of the gathered rows, their dx of sp_all */
    mt_tensor *xs = sp(m) ? &a->lnf_all : (mt_tensor *)xin, *dxs = sp(m) ? &a->sp_all : dxout;
    if (sp(m)) OP("fwd.tp.gather", mt_tp_gather_rows(m->tp, &a->lnf_all, xin, s));
    if (train) MT_TRY(loss_grad(m, t, loss_scale, s));
    for (int64_t r0 = 0; r0 < N; r0 += R) {
        const int64_t n = N - r0 < R ? N - r0 : R;
        mt_tensor x, lg, tc, lo, g, dx;
        MT_TRY(mt_tensor_slice(xs, 0, r0, n, &x));
        MT_TRY(mt_tensor_slice(&a->logits, 0, 0, n, &lg));
        MT_TRY(mt_tensor_slice(t, 0, r0, n, &tc));
        MT_TRY(mt_tensor_slice(&a->losses, 0, r0, n, &lo));
        OP("fwd.gemm.lmhead",
           mt_tp_column_fwd(m->tp, m->blas, &lg, NULL, &x, NULL, W(m->out_w), NULL, 0, 0, s));
        if (!train) {
            OP("xent", xent_rows(m, &lo, &lg, &tc, NULL, s));
            continue;
        }
        MT_TRY(mt_tensor_slice(&a->dloss, 0, r0, n, &g));
        MT_TRY(mt_tensor_slice(dxs, 0, r0, n, &dx));
        OP("xent", xent_rows(m, &lo, &lg, &tc, &g, s));
        /* (column-parallel: each slice's dx summed over the group once, after the last) */
        OP("bwd.gemm.lmhead",
           mt_linear_bwd(m->blas, &dx, G(m->out_w), NULL, &lg, &x, W(m->out_w), acc || r0 > 0, s));
    }
    if (train && sp(m))
        OP("bwd.tp.lmhead", mt_tp_reduce_scatter_rows(m->tp, dxout, &a->sp_all, s));
    else if (train)
        OP("bwd.tp.lmhead", mt_tp_all_reduce(m->tp, dxout, s));
    return mt_xent_stats(&a->stats, NULL, &a->losses, t, 0.0f, MT_XENT_IGNORE_INDEX, s);
}

/* logits_chunks > 1: the decoder's output layer in slices, dln receiving its input's gradient. */
static mt_status lm_head_slices(mt_model *m, const mt_tensor *t, int train, float loss_scale,
                                mt_stream s) {
    return head_slices(m, &m->a.lnf, &m->a.dln, t, train, loss_scale,
                       !m->grads_discarded || m->mtp_ran, s);
}

/* ---- multi-token prediction ---- */

static mt_status layer_bwd(mt_model *m, int l, int own_fc2_b, mt_model_param *prev_fc2_b,
                           mt_stream s);

/* Dropout site of MTP depth k+1's embedding (past every layer's sites). */
#define SITE_MTP_EMB(k) (0x40000000u + (uint32_t)(k))

/* dst (B,T) i32 = src rolled left by one along T, the last column the fill (0: zero, 1: the
 * ignore index): megatron.core's roll_tensor(shifts=-1) without context parallelism. */
static mt_status roll_left(mt_model *m, mt_tensor *dst, const mt_tensor *src, int fill,
                           mt_stream s) {
    const int64_t T = m->cfg.seq_length;
    mt_tensor d, x, f, f2;
    MT_TRY(mt_tensor_slice(dst, 1, 0, T - 1, &d));
    MT_TRY(mt_tensor_slice(src, 1, 1, T - 1, &x));
    MT_TRY(mt_copy(&d, &x, s));
    MT_TRY(mt_tensor_slice(dst, 1, T - 1, 1, &d));
    MT_TRY(mt_tensor_slice(&m->a.mtp_fill, 0, fill, 1, &f));
    MT_TRY(mt_tensor_reshape(&f, 2, (int64_t[]){ m->B, 1 }, &f2));
    return mt_copy(&d, &f2, s);
}

/* eh_proj's input's half i (0: the embedding's norm, 1: the hidden state's), a (rows, C) view. */
static mt_status cat_half(const mt_model *m, const mt_tensor *cat, int i, mt_tensor *out) {
    const int64_t C = m->cfg.hidden_size;
    return mt_tensor_slice(cat, 1, i * C, C, out);
}

/* Training with multi-token prediction (between the decoder's final norm and its output layer):
 * each depth's forward, its head's loss, that loss's gradient (times mtp_loss_scaling_factor / D)
 * and the output layer's backward, then the depths' backwards from the last down. Leaves in
 * a->mtp_dh0 the gradient of the final norm's output (backward() adds it to the output layer's)
 * and each depth's token losses in the MTP accumulators. tokens and targets (B,T) i32. */
static mt_status mtp_step(mt_model *m, const mt_tensor *tokens, const mt_tensor *targets,
                          float loss_scale, mt_stream s) {
    const mt_model_config *c = &m->cfg;
    acts *a = &m->a;
    const int L = c->num_layers, D = mtp_n(c), hdrop = hidden_drop(m);
    const int64_t N = (int64_t)m->B * c->seq_length;
    const int64_t bt[3] = { m->B, c->seq_length, c->hidden_size };
    const float scale = loss_scale * c->mtp_loss_scaling_factor / (float)D;
    MT_REQUIRE(c->seq_length > D, MT_ERR_INVALID_ARG,
               "--mtp-num-layers %d leaves no target in a sequence of %d", D, c->seq_length);
    MT_REQUIRE(tokens, MT_ERR_INVALID_ARG,
               "multi-token prediction needs the tokens on the last pipeline stage too");
    MT_TRY(check_ids(m, tokens, "tokens"));
    for (int k = 0; k < D; k++) {
        mtp_acts *d = &a->mtp[k];
        const mtp_params *q = &m->mp[k];
        const mt_tensor *pos0 = positions(m) ? positions(m) : &a->mtp_pos0;
        float sk = scale;
        if (m->mtp_in_tok.data) { /* (the caller's rolls: context parallelism) */
            const int64_t bt2[2] = { m->B, c->seq_length };
            mt_tensor x, x2;
            MT_TRY(mt_tensor_slice(&m->mtp_in_tok, 0, k, 1, &x));
            MT_TRY(mt_tensor_reshape(&x, 2, bt2, &x2));
            OP("fwd.mtp.roll", mt_copy(&d->tok, &x2, s));
            MT_TRY(mt_tensor_slice(&m->mtp_in_tgt, 0, k, 1, &x));
            MT_TRY(mt_tensor_reshape(&x, 2, bt2, &x2));
            OP("fwd.mtp.roll", mt_copy(&d->tgt, &x2, s));
            sk *= m->mtp_mult ? m->mtp_mult[k] : 1.0f;
        } else {
            MT_REQUIRE(cp_n(c) == 1, MT_ERR_INVALID_ARG,
                       "multi-token prediction under context parallelism needs the caller's "
                       "rolls: mt_model_set_mtp_inputs");
            OP("fwd.mtp.roll", roll_left(m, &d->tok, k ? &a->mtp[k - 1].tok : tokens, 0, s));
            OP("fwd.mtp.roll", roll_left(m, &d->tgt, k ? &a->mtp[k - 1].tgt : targets, 1, s));
        }
        if (d->pos.data)
            OP("fwd.mtp.roll", roll_left(m, &d->pos, k ? &a->mtp[k - 1].pos : pos0, 0, s));
        /* the embedding of the tokens k+1 ahead (sequence parallelism: this rank's rows) */
        mt_tensor e3, half;
        MT_TRY(mt_tensor_reshape(sp(m) ? &a->sp_all : &d->emb, 3, bt, &e3));
        OP("fwd.mtp.embedding",
           mt_tp_embedding_fwd(m->tp, sp(m) ? &d->emb : &e3, sp(m) ? &e3 : NULL, &d->tok,
                               W(m->mtp_wte), W(m->wpe), d->pos.data ? &d->pos : NULL, sp(m), s));
        if (hdrop) {
            mt_dropout_config dc = hidden_cfg(m, SITE_MTP_EMB(k));
            OP("fwd.dropout", mt_dropout(&d->emb, &d->emb, NULL, &dc, s));
        }
        /* eh_proj([enorm(e) | hnorm(h)]) into the transformer layer's input */
        const mt_tensor *h = k ? &a->mtp[k - 1].fin : &a->lnf;
        OP("fwd.mtp.norm",
           norm_fwd(m, &a->mtp_tmp, &d->en_mean, &d->en_rstd, &d->emb, q->en_w, q->en_b, s));
        MT_TRY(cat_half(m, &d->cat, 0, &half));
        OP("fwd.mtp.cat", copy_to(half, a->mtp_tmp, s));
        OP("fwd.mtp.norm",
           norm_fwd(m, &a->mtp_tmp, &d->hn_mean, &d->hn_rstd, h, q->hn_w, q->hn_b, s));
        MT_TRY(cat_half(m, &d->cat, 1, &half));
        OP("fwd.mtp.cat", copy_to(half, a->mtp_tmp, s));
        layer_acts *la = layer_of(m, L + k);
        OP("fwd.gemm.eh_proj",
           mt_linear_fwd(m->blas, &la->resid_in, NULL, &d->cat, W(q->eh_w), NULL, 0, s));
        MT_TRY(layer_fwd(m, L + k, &d->out, s));
        OP("fwd.mtp.norm",
           norm_fwd(m, &d->fin, &d->fin_mean, &d->fin_rstd, &d->out, q->fn_w, q->fn_b, s));
        /* the head: the loss, its gradient and the output layer's backward into d->dh */
        mt_tensor t, sum, cnt, cnt_k;
        MT_TRY(mt_tensor_reshape(&d->tgt, 1, &N, &t));
        MT_TRY(head_slices(m, &d->fin, &d->dh, &t, 1, sk, k > 0 || !m->grads_discarded, s));
        MT_TRY(mt_tensor_slice(&a->mtp_sum, 0, k, 1, &sum));
        MT_TRY(mt_tensor_reshape(&sum, 1, &N, &sum));
        MT_TRY(mt_axpy(&sum, 1.0f, &a->losses, s));
        MT_TRY(mt_tensor_slice(&a->stats, 0, 1, 1, &cnt));
        MT_TRY(mt_tensor_slice(&a->mtp_count, 0, k, 1, &cnt_k));
        MT_TRY(mt_axpy(&cnt_k, 1.0f, &cnt, s));
    }
    const int acc = !m->grads_discarded;
    for (int k = D - 1; k >= 0; k--) {
        mtp_acts *d = &a->mtp[k];
        const mtp_params *q = &m->mp[k];
        /* (the final norm's backward takes the layer's fc2 bias gradient, as the decoder's) */
        OP("bwd.norm", norm_bwd(m, &a->dres, q->fn_w, q->fn_b, hdrop ? NULL : m->lp[L + k].fc2_b,
                                &d->dh, &d->out, &d->fin_mean, &d->fin_rstd, NULL, s));
        MT_TRY(layer_bwd(m, L + k, 0, NULL, s));
        OP("bwd.gemm.eh_proj", mt_linear_bwd(m->blas, &a->mtp_dcat, G(q->eh_w), NULL, &a->dres,
                                             &d->cat, W(q->eh_w), acc, s));
        /* the embedding's half, through enorm and the dropout into the embeddings */
        mt_tensor half, d3;
        MT_TRY(cat_half(m, &a->mtp_dcat, 0, &half));
        OP("bwd.mtp.cat", copy_to(a->dln, half, s));
        OP("bwd.norm", norm_bwd(m, &a->mtp_tmp, q->en_w, q->en_b, NULL, &a->dln, &d->emb,
                                &d->en_mean, &d->en_rstd, NULL, s));
        if (hdrop) {
            mt_dropout_config dc = hidden_cfg(m, SITE_MTP_EMB(k));
            OP("bwd.dropout", mt_dropout(&a->mtp_tmp, &a->mtp_tmp, NULL, &dc, s));
        }
        MT_TRY(mt_tensor_reshape(sp(m) ? &a->sp_all : &a->mtp_tmp, 3, bt, &d3));
        OP("bwd.embedding",
           mt_tp_embedding_bwd(m->tp, G(m->mtp_wte), G(m->wpe), sp(m) ? &a->mtp_tmp : &d3,
                               sp(m) ? &d3 : NULL, &d->tok, d->pos.data ? &d->pos : NULL,
                               a->ws.data, m->ws_bytes, sp(m), s));
        /* the hidden state's half, through hnorm into the depth before's output (or the final
         * norm's) */
        mt_tensor *dh = k ? &a->mtp[k - 1].dh : &a->mtp_dh0;
        MT_TRY(cat_half(m, &a->mtp_dcat, 1, &half));
        OP("bwd.mtp.cat", copy_to(a->dln, half, s));
        OP("bwd.norm",
           norm_bwd(m, dh, q->hn_w, q->hn_b, NULL, &a->dln, k ? &a->mtp[k - 1].fin : &a->lnf,
                    &d->hn_mean, &d->hn_rstd, k ? dh : NULL, s));
    }
    return MT_OK;
}

/* The stage's forward (the whole model's without pipeline parallelism) and, on the last stage
 * with targets, the loss into the accumulator; with train also its gradient for loss_scale (and
 * with logits chunks the output layer's backward), ready for backward(). */
static mt_status stage_fwd(mt_model *m, const mt_tensor *tokens, const mt_tensor *targets,
                           int train, float loss_scale, mt_stream s) {
    const int sliced = m->cfg.logits_chunks > 1, last = last_stage(&m->cfg);
    MT_REQUIRE(targets || !sliced || !last, MT_ERR_INVALID_ARG,
               "a forward without targets returns every token's logits: it needs logits_chunks "
               "1 (this model keeps one of %d slices)",
               m->cfg.logits_chunks);
    m->loss_scale = loss_scale;
    /* (multi-token prediction: its depths between the final norm and the output layer) */
    m->mtp_ran = train && targets && last && mtp_n(&m->cfg) > 0;
    MT_TRY(forward(m, tokens, !sliced && !m->mtp_ran, s));
    if (!targets || !last) return MT_OK;
    mt_tensor t;
    MT_TRY(targets_flat(m, targets, &t));
    if (m->mtp_ran) {
        MT_TRY(mtp_step(m, tokens, targets, loss_scale, s));
        if (!sliced) MT_TRY(lm_head_fwd(m, s));
    }
    if (sliced) {
        MT_TRY(lm_head_slices(m, &t, train, loss_scale, s));
    } else if (m->tp) { /* the vocab-parallel cross-entropy takes each token's gradient */
        if (train) MT_TRY(loss_grad(m, &t, loss_scale, s));
        OP("xent", xent_rows(m, &m->a.losses, &m->a.logits, &t, train ? &m->a.dloss : NULL, s));
        MT_TRY(mt_xent_stats(&m->a.stats, NULL, &m->a.losses, &t, 0.0f, MT_XENT_IGNORE_INDEX, s));
    } else if (!train) {
        MT_TRY(mt_xent_fwd(&m->a.losses, &m->a.stats, &m->a.logits, &t, m->cfg.vocab_size,
                           MT_XENT_IGNORE_INDEX, s));
    } else {
        const int per_token = m->cfg.per_token_loss;
        if (per_token) MT_TRY(loss_grad(m, &t, loss_scale, s));
        OP("xent", mt_xent_fwd_bwd(&m->a.logits, &m->a.losses, &m->a.stats, &m->a.logits, &t,
                                   per_token ? &m->a.dloss : NULL, loss_scale, m->cfg.vocab_size,
                                   MT_XENT_IGNORE_INDEX, s));
    }
    return add_loss(m, s);
}

/* Training calls need gradients (not an inference model or view) and no KV cache. */
static mt_status trainable(const mt_model *m, const char *what) {
    MT_REQUIRE(!m->no_grads, MT_ERR_INVALID_ARG,
               "%s: this model has no gradients (mt_model_create_inference or _view)", what);
    MT_REQUIRE(!m->kv, MT_ERR_INVALID_ARG, "%s: a KV cache is set (inference only)", what);
    return MT_OK;
}

/* mt_model_forward and mt_model_forward_backward run the whole model: not a pipeline stage. */
static mt_status whole_model(const mt_model *m, const char *what) {
    MT_REQUIRE(pp_n(&m->cfg) == 1, MT_ERR_INVALID_ARG,
               "%s runs the whole model; this one is pipeline stage %d of %d: use "
               "mt_model_pp_forward and mt_model_pp_backward",
               what, m->cfg.pipeline_model_parallel_rank, pp_n(&m->cfg));
    return MT_OK;
}

typedef struct f_call {
    mt_model *m;
    const mt_tensor *tokens;
} f_call;

static mt_status f_capture(void *ctx, mt_stream s) {
    f_call *c = ctx;
    return stage_fwd(c->m, c->tokens, NULL, 0, 0.0f, s);
}

/* An inference model's forward without targets as a CUDA graph (mt_model_set_cuda_graphs):
 * captured at the second call with the same tokens buffer, stream, positions and KV cache,
 * replayed after; the first runs eagerly (cuBLASLt's algorithm choice). A KV cache's position is
 * read from the device, so one graph serves every decoding step. */
static mt_status fwd_graph(mt_model *m, const mt_tensor *tokens, mt_stream s) {
    MT_TRY(check_ids(m, tokens, "tokens"));
    graph_slot *g = &m->gf;
    graph_key k;
    memset(&k, 0, sizeof k);
    k.tokens = tokens->data, k.stream = s, k.positions = m->pos.data, k.kv = m->kv;
    const int same = g->seen && memcmp(&k, &g->key, sizeof k) == 0;
    if (!g->graph || !same) {
        mt_graph_destroy(g->graph);
        g->graph = NULL;
        if (!same) {
            g->key = k, g->seen = 1;
            return stage_fwd(m, tokens, NULL, 0, 0.0f, s);
        }
        f_call c = { m, tokens };
        if (mt_graph_capture(f_capture, &c, &g->graph) != MT_OK) {
            MT_LOG_WARN("CUDA graph capture of the forward failed (%s); running without graphs",
                        mt_last_error());
            mt_error_clear();
            m->graphs = 0;
            return stage_fwd(m, tokens, NULL, 0, 0.0f, s);
        }
    }
    MT_TRY(mt_graph_launch(g->graph, s));
    m->slot_tokens[0] = *tokens;
    return MT_OK;
}

mt_status mt_model_forward(mt_model *m, const mt_tensor *tokens, const mt_tensor *targets,
                           mt_stream stream) {
    MT_REQUIRE(m && tokens, MT_ERR_INVALID_ARG, "NULL model or tokens");
    MT_TRY(whole_model(m, "mt_model_forward"));
    /* (inference models only; MoE: the tokens per expert come to the host every layer) */
    if (m->graphs && m->no_grads && !targets && !m->prof && mt_device_is_cuda(m->dev) &&
        !moe_n(&m->cfg))
        return fwd_graph(m, tokens, stream);
    return stage_fwd(m, tokens, targets, 0, 0.0f, stream);
}

/* Tells the grad-ready callback (mt_model_set_grad_ready) that a level's gradients are final. */
static mt_status grads_ready(mt_model *m, int level, mt_stream s) {
    return m->ready_fn ? m->ready_fn(m->ready_ctx, level, s) : MT_OK;
}

/* Layer l's backward: a->dres, the gradient of its output, becomes its input's. own_fc2_b: no
 * norm backward came before to take fc2's bias gradient (a pipeline stage's last layer), so
 * fc2's backward takes it; prev_fc2_b: the bias whose gradient the input norm's backward takes
 * (the layer before's fc2 bias; NULL: none). */
static mt_status layer_bwd(mt_model *m, int l, int own_fc2_b, mt_model_param *prev_fc2_b,
                           mt_stream s) {
    const mt_model_config *c = &m->cfg;
    acts *a = &m->a;
    const int acc = !m->grads_discarded; /* 0: the first write of every weight's grad */
    /* with hidden dropout the projections' bias gradients are the dropped gradients' sums, taken
     * by their own linear backwards, not the norm backwards' sums of dres */
    const int hdrop = hidden_drop(m);
    layer_acts *la = layer_of(m, l);
    layer_params *lp = &m->lp[l];
    mt_attn_config ac = attn_cfg(m, l);
    /* a->dres is the gradient of resid_in[l+1] = resid_mid + mlp(ln2); dy is fc2's output's
     * (a->dres, or its dropout) */
    const mt_tensor *dyp = &a->dres;
    if (moe_layer(c, l)) {
        MT_TRY(moe_bwd(m, l, la, lp, acc, s));
        goto mlp_done;
    }
    if (hdrop) OP("bwd.dropout", drop_grad(m, (uint32_t)(SITE_FC2 + 3 * l), &dyp, s));
    /* (else from the norm backward's sums; no norm follows a stage's last layer) */
    mt_model_param *fc2_b = hdrop || own_fc2_b ? lp->fc2_b : NULL;
    if (sp(m)) { /* row-parallel: every row's gradient (the dropped one under hidden dropout) */
        OP("bwd.tp.gather", mt_tp_gather_rows(m->tp, &a->sp_all, dyp, s));
        dyp = &a->sp_all;
    }
    if (c->recompute_mlp_act && c->swiglu)
        OP("bwd.recompute.act", mt_swiglu_fwd(&la->fc1_act, &la->fc1_pre, NULL, s));
    if (c->swiglu) {
        OP("bwd.gemm.fc2", mt_linear_bwd(m->blas, &a->dfc1_act, G(lp->fc2_w), G(fc2_b), dyp,
                                         &la->fc1_act, W(lp->fc2_w), acc, s));
        OP("bwd.swiglu", mt_swiglu_bwd(&a->dfc1_pre, NULL, &a->dfc1_act, &la->fc1_pre, NULL, s));
    } else if (c->recompute_mlp_act) { /* the GELU recomputed by fc2's dx GEMM too */
        OP("bwd.gemm.fc2+dgelu",
           mt_linear_bwd_dgelu_recompute(m->blas, &a->dfc1_pre, G(lp->fc1_b), &la->fc1_pre,
                                         G(lp->fc2_w), G(fc2_b), dyp, &la->fc1_act, W(lp->fc2_w),
                                         acc, s));
    } else { /* the GELU backward (and fc1's bias gradient) ride on fc2's dx GEMM */
        OP("bwd.gemm.fc2+dgelu",
           mt_linear_bwd_dgelu(m->blas, &a->dfc1_pre, G(lp->fc1_b), &la->fc1_pre, G(lp->fc2_w),
                               G(fc2_b), dyp, &la->fc1_act, W(lp->fc2_w), acc, s));
    }
    if (c->recompute_layernorm)
        OP("bwd.recompute.norm",
           norm_fwd(m, &la->ln2, NULL, NULL, &la->resid_mid, lp->ln2_w, lp->ln2_b, s));
    const mt_tensor *x;
    OP("bwd.tp.gather", ln_rows(m, &la->ln2, &x, s));
    OP("bwd.gemm.fc1",
       mt_tp_column_bwd_async(m->tp, m->tpa_on, m->blas, &a->dln, sp(m) ? &a->sp_all : NULL,
                              G(lp->fc1_w), c->swiglu ? G(lp->fc1_b) : NULL, &a->dfc1_pre, x,
                              W(lp->fc1_w), acc, sp(m), s));
mlp_done:
    OP("bwd.norm", norm_bwd(m, &a->dres, lp->ln2_w, lp->ln2_b, hdrop ? NULL : lp->proj_b, &a->dln,
                            &la->resid_mid, &la->ln2_mean, &la->ln2_rstd, &a->dres, s));
    /* a->dres is now the gradient of resid_mid = resid_in + proj(attention) */
    dyp = &a->dres;
    if (hdrop) OP("bwd.dropout", drop_grad(m, (uint32_t)(SITE_PROJ + 3 * l), &dyp, s));
    if (sp(m)) {
        OP("bwd.tp.gather", mt_tp_gather_rows(m->tp, &a->sp_all, dyp, s));
        dyp = &a->sp_all;
    }
    const int mla = c->multi_latent_attention;
    OP("bwd.gemm.proj", mt_linear_bwd(m->blas, mla ? &a->mla_do : &a->datty, G(lp->proj_w),
                                      hdrop ? G(lp->proj_b) : NULL, dyp,
                                      mla ? &la->mla_o : &la->atty, W(lp->proj_w), acc, s));
    if (mla) OP("bwd.mla", mla_out_bwd(m, s));
    mt_tensor q, k, v, dq, dk, dv, y, dy;
    MT_TRY(qkv_views(m, &la->qkv, &q, &k, &v));
    if (mla && c->recompute_mla_up_proj) { /* (the heads again, into the shared buffers) */
        const mt_tensor *xq = NULL;        /* (linear_q_proj's input: the layer's normed input) */
        if (!c->q_lora_rank && c->recompute_layernorm)
            OP("bwd.recompute.norm",
               norm_fwd(m, &la->ln1, NULL, NULL, &la->resid_in, lp->ln1_w, lp->ln1_b, s));
        if (!c->q_lora_rank) OP("bwd.tp.gather", ln_rows(m, &la->ln1, &xq, s));
        OP("bwd.recompute.mla", mla_up(m, la, lp, xq, s));
        OP("bwd.recompute.rope", rope(m, &q, 0, s));
        OP("bwd.recompute.rope", rope(m, &k, 0, s));
    }
    MT_TRY(qkv_views(m, &a->dqkv, &dq, &dk, &dv));
    MT_TRY(as_bthd(m, &la->atty, local_heads(c), &y));
    MT_TRY(as_bthd(m, &a->datty, local_heads(c), &dy));
    /* qkv's bias gradient from the attention backward, which needs no pass over dqkv for
     * it; with rotary embeddings between, the column sums of dqkv (qkv's linear backward) */
    mt_tensor db[3];
    const int bias_here =
        lp->qkv_b && c->position_embedding_type != MT_POS_ROPE && !c->qk_layernorm && cp_n(c) == 1;
    if (bias_here) {
        const int64_t nh = local_heads(c), ng = local_groups(c), hd = c->kv_channels;
        MT_TRY(mt_tensor_slice(&lp->qkv_b->grad, 0, 0, nh * hd, &db[0]));
        MT_TRY(mt_tensor_slice(&lp->qkv_b->grad, 0, nh * hd, ng * hd, &db[1]));
        MT_TRY(mt_tensor_slice(&lp->qkv_b->grad, 0, (nh + ng) * hd, ng * hd, &db[2]));
    }
    if (cp_n(c) > 1) /* (context parallelism: the keys' gradients summed over the ranks) */
        OP("bwd.attn", cp_attn_bwd(m, &dq, &dk, &dv, &dy, &q, &k, &v, &y, &la->lse, &ac, s));
    else
        OP("bwd.attn",
           mt_attn_bwd_bias(&dq, &dk, &dv, bias_here ? &db[0] : NULL, bias_here ? &db[1] : NULL,
                            bias_here ? &db[2] : NULL, acc, &dy, &q, &k, &v, &y, &la->lse, &ac,
                            a->ws.data, m->ws_bytes, s));
    if (c->position_embedding_type == MT_POS_ROPE) {
        OP("bwd.rope", rope(m, &dq, 1, s));
        OP("bwd.rope", rope(m, &dk, 1, s));
    }
    if (c->qk_layernorm) OP("bwd.qk_norm", qk_norm_bwd(m, la, lp, &dq, &dk, s));
    if (c->recompute_layernorm)
        OP("bwd.recompute.norm",
           norm_fwd(m, &la->ln1, NULL, NULL, &la->resid_in, lp->ln1_w, lp->ln1_b, s));
    OP("bwd.tp.gather", ln_rows(m, &la->ln1, &x, s));
    if (mla)
        OP("bwd.mla", mla_bwd(m, la, lp, x, acc, s));
    else
        OP("bwd.gemm.qkv",
           mt_tp_column_bwd_async(m->tp, m->tpa_on, m->blas, &a->dln, sp(m) ? &a->sp_all : NULL,
                                  G(lp->qkv_w), bias_here ? NULL : G(lp->qkv_b), &a->dqkv, x,
                                  W(lp->qkv_w), acc, sp(m), s));
    OP("bwd.norm", norm_bwd(m, &a->dres, lp->ln1_w, lp->ln1_b, hdrop ? NULL : prev_fc2_b, &a->dln,
                            &la->resid_in, &la->ln1_mean, &la->ln1_rstd, &a->dres, s));
    return MT_OK;
}

/* The backward from the logits' gradient (lm_head), or from dln when lm_head_slices ran the
 * output layer's backward. */
static mt_status backward(mt_model *m, int lm_head, mt_stream s) {
    const mt_model_config *c = &m->cfg;
    acts *a = &m->a;
    const int acc = !m->grads_discarded; /* 0: the first write of every weight's grad */
    /* with hidden dropout the projections' bias gradients are the dropped gradients' sums, taken
     * by their own linear backwards, not the norm backwards' sums of dres */
    const int hdrop = hidden_drop(m);
    const int l0 = stage_l0(c), l1 = l0 + stage_nl(c), last = last_stage(c);
    if (lm_head && last)
        OP("bwd.gemm.lmhead",
           mt_tp_column_bwd_async(m->tp, m->tpa_on, m->blas, &a->dln, sp(m) ? &a->sp_all : NULL,
                                  G(m->out_w), NULL, &a->logits, sp(m) ? &a->lnf_all : &a->lnf,
                                  W(m->out_w), acc || m->mtp_ran, sp(m), s));
    if (last && m->mtp_ran) /* (the first MTP depth's input is the final norm's output too) */
        OP("bwd.mtp", mt_axpy(&a->dln, 1.0f, &a->mtp_dh0, s));
    /* fc2's and proj's bias gradients come from the norm backwards that write their dy (a
     * pipeline stage before the last: a->dres is its output's gradient, received) */
    if (last)
        OP("bwd.norm",
           norm_bwd(m, &a->dres, m->lnf_w, m->lnf_b, hdrop ? NULL : m->lp[c->num_layers - 1].fc2_b,
                    &a->dln, &a->resid_final, &a->lnf_mean, &a->lnf_rstd, NULL, s));
    if (last) MT_TRY(grads_ready(m, c->num_layers, s));
    for (int l = l1 - 1; l >= l0; l--) {
        int g0, g1;
        if (recompute_group(c, l, &g0, &g1) && l == g1) MT_TRY(recompute(m, g0, g1, s));
        MT_TRY(layer_bwd(m, l, l == l1 - 1 && !last, l > l0 ? m->lp[l - 1].fc2_b : NULL, s));
        MT_TRY(grads_ready(m, l, s));
    }
    if (!first_stage(c)) return grads_ready(m, -1, s); /* (a->dres: the input's gradient) */
    mt_tensor d3; /* (sequence parallelism: sp_all, where the embedding's backward gathers) */
    const int64_t bt[3] = { m->B, c->seq_length, c->hidden_size };
    MT_TRY(mt_tensor_reshape(sp(m) ? &a->sp_all : &a->dres, 3, bt, &d3));
    if (hdrop) { /* the embeddings' dropout, in place */
        mt_dropout_config d = hidden_cfg(m, SITE_EMB);
        OP("bwd.dropout", mt_dropout(&a->dres, &a->dres, NULL, &d, s));
    }
    OP("bwd.embedding",
       mt_tp_embedding_bwd(m->tp, G(m->wte), G(m->wpe), sp(m) ? &a->dres : &d3, sp(m) ? &d3 : NULL,
                           &m->slot_tokens[m->slot], m->wpe ? positions(m) : NULL, a->ws.data,
                           m->ws_bytes, sp(m), s));
    return grads_ready(m, -1, s);
}

static mt_status fwd_bwd_train(mt_model *m, const mt_tensor *tokens, const mt_tensor *targets,
                               float loss_scale, mt_stream s);

/* The training step: dropout on (m->train) for its forward and backward only. */
static mt_status check_sample_ids(const mt_model *m) {
    const mt_model_config *c = &m->cfg;
    MT_REQUIRE((c->hidden_dropout == 0.0f && c->attention_dropout == 0.0f) || m->ids.data,
               MT_ERR_INVALID_ARG,
               "dropout (hidden %g, attention %g) needs each row's sample id: "
               "mt_model_set_sample_ids",
               (double)c->hidden_dropout, (double)c->attention_dropout);
    return MT_OK;
}

static mt_status fwd_bwd(mt_model *m, const mt_tensor *tokens, const mt_tensor *targets,
                         float loss_scale, mt_stream s) {
    MT_TRY(check_sample_ids(m));
    m->train = 1;
    mt_status st = fwd_bwd_train(m, tokens, targets, loss_scale, s);
    m->train = 0;
    return st;
}

static mt_status fwd_bwd_train(mt_model *m, const mt_tensor *tokens, const mt_tensor *targets,
                               float loss_scale, mt_stream s) {
    MT_TRY(stage_fwd(m, tokens, targets, 1, loss_scale, s));
    MT_TRY(backward(m, m->cfg.logits_chunks == 1, s));
    m->grads_discarded = 0;
    return MT_OK;
}

typedef struct fb_call {
    mt_model *m;
    const mt_tensor *tokens, *targets;
    float loss_scale;
} fb_call;

static mt_status fb_capture(void *ctx, mt_stream s) {
    fb_call *c = ctx;
    return fwd_bwd(c->m, c->tokens, c->targets, c->loss_scale, s);
}

/* The step as a CUDA graph (mt_model_set_cuda_graphs): captured at the second call with the same
 * key, replayed after; the first runs eagerly (cuBLASLt's algorithm choice, first-use work). Eight
 * slots: the backward that writes the grads (first micro-batch) and the one that adds to them,
 * each without and with the grad-ready and the param-wait callbacks, whose enqueued work (a
 * trainer's bucket reductions on its own stream, joined back by the last level; waits for
 * gathers) the graph records. */
static mt_status fwd_bwd_graph(mt_model *m, const mt_tensor *tokens, const mt_tensor *targets,
                               float loss_scale, mt_stream s) {
    MT_TRY(check_ids(m, tokens, "tokens"));
    MT_TRY(check_ids(m, targets, "targets"));
    graph_slot *g =
        &m->gs[m->grads_discarded + 2 * (m->ready_fn != NULL) + 4 * (m->wait_fn != NULL)];
    graph_key k;
    memset(&k, 0, sizeof k);
    k.tokens = tokens->data, k.targets = targets->data, k.stream = s, k.loss_scale = loss_scale;
    k.positions = m->pos.data, k.sample_ids = m->ids.data;
    k.ready_fn = m->ready_fn, k.ready_ctx = m->ready_ctx;
    k.wait_fn = m->wait_fn, k.wait_ctx = m->wait_ctx;
    const int same = g->seen && memcmp(&k, &g->key, sizeof k) == 0;
    if (!g->graph || !same) { /* (a graph implies seen, with its key) */
        mt_graph_destroy(g->graph);
        g->graph = NULL;
        if (!same) {
            g->key = k, g->seen = 1;
            return fwd_bwd(m, tokens, targets, loss_scale, s);
        }
        fb_call c = { m, tokens, targets, loss_scale };
        int n_loss = m->n_loss, discarded = m->grads_discarded; /* the capture ran the host parts */
        mt_status st = mt_graph_capture(fb_capture, &c, &g->graph);
        m->n_loss = n_loss, m->grads_discarded = discarded;
        if (st != MT_OK && (m->ready_fn || m->wait_fn)) /* their host parts ran for it */
            return MT_ERROR(MT_ERR_CUDA,
                            "CUDA graph capture of the training step with data-parallel "
                            "callbacks failed (%s); run with MT_CUDA_GRAPHS=0",
                            mt_last_error());
        if (st != MT_OK) {
            MT_LOG_WARN("CUDA graph capture of the training step failed (%s); running without "
                        "graphs",
                        mt_last_error());
            mt_error_clear();
            m->graphs = 0;
            return fwd_bwd(m, tokens, targets, loss_scale, s);
        }
        MT_LOG_DEBUG("CUDA graph: captured the forward and backward (loss scale %g, grads %s)",
                     (double)loss_scale, m->grads_discarded ? "written" : "added");
    }
    MT_TRY(mt_graph_launch(g->graph, s));
    m->slot_tokens[0] = *tokens;
    m->n_loss++;
    m->grads_discarded = 0;
    return MT_OK;
}

mt_status mt_model_forward_backward(mt_model *m, const mt_tensor *tokens, const mt_tensor *targets,
                                    float loss_scale, mt_stream s) {
    MT_REQUIRE(m && tokens && targets, MT_ERR_INVALID_ARG, "NULL model, tokens or targets");
    MT_TRY(whole_model(m, "mt_model_forward_backward"));
    MT_TRY(trainable(m, "mt_model_forward_backward"));
    /* (MoE: the tokens per expert come to the host every layer, which no graph can replay) */
    /* (nor with the caller's MTP rolls: their scales change between micro-batches) */
    if (m->graphs && !m->prof && mt_device_is_cuda(m->dev) && !moe_n(&m->cfg) &&
        !m->mtp_in_tok.data)
        return fwd_bwd_graph(m, tokens, targets, loss_scale, s);
    return fwd_bwd(m, tokens, targets, loss_scale, s);
}

/* ---- pipeline parallelism ---- */

int mt_model_pp_slots(const mt_model *m) {
    return m ? m->nslots : 0;
}

mt_tensor mt_model_pp_input(mt_model *m, int slot) {
    mt_tensor none = { 0 };
    if (!m || slot < 0 || slot >= m->nslots) return none;
    return m->a.layer[slot * stage_nl(&m->cfg)].resid_in;
}

mt_tensor mt_model_pp_output(mt_model *m) {
    return m->a.resid_final;
}

mt_tensor mt_model_pp_grad(mt_model *m) {
    return m->a.dres;
}

static mt_status pp_slot(mt_model *m, int slot) {
    MT_REQUIRE(m, MT_ERR_INVALID_ARG, "NULL model");
    MT_REQUIRE(slot >= 0 && slot < m->nslots, MT_ERR_INVALID_ARG,
               "pipeline slot %d: this stage (%d of %d) has %d", slot,
               m->cfg.pipeline_model_parallel_rank, pp_n(&m->cfg), m->nslots);
    m->slot = slot;
    return MT_OK;
}

mt_status mt_model_pp_forward(mt_model *m, int slot, const mt_tensor *tokens,
                              const mt_tensor *targets, int train, float loss_scale, mt_stream s) {
    MT_TRY(pp_slot(m, slot));
    const mt_model_config *c = &m->cfg;
    MT_REQUIRE(!m->pp_fwd, MT_ERR_INVALID_ARG,
               "the last pipeline stage ran a training forward without its mt_model_pp_backward");
    MT_REQUIRE(tokens || !first_stage(c), MT_ERR_INVALID_ARG, "the first stage needs tokens");
    MT_REQUIRE(targets || !train || !last_stage(c), MT_ERR_INVALID_ARG,
               "the last stage's training forward needs targets");
    if (train) MT_TRY(trainable(m, "mt_model_pp_forward with train"));
    if (train) MT_TRY(check_sample_ids(m));
    m->train = train != 0;
    mt_status st =
        stage_fwd(m, tokens, train || last_stage(c) ? targets : NULL, train, loss_scale, s);
    m->train = 0;
    m->pp_fwd = st == MT_OK && train && last_stage(c);
    return st;
}

mt_status mt_model_pp_backward(mt_model *m, int slot, mt_stream s) {
    MT_TRY(pp_slot(m, slot));
    MT_REQUIRE(m->pp_fwd || !last_stage(&m->cfg), MT_ERR_INVALID_ARG,
               "the last pipeline stage's backward needs its training forward first");
    MT_TRY(check_sample_ids(m));
    m->pp_fwd = 0;
    m->train = 1;
    mt_status st = backward(m, m->cfg.logits_chunks == 1, s);
    m->train = 0;
    m->grads_discarded = 0;
    return st;
}
