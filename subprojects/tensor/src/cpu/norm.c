/* LayerNorm and RMSNorm CPU reference (fused residual add): fp64 row statistics, fp64 sums over
 * rows for the weight and bias gradients, one rounding on store. */
#include <math.h>
#include <stdlib.h>

#include "../ops_impl.h"

/* v rounded to dtype dt and back */
static float round_to(mt_dtype dt, float v) {
    float tmp[1];
    mt_store_f32(tmp, dt, 0, v);
    return mt_load_f32(tmp, dt, 0);
}

mt_status norm_fwd_cpu(const norm_args *n) {
    int64_t C = n->C;
    float *h = malloc((size_t)C * sizeof *h);
    MT_REQUIRE(h, MT_ERR_OOM, "norm: %lld floats", (long long)C);
    for (int64_t r = 0; r < n->rows; r++) {
        int64_t o = r * C;
        for (int64_t c = 0; c < C; c++) {
            float v = mt_load_f32(n->x, n->dtype, o + c);
            if (n->residual) {
                /* the sum is rounded to the storage dtype, and that value is normalised */
                v = round_to(n->dtype, v + mt_load_f32(n->residual, n->dtype, o + c));
            }
            if (n->resid_out) mt_store_f32(n->resid_out, n->dtype, o + c, v);
            h[c] = v;
        }
        double mean = 0.0, var = 0.0;
        if (!n->rms) {
            for (int64_t c = 0; c < C; c++)
                mean += h[c];
            mean /= (double)C;
        }
        for (int64_t c = 0; c < C; c++)
            var += ((double)h[c] - mean) * ((double)h[c] - mean);
        var /= (double)C;
        float rstd = (float)(1.0 / sqrt(var + (double)n->eps));
        for (int64_t c = 0; c < C; c++) {
            float y = ((float)((double)h[c] - mean)) * rstd * mt_load_f32(n->weight, n->dtype, c);
            if (n->bias) y += mt_load_f32(n->bias, n->dtype, c);
            mt_store_f32(n->out, n->dtype, o + c, y);
        }
        if (n->mean) n->mean[r] = (float)mean;
        if (n->rstd) n->rstd[r] = rstd;
    }
    free(h);
    return MT_OK;
}

mt_status norm_bwd_cpu(const norm_args *n) {
    int64_t C = n->C;
    double *dw = calloc((size_t)C, sizeof *dw), *db = calloc((size_t)C, sizeof *db),
           *ds = calloc((size_t)C, sizeof *ds);
    if (!dw || !db || !ds) {
        free(dw), free(db), free(ds);
        return MT_ERROR(MT_ERR_OOM, "norm: %lld doubles", (long long)C);
    }
    for (int64_t r = 0; r < n->rows; r++) {
        int64_t o = r * C;
        float mean = n->rms ? 0.0f : n->mean[r], rstd = n->rstd[r];
        /* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w (LayerNorm);
         * RMSNorm drops the mean(g) term */
        double sg = 0.0, sgx = 0.0;
        for (int64_t c = 0; c < C; c++) {
            float xhat = (mt_load_f32(n->x, n->dtype, o + c) - mean) * rstd;
            float d = mt_load_f32(n->dout, n->dtype, o + c);
            float g = d * mt_load_f32(n->weight, n->dtype, c);
            sg += g;
            sgx += (double)g * xhat;
            dw[c] += (double)d * xhat;
            db[c] += d;
        }
        float mg = n->rms ? 0.0f : (float)(sg / (double)C), mgx = (float)(sgx / (double)C);
        for (int64_t c = 0; c < C; c++) {
            float xhat = (mt_load_f32(n->x, n->dtype, o + c) - mean) * rstd;
            float g = mt_load_f32(n->dout, n->dtype, o + c) * mt_load_f32(n->weight, n->dtype, c);
            float v = rstd * (g - mg - xhat * mgx);
            if (n->dresid) v += mt_load_f32(n->dresid, n->dtype, o + c);
            mt_store_f32(n->dx, n->dtype, o + c, v);
            if (n->dx_sum) ds[c] += mt_load_f32(n->dx, n->dtype, o + c); /* as stored */
        }
    }
    for (int64_t c = 0; c < C; c++) {
        if (n->dweight) {
            double prev = n->accumulate ? mt_load_f32(n->dweight, n->dw_dtype, c) : 0.0;
            mt_store_f32(n->dweight, n->dw_dtype, c, (float)(prev + dw[c]));
        }
        if (n->dbias) {
            double prev = n->accumulate ? mt_load_f32(n->dbias, n->dw_dtype, c) : 0.0;
            mt_store_f32(n->dbias, n->dw_dtype, c, (float)(prev + db[c]));
        }
        if (n->dx_sum) {
            double prev = n->accumulate ? mt_load_f32(n->dx_sum, n->dw_dtype, c) : 0.0;
            mt_store_f32(n->dx_sum, n->dw_dtype, c, (float)(prev + ds[c]));
        }
    }
    free(dw), free(db), free(ds);
    return MT_OK;
}
