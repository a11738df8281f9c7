/* GEMM and nn.Linear forward/backward: validation, the mt_blas handle and device dispatch
 * (cuBLASLt on CUDA; on the CPU the fast path, or the reference with MT_CPU_REFERENCE=1). */
#include <stdlib.h>
#include <string.h>

#include "ops_impl.h"

/* The fast CPU path (cpu/gemm_fast.c): fp32 accumulation, packed panels, threads. */
mt_status gemm_fast_cpu(const gemm_args *g);

/* c = GELU(src) (ACT_GELU_FWD) or c *= GELU'(src) (ACT_GELU_BWD), batch by batch; src of c's
 * shape, row stride ld, batch stride sb. */
static mt_status gelu_batches(const gemm_args *g, act_op op, const void *src, int64_t ld,
                              int64_t sb, int cuda, mt_stream stream) {
    size_t es = mt_dtype_size(g->c_dtype);
    for (int64_t bt = 0; bt < g->batch; bt++) {
        act_args a = { 0 };
        a.op = op;
        a.dtype = g->c_dtype;
        a.rows = g->M, a.cols = g->N;
        a.out0 = (char *)g->c + (size_t)(bt * g->sc) * es;
        a.ld_out0 = g->ldc;
        a.in1 = (const char *)src + (size_t)(bt * sb) * es;
        a.ld_in1 = ld;
        a.in0 = op == ACT_GELU_BWD ? a.out0 : a.in1; /* GELU': dout is c itself */
        a.ld_in0 = op == ACT_GELU_BWD ? g->ldc : ld;
#if MT_HAVE_CUDA
        if (cuda) {
            MT_TRY(act_cuda(&a, stream));
            continue;
        }
#else
        (void)cuda;
        (void)stream;
#endif
        MT_TRY(act_cpu(&a));
    }
    return MT_OK;
}

mt_status gemm_dgelu_apply(const gemm_args *g, int cuda, mt_stream stream) {
    return gelu_batches(g, ACT_GELU_BWD, g->pre_gelu, g->ldpre, g->spre, cuda, stream);
}

mt_status gemm_gelu_apply(const gemm_args *g, const void *src, int64_t ld, int64_t sb, int cuda,
                          mt_stream stream) {
    return gelu_batches(g, ACT_GELU_FWD, src, ld, sb, cuda, stream);
}

/* Inputs take the fast path unless MT_CPU_REFERENCE=1 asks for the reference. */
static mt_status gemm_host(const gemm_args *g) {
    if (g->cin) { /* beta's c from cin: copied into c first */
        const size_t es = mt_dtype_size(g->c_dtype);
        for (int64_t bt = 0; bt < g->batch; bt++)
            for (int64_t i = 0; i < g->M; i++) {
                const size_t o = (size_t)(bt * g->sc + i * g->ldc) * es;
                memmove((char *)g->c + o, (const char *)g->cin + o, (size_t)g->N * es);
            }
        gemm_args h = *g;
        h.cin = NULL;
        return gemm_host(&h);
    }
    if (g->gelu_split) { /* the GEMM into pre_gelu, then mt_gelu_fwd's GELU from there */
        gemm_args h = *g;
        h.c = g->pre_gelu, h.ldc = g->ldpre, h.sc = g->spre, h.pre_gelu = NULL;
        h.gelu = h.gelu_split = 0;
        MT_TRY(gemm_host(&h));
        return gemm_gelu_apply(g, g->pre_gelu, g->ldpre, g->spre, 0, NULL);
    }
    if (mt_env_int("MT_CPU_REFERENCE", 0) == 0)
        MT_TRY(gemm_fast_cpu(g));
    else
        MT_TRY(gemm_cpu(g));
    return g->dgelu ? gemm_dgelu_apply(g, 0, NULL) : MT_OK;
}

struct mt_blas {
    mt_device device;
    blas_lt *lt; /* NULL for the CPU */
};

