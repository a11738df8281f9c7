/* gpu: cuBLASLt GEMMs equal the CPU reference on fresh random input in f32 (exact fp32 compute),
 * bf16 and f16: nn.Linear forward with bias and GELU epilogues (fused, and the fallback when the
 * pre-GELU row stride is not a multiple of 8), the backward with fp32 accumulation and the bias
 * gradient, batched transposes with beta; repeated calls hit the plan cache; a few rows of bf16/f16
 * (the GEMV kernel, gemv.cu) with every epilogue; grouped GEMMs (a mixture of experts' three);
 * PyTorch goldens. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

static mt_arena *ar;
static mt_blas *blas;
static uint64_t seed = 300;

static mt_tensor host_rand(mt_dtype dt, int ndim, const int64_t *shape) {
    mt_tensor t = mt_tensor_make(NULL, dt, ndim, shape, MT_DEVICE_CPU);
    size_t n = (size_t)mt_tensor_numel(&t);
    float *f = malloc(n * 4);
    mt_test_fill_uniform(f, n, seed++, 11, -1.0f, 1.0f);
    mt_tensor t32 = mt_tensor_make(f, MT_F32, ndim, shape, MT_DEVICE_CPU);
    t.data = malloc(n * mt_dtype_size(dt));
    MT_CHECK(mt_cast(&t, &t32, NULL));
    free(f);
    return t;
}

static mt_tensor host_empty(mt_dtype dt, int ndim, const int64_t *shape) {
    mt_tensor t = mt_tensor_make(NULL, dt, ndim, shape, MT_DEVICE_CPU);
    t.data = calloc((size_t)mt_tensor_numel(&t), mt_dtype_size(dt));
    return t;
}

static mt_tensor dev(const mt_tensor *h, mt_dtype dt, int ndim, const int64_t *shape) {
    mt_tensor d;
    MT_CHECK(mt_tensor_alloc(ar, dt, ndim, shape, &d));
    if (h)
        MT_CHECK(mt_tensor_copy(&d, h, NULL));
    else
        MT_CHECK(mt_fill(&d, NAN, NULL)); /* poison: every element must be written */
    return d;
}

/* A tensor's values (host or device, any float dtype) as malloc'd floats. */
static float *to_host_f32(const mt_tensor *d) {
    int64_t n = mt_tensor_numel(d);
    float *f = malloc((size_t)n * 4);
    void *tmp = malloc((size_t)n * mt_dtype_size(d->dtype));
    mt_tensor th = mt_tensor_1d(tmp, d->dtype, n, MT_DEVICE_CPU), src = *d;
    MT_CHECK(mt_tensor_reshape(&src, 1, &n, &src));
    MT_CHECK(mt_tensor_copy(&th, &src, NULL));
    mt_tensor g = mt_tensor_1d(f, MT_F32, n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&g, &th, NULL));
    free(tmp);
    return f;
}

static void cmp_at(const char *what, const char *k, const mt_tensor *d, const mt_tensor *h,
                   double atol, double rtol) {
    float *got = to_host_f32(d), *want = to_host_f32(h);
    char buf[128];
    snprintf(buf, sizeof buf, "%s %s", what, k);
    mt_test_close_f32(buf, got, want, (size_t)mt_tensor_numel(h), atol, rtol);
    free(got), free(want);
}

static void cmp(const char *what, const char *k, const mt_tensor *d, const mt_tensor *h,
                double tol) {
    cmp_at(what, k, d, h, tol, tol);
}

/* sums (N, f32, on the device) against scale * the column sums of x (rows, N, on the device) in
 * double, within rel * sum |x| + 1e-5 * sum |x| + 1e-6 per column. */
