/* unit: LayerNorm and RMSNorm with the fused residual add, forward and backward (CPU reference),
 * against PyTorch float64 golden values in f32, bf16 and f16, plus accumulation and bad input. */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include "test_common.h"

/* result t against golden `name` at tol (absolute and relative), labelled with the run dtype */
#define expect_norm(what, dt, t, name, tol) expect_golden(what, dt, t, name, tol, tol, 1.0f)

#include <stdlib.h>
#include <string.h>

#define B 2
#define T 7
#define C 40
#define N (B * T)

static void run(int rms, mt_dtype dt) {
    const int64_t sx[3] = { B, T, C }, sc[1] = { C }, sr[1] = { N };
    const char *k = rms ? "rms" : "ln";
    char name[64], what[64];
    double tol = dt == MT_F32 ? 2e-5 : dt == MT_F16 ? 5e-2 / 8 : 5e-2; /* f16: unit roundoff / 8 */
    mt_tensor x = golden_tensor("norm_x.npy", dt, 3, sx),
              res = golden_tensor("norm_res.npy", dt, 3, sx);
    mt_tensor w = golden_tensor("norm_w.npy", dt, 1, sc),
              b = golden_tensor("norm_b.npy", dt, 1, sc);
    mt_tensor dout = golden_tensor("norm_dout.npy", dt, 3, sx),
              dres = golden_tensor("norm_dres.npy", dt, 3, sx);
    mt_tensor out = poison_tensor(dt, 3, sx), h = poison_tensor(dt, 3, sx),
              dx = poison_tensor(dt, 3, sx);
    mt_tensor mean = poison_tensor(MT_F32, 1, sr), rstd = poison_tensor(MT_F32, 1, sr);
    mt_tensor dw = poison_tensor(MT_F32, 1, sc), db = poison_tensor(MT_F32, 1, sc),
              dsum = poison_tensor(MT_F32, 1, sc);
    if (rms)
        MT_CHECK(mt_rmsnorm_fwd(&out, &h, &rstd, &x, &res, &w, 1e-5f, NULL));
    else
        MT_CHECK(mt_layernorm_fwd(&out, &h, &mean, &rstd, &x, &res, &w, &b, 1e-5f, NULL));
    snprintf(name, sizeof name, "norm_%s_h.npy", k);
    snprintf(what, sizeof what, "%s resid_out", k);
    expect_norm(what, dt, &h, name, tol);
    snprintf(name, sizeof name, "norm_%s_out.npy", k);
    snprintf(what, sizeof what, "%s out", k);
    expect_norm(what, dt, &out, name, tol);
    snprintf(name, sizeof name, "norm_%s_rstd.npy", k);
    snprintf(what, sizeof what, "%s rstd", k);
    expect_norm(what, dt, &rstd, name, dt == MT_F32 ? 1e-5 : 1e-2);
    if (!rms) expect_norm("ln mean", dt, &mean, "norm_ln_mean.npy", dt == MT_F32 ? 1e-5 : 1e-2);

    /* backward: dx accumulates into the residual gradient in place (dx starts as dres) */
    memcpy(dx.data, dres.data, mt_tensor_nbytes(&dx));
    mt_tensor *dbp = rms ? NULL : &db;
    if (rms)
        MT_CHECK(mt_rmsnorm_bwd(&dx, &dw, &dsum, NULL, &dout, &h, &w, &rstd, &dx, 0, NULL));
    else
        MT_CHECK(mt_layernorm_bwd(&dx, &dw, dbp, &dsum, NULL, &dout, &h, &w, &mean, &rstd, &dx, 0,
                                  NULL));
    snprintf(name, sizeof name, "norm_%s_dx.npy", k);
    snprintf(what, sizeof what, "%s dx", k);
    expect_norm(what, dt, &dx, name, tol);
    snprintf(name, sizeof name, "norm_%s_dw.npy", k);
    snprintf(what, sizeof what, "%s dweight", k);
    expect_norm(what, dt, &dw, name, tol);
    if (!rms) expect_norm("ln dbias", dt, &db, "norm_ln_db.npy", tol);
    /* dx_sum: the column sums of dx as stored */
    float dx32[N * C], colsum[C] = { 0 };
    mt_tensor t32 = mt_tensor_make(dx32, MT_F32, 3, sx, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&t32, &dx, NULL));
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++)
            colsum[c] += dx32[r * C + c];
    snprintf(what, sizeof what, "%s dx_sum", k);
    mt_test_close_f32(what, dsum.data, colsum, C, 1e-5, 1e-5);

    /* accumulate = 1 adds a second identical gradient: 2x the golden */
    if (dt == MT_F32) {
        if (rms)
            MT_CHECK(mt_rmsnorm_bwd(&dx, &dw, NULL, NULL, &dout, &h, &w, &rstd, NULL, 1, NULL));
        else
            MT_CHECK(mt_layernorm_bwd(&dx, &dw, dbp, NULL, NULL, &dout, &h, &w, &mean, &rstd, NULL,
                                      1, NULL));
        snprintf(name, sizeof name, "norm_%s_dw.npy", k);
        float *ref = mt_test_golden_f32(name, NULL, NULL);
        for (int i = 0; i < C; i++)
            ref[i] *= 2.0f;
        snprintf(what, sizeof what, "%s dweight accumulated", k);
        mt_test_close_f32(what, dw.data, ref, C, 1e-4, 1e-4);
        free(ref);
    }
    free(x.data), free(res.data), free(w.data), free(b.data), free(dout.data), free(dres.data);
    free(out.data), free(h.data), free(dx.data), free(mean.data), free(rstd.data), free(dw.data);
    free(db.data), free(dsum.data);
}

