/* unit: GEMM and nn.Linear forward/backward (CPU reference) against PyTorch float64 golden values
 * in f32, bf16 and f16: bias and GELU epilogues, transposes, strided batches, beta, accumulation. */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include "test_common.h"

/* result t against scale * golden `name` at tol (absolute and relative) */
#define expect_gemm(what, t, name, tol, scale) \
    expect_golden(what, (t)->dtype, t, name, tol, tol, scale)

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Activation recompute: the forward with MT_GEMM_GELU_RECOMPUTE (against PyTorch), then
 * mt_linear_bwd_dgelu_recompute into a poisoned x (bitwise the forward's activation; dx, dx_sum
 * and dw bitwise those of mt_linear_bwd_dgelu reading that activation). The next linear's weight
 * is w's values as (40, 24), its output gradient x's (13, 40). */
static void recompute(mt_dtype dt, double tol, const mt_tensor *x, const mt_tensor *w,
                      const mt_tensor *b) {
    const int64_t sy[2] = { 13, 24 }, s2[2] = { 40, 24 }, so[1] = { 24 };
    mt_tensor act = poison_tensor(dt, 2, sy), pre = poison_tensor(dt, 2, sy), w2 = *w;
    MT_CHECK(mt_tensor_reshape(&w2, 2, s2, &w2));
    MT_CHECK(mt_linear_fwd(NULL, &act, &pre, x, w, b, MT_GEMM_GELU | MT_GEMM_GELU_RECOMPUTE, NULL));
    expect_gemm("linear gelu to recompute", &act, "gemm_linear_gelu.npy", tol, 1.0f);
    expect_gemm("linear pre_gelu to recompute", &pre, "gemm_linear.npy", tol, 1.0f);
    mt_tensor xr = poison_tensor(dt, 2, sy), dx = poison_tensor(dt, 2, sy),
              dx0 = poison_tensor(dt, 2, sy), dw = poison_tensor(MT_F32, 2, s2),
              dw0 = poison_tensor(MT_F32, 2, s2), sum = poison_tensor(MT_F32, 1, so),
              sum0 = poison_tensor(MT_F32, 1, so);
    MT_CHECK(mt_linear_bwd_dgelu_recompute(NULL, &dx, &sum, &pre, &dw, NULL, x, &xr, &w2, 0, NULL));
    MT_CHECK(mt_linear_bwd_dgelu(NULL, &dx0, &sum0, &pre, &dw0, NULL, x, &act, &w2, 0, NULL));
    const struct {
        const char *k;
        const mt_tensor *got, *want;
    } same[] = {
        { "x", &xr, &act }, { "dx", &dx, &dx0 }, { "dw", &dw, &dw0 }, { "dx_sum", &sum, &sum0 }
    };
    for (size_t i = 0; i < sizeof same / sizeof *same; i++)
        MT_EXPECT(memcmp(same[i].got->data, same[i].want->data, mt_tensor_nbytes(same[i].want)) ==
                      0,
                  "recompute %s: %s differs from the backward that read the activation",
                  mt_dtype_name(dt), same[i].k);
    /* an x that does not fit pre_gelu, or aliases it, is refused before anything is written */
    memcpy(dx0.data, dx.data, mt_tensor_nbytes(&dx));
    mt_tensor narrow = xr;
    MT_CHECK(mt_tensor_reshape(&narrow, 2, (int64_t[]){ 24, 13 }, &narrow));
    MT_EXPECT_STATUS(
        mt_linear_bwd_dgelu_recompute(NULL, &dx, NULL, &pre, NULL, NULL, x, &narrow, &w2, 0, NULL),
        MT_ERR_INVALID_ARG);
    MT_EXPECT(strstr(mt_last_error(), "x (24x13") != NULL, "the error names x: %s",
              mt_last_error());
    MT_EXPECT_STATUS(mt_linear_bwd_dgelu_recompute(NULL, &dx, NULL, &pre, NULL, NULL, x,
                                                   (mt_tensor *)&pre, &w2, 0, NULL),
                     MT_ERR_INVALID_ARG);
    MT_EXPECT(memcmp(dx0.data, dx.data, mt_tensor_nbytes(&dx)) == 0,
              "dx written despite the refused x");
    MT_EXPECT_STATUS(
        mt_linear_fwd(NULL, &act, NULL, x, w, b, MT_GEMM_GELU | MT_GEMM_GELU_RECOMPUTE, NULL),
        MT_ERR_INVALID_ARG); /* nothing to recompute from */
    mt_tensor *all[] = { &act, &pre, &xr, &dx, &dx0, &dw, &dw0, &sum, &sum0 };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]->data);
}

