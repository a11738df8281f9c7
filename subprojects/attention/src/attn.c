/* Attention forward/backward: validation of shapes, strides, dtypes and devices, then dispatch. */
#include "attn_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A (B,T,heads,D) view with D innermost; heads == 0 takes it from t; T from like, or (T < 0) free:
 * keys and values in a forward (attention.h: their T may differ from the queries'). */
static mt_status check_bthd_t(const mt_tensor *t, const char *what, const mt_tensor *like,
                              int64_t heads, int64_t T) {
    MT_REQUIRE(t && (t->data || mt_tensor_numel(t) == 0), MT_ERR_INVALID_ARG, "%s is NULL", what);
    MT_REQUIRE(t->ndim == 4, MT_ERR_INVALID_ARG, "%s must be (B,T,H,D), has %d dims", what,
               t->ndim);
    MT_REQUIRE(t->stride[3] == 1, MT_ERR_INVALID_ARG, "%s: D must be innermost (stride %lld)", what,
               (long long)t->stride[3]);
    MT_REQUIRE(mt_dtype_is_float(t->dtype), MT_ERR_UNSUPPORTED, "%s: dtype %s", what,
               mt_dtype_name(t->dtype));
    if (like) {
        MT_REQUIRE(t->dtype == like->dtype && mt_device_eq(t->device, like->device),
                   MT_ERR_INVALID_ARG, "%s differs from q in dtype or device", what);
        if (T == 0) T = like->shape[1];
        MT_REQUIRE(t->shape[0] == like->shape[0] && (T < 0 || t->shape[1] == T) &&
                       t->shape[3] == like->shape[3] && (heads == 0 || t->shape[2] == heads),
                   MT_ERR_INVALID_ARG,
                   "%s has shape [%lld,%lld,%lld,%lld], expected [%lld,%lld,%lld,%lld]", what,
                   (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2],
                   (long long)t->shape[3], (long long)like->shape[0],
                   (long long)(T < 0 ? t->shape[1] : T), (long long)(heads ? heads : t->shape[2]),
                   (long long)like->shape[3]);
    }
    return MT_OK;
}

static mt_status check_bthd(const mt_tensor *t, const char *what, const mt_tensor *like,
                            int64_t heads) {
    return check_bthd_t(t, what, like, heads, 0);
}

/* fwd: 1 for the forward, whose keys may outnumber the queries (attention.h). */
static mt_status resolve(attn_shape *s, const mt_tensor *q, const mt_tensor *k,
                         const mt_attn_config *cfg, int fwd) {
    MT_REQUIRE(cfg && cfg->size >= sizeof(mt_attn_config), MT_ERR_INVALID_ARG,
               "cfg is NULL or not from MT_ATTN_CONFIG_INIT");
    MT_TRY(check_bthd(q, "q", NULL, 0));
    MT_TRY(check_bthd_t(k, "k", q, 0, -1));
    s->B = q->shape[0], s->T = q->shape[1], s->H = q->shape[2], s->D = q->shape[3];
    s->Tk = k->shape[1];
    s->kl = NULL;
    const mt_tensor *kl = cfg->key_len;
    if (kl) { /* per-row key counts (a KV cache's lengths) */
        MT_REQUIRE(fwd, MT_ERR_INVALID_ARG, "key_len is for the forward only");
        MT_REQUIRE(kl->data && kl->dtype == MT_I32 && kl->ndim == 1 && kl->shape[0] == s->B &&
                       mt_tensor_is_contiguous(kl) && mt_device_eq(kl->device, q->device),
                   MT_ERR_INVALID_ARG, "key_len must be contiguous i32 (B) = (%lld) on q's device",
                   (long long)s->B);
        s->kl = kl->data;
        if (!mt_device_is_cuda(q->device)) /* (CUDA relies on them) */
            for (int64_t b = 0; b < s->B; b++)
                MT_REQUIRE(s->kl[b] >= s->T && s->kl[b] <= s->Tk, MT_ERR_INVALID_ARG,
                           "key_len[%lld] = %d: must be in [%lld, %lld] (the queries, the keys)",
                           (long long)b, s->kl[b], (long long)s->T, (long long)s->Tk);
    }
    if (s->Tk != s->T || kl) { /* a forward over cached keys, or a backward over a key prefix */
        MT_REQUIRE(!cfg->causal || s->Tk >= s->T, MT_ERR_INVALID_ARG,
                   "causal attention of %lld queries over %lld keys: the queries are the last "
                   "keys' positions, so there must be at least as many keys",
                   (long long)s->T, (long long)s->Tk);
        MT_REQUIRE(!cfg->key_start && cfg->dropout.p == 0.0f, MT_ERR_UNSUPPORTED,
                   "document masks and attention dropout need as many keys as queries (%lld "
                   "keys, %lld queries)",
                   (long long)s->Tk, (long long)s->T);
    }
    s->Hkv = k->shape[2];
    MT_REQUIRE(s->Hkv > 0 && s->H % s->Hkv == 0, MT_ERR_INVALID_ARG,
               "q heads %lld not a multiple of kv heads %lld", (long long)s->H, (long long)s->Hkv);
    MT_REQUIRE(s->D > 0 && s->D <= 256, MT_ERR_UNSUPPORTED, "head dim %lld not in [1,256]",
               (long long)s->D);
    s->scale = cfg->scale != 0.0f ? cfg->scale : (float)(1.0 / sqrt((double)s->D));
    s->causal = cfg->causal != 0;
    s->deterministic = cfg->deterministic != 0;
    static int env_split = MT_ENV_UNREAD; /* MT_ATTN_DS_SPLIT=0/1 overrides cfg (comparisons) */
    const int split = mt_env_int_once("MT_ATTN_DS_SPLIT", -1, &env_split);
    s->ds_split = split >= 0 ? split != 0 : cfg->ds_split != 0;
    s->esize = (int)mt_dtype_size(q->dtype);
    s->ks = NULL;
    const mt_dropout_config *dc = &cfg->dropout;
    memset(&s->drop, 0, sizeof s->drop);
    MT_TRY(mt_dropout_check(dc, q->device));
    if (dc->p > 0.0f) {
        const mt_tensor *id = dc->sample;
        MT_REQUIRE(id->shape[0] == s->B, MT_ERR_INVALID_ARG,
                   "attention dropout: %lld sample ids for B = %lld rows", (long long)id->shape[0],
                   (long long)s->B);
        s->drop.seed = dc->seed, s->drop.site = dc->site;
        s->drop.thr = mt_dropout_threshold(dc->p);
        s->drop.scale = mt_dropout_scale(dc->p);
        s->drop.ids = id->data;
    }
    const mt_tensor *ks = cfg->key_start;
    if (!ks) return MT_OK;
    MT_REQUIRE(s->causal, MT_ERR_INVALID_ARG, "key_start (document masks) needs causal = 1");
    MT_REQUIRE(
        ks->data && ks->dtype == MT_I32 && ks->ndim == 2 && mt_tensor_is_contiguous(ks) &&
            ks->shape[0] == s->B && ks->shape[1] == s->T && mt_device_eq(ks->device, q->device),
        MT_ERR_INVALID_ARG, "key_start must be contiguous i32 (B,T) = (%lld,%lld) on q's device",
        (long long)s->B, (long long)s->T);
    s->ks = ks->data;
    if (mt_device_is_cuda(q->device)) return MT_OK; /* the kernels rely on it (attention.h) */
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t i = 0, prev = 0; i < s->T; i++) {
            const int64_t v = s->ks[b * s->T + i];
            MT_REQUIRE(v >= prev && v <= i, MT_ERR_INVALID_ARG,
                       "key_start[%lld][%lld] = %lld: must be in [key_start[%lld][%lld], %lld] "
                       "(nondecreasing, at most the query's own index)",
                       (long long)b, (long long)i, (long long)v, (long long)b,
                       (long long)(i ? i - 1 : 0), (long long)i);
            prev = v;
        }
    return MT_OK;
}