static void colsum_check(const char *what, const mt_tensor *sums, const mt_tensor *x, double scale,
                         double rel) {
    const int64_t rows = x->shape[0], N = x->shape[1];
    float *got = to_host_f32(sums), *xv = to_host_f32(x);
    int bad = 0;
    for (int64_t n = 0; n < N; n++) {
        double s = 0.0, a = 0.0;
        for (int64_t r = 0; r < rows; r++)
            s += xv[r * N + n], a += fabs(xv[r * N + n]);
        const double want = scale * s, bound = scale * ((rel + 1e-5) * a + 1e-6);
        if (!(fabs(got[n] - want) <= bound) && bad++ < 3)
            MT_EXPECT(0, "%s dx_sum column %lld: %g, want %g (bound %g)", what, (long long)n,
                      got[n], want, bound);
    }
    MT_EXPECT(bad == 0, "%s dx_sum: %d of %lld columns off", what, bad, (long long)N);
    free(got), free(xv);
}

/* Bitwise equality of two device tensors of one shape and dtype. */
static void same_bits(const char *what, const char *k, const mt_tensor *got,
                      const mt_tensor *want) {
    const size_t n = mt_tensor_nbytes(want);
    void *g = malloc(n), *w = malloc(n);
    MT_CHECK(mt_memcpy(g, MT_DEVICE_CPU, got->data, got->device, n, NULL));
    MT_CHECK(mt_memcpy(w, MT_DEVICE_CPU, want->data, want->device, n, NULL));
    MT_EXPECT(memcmp(g, w, n) == 0, "%s: %s differs from the reference bitwise", what, k);
    free(g), free(w);
}

/* Activation recompute (mlp_act): fc1's forward with MT_GEMM_GELU_RECOMPUTE, then fc2's backward
 * with mt_linear_bwd_dgelu_recompute into a poisoned x, against the forward's own activation
 * (bitwise) and the backward that reads that activation (dx, its column sums and dw bitwise); the
 * forward against the CPU. x (M,I), w (O,I), b: fc1; the activation is (M,O), fc2's weight
 * (I,O) and its output gradient (M,I). */
static void recompute(const char *what, double tol, const mt_tensor *hx, const mt_tensor *hw,
                      const mt_tensor *hb, const mt_tensor *x, const mt_tensor *w,
                      const mt_tensor *b) {
    const mt_dtype dt = x->dtype;
    const int64_t M = x->shape[0], I = x->shape[1], O = w->shape[0];
    int64_t sy[2] = { M, O }, s2[2] = { I, O }, so[1] = { O };
    mt_tensor hy = host_empty(dt, 2, sy), hp = host_empty(dt, 2, sy), hw2 = host_rand(dt, 2, s2);
    mt_tensor act = dev(NULL, dt, 2, sy), pre = dev(NULL, dt, 2, sy), w2 = dev(&hw2, dt, 2, s2);
    MT_CHECK(mt_linear_fwd(NULL, &hy, &hp, hx, hw, hb, MT_GEMM_GELU, NULL));
    MT_CHECK(mt_linear_fwd(blas, &act, &pre, x, w, b, MT_GEMM_GELU | MT_GEMM_GELU_RECOMPUTE, NULL));
    cmp(what, "gelu(y) to recompute", &act, &hy, tol);
    cmp(what, "pre_gelu to recompute", &pre, &hp, tol);
    mt_tensor xr = dev(NULL, dt, 2, sy), dpre = dev(NULL, dt, 2, sy), dpre0 = dev(NULL, dt, 2, sy);
    mt_tensor dw2 = dev(NULL, MT_F32, 2, s2), dw20 = dev(NULL, MT_F32, 2, s2);
    mt_tensor sums = dev(NULL, MT_F32, 1, so), sums0 = dev(NULL, MT_F32, 1, so);
    for (int with_sums = 0; with_sums < 2; with_sums++) {
        MT_CHECK(mt_fill(&xr, NAN, NULL)); /* every element must be written */
        MT_CHECK(mt_linear_bwd_dgelu_recompute(blas, &dpre, with_sums ? &sums : NULL, &pre, &dw2,
                                               NULL, x, &xr, &w2, 0, NULL));
        MT_CHECK(mt_linear_bwd_dgelu(blas, &dpre0, with_sums ? &sums0 : NULL, &pre, &dw20, NULL, x,
                                     &act, &w2, 0, NULL));
        same_bits(what, with_sums ? "recomputed x (with dx_sum)" : "recomputed x", &xr, &act);
        same_bits(what, "dx after the recompute", &dpre, &dpre0);
        same_bits(what, "dw from the recomputed x", &dw2, &dw20);
        if (with_sums) same_bits(what, "dx_sum beside the recompute", &sums, &sums0);
    }
    free(hy.data), free(hp.data), free(hw2.data);
}