/* The linear with the residual add fused in: y = x w^T + b + r against PyTorch's linear plus r
 * (in double); a residual of another shape, or y itself, is refused. */
static void residual(mt_dtype dt, double tol, const mt_tensor *x, const mt_tensor *w,
                     const mt_tensor *b) {
    const int64_t sy[2] = { 13, 24 };
    float *lin = mt_test_golden_f32("gemm_linear.npy", NULL, NULL), r32[13 * 24], want[13 * 24];
    mt_test_fill_uniform(r32, 13 * 24, 7, 0, -4.0f, 4.0f);
    mt_tensor r = poison_tensor(dt, 2, sy), y = poison_tensor(dt, 2, sy);
    mt_tensor rf = mt_tensor_2d(r32, MT_F32, 13, 24, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&r, &rf, NULL));
    MT_CHECK(mt_cast(&rf, &r, NULL)); /* the residual as rounded to dt */
    for (int i = 0; i < 13 * 24; i++)
        want[i] = (float)((double)lin[i] + (double)r32[i]);
    float got[13 * 24];
    mt_tensor g = mt_tensor_2d(got, MT_F32, 13, 24, MT_DEVICE_CPU);
    char what[64];
    MT_CHECK(mt_linear_fwd_add(NULL, &y, x, w, b, &r, NULL));
    MT_CHECK(mt_cast(&g, &y, NULL));
    snprintf(what, sizeof what, "linear + residual %s", mt_dtype_name(dt));
    mt_test_close_f32(what, got, want, 13 * 24, tol, tol);
    MT_EXPECT_STATUS(mt_linear_fwd_add(NULL, &y, x, w, b, &y, NULL), MT_ERR_INVALID_ARG);
    mt_tensor narrow = r;
    MT_CHECK(mt_tensor_reshape(&narrow, 2, (int64_t[]){ 24, 13 }, &narrow));
    MT_EXPECT_STATUS(mt_linear_fwd_add(NULL, &y, x, w, b, &narrow, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT(strstr(mt_last_error(), "residual must match y") != NULL,
              "the error names residual: %s", mt_last_error());
    free(lin), free(r.data), free(y.data);
}

static void run(mt_dtype dt) {
    const int64_t sx[2] = { 13, 40 }, sw[2] = { 24, 40 }, sb[1] = { 24 }, sy[2] = { 13, 24 };
    double tol = dt == MT_F32 ? 2e-5 : dt == MT_F16 ? 6e-2 / 8 : 6e-2; /* f16: unit roundoff / 8 */
    mt_tensor x = golden_tensor("gemm_x.npy", dt, 2, sx),
              w = golden_tensor("gemm_w.npy", dt, 2, sw);
    mt_tensor b = golden_tensor("gemm_b.npy", dt, 1, sb),
              dy = golden_tensor("gemm_dy.npy", dt, 2, sy);
    mt_tensor y = poison_tensor(dt, 2, sy), pre = poison_tensor(dt, 2, sy);
    MT_CHECK(mt_linear_fwd(NULL, &y, NULL, &x, &w, &b, 0, NULL));
    expect_gemm("linear", &y, "gemm_linear.npy", tol, 1.0f);
    MT_CHECK(mt_linear_fwd(NULL, &y, &pre, &x, &w, &b, MT_GEMM_GELU, NULL));
    expect_gemm("linear gelu", &y, "gemm_linear_gelu.npy", tol, 1.0f);
    expect_gemm("linear pre_gelu", &pre, "gemm_linear.npy", tol, 1.0f);
    recompute(dt, tol, &x, &w, &b);
    residual(dt, tol, &x, &w, &b);

    mt_tensor dx = poison_tensor(dt, 2, sx), dw = poison_tensor(dt, 2, sw),
              db = poison_tensor(dt, 1, sb);
    MT_CHECK(mt_linear_bwd(NULL, &dx, &dw, &db, &dy, &x, &w, 0, NULL));
    expect_gemm("linear dx", &dx, "gemm_dx.npy", tol, 1.0f);
    expect_gemm("linear dw", &dw, "gemm_dw.npy", tol, 1.0f);
    expect_gemm("linear db", &db, "gemm_db.npy", tol, 1.0f);
    /* fp32 main grads, accumulated twice */
    mt_tensor dw32 = poison_tensor(MT_F32, 2, sw), db32 = poison_tensor(MT_F32, 1, sb);
    MT_CHECK(mt_linear_bwd(NULL, NULL, &dw32, &db32, &dy, &x, &w, 0, NULL));
    MT_CHECK(mt_linear_bwd(NULL, NULL, &dw32, &db32, &dy, &x, &w, 1, NULL));
    expect_gemm("linear dw f32 accumulated", &dw32, "gemm_dw.npy", tol, 2.0f);
    expect_gemm("linear db f32 accumulated", &db32, "gemm_db.npy", tol, 2.0f);

    /* batched: c = 0.5 * a^T b + 0.25 * c, a stored (3, 9, 5) */
    const int64_t sa[3] = { 3, 9, 5 }, sbb[3] = { 3, 9, 6 }, sc[3] = { 3, 5, 6 };
    mt_tensor a = golden_tensor("gemm_ba.npy", dt, 3, sa),
              bb = golden_tensor("gemm_bb.npy", dt, 3, sbb);
    mt_tensor c = golden_tensor("gemm_bc0.npy", dt, 3, sc);
    MT_CHECK(mt_gemm(NULL, &c, NULL, &a, &bb, NULL, MT_GEMM_TRANS_A, 0.5f, 0.25f, NULL));
    expect_gemm("batched a^T b + beta c", &c, "gemm_bc.npy", tol, 1.0f);

    mt_tensor *all[] = { &x, &w, &b, &dy, &y, &pre, &dx, &dw, &db, &dw32, &db32, &a, &bb, &c };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]->data);
}