static mt_status check_lse(const mt_tensor *lse, const attn_shape *s, const mt_tensor *q) {
    MT_REQUIRE(lse && lse->data, MT_ERR_INVALID_ARG, "lse is NULL");
    MT_REQUIRE(lse->dtype == MT_F32 && lse->ndim == 3 && mt_tensor_is_contiguous(lse) &&
                   lse->shape[0] == s->B && lse->shape[1] == s->H && lse->shape[2] == s->T &&
                   mt_device_eq(lse->device, q->device),
               MT_ERR_INVALID_ARG,
               "lse must be contiguous f32 (B,H,T) = (%lld,%lld,%lld) on q's device",
               (long long)s->B, (long long)s->H, (long long)s->T);
    return MT_OK;
}

mt_status mt_attn_fwd(mt_tensor *out, mt_tensor *lse, const mt_tensor *q, const mt_tensor *k,
                      const mt_tensor *v, const mt_attn_config *cfg, mt_stream stream) {
    attn_shape s;
    MT_TRY(resolve(&s, q, k, cfg, 1));
    MT_TRY(check_bthd_t(v, "v", q, s.Hkv, s.Tk));
    MT_TRY(check_bthd(out, "out", q, s.H));
    MT_TRY(check_lse(lse, &s, q));
    MT_REQUIRE(out->data != q->data && out->data != k->data && out->data != v->data,
               MT_ERR_INVALID_ARG, "out aliases an input");
    if (s.B * s.T * s.H == 0) return MT_OK;
    MT_REQUIRE(s.Tk > 0, MT_ERR_INVALID_ARG, "attention over no keys");
    return MT_DISPATCH(q->device, attn_fwd_cpu(&s, out, lse, q, k, v),
                       attn_fwd_cuda(&s, out, lse, q, k, v, stream));
}