/* y(M,O) = x(M,I) @ w(O,I)^T + b, with and without GELU; then the backward. */
static void linear(mt_dtype dt, int64_t M, int64_t I, int64_t O) {
    char what[96];
    snprintf(what, sizeof what, "linear %s M=%lld in=%lld out=%lld", mt_dtype_name(dt),
             (long long)M, (long long)I, (long long)O);
    mt_arena_reset(ar);
    double tol = dt == MT_F32 ? 1e-5 : dt == MT_F16 ? 1.25e-3 : 1e-2; /* f16: bf16's / 8 */
    int64_t sx[2] = { M, I }, sw[2] = { O, I }, sy[2] = { M, O }, sb[1] = { O };
    mt_tensor hx = host_rand(dt, 2, sx), hw = host_rand(dt, 2, sw), hb = host_rand(dt, 1, sb);
    mt_tensor hdy = host_rand(dt, 2, sy), hy = host_empty(dt, 2, sy), hp = host_empty(dt, 2, sy);
    mt_tensor dx = dev(&hx, dt, 2, sx), dw = dev(&hw, dt, 2, sw), db = dev(&hb, dt, 1, sb);
    mt_tensor ddy = dev(&hdy, dt, 2, sy), dy = dev(NULL, dt, 2, sy), dp = dev(NULL, dt, 2, sy);
    for (int rep = 0; rep < 2; rep++) { /* the second call runs the cached plan */
        MT_CHECK(mt_linear_fwd(NULL, &hy, NULL, &hx, &hw, &hb, 0, NULL));
        MT_CHECK(mt_linear_fwd(blas, &dy, NULL, &dx, &dw, &db, 0, NULL));
        cmp(what, rep ? "y (cached plan)" : "y", &dy, &hy, tol);
    }
    MT_CHECK(mt_linear_fwd(NULL, &hy, &hp, &hx, &hw, &hb, MT_GEMM_GELU, NULL));
    MT_CHECK(mt_linear_fwd(blas, &dy, &dp, &dx, &dw, &db, MT_GEMM_GELU, NULL));
    cmp(what, "gelu(y)", &dy, &hy, tol);
    cmp(what, "pre_gelu", &dp, &hp, tol);
    MT_CHECK(mt_linear_fwd(blas, &dy, NULL, &dx, &dw, NULL, MT_GEMM_GELU, NULL));
    MT_CHECK(mt_linear_fwd(NULL, &hy, NULL, &hx, &hw, NULL, MT_GEMM_GELU, NULL));
    cmp(what, "gelu(y) no bias", &dy, &hy, tol);
    /* the residual add in the GEMM's epilogue (cuBLASLt reading c from another tensor); the
     * residual from [-4, 4], so that a lost add is far outside the tolerance */
    mt_tensor hr = host_rand(dt, 2, sy);
    MT_CHECK(mt_scale(&hr, &hr, 4.0f, NULL));
    mt_tensor dr = dev(&hr, dt, 2, sy);
    MT_CHECK(mt_linear_fwd_add(NULL, &hy, &hx, &hw, &hb, &hr, NULL));
    MT_CHECK(mt_linear_fwd_add(blas, &dy, &dx, &dw, &db, &dr, NULL));
    cmp(what, "y + residual", &dy, &hy, tol);
    free(hr.data);

    /* backward: dx = dy @ w, dw (f32) accumulated twice, dbias (f32) */
    mt_tensor hdx = host_empty(dt, 2, sx), hdw = host_empty(MT_F32, 2, sw),
              hdb = host_empty(MT_F32, 1, sb);
    mt_tensor ddx = dev(NULL, dt, 2, sx), ddw = dev(NULL, MT_F32, 2, sw),
              ddb = dev(NULL, MT_F32, 1, sb);
    for (int acc = 0; acc < 2; acc++) {
        MT_CHECK(mt_linear_bwd(NULL, &hdx, &hdw, &hdb, &hdy, &hx, &hw, acc, NULL));
        MT_CHECK(mt_linear_bwd(blas, &ddx, &ddw, &ddb, &ddy, &dx, &dw, acc, NULL));
    }
    /* dw and dbias sum over the M rows. Each side's f32 rounding errors walk like a random sum:
     * about M 2^-24 / 4 (sd) for products of values in [-1, 1] (M = 4096: 0.4e-3 at most over
     * 6144 elements on an H200), so past the small cases' plain bounds (kept as they were for
     * M <= 128) 8 M 2^-24 stays far outside them, while a lost row block is off by O(1) */
    const double wtol = dt == MT_F32 ? 1e-5 : 1e-4;
    const double sum_atol = M > 128 ? 8.0 * (double)M / (1 << 24) : 0.0;
    cmp(what, "dx", &ddx, &hdx, tol);
    cmp_at(what, "dw f32 accumulated", &ddw, &hdw, fmax(wtol, sum_atol), wtol);
    cmp_at(what, "dbias f32 accumulated", &ddb, &hdb, fmax(1e-5, sum_atol), 1e-5);
    /* dw and dbias in the input dtype */
    mt_tensor hdw2 = host_empty(dt, 2, sw), hdb2 = host_empty(dt, 1, sb);
    mt_tensor ddw2 = dev(NULL, dt, 2, sw), ddb2 = dev(NULL, dt, 1, sb);
    MT_CHECK(mt_linear_bwd(NULL, NULL, &hdw2, &hdb2, &hdy, &hx, NULL, 0, NULL));
    MT_CHECK(mt_linear_bwd(blas, NULL, &ddw2, &ddb2, &ddy, &dx, NULL, 0, NULL));
    cmp_at(what, "dw", &ddw2, &hdw2, dt == MT_F32 ? fmax(tol, sum_atol) : tol, tol);
    cmp_at(what, "dbias", &ddb2, &hdb2, dt == MT_F32 ? fmax(tol, sum_atol) : tol, tol);
    /* through GELU: dpre = (dy @ w) * GELU'(pre) (cuBLASLt's DGELU epilogue in bf16 when the
     * pre-GELU stride allows, else GEMM + our kernel), against the CPU GEMM then mt_gelu_bwd */
    mt_tensor hpre = host_rand(dt, 2, sx), hdpre = host_empty(dt, 2, sx);
    mt_tensor dpre = dev(&hpre, dt, 2, sx), ddpre = dev(NULL, dt, 2, sx);
    MT_CHECK(mt_linear_bwd(NULL, &hdpre, NULL, NULL, &hdy, &hx, &hw, 0, NULL));
    MT_CHECK(mt_gelu_bwd(&hdpre, &hdpre, &hpre, NULL));
    MT_CHECK(mt_fill(&ddw, 0.0f, NULL));
    MT_CHECK(mt_linear_bwd_dgelu(blas, &ddpre, NULL, &dpre, &ddw, NULL, &ddy, &dx, &dw, 0, NULL));
    cmp(what, "dx through GELU", &ddpre, &hdpre, tol);
    /* and its column sums (fc1's bias gradient), written then added: against the sums of the dx
     * this call stored, in double; the GPU may add the values before their rounding to dt, so
     * the bound is that rounding (2^-8 or 2^-11 of the column's sum of |dx|, 0 in f32) plus
     * fp32 summation error. A lost row block or column is off by far more. */
    mt_tensor ddxs = dev(NULL, MT_F32, 1, sx + 1);
    MT_CHECK(mt_linear_bwd_dgelu(blas, &ddpre, &ddxs, &dpre, NULL, NULL, &ddy, NULL, &dw, 0, NULL));
    MT_CHECK(mt_linear_bwd_dgelu(blas, &ddpre, &ddxs, &dpre, NULL, NULL, &ddy, NULL, &dw, 1, NULL));
    colsum_check(what, &ddxs, &ddpre, 2.0, dt == MT_BF16 ? 0x1p-8 : dt == MT_F16 ? 0x1p-11 : 0.0);
    MT_CHECK(mt_linear_bwd(NULL, NULL, &hdw, NULL, &hdy, &hx, NULL, 0, NULL));
    cmp_at(what, "dw beside the GELU backward", &ddw, &hdw, fmax(wtol, sum_atol), wtol);
    recompute(what, tol, &hx, &hw, &hb, &dx, &dw, &db);
    mt_tensor *all[] = { &hx,  &hw,  &hb,   &hdy,  &hy,   &hp,   &hdx,
                         &hdw, &hdb, &hdw2, &hdb2, &hpre, &hdpre };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]->data);
}