/* MT_GEMM_DGELU: c = (a @ b^T) * GELU'(pre) against fp64 loops of the tanh-GELU derivative. */
static void dgelu(void) {
    enum {
        M = 5,
        K = 7,
        N = 6
    };
    float a[M * K], b[N * K], pre[M * N], c[M * N];
    mt_test_fill_uniform(a, M * K, 41, 0, -1.0f, 1.0f);
    mt_test_fill_uniform(b, N * K, 42, 0, -1.0f, 1.0f);
    mt_test_fill_uniform(pre, M * N, 43, 0, -3.0f, 3.0f);
    double want[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, x = pre[i * N + j];
            for (int k = 0; k < K; k++)
                s += (double)a[i * K + k] * b[j * K + k];
            double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = tanh(u);
            double d = 0.5 * (1 + t) +
                       0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
            want[i * N + j] = s * d;
        }
    mt_tensor ta = mt_tensor_2d(a, MT_F32, M, K, MT_DEVICE_CPU),
              tb = mt_tensor_2d(b, MT_F32, N, K, MT_DEVICE_CPU),
              tp = mt_tensor_2d(pre, MT_F32, M, N, MT_DEVICE_CPU),
              tc = mt_tensor_2d(c, MT_F32, M, N, MT_DEVICE_CPU);
    MT_CHECK(
        mt_gemm(NULL, &tc, &tp, &ta, &tb, NULL, MT_GEMM_DGELU | MT_GEMM_TRANS_B, 1.0f, 0.0f, NULL));
    float w32[M * N];
    for (int i = 0; i < M * N; i++)
        w32[i] = (float)want[i];
    mt_test_close_f32("gemm DGELU vs fp64", c, w32, M * N, 1e-5, 1e-5);

    /* the linear backward through GELU' (dx = dy @ w with w = b^T) and dx's column sums (the
     * previous linear's bias gradient), written then added */
    float wt[K * N], dx[M * N], sums[N], want_sums[N];
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++)
            wt[k * N + j] = b[j * K + k];
    mt_tensor tw = mt_tensor_2d(wt, MT_F32, K, N, MT_DEVICE_CPU),
              tdx = mt_tensor_2d(dx, MT_F32, M, N, MT_DEVICE_CPU),
              ts = mt_tensor_1d(sums, MT_F32, N, MT_DEVICE_CPU);
    for (int acc = 0; acc < 2; acc++)
        MT_CHECK(mt_linear_bwd_dgelu(NULL, &tdx, &ts, &tp, NULL, NULL, &ta, NULL, &tw, acc, NULL));
    mt_test_close_f32("linear DGELU dx vs fp64", dx, w32, M * N, 1e-5, 1e-5);
    for (int j = 0; j < N; j++) {
        double t = 0;
        for (int i = 0; i < M; i++)
            t += want[i * N + j];
        want_sums[j] = (float)(2 * t);
    }
    mt_test_close_f32("linear DGELU dx column sums, accumulated", sums, want_sums, N, 1e-5, 1e-5);

    /* a dx_sum that does not fit dx is refused before anything is written */
    float before[M * N];
    memcpy(before, dx, sizeof before);
    mt_tensor short_sum = mt_tensor_1d(sums, MT_F32, N - 1, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(
        mt_linear_bwd_dgelu(NULL, &tdx, &short_sum, &tp, NULL, NULL, &ta, NULL, &tw, 0, NULL),
        MT_ERR_INVALID_ARG);
    MT_EXPECT(strstr(mt_last_error(), "dx_sum has 5 elements, dx 6 columns") != NULL,
              "the error names dx_sum: %s", mt_last_error());
    MT_EXPECT(memcmp(before, dx, sizeof before) == 0, "dx written despite the refused dx_sum");
}