/* CUDA, keys outnumbering the queries (Tk > T) in the backward, where the square's kernels do
 * not take them as they are (attn_bwd_prefix_direct): the queries padded to Tk rows in
 * front (zero q, out and dout, lse 1e30: every padded row's weights are 0, so it adds nothing to
 * dk, dv or a bias sum) for the kernels' square causal mask. Bytes of the padded q, out, dout, dq
 * (B,Tk,H,D) and lse (B,H,Tk), each 256-byte aligned, before the kernels' own workspace. */
static size_t pad_bytes(const attn_shape *s) {
    if (s->Tk == s->T) return 0;
    const size_t rows = (size_t)(s->B * s->Tk * s->H * s->D) * (size_t)s->esize;
    const size_t lse = (size_t)(s->B * s->H * s->Tk) * 4;
    return 4 * ((rows + 255) / 256 * 256) + (lse + 255) / 256 * 256;
}

static size_t bwd_ws_bytes(const attn_shape *s) {
    attn_shape p = *s;
    p.T = s->Tk;
    return pad_bytes(s) + attn_ws_bytes(&p);
}

mt_status mt_attn_bwd_workspace(const mt_tensor *q, const mt_tensor *k, const mt_attn_config *cfg,
                                size_t *bytes) {
    attn_shape s = { 0 };
    MT_REQUIRE(bytes, MT_ERR_INVALID_ARG, "bytes is NULL");
    MT_TRY(resolve(&s, q, k, cfg, 0));
    *bytes = mt_device_is_cuda(q->device) ? bwd_ws_bytes(&s) : 0;
    return MT_OK;
}

/* The backward over a key prefix on CUDA (pad_bytes): the queries' rows padded in front, the
 * square backward, dq's last T rows. */