int main(void) {
    run(0, MT_F32);
    run(1, MT_F32);
    run(0, MT_BF16);
    run(1, MT_BF16);
    run(0, MT_F16);
    run(1, MT_F16);

    /* bad input gets a clear error */
    float a[24], w[6], m[4], r[4];
    mt_tensor x = mt_tensor_2d(a, MT_F32, 4, 6, MT_DEVICE_CPU);
    mt_tensor tw = mt_tensor_1d(w, MT_F32, 6, MT_DEVICE_CPU),
              tw5 = mt_tensor_1d(w, MT_F32, 5, MT_DEVICE_CPU);
    mt_tensor tm = mt_tensor_1d(m, MT_F32, 4, MT_DEVICE_CPU),
              tr = mt_tensor_1d(r, MT_F32, 4, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_layernorm_fwd(&x, NULL, &tm, &tr, &x, NULL, &tw5, NULL, 1e-5f, NULL),
                     MT_ERR_INVALID_ARG);
    mt_tensor xb = mt_tensor_2d(a, MT_BF16, 4, 6, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_rmsnorm_fwd(&xb, NULL, &tr, &x, NULL, &tw, 1e-5f, NULL),
                     MT_ERR_INVALID_ARG);
    mt_tensor xi = mt_tensor_2d(a, MT_I32, 4, 6, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_rmsnorm_fwd(&xi, NULL, &tr, &xi, NULL, &tw, 1e-5f, NULL),
                     MT_ERR_UNSUPPORTED);
    MT_EXPECT_STATUS(
        mt_layernorm_bwd(&x, NULL, NULL, NULL, NULL, &x, &x, &tw, NULL, &tr, NULL, 0, NULL),
        MT_ERR_INVALID_ARG); /* LayerNorm needs mean */
    MT_EXPECT_STATUS(mt_rmsnorm_bwd(&x, NULL, &tw5, NULL, &x, &x, &tw, &tr, NULL, 0, NULL),
                     MT_ERR_INVALID_ARG); /* dx_sum of the wrong length */
    return mt_test_result();
}