/* The Hopper GEMMs with GELU epilogues (gemm_sm90.cu, on by default on sm_90a builds and devices:
 * bf16, M a multiple of 256, N of 128, K of 64) through linear(), against the CPU: fc1's forward
 * and fc2's dX through GELU', with and without its column sums, and both as an activation
 * recompute (bitwise: the dX kernel's GELU(pre) against the forward's). With the grid capped at one
 * cluster, each CTA walks several tiles (both warpgroups several each) and the rings' phases
 * wrap. MT_GEMM_SM90=0 hands the same cases to cuBLASLt. Elsewhere (no sm_90a build or device)
 * everything runs on cuBLASLt. */
static void sm90(void) {
    const long long n0 = mt_gemm_sm90_count();
    if (n0 < 0) printf("gemm_sm90: not built for sm_90a or no sm_90 device; cuBLASLt runs these\n");
    linear(MT_BF16, 512, 256, 512); /* a tile per CTA */
    setenv("MT_GEMM_SM90_CTAS", "2", 1);
    /* one cluster: 12 (fwd) and 8 (dX) tiles of 8 and 12 K steps */
    linear(MT_BF16, 512, 512, 768);
    linear(MT_BF16, 1024, 256, 640); /* 20 and 8 tiles, 4 and 10 K steps */
    unsetenv("MT_GEMM_SM90_CTAS");
    const long long n1 = mt_gemm_sm90_count();
    /* each linear(): the GELU forward with pre-GELU (with bias), the dX through GELU' alone and
     * twice with its column sums; recompute(): the forward, then the recompute and the dX that
     * reads the forward's activation, without and with column sums */
    if (n0 >= 0) MT_EXPECT(n1 == n0 + 27, "gemm_sm90 ran %lld GEMMs, want 27", n1 - n0);
    setenv("MT_GEMM_SM90", "0", 1); /* off: the same through cuBLASLt */
    linear(MT_BF16, 512, 256, 512);
    unsetenv("MT_GEMM_SM90");
    if (n0 >= 0) MT_EXPECT(mt_gemm_sm90_count() == n1, "gemm_sm90 ran with MT_GEMM_SM90=0");
}