static mt_status bwd_padded(const attn_shape *s, mt_tensor *dq, mt_tensor *dk, mt_tensor *dv,
                            const mt_tensor *dout, const mt_tensor *q, const mt_tensor *k,
                            const mt_tensor *v, const mt_tensor *out, const mt_tensor *lse,
                            const attn_bias *bias, void *workspace, mt_stream stream) {
    const int64_t B = s->B, T = s->T, Tk = s->Tk, H = s->H, D = s->D, off = Tk - T;
    const size_t rows = (size_t)(B * Tk * H * D) * (size_t)s->esize, rb = (rows + 255) / 256 * 256;
    char *w = workspace;
    mt_tensor pad[4]; /* q, out, dout, dq */
    const mt_tensor *src[3] = { q, out, dout };
    for (int i = 0; i < 4; i++) {
        pad[i] = mt_tensor_make(w + i * rb, q->dtype, 4, (int64_t[]){ B, Tk, H, D }, q->device);
        if (i == 3) break;
        mt_tensor tail;
        MT_TRY(mt_fill(&pad[i], 0.0f, stream));
        MT_TRY(mt_tensor_slice(&pad[i], 1, off, T, &tail));
        MT_TRY(mt_copy(&tail, src[i], stream));
    }
    mt_tensor lp = mt_tensor_make(w + 4 * rb, MT_F32, 3, (int64_t[]){ B, H, Tk }, q->device), lt;
    MT_TRY(mt_fill(&lp, 1e30f, stream));
    MT_TRY(mt_tensor_slice(&lp, 2, off, T, &lt));
    MT_TRY(mt_copy(&lt, lse, stream));
    attn_shape p = *s;
    p.T = Tk;
    MT_TRY(MT_DISPATCH(q->device, MT_ERROR(MT_ERR_INTERNAL, "padded backward on the CPU"),
                       attn_bwd_cuda(&p, &pad[3], dk, dv, &pad[2], &pad[0], k, v, &pad[1], &lp,
                                     bias, w + pad_bytes(s), stream)));
    mt_tensor dq_tail;
    MT_TRY(mt_tensor_slice(&pad[3], 1, off, T, &dq_tail));
    return mt_copy(dq, &dq_tail, stream);
}

/* A bias sum: f32, contiguous, n elements on q's device; NULL is fine. */
static mt_status check_bias(const mt_tensor *t, const char *what, int64_t n, const mt_tensor *q) {
    if (!t) return MT_OK;
    MT_REQUIRE(t->data || n == 0, MT_ERR_INVALID_ARG, "%s has no data", what);
    MT_REQUIRE(t->dtype == MT_F32 && mt_tensor_is_contiguous(t) && mt_tensor_numel(t) == n &&
                   mt_device_eq(t->device, q->device),
               MT_ERR_INVALID_ARG,
               "%s must be contiguous f32 of %lld elements on q's device (is %s, %lld elements)",
               what, (long long)n, mt_dtype_name(t->dtype), (long long)mt_tensor_numel(t));
    return MT_OK;
}

mt_status mt_attn_bwd_bias(mt_tensor *dq, mt_tensor *dk, mt_tensor *dv, mt_tensor *dbq,
                           mt_tensor *dbk, mt_tensor *dbv, int accumulate, const mt_tensor *dout,
                           const mt_tensor *q, const mt_tensor *k, const mt_tensor *v,
                           const mt_tensor *out, const mt_tensor *lse, const mt_attn_config *cfg,
                           void *workspace, size_t workspace_bytes, mt_stream stream) {
    attn_shape s = { 0 };
    MT_TRY(resolve(&s, q, k, cfg, 0));
    MT_TRY(check_bthd_t(v, "v", q, s.Hkv, s.Tk));
    MT_TRY(check_bthd(out, "out", q, s.H));
    MT_TRY(check_bthd(dout, "dout", q, s.H));
    MT_TRY(check_bthd(dq, "dq", q, s.H));
    MT_TRY(check_bthd_t(dk, "dk", q, s.Hkv, s.Tk));
    MT_TRY(check_bthd_t(dv, "dv", q, s.Hkv, s.Tk));
    MT_TRY(check_lse(lse, &s, q));
    MT_REQUIRE(s.Tk >= s.T, MT_ERR_INVALID_ARG,
               "the backward of %lld queries needs at least as many keys (%lld)", (long long)s.T,
               (long long)s.Tk);
    MT_TRY(check_bias(dbq, "dbq", s.H * s.D, q));
    MT_TRY(check_bias(dbk, "dbk", s.Hkv * s.D, q));
    MT_TRY(check_bias(dbv, "dbv", s.Hkv * s.D, q));
    size_t need = mt_device_is_cuda(q->device) ? bwd_ws_bytes(&s) : 0;
    MT_REQUIRE(workspace_bytes >= need && (need == 0 || workspace), MT_ERR_INVALID_ARG,
               "workspace has %zu bytes, needs %zu (mt_attn_bwd_workspace)", workspace_bytes, need);
    MT_REQUIRE(((uintptr_t)workspace & 255) == 0, MT_ERR_INVALID_ARG,
               "workspace must be 256-byte aligned");
    attn_bias bias = { dbq, dbk, dbv, accumulate != 0 };
    const attn_bias *bp = dbq || dbk || dbv ? &bias : NULL;
    if (s.B * s.T * s.H == 0) { /* no rows: sums of nothing */
        mt_tensor *sums[3] = { dbq, dbk, dbv };
        for (int i = 0; i < 3 && !accumulate; i++)
            if (sums[i] && mt_tensor_numel(sums[i]) > 0)
                MT_TRY(mt_memset_zero(sums[i]->data, sums[i]->device, mt_tensor_nbytes(sums[i]),
                                      stream));
        return MT_OK;
    }
    int direct = 0; /* a key prefix on the square's kernels as it stands (attention.h) */
#if MT_HAVE_CUDA
    const mt_tensor *ts[8] = { q, k, v, out, dout, dq, dk, dv };
    direct = s.Tk > s.T && mt_device_is_cuda(q->device) && attn_bwd_prefix_direct(&s, ts);
#endif
    if (s.Tk > s.T && mt_device_is_cuda(q->device) && !direct)
        return bwd_padded(&s, dq, dk, dv, dout, q, k, v, out, lse, bp, workspace, stream);
    return MT_DISPATCH(
        q->device, attn_bwd_cpu(&s, dq, dk, dv, dout, q, k, v, out, lse, bp),
        attn_bwd_cuda(&s, dq, dk, dv, dout, q, k, v, out, lse, bp, workspace, stream));
}