int main(void) {
    run(MT_F32);
    run(MT_BF16);
    run(MT_F16);

    /* bad input gets a clear error */
    float p[64];
    mt_tensor a = mt_tensor_2d(p, MT_F32, 4, 3, MT_DEVICE_CPU);
    mt_tensor b = mt_tensor_2d(p, MT_F32, 4, 5, MT_DEVICE_CPU);
    mt_tensor c = mt_tensor_2d(p, MT_F32, 4, 5, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_gemm(NULL, &c, NULL, &a, &b, NULL, 0, 1.0f, 0.0f, NULL),
                     MT_ERR_INVALID_ARG); /* K mismatch: 3 vs 4 */
    mt_tensor bh = mt_tensor_2d(p, MT_BF16, 3, 5, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_gemm(NULL, &c, NULL, &a, &bh, NULL, 0, 1.0f, 0.0f, NULL),
                     MT_ERR_INVALID_ARG); /* mixed input dtypes */
    mt_tensor ai = mt_tensor_2d(p, MT_I32, 4, 3, MT_DEVICE_CPU),
              bi = mt_tensor_2d(p, MT_I32, 3, 5, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_gemm(NULL, &c, NULL, &ai, &bi, NULL, 0, 1.0f, 0.0f, NULL),
                     MT_ERR_UNSUPPORTED);
    mt_tensor b35 = mt_tensor_2d(p, MT_F32, 3, 5, MT_DEVICE_CPU), pre = c;
    MT_EXPECT_STATUS(mt_gemm(NULL, &c, &pre, &a, &b35, NULL, 0, 1.0f, 0.0f, NULL),
                     MT_ERR_INVALID_ARG); /* pre_gelu without GELU */
    float bias5[5] = { 0 };
    mt_tensor bias = mt_tensor_1d(bias5, MT_F32, 5, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_gemm(NULL, &c, &pre, &a, &b35, &bias, MT_GEMM_DGELU, 1.0f, 0.0f, NULL),
                     MT_ERR_INVALID_ARG); /* DGELU with a bias */
    MT_EXPECT_STATUS(mt_gemm(NULL, &c, NULL, &a, &b35, NULL, MT_GEMM_DGELU, 1.0f, 0.0f, NULL),
                     MT_ERR_INVALID_ARG); /* DGELU without pre_gelu */
    /* grouped GEMMs: on the CPU each as mt_gemm (bitwise); refusals before anything runs */
    {
        float x[6 * 4], w[2][3 * 4], y[6 * 3], want[6 * 3];
        mt_test_fill_uniform(x, 24, 7, 0, -1.0f, 1.0f);
        mt_test_fill_uniform(w[0], 12, 8, 0, -1.0f, 1.0f);
        mt_test_fill_uniform(w[1], 12, 9, 0, -1.0f, 1.0f);
        for (int i = 0; i < 18; i++)
            y[i] = NAN;
        mt_tensor xt = mt_tensor_2d(x, MT_F32, 6, 4, MT_DEVICE_CPU);
        mt_tensor wt[2] = { mt_tensor_2d(w[0], MT_F32, 3, 4, MT_DEVICE_CPU),
                            mt_tensor_2d(w[1], MT_F32, 3, 4, MT_DEVICE_CPU) };
        mt_tensor yt = mt_tensor_2d(y, MT_F32, 6, 3, MT_DEVICE_CPU),
                  wy = mt_tensor_2d(want, MT_F32, 6, 3, MT_DEVICE_CPU);
        mt_tensor xs[2], ys[2], ws[2];
        const int64_t off[2] = { 0, 2 }, n[2] = { 2, 4 };
        mt_tensor *cp[2];
        const mt_tensor *ap[2], *bp[2];
        for (int e = 0; e < 2; e++) {
            MT_CHECK(mt_tensor_slice(&xt, 0, off[e], n[e], &xs[e]));
            MT_CHECK(mt_tensor_slice(&yt, 0, off[e], n[e], &ys[e]));
            MT_CHECK(mt_tensor_slice(&wy, 0, off[e], n[e], &ws[e]));
            MT_CHECK(mt_gemm(NULL, &ws[e], NULL, &xs[e], &wt[e], NULL, MT_GEMM_TRANS_B, 1.0f, 0.0f,
                             NULL));
            cp[e] = &ys[e], ap[e] = &xs[e], bp[e] = &wt[e];
        }
        MT_CHECK(mt_gemm_grouped(NULL, 2, cp, ap, bp, MT_GEMM_TRANS_B, 1.0f, 0.0f, NULL));
        MT_EXPECT(memcmp(y, want, sizeof y) == 0, "grouped gemm differs from mt_gemm on the CPU");
        MT_CHECK(mt_gemm_grouped(NULL, 0, NULL, NULL, NULL, 0, 1.0f, 0.0f, NULL));
        MT_EXPECT_STATUS(mt_gemm_grouped(NULL, 2, cp, ap, bp, MT_GEMM_GELU, 1.0f, 0.0f, NULL),
                         MT_ERR_INVALID_ARG); /* no epilogues */
        for (int i = 0; i < 18; i++)
            y[i] = NAN;
        mt_tensor wbad = mt_tensor_2d(w[1], MT_F32, 4, 3, MT_DEVICE_CPU);
        bp[1] = &wbad; /* problem 1's K mismatch: problem 0 must not run either */
        MT_EXPECT_STATUS(mt_gemm_grouped(NULL, 2, cp, ap, bp, MT_GEMM_TRANS_B, 1.0f, 0.0f, NULL),
                         MT_ERR_INVALID_ARG);
        MT_EXPECT(isnan(y[0]), "a refused grouped gemm wrote problem 0");
        mt_tensor wh = mt_tensor_2d(w[1], MT_BF16, 3, 4, MT_DEVICE_CPU), xh = xs[1];
        xh.dtype = MT_BF16, bp[1] = &wh, ap[1] = &xh; /* another dtype than problem 0's */
        MT_EXPECT_STATUS(mt_gemm_grouped(NULL, 2, cp, ap, bp, MT_GEMM_TRANS_B, 1.0f, 0.0f, NULL),
                         MT_ERR_INVALID_ARG);
    }
    dgelu();
    mt_blas *blas;
    MT_CHECK(mt_blas_create(MT_DEVICE_CPU, &blas));
    MT_CHECK(mt_gemm(blas, &c, NULL, &a, &b35, NULL, 0, 1.0f, 0.0f, NULL));
    mt_blas_destroy(blas);
    mt_blas_destroy(NULL);
    return mt_test_result();
}