/* dbias alone (no GEMM) over many rows: f32 accumulated twice, and in the input dtype. */
static void bias_grad(mt_dtype dt, int64_t rows, int64_t N) {
    char what[96];
    snprintf(what, sizeof what, "bias gradient %s rows=%lld N=%lld", mt_dtype_name(dt),
             (long long)rows, (long long)N);
    mt_arena_reset(ar);
    int64_t sy[2] = { rows, N }, sb[1] = { N };
    mt_tensor hdy = host_rand(dt, 2, sy), ddy = dev(&hdy, dt, 2, sy);
    mt_tensor hdb = host_empty(MT_F32, 1, sb), ddb = dev(NULL, MT_F32, 1, sb);
    mt_tensor hdb2 = host_empty(dt, 1, sb), ddb2 = dev(NULL, dt, 1, sb);
    for (int acc = 0; acc < 2; acc++) {
        MT_CHECK(mt_linear_bwd(NULL, NULL, NULL, &hdb, &hdy, NULL, NULL, acc, NULL));
        MT_CHECK(mt_linear_bwd(blas, NULL, NULL, &ddb, &ddy, NULL, NULL, acc, NULL));
    }
    /* f32 sums of up to 2 x rows terms in [-1, 1] (the CPU's in double) are about rows 2^-24
     * apart at most; a lost row group or column is off by O(1) */
    const double atol = 2.0 * (double)rows / (1 << 24);
    cmp_at(what, "dbias f32 accumulated", &ddb, &hdb, atol, 1e-5);
    MT_CHECK(mt_linear_bwd(NULL, NULL, NULL, &hdb2, &hdy, NULL, NULL, 0, NULL));
    MT_CHECK(mt_linear_bwd(blas, NULL, NULL, &ddb2, &ddy, NULL, NULL, 0, NULL));
    if (dt == MT_F32)
        cmp_at(what, "dbias", &ddb2, &hdb2, atol, 1e-5);
    else
        cmp(what, "dbias", &ddb2, &hdb2, 1e-2);
    free(hdy.data), free(hdb.data), free(hdb2.data);
}