mt_status mt_attn_bwd(mt_tensor *dq, mt_tensor *dk, mt_tensor *dv, const mt_tensor *dout,
                      const mt_tensor *q, const mt_tensor *k, const mt_tensor *v,
                      const mt_tensor *out, const mt_tensor *lse, const mt_attn_config *cfg,
                      void *workspace, size_t workspace_bytes, mt_stream stream) {
    return mt_attn_bwd_bias(dq, dk, dv, NULL, NULL, NULL, 0, dout, q, k, v, out, lse, cfg,
                            workspace, workspace_bytes, stream);
}

mt_status mt_attn_kv_append(mt_tensor *kcache, mt_tensor *vcache, const mt_tensor *k,
                            const mt_tensor *v, const mt_tensor *key_len, mt_stream stream) {
    MT_TRY(check_bthd(kcache, "kcache", NULL, 0));
    MT_TRY(check_bthd_t(vcache, "vcache", kcache, 0, 0));
    MT_TRY(check_bthd_t(k, "k", kcache, kcache->shape[2], -1));
    MT_TRY(check_bthd_t(v, "v", k, kcache->shape[2], 0));
    const int64_t B = kcache->shape[0], T = k->shape[1], Tmax = kcache->shape[1];
    MT_REQUIRE(T <= Tmax, MT_ERR_INVALID_ARG, "%lld new tokens for a cache of %lld", (long long)T,
               (long long)Tmax);
    MT_REQUIRE(key_len && key_len->data && key_len->dtype == MT_I32 && key_len->ndim == 1 &&
                   key_len->shape[0] == B && mt_tensor_is_contiguous(key_len) &&
                   mt_device_eq(key_len->device, k->device),
               MT_ERR_INVALID_ARG, "key_len must be contiguous i32 (B) = (%lld) on k's device",
               (long long)B);
    const int32_t *len = key_len->data;
    if (!mt_device_is_cuda(k->device))
        for (int64_t b = 0; b < B; b++)
            MT_REQUIRE(len[b] >= T && len[b] <= Tmax, MT_ERR_INVALID_ARG,
                       "key_len[%lld] = %d: must be in [%lld, %lld] (the new tokens, the cache)",
                       (long long)b, len[b], (long long)T, (long long)Tmax);
    if (B * T == 0) return MT_OK;
    return MT_DISPATCH(k->device, attn_kv_append_cpu(kcache, vcache, k, v, len),
                       attn_kv_append_cuda(kcache, vcache, k, v, len, stream));
}