mt_status mt_blas_create(mt_device device, mt_blas **out) {
    MT_REQUIRE(out, MT_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
#if !MT_HAVE_CUDA
    MT_REQUIRE(!mt_device_is_cuda(device), MT_ERR_UNSUPPORTED, "built without CUDA");
#endif
    mt_blas *b = calloc(1, sizeof *b);
    MT_REQUIRE(b, MT_ERR_OOM, "mt_blas");
    b->device = device;
#if MT_HAVE_CUDA
    if (mt_device_is_cuda(device)) {
        mt_status s = blas_lt_create(&b->lt);
        if (s != MT_OK) {
            free(b);
            return s;
        }
    }
#endif
    *out = b;
    return MT_OK;
}

void mt_blas_set_autotune(mt_blas *blas, int on) {
#if MT_HAVE_CUDA
    if (blas && blas->lt) blas_lt_set_autotune(blas->lt, on != 0);
#else
    (void)blas, (void)on;
#endif
}

#if !MT_HAVE_CUDA
long long mt_gemm_sm90_count(void) {
    return -1;
}
#endif

void mt_blas_destroy(mt_blas *blas) {
    if (!blas) return;
#if MT_HAVE_CUDA
    blas_lt_destroy(blas->lt);
#endif
    free(blas);
}

/* A rank-2 or rank-3 matrix operand: rows x cols with row stride ld and batch stride sb (0 for a
 * rank-2 operand shared by every batch). */
static mt_status mat_view(const mt_tensor *t, const char *what, int64_t *batch, int64_t *rows,
                          int64_t *cols, int64_t *ld, int64_t *sb) {
    MT_REQUIRE(t && (t->data || mt_tensor_numel(t) == 0), MT_ERR_INVALID_ARG, "%s is NULL", what);
    MT_REQUIRE(t->ndim == 2 || t->ndim == 3, MT_ERR_INVALID_ARG, "%s has rank %d (want 2 or 3)",
               what, t->ndim);
    int d = t->ndim - 2;
    *batch = d ? t->shape[0] : 1;
    *rows = t->shape[d];
    *cols = t->shape[d + 1];
    *ld = t->stride[d];
    *sb = d ? t->stride[0] : 0;
    MT_REQUIRE(t->stride[d + 1] == 1 || *cols <= 1, MT_ERR_INVALID_ARG,
               "%s: last dim is not contiguous", what);
    MT_REQUIRE(*ld >= *cols || *rows <= 1, MT_ERR_INVALID_ARG, "%s: row stride %lld < %lld", what,
               (long long)*ld, (long long)*cols);
    if (*ld < *cols) *ld = *cols;
    return MT_OK;
}

/* Checks an mt_gemm call and fills *gp; 1 in *empty when there is nothing to compute. */
static mt_status gemm_setup(gemm_args *gp, int *empty, mt_blas *blas, mt_tensor *c,
                            mt_tensor *pre_gelu, const mt_tensor *a, const mt_tensor *b,
                            const mt_tensor *bias, int flags, float alpha, float beta) {
    gemm_args g = { 0 };
    int64_t ba = 0, bb = 0, bc = 0, ar = 0, ac = 0, br = 0, bcol = 0, cr = 0, cc = 0;
    MT_TRY(mat_view(a, "a", &ba, &ar, &ac, &g.lda, &g.sa));
    MT_TRY(mat_view(b, "b", &bb, &br, &bcol, &g.ldb, &g.sb));
    MT_TRY(mat_view(c, "c", &bc, &cr, &cc, &g.ldc, &g.sc));
    MT_REQUIRE((flags & ~(MT_GEMM_TRANS_A | MT_GEMM_TRANS_B | MT_GEMM_GELU | MT_GEMM_DGELU |
                          MT_GEMM_GELU_RECOMPUTE)) == 0,
               MT_ERR_INVALID_ARG, "unknown gemm flags 0x%x", flags);
    MT_REQUIRE(!(flags & MT_GEMM_GELU_RECOMPUTE) || ((flags & MT_GEMM_GELU) && pre_gelu),
               MT_ERR_INVALID_ARG, "MT_GEMM_GELU_RECOMPUTE needs MT_GEMM_GELU and pre_gelu");
    g.gelu_split = (flags & MT_GEMM_GELU_RECOMPUTE) != 0;
    g.dgelu = (flags & MT_GEMM_DGELU) != 0;
    MT_REQUIRE(!g.dgelu || (!(flags & MT_GEMM_GELU) && !bias && beta == 0.0f && pre_gelu),
               MT_ERR_INVALID_ARG, "MT_GEMM_DGELU needs pre_gelu and excludes GELU, bias and beta");
    g.trans_a = (flags & MT_GEMM_TRANS_A) != 0;
    g.trans_b = (flags & MT_GEMM_TRANS_B) != 0;
    g.gelu = (flags & MT_GEMM_GELU) != 0;
    g.M = g.trans_a ? ac : ar;
    g.K = g.trans_a ? ar : ac;
    g.N = g.trans_b ? br : bcol;
    int64_t kb = g.trans_b ? bcol : br;
    MT_REQUIRE(kb == g.K && cr == g.M && cc == g.N, MT_ERR_INVALID_ARG,
               "gemm shapes: op(a) is %lldx%lld, op(b) %lldx%lld, c %lldx%lld", (long long)g.M,
               (long long)g.K, (long long)kb, (long long)g.N, (long long)cr, (long long)cc);
    MT_REQUIRE(c->ndim == 3 || (a->ndim == 2 && b->ndim == 2), MT_ERR_INVALID_ARG,
               "batched a or b needs a rank-3 c");
    MT_REQUIRE((a->ndim == 2 || ba == bc) && (b->ndim == 2 || bb == bc), MT_ERR_INVALID_ARG,
               "batch counts differ: a %lld, b %lld, c %lld", (long long)ba, (long long)bb,
               (long long)bc);
    g.batch = bc;
    MT_REQUIRE(mt_device_eq(a->device, c->device) && mt_device_eq(b->device, c->device),
               MT_ERR_INVALID_ARG, "a, b and c are on different devices");
    MT_REQUIRE(a->dtype == MT_F32 || a->dtype == MT_BF16 || a->dtype == MT_F16, MT_ERR_UNSUPPORTED,
               "gemm: dtype %s (f32, bf16 or f16)", mt_dtype_name(a->dtype));
    MT_REQUIRE(b->dtype == a->dtype, MT_ERR_INVALID_ARG, "a is %s, b %s", mt_dtype_name(a->dtype),
               mt_dtype_name(b->dtype));
    MT_REQUIRE(c->dtype == a->dtype || (c->dtype == MT_F32 && !bias && !g.gelu && !g.dgelu),
               MT_ERR_INVALID_ARG, "c is %s for %s inputs (f32 only without bias or GELU)",
               mt_dtype_name(c->dtype), mt_dtype_name(a->dtype));
    g.ab_dtype = a->dtype;
    g.c_dtype = c->dtype;
    if (bias) {
        MT_TRY(mt_tensor_check(bias, "bias", -1));
        MT_REQUIRE(mt_tensor_numel(bias) == g.N && bias->dtype == c->dtype &&
                       mt_device_eq(bias->device, c->device),
                   MT_ERR_INVALID_ARG, "bias must be %lld %s elements on c's device",
                   (long long)g.N, mt_dtype_name(c->dtype));
        g.bias = bias->data;
    }
    if (pre_gelu) {
        int64_t pb, pr, pc;
        MT_REQUIRE(g.gelu || g.dgelu, MT_ERR_INVALID_ARG,
                   "pre_gelu given without MT_GEMM_GELU or MT_GEMM_DGELU");
        MT_TRY(mat_view(pre_gelu, "pre_gelu", &pb, &pr, &pc, &g.ldpre, &g.spre));
        MT_REQUIRE(pb == bc && pr == g.M && pc == g.N && pre_gelu->ndim == c->ndim &&
                       pre_gelu->dtype == c->dtype && mt_device_eq(pre_gelu->device, c->device),
                   MT_ERR_INVALID_ARG, "pre_gelu must match c in shape, dtype and device");
        g.pre_gelu = pre_gelu->data;
    }
    g.a = a->data;
    g.b = b->data;
    g.c = c->data;
    g.alpha = alpha;
    g.beta = beta;
    *gp = g;
    *empty = g.M == 0 || g.N == 0 || g.batch == 0;
#if MT_HAVE_CUDA
    if (mt_device_is_cuda(c->device)) {
        MT_REQUIRE(blas && blas->lt, MT_ERR_INVALID_ARG, "CUDA gemm needs a CUDA mt_blas handle");
        MT_REQUIRE(blas->device.index == c->device.index, MT_ERR_INVALID_ARG,
                   "mt_blas is for cuda:%d, tensors on cuda:%d", blas->device.index,
                   c->device.index);
    }
#else
    (void)blas;
#endif
    return MT_OK;
}

mt_status mt_gemm(mt_blas *blas, mt_tensor *c, mt_tensor *pre_gelu, const mt_tensor *a,
                  const mt_tensor *b, const mt_tensor *bias, int flags, float alpha, float beta,
                  mt_stream stream) {
    gemm_args g;
    int empty;
    MT_TRY(gemm_setup(&g, &empty, blas, c, pre_gelu, a, b, bias, flags, alpha, beta));
    if (empty) return MT_OK;
    return MT_DISPATCH(c->device, gemm_host(&g), gemm_cuda(blas->lt, &g, stream));
}

mt_status mt_gemm_grouped(mt_blas *blas, int n, mt_tensor *const *c, const mt_tensor *const *a,
                          const mt_tensor *const *b, int flags, float alpha, float beta,
                          mt_stream stream) {
    MT_REQUIRE(n >= 0 && (n == 0 || (c && a && b)), MT_ERR_INVALID_ARG,
               "grouped gemm: %d problems, NULL arrays", n);
    MT_REQUIRE((flags & ~(MT_GEMM_TRANS_A | MT_GEMM_TRANS_B)) == 0, MT_ERR_INVALID_ARG,
               "grouped gemm: flags may only hold MT_GEMM_TRANS_A and MT_GEMM_TRANS_B");
    if (n == 0) return MT_OK;
    gemm_args *g = malloc((size_t)n * sizeof *g);
    MT_REQUIRE(g, MT_ERR_OOM, "grouped gemm: %d problems", n);
    int k = 0; /* the non-empty problems, all checked before any runs */
    mt_status st = MT_OK;
    for (int i = 0; i < n && st == MT_OK; i++) {
        int empty;
        st = gemm_setup(&g[k], &empty, blas, c[i], NULL, a[i], b[i], NULL, flags, alpha, beta);
        if (st != MT_OK) break;
        if (c[i]->ndim != 2 || a[i]->ndim != 2 || b[i]->ndim != 2 || c[i]->dtype != c[0]->dtype ||
            a[i]->dtype != a[0]->dtype || !mt_device_eq(c[i]->device, c[0]->device))
            st = MT_ERROR(MT_ERR_INVALID_ARG,
                          "grouped gemm: problem %d is not rank 2 or differs from problem 0 in "
                          "dtype or device",
                          i);
        else if (!empty)
            k++;
    }
    const int cuda = mt_device_is_cuda(c[0]->device);
    if (st == MT_OK && cuda && k > 0) {
#if MT_HAVE_CUDA
        st = gemm_grouped_cuda(blas->lt, k, g, stream);
#else
        st = MT_ERR_UNSUPPORTED;
#endif
        if (st == MT_OK) k = 0; /* done */
        if (st == MT_ERR_UNSUPPORTED) mt_error_clear(), st = MT_OK;
    }
    for (int i = 0; i < k && st == MT_OK; i++) /* one by one */
        st = MT_DISPATCH(c[0]->device, gemm_host(&g[i]), gemm_cuda(blas->lt, &g[i], stream));
    free(g);
    return st;
}

mt_status mt_linear_fwd(mt_blas *blas, mt_tensor *y, mt_tensor *pre_gelu, const mt_tensor *x,
                        const mt_tensor *w, const mt_tensor *bias, int flags, mt_stream stream) {
    MT_REQUIRE((flags & ~(MT_GEMM_GELU | MT_GEMM_GELU_RECOMPUTE)) == 0, MT_ERR_INVALID_ARG,
               "linear: flags may only hold MT_GEMM_GELU and MT_GEMM_GELU_RECOMPUTE");
    return mt_gemm(blas, y, pre_gelu, x, w, bias, flags | MT_GEMM_TRANS_B, 1.0f, 0.0f, stream);
}

mt_status mt_linear_fwd_add(mt_blas *blas, mt_tensor *y, const mt_tensor *x, const mt_tensor *w,
                            const mt_tensor *bias, const mt_tensor *residual, mt_stream stream) {
    MT_REQUIRE(y && residual, MT_ERR_INVALID_ARG, "NULL y or residual");
    MT_REQUIRE(residual->ndim == y->ndim && residual->dtype == y->dtype &&
                   mt_device_eq(residual->device, y->device) &&
                   memcmp(residual->shape, y->shape, (size_t)y->ndim * sizeof y->shape[0]) == 0 &&
                   memcmp(residual->stride, y->stride, (size_t)y->ndim * sizeof y->stride[0]) == 0,
               MT_ERR_INVALID_ARG, "residual must match y in shape, strides, dtype and device");
    MT_REQUIRE(residual->data || mt_tensor_numel(residual) == 0, MT_ERR_INVALID_ARG,
               "residual has no data");
    // why: cuBLASLt reading C from D itself (beta 1, bf16) rounded some sums twice (gpu_gemm)
    MT_REQUIRE(residual->data != y->data || mt_tensor_numel(y) == 0, MT_ERR_INVALID_ARG,
               "residual must not be y (no in-place add)");
    gemm_args g;
    int empty;
    MT_TRY(gemm_setup(&g, &empty, blas, y, NULL, x, w, bias, MT_GEMM_TRANS_B, 1.0f, 1.0f));
    if (empty) return MT_OK;
    g.cin = residual->data;
    return MT_DISPATCH(y->device, gemm_host(&g), gemm_cuda(blas->lt, &g, stream));
}

/* A bias gradient `sum` (the column sums of x, 2-D): as many elements as x has columns, f32 or
 * x's dtype, on x's device. */
static mt_status sums_check(const mt_tensor *sum, const char *sname, const mt_tensor *x,
                            const char *xname) {
    MT_TRY(mt_tensor_check(x, xname, 2));
    MT_TRY(mt_tensor_check(sum, sname, -1));
    MT_REQUIRE(mt_tensor_numel(sum) == x->shape[1], MT_ERR_INVALID_ARG,
               "%s has %lld elements, %s %lld columns", sname, (long long)mt_tensor_numel(sum),
               xname, (long long)x->shape[1]);
    MT_REQUIRE(sum->dtype == x->dtype || sum->dtype == MT_F32, MT_ERR_INVALID_ARG,
               "%s is %s (want %s or f32)", sname, mt_dtype_name(sum->dtype),
               mt_dtype_name(x->dtype));
    MT_REQUIRE(x->dtype == MT_F32 || x->dtype == MT_BF16 || x->dtype == MT_F16, MT_ERR_UNSUPPORTED,
               "%s: dtype %s (f32, bf16 or f16)", xname, mt_dtype_name(x->dtype));
    MT_REQUIRE(mt_device_eq(sum->device, x->device), MT_ERR_INVALID_ARG,
               "%s and %s are on different devices", sname, xname);
    return MT_OK;
}

mt_status mt_linear_bwd(mt_blas *blas, mt_tensor *dx, mt_tensor *dw, mt_tensor *dbias,
                        const mt_tensor *dy, const mt_tensor *x, const mt_tensor *w, int accumulate,
                        mt_stream stream) {
    MT_REQUIRE(dy, MT_ERR_INVALID_ARG, "dy is NULL");
    if (dbias) MT_TRY(sums_check(dbias, "dbias", dy, "dy")); /* before anything is written */
    if (dx) {
        MT_REQUIRE(w, MT_ERR_INVALID_ARG, "dx needs w");
        MT_TRY(mt_gemm(blas, dx, NULL, dy, w, NULL, 0, 1.0f, 0.0f, stream)); /* dy @ w */
    }
    if (dw) {
        MT_REQUIRE(x, MT_ERR_INVALID_ARG, "dw needs x");
        gemm_args g;
        int empty;
        MT_TRY(gemm_setup(&g, &empty, blas, dw, NULL, dy, x, NULL, MT_GEMM_TRANS_A, 1.0f,
                          accumulate ? 1.0f : 0.0f)); /* dy^T @ x */
        if (!empty) {
#if MT_HAVE_CUDA
            /* dbias from the same GEMM (cuBLASLt's BGRADB epilogue) when it offers one */
            if (dbias && mt_device_is_cuda(dw->device)) {
                mt_status st = gemm_dw_bgrad_cuda(blas->lt, &g, dbias, accumulate, stream);
                if (st == MT_OK) return MT_OK;
                if (st != MT_ERR_UNSUPPORTED) return st;
                mt_error_clear();
            }
#endif
            MT_TRY(MT_DISPATCH(dw->device, gemm_host(&g), gemm_cuda(blas->lt, &g, stream)));
        }
    }
    if (!dbias) return MT_OK;
#if MT_HAVE_CUDA
    if (mt_device_is_cuda(dy->device))
        MT_REQUIRE(blas && blas->lt, MT_ERR_INVALID_ARG, "CUDA dbias needs a CUDA mt_blas handle");
#endif
    return MT_DISPATCH(dy->device, colsum_cpu(dbias, dy, accumulate),
                       bias_grad_cuda(blas->lt, dbias, dy, accumulate, stream));
}

/* mt_linear_bwd_dgelu, and with x_out (mt_linear_bwd_dgelu_recompute) x = GELU(pre_gelu) written
 * first (x = x_out). */
static mt_status linear_bwd_dgelu(mt_blas *blas, mt_tensor *dx, mt_tensor *dx_sum,
                                  const mt_tensor *pre_gelu, mt_tensor *dw, mt_tensor *dbias,
                                  const mt_tensor *dy, const mt_tensor *x, mt_tensor *x_out,
                                  const mt_tensor *w, int accumulate, mt_stream stream) {
    MT_REQUIRE(dx && pre_gelu && dy && w, MT_ERR_INVALID_ARG, "NULL dx, pre_gelu, dy or w");
    /* checks before anything is written */
    if (dx_sum) MT_TRY(sums_check(dx_sum, "dx_sum", dx, "dx"));
    if (x_out) {
        MT_TRY(mt_tensor_check(x_out, "x", 2));
        MT_TRY(mt_tensor_check(pre_gelu, "pre_gelu", 2));
        MT_REQUIRE(x_out->shape[0] == pre_gelu->shape[0] && x_out->shape[1] == pre_gelu->shape[1] &&
                       x_out->dtype == pre_gelu->dtype &&
                       mt_device_eq(x_out->device, pre_gelu->device),
                   MT_ERR_INVALID_ARG, "x (%lldx%lld %s) must match pre_gelu (%lldx%lld %s)",
                   (long long)x_out->shape[0], (long long)x_out->shape[1],
                   mt_dtype_name(x_out->dtype), (long long)pre_gelu->shape[0],
                   (long long)pre_gelu->shape[1], mt_dtype_name(pre_gelu->dtype));
        MT_REQUIRE(x_out->data != pre_gelu->data && x_out->data != dx->data, MT_ERR_INVALID_ARG,
                   "x must not alias pre_gelu or dx");
    }
    int done = 0;
#if MT_HAVE_CUDA
    /* on sm_90: dx's column sums and the recomputed x from the GEMM's epilogue */
    if ((dx_sum || x_out) && mt_device_is_cuda(dx->device)) {
        gemm_args g;
        int empty;
        MT_TRY(gemm_setup(&g, &empty, blas, dx, (mt_tensor *)pre_gelu, dy, w, NULL, MT_GEMM_DGELU,
                          1.0f, 0.0f));
        if (x_out) g.gelu_out = x_out->data, g.ldgo = x_out->stride[0];
        if (!empty) {
            mt_status st = dx_sum ? gemm_dgelu_colsum_cuda(blas->lt, &g, dx_sum, accumulate, stream)
                                  : gemm_sm90_cuda(&g, stream);
            if (st != MT_OK && st != MT_ERR_UNSUPPORTED) return st;
            done = st == MT_OK;
            mt_error_clear();
        }
    }
#endif
    if (!done) {
        if (x_out) MT_TRY(mt_gelu_fwd(x_out, pre_gelu, stream));
        MT_TRY(mt_gemm(blas, dx, (mt_tensor *)pre_gelu, dy, w, NULL, MT_GEMM_DGELU, 1.0f, 0.0f,
                       stream)); /* (dy @ w) * GELU'(pre_gelu) */
        if (dx_sum)              /* dx's column sums, as a bias gradient */
            MT_TRY(mt_linear_bwd(blas, NULL, NULL, dx_sum, dx, NULL, NULL, accumulate, stream));
    }
    return mt_linear_bwd(blas, NULL, dw, dbias, dy, x_out ? x_out : x, w, accumulate, stream);
}

mt_status mt_linear_bwd_dgelu(mt_blas *blas, mt_tensor *dx, mt_tensor *dx_sum,
                              const mt_tensor *pre_gelu, mt_tensor *dw, mt_tensor *dbias,
                              const mt_tensor *dy, const mt_tensor *x, const mt_tensor *w,
                              int accumulate, mt_stream stream) {
    return linear_bwd_dgelu(blas, dx, dx_sum, pre_gelu, dw, dbias, dy, x, NULL, w, accumulate,
                            stream);
}

mt_status mt_linear_bwd_dgelu_recompute(mt_blas *blas, mt_tensor *dx, mt_tensor *dx_sum,
                                        const mt_tensor *pre_gelu, mt_tensor *dw, mt_tensor *dbias,
                                        const mt_tensor *dy, mt_tensor *x, const mt_tensor *w,
                                        int accumulate, mt_stream stream) {
    MT_REQUIRE(x, MT_ERR_INVALID_ARG, "NULL x (the activation to recompute)");
    return linear_bwd_dgelu(blas, dx, dx_sum, pre_gelu, dw, dbias, dy, NULL, x, w, accumulate,
                            stream);
}