/* c(B,M,N) = 0.5 * op(a) op(b) + 0.25 * c over strided batches, every transpose combination. */
static void batched(mt_dtype dt, int64_t B, int64_t M, int64_t N, int64_t K) {
    mt_arena_reset(ar);
    double tol = dt == MT_F32 ? 1e-5 : dt == MT_F16 ? 1.25e-3 : 1e-2; /* f16: bf16's / 8 */
    for (int flags = 0; flags < 4; flags++) {
        int ta = flags & MT_GEMM_TRANS_A, tb = flags & MT_GEMM_TRANS_B;
        int64_t sa[3] = { B, ta ? K : M, ta ? M : K }, sb[3] = { B, tb ? N : K, tb ? K : N };
        int64_t sc[3] = { B, M, N };
        mt_tensor ha = host_rand(dt, 3, sa), hb = host_rand(dt, 3, sb), hc = host_rand(dt, 3, sc);
        mt_tensor da = dev(&ha, dt, 3, sa), db = dev(&hb, dt, 3, sb), dc = dev(&hc, dt, 3, sc);
        MT_CHECK(mt_gemm(NULL, &hc, NULL, &ha, &hb, NULL, flags, 0.5f, 0.25f, NULL));
        MT_CHECK(mt_gemm(blas, &dc, NULL, &da, &db, NULL, flags, 0.5f, 0.25f, NULL));
        char what[96];
        snprintf(what, sizeof what, "batched %s B=%lld M=%lld N=%lld K=%lld flags=%d",
                 mt_dtype_name(dt), (long long)B, (long long)M, (long long)N, (long long)K, flags);
        cmp(what, "c", &dc, &hc, tol);
        free(ha.data), free(hb.data), free(hc.data);
    }
}

/* mt_gemm_grouped: a mixture of experts' three GEMMs over n experts with the given row counts
 * (some empty; their rows one after another in shared tensors, so most slices start unaligned
 * to 16 bytes when K or N is odd), each problem against the CPU's mt_gemm: y_e = x_e w_e^T,
 * dx_e = dy_e w_e, and dw_e += dy_e^T x_e (f32 for 16-bit inputs, beta 1). */
static void grouped(mt_dtype dt, int n, const int64_t *rows, int64_t K, int64_t N) {
    mt_arena_reset(ar);
    double tol = dt == MT_F32 ? 1e-5 : dt == MT_F16 ? 1.25e-3 : 1e-2;
    const mt_dtype gdt = MT_F32; /* the grads */
    int64_t R = 0;
    for (int e = 0; e < n; e++)
        R += rows[e];
    int64_t sx[2] = { R, K }, sy[2] = { R, N }, sw[2] = { N, K };
    mt_tensor hx = host_rand(dt, 2, sx), hdy = host_rand(dt, 2, sy);
    mt_tensor dx_in = dev(&hx, dt, 2, sx), ddy = dev(&hdy, dt, 2, sy);
    mt_tensor hy = host_empty(dt, 2, sy), hdx = host_empty(dt, 2, sx);
    mt_tensor dy_out = dev(NULL, dt, 2, sy), dx_out = dev(NULL, dt, 2, sx);
    mt_tensor *hw = calloc((size_t)n, sizeof *hw), *dw = calloc((size_t)n, sizeof *dw);
    mt_tensor *hg = calloc((size_t)n, sizeof *hg), *dg = calloc((size_t)n, sizeof *dg);
    mt_tensor *hs = calloc((size_t)n * 6, sizeof *hs), *ds = calloc((size_t)n * 6, sizeof *ds);
    mt_tensor **c = calloc((size_t)n, sizeof *c);
    const mt_tensor **a = calloc((size_t)n, sizeof *a), **b = calloc((size_t)n, sizeof *b);
    int64_t off = 0;
    for (int e = 0; e < n; off += rows[e++]) {
        hw[e] = host_rand(dt, 2, sw), dw[e] = dev(&hw[e], dt, 2, sw);
        hg[e] = host_rand(gdt, 2, sw), dg[e] = dev(&hg[e], gdt, 2, sw);
        /* the slices: x, y, dy, dx on the host (hs) and the device (ds) */
        const mt_tensor *hsrc[4] = { &hx, &hy, &hdy, &hdx },
                        *dsrc[4] = { &dx_in, &dy_out, &ddy, &dx_out };
        for (int t = 0; t < 4; t++) {
            MT_CHECK(mt_tensor_slice(hsrc[t], 0, off, rows[e], &hs[e * 6 + t]));
            MT_CHECK(mt_tensor_slice(dsrc[t], 0, off, rows[e], &ds[e * 6 + t]));
        }
    }
    char what[96];
    snprintf(what, sizeof what, "grouped %s n=%d K=%lld N=%lld", mt_dtype_name(dt), n, (long long)K,
             (long long)N);
    /* y_e = x_e w_e^T */
    for (int e = 0; e < n; e++) {
        MT_CHECK(mt_gemm(NULL, &hs[e * 6 + 1], NULL, &hs[e * 6], &hw[e], NULL, MT_GEMM_TRANS_B,
                         1.0f, 0.0f, NULL));
        c[e] = &ds[e * 6 + 1], a[e] = &ds[e * 6], b[e] = &dw[e];
    }
    MT_CHECK(mt_gemm_grouped(blas, n, c, a, b, MT_GEMM_TRANS_B, 1.0f, 0.0f, NULL));
    cmp(what, "y", &dy_out, &hy, tol);
    /* dx_e = dy_e w_e */
    for (int e = 0; e < n; e++) {
        MT_CHECK(
            mt_gemm(NULL, &hs[e * 6 + 3], NULL, &hs[e * 6 + 2], &hw[e], NULL, 0, 1.0f, 0.0f, NULL));
        c[e] = &ds[e * 6 + 3], a[e] = &ds[e * 6 + 2], b[e] = &dw[e];
    }
    MT_CHECK(mt_gemm_grouped(blas, n, c, a, b, 0, 1.0f, 0.0f, NULL));
    cmp(what, "dx", &dx_out, &hdx, tol);
    /* dw_e += dy_e^T x_e (an empty expert's grad stays as it was) */
    for (int e = 0; e < n; e++) {
        if (rows[e])
            MT_CHECK(mt_gemm(NULL, &hg[e], NULL, &hs[e * 6 + 2], &hs[e * 6], NULL, MT_GEMM_TRANS_A,
                             1.0f, 1.0f, NULL));
        c[e] = &dg[e], a[e] = &ds[e * 6 + 2], b[e] = &ds[e * 6];
    }
    MT_CHECK(mt_gemm_grouped(blas, n, c, a, b, MT_GEMM_TRANS_A, 1.0f, 1.0f, NULL));
    for (int e = 0; e < n; e++) {
        char k[32];
        snprintf(k, sizeof k, "dw[%d]", e);
        cmp(what, k, &dg[e], &hg[e], dt == MT_F32 ? 1e-5 : 1e-4); /* (f32 sums of exact products) */
        free(hw[e].data), free(hg[e].data);
    }
    free(hx.data), free(hdy.data), free(hy.data), free(hdx.data);
    free(hw), free(dw), free(hg), free(dg), free(hs), free(ds), free(c), free(a), free(b);
}

/* The GPU against the PyTorch golden values directly (f32 linear with GELU). */
static void golden(void) {
    mt_arena_reset(ar);
    int64_t sx[2] = { 13, 40 }, sw[2] = { 24, 40 }, sb[1] = { 24 }, sy[2] = { 13, 24 };
    float *x = mt_test_golden_f32("gemm_x.npy", NULL, NULL),
          *w = mt_test_golden_f32("gemm_w.npy", NULL, NULL);
    float *b = mt_test_golden_f32("gemm_b.npy", NULL, NULL),
          *ref = mt_test_golden_f32("gemm_linear_gelu.npy", NULL, NULL);
    float got[13 * 24];
    mt_tensor hx = mt_tensor_make(x, MT_F32, 2, sx, MT_DEVICE_CPU),
              hw = mt_tensor_make(w, MT_F32, 2, sw, MT_DEVICE_CPU);
    mt_tensor hb = mt_tensor_make(b, MT_F32, 1, sb, MT_DEVICE_CPU),
              hg = mt_tensor_make(got, MT_F32, 2, sy, MT_DEVICE_CPU);
    mt_tensor dx = dev(&hx, MT_F32, 2, sx), dw = dev(&hw, MT_F32, 2, sw),
              db = dev(&hb, MT_F32, 1, sb);
    mt_tensor dy = dev(NULL, MT_F32, 2, sy);
    MT_CHECK(mt_linear_fwd(blas, &dy, NULL, &dx, &dw, &db, MT_GEMM_GELU, NULL));
    MT_CHECK(mt_tensor_copy(&hg, &dy, NULL));
    mt_test_close_f32("linear gelu cuda vs torch", got, ref, 13 * 24, 2e-5, 2e-5);
    free(x), free(w), free(b), free(ref);
}

int main(void) {
    mt_test_require_gpus(1);
    MT_CHECK(mt_arena_create(mt_device_cuda(0), (size_t)64 << 20, &ar));
    MT_CHECK(mt_blas_create(mt_device_cuda(0), &blas));
    const mt_dtype dtypes[3] = { MT_F32, MT_BF16, MT_F16 };
    for (int d = 0; d < 3; d++) {
        mt_dtype dt = dtypes[d];
        linear(dt, 128, 256, 384);
        linear(dt, 33, 40, 24);
        linear(dt, 17, 24, 20);   /* out = 20: pre-GELU row stride not a multiple of 8 */
        linear(dt, 9, 20, 16);    /* in = 20: the same for the GELU backward */
        linear(dt, 4096, 64, 96); /* dw's long contraction (cuBLASLt's split-K kernels) */
        bias_grad(dt, 2053, 776); /* many row groups; the last column block partly used */
        bias_grad(dt, 4099, 20);  /* 20 columns: the unvectorised kernel */
        batched(dt, 3, 17, 24, 40);
        /* a few rows (decoding): bf16/f16 take the GEMV kernel (gemv.cu) when K % 8 == 0; f32
         * (cuBLASLt) at short contractions only, whose fp32 sums stay within its tolerance */
        linear(dt, 4, 40, 24);
        linear(dt, 1, 20, 16); /* K % 8 != 0: cuBLASLt */
        if (dt == MT_F32) continue;
        linear(dt, 1, 768, 2304);
        linear(dt, 3, 1600, 101); /* an odd column count: a warp's second column past N */
        linear(dt, 2, 4096, 8);
    }
    /* mt_gemm_grouped: experts of a few to hundreds of rows, some without (the second case
     * unaligned: odd K and N); 70 problems run as two cuBLAS groups */
    const int64_t rows6[6] = { 0, 1, 37, 200, 5, 513 }, rows3[3] = { 19, 0, 64 };
    /* bf16/f16 weight gradients (no cuBLAS grouped GEMM into f32): 100 runs on the plan of 256
     * rows, which must be back at 256 for the exact 256 after it */
    const int64_t rows2[2] = { 100, 256 };
    int64_t rows70[70];
    for (int e = 0; e < 70; e++)
        rows70[e] = (e * 7) % 23;
    for (int d = 0; d < 3; d++) {
        grouped(dtypes[d], 6, rows6, 128, 192);
        grouped(dtypes[d], 3, rows3, 21, 13);
        grouped(dtypes[d], 70, rows70, 32, 40);
        grouped(dtypes[d], 2, rows2, 64, 48);
    }
    sm90();
    golden();
    mt_blas_destroy(blas);
    mt_arena_destroy(ar);
    return mt_test_result();
}
