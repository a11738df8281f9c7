/* gpu: LayerNorm and RMSNorm (fused residual) forward and backward on CUDA equal the CPU reference
 * on fresh random input in f32, bf16 and f16 (16-byte and scalar paths, one and several rows per
 * block, more rows than partial blocks), bit-identical weight gradients across runs, and the
 * PyTorch golden values; per-head norms in place inside a qkv buffer (mt_head_norm_*). */
#include "gpu_common.h"

static uint64_t seed = 200;

static mt_tensor host_rand(mt_dtype dt, int64_t rows, int64_t cols, float lo, float hi) {
    size_t n = (size_t)(rows * cols);
    float *f = malloc(n * 4);
    mt_test_fill_uniform(f, n, seed++, 9, lo, hi);
    mt_tensor t32 = mt_tensor_2d(f, MT_F32, rows, cols, MT_DEVICE_CPU);
    mt_tensor t = mt_tensor_2d(malloc(n * mt_dtype_size(dt)), dt, rows, cols, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&t, &t32, NULL));
    free(f);
    return t;
}

static void cmp(const char *what, const char *k, const mt_tensor *d, const mt_tensor *h,
                double tol) {
    int64_t n = mt_tensor_numel(h);
    float *got = as_f32(d), *want = malloc((size_t)n * 4);
    mt_tensor w = mt_tensor_1d(want, MT_F32, n, MT_DEVICE_CPU), hs = *h;
    MT_CHECK(mt_tensor_reshape(&hs, 1, &n, &hs));
    MT_CHECK(mt_cast(&w, &hs, NULL));
    char buf[128];
    snprintf(buf, sizeof buf, "%s %s", what, k);
    mt_test_close_f32(buf, got, want, (size_t)n, tol, tol);
    free(got), free(want);
}

static void run(int rms, mt_dtype dt, int64_t R, int64_t C) {
    char what[96];
    snprintf(what, sizeof what, "%s %s %lldx%lld", rms ? "rmsnorm" : "layernorm", mt_dtype_name(dt),
             (long long)R, (long long)C);
    mt_arena_reset(ar);
    double tol = dt == MT_F32 ? 2e-5 : dt == MT_F16 ? 2e-3 : 1.6e-2; /* f16: bf16's / 8 */
    mt_tensor hx = host_rand(dt, R, C, -3, 5), hr = host_rand(dt, R, C, -2, 2);
    mt_tensor hw = host_rand(dt, 1, C, 0.5f, 1.5f), hb = host_rand(dt, 1, C, -1, 1);
    mt_tensor hdo = host_rand(dt, R, C, -1, 1), hdr = host_rand(dt, R, C, -1, 1);
    mt_tensor ho = host_empty(dt, R, C), hh = host_empty(dt, R, C), hdx = host_empty(dt, R, C);
    mt_tensor hm = host_empty(MT_F32, 1, R), hs = host_empty(MT_F32, 1, R);
    mt_tensor hdw = host_empty(MT_F32, 1, C), hdb = host_empty(MT_F32, 1, C),
              hsum = host_empty(MT_F32, 1, C);
    mt_tensor dx = dev(&hx, dt, R, C), dr = dev(&hr, dt, R, C), dw = dev(&hw, dt, 1, C);
    mt_tensor db = dev(&hb, dt, 1, C), ddo = dev(&hdo, dt, R, C), ddr = dev(&hdr, dt, R, C);
    mt_tensor dout = dev(NULL, dt, R, C), dh = dev(NULL, dt, R, C), ddx = dev(NULL, dt, R, C);
    mt_tensor dm = dev(NULL, MT_F32, 1, R), ds = dev(NULL, MT_F32, 1, R);
    mt_tensor ddw = dev(NULL, MT_F32, 1, C), ddb = dev(NULL, MT_F32, 1, C),
              dsum = dev(NULL, MT_F32, 1, C);
    mt_tensor scratch = dev(NULL, MT_F32, 1, mt_norm_bwd_scratch_numel(R, C));
    /* weight/bias as 1-D */
    mt_tensor *vecs[] = { &hw, &hb,  &dw,  &db,  &hm,  &hs,   &dm,
                          &ds, &hdw, &hdb, &ddw, &ddb, &hsum, &dsum };
    for (int i = 0; i < 14; i++)
        MT_CHECK(mt_tensor_reshape(vecs[i], 1, &vecs[i]->shape[1], vecs[i]));

    if (rms) {
        MT_CHECK(mt_rmsnorm_fwd(&ho, &hh, &hs, &hx, &hr, &hw, 1e-5f, NULL));
        MT_CHECK(mt_rmsnorm_fwd(&dout, &dh, &ds, &dx, &dr, &dw, 1e-5f, NULL));
    } else {
        MT_CHECK(mt_layernorm_fwd(&ho, &hh, &hm, &hs, &hx, &hr, &hw, &hb, 1e-5f, NULL));
        MT_CHECK(mt_layernorm_fwd(&dout, &dh, &dm, &ds, &dx, &dr, &dw, &db, 1e-5f, NULL));
        cmp(what, "mean", &dm, &hm, 2e-5);
    }
    cmp(what, "resid_out", &dh, &hh, 0.0);
    cmp(what, "out", &dout, &ho, tol);
    cmp(what, "rstd", &ds, &hs, 2e-5);
    /* without a residual (the model's norms: the GEMMs add it), where the kernel may take more
     * rows a block (the backward below restores the buffers it reads from the CPU's) */
    char what2[112];
    snprintf(what2, sizeof what2, "%s no residual", what);
    mt_tensor hm2 = host_empty(MT_F32, 1, R), hs2 = host_empty(MT_F32, 1, R);
    MT_CHECK(mt_tensor_reshape(&hm2, 1, &hm2.shape[1], &hm2));
    MT_CHECK(mt_tensor_reshape(&hs2, 1, &hs2.shape[1], &hs2));
    if (rms) {
        MT_CHECK(mt_rmsnorm_fwd(&ho, NULL, &hs2, &hh, NULL, &hw, 1e-5f, NULL));
        MT_CHECK(mt_rmsnorm_fwd(&dout, NULL, &ds, &dh, NULL, &dw, 1e-5f, NULL));
    } else {
        MT_CHECK(mt_layernorm_fwd(&ho, NULL, &hm2, &hs2, &hh, NULL, &hw, &hb, 1e-5f, NULL));
        MT_CHECK(mt_layernorm_fwd(&dout, NULL, &dm, &ds, &dh, NULL, &dw, &db, 1e-5f, NULL));
        cmp(what2, "mean", &dm, &hm2, 2e-5);
    }
    cmp(what2, "out", &dout, &ho, tol);
    cmp(what2, "rstd", &ds, &hs2, 2e-5);
    free(hm2.data), free(hs2.data);

    /* backward from the CPU's saved statistics, dx accumulating into the residual gradient */
    MT_CHECK(mt_tensor_copy(&dm, &hm, NULL));
    MT_CHECK(mt_tensor_copy(&ds, &hs, NULL));
    MT_CHECK(mt_tensor_copy(&dh, &hh, NULL));
    MT_CHECK(mt_tensor_copy(&ddx, &ddr, NULL));
    memcpy(hdx.data, hdr.data, mt_tensor_nbytes(&hdx));
    if (rms) {
        MT_CHECK(mt_rmsnorm_bwd(&hdx, &hdw, &hsum, NULL, &hdo, &hh, &hw, &hs, &hdx, 0, NULL));
        MT_CHECK(mt_rmsnorm_bwd(&ddx, &ddw, &dsum, &scratch, &ddo, &dh, &dw, &ds, &ddx, 0, NULL));
    } else {
        MT_CHECK(mt_layernorm_bwd(&hdx, &hdw, &hdb, &hsum, NULL, &hdo, &hh, &hw, &hm, &hs, &hdx, 0,
                                  NULL));
        MT_CHECK(mt_layernorm_bwd(&ddx, &ddw, &ddb, &dsum, &scratch, &ddo, &dh, &dw, &dm, &ds, &ddx,
                                  0, NULL));
        cmp(what, "dbias", &ddb, &hdb, 1e-4);
    }
    cmp(what, "dx", &ddx, &hdx, tol);
    cmp(what, "dweight", &ddw, &hdw, 1e-4);
    { /* dx_sum: the column sums of the GPU's own dx as stored (the CPU's dx may round apart) */
        float *gx = as_f32(&ddx), *gs = as_f32(&dsum), *want = calloc((size_t)C, 4);
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++)
                want[c] += gx[r * C + c];
        char buf[128];
        snprintf(buf, sizeof buf, "%s dx_sum", what);
        mt_test_close_f32(buf, gs, want, (size_t)C, 1e-4, 1e-4);
        free(gx), free(gs), free(want);
    }

    /* deterministic: a second run (accumulate = 0) gives the same bits; accumulate = 1 doubles */
    float *first = as_f32(&ddw);
    if (rms)
        MT_CHECK(mt_rmsnorm_bwd(&ddx, &ddw, NULL, &scratch, &ddo, &dh, &dw, &ds, NULL, 0, NULL));
    else
        MT_CHECK(mt_layernorm_bwd(&ddx, &ddw, &ddb, NULL, &scratch, &ddo, &dh, &dw, &dm, &ds, NULL,
                                  0, NULL));
    float *second = as_f32(&ddw);
    MT_EXPECT(memcmp(first, second, (size_t)C * 4) == 0, "%s: dweight differs between runs", what);
    if (rms)
        MT_CHECK(mt_rmsnorm_bwd(&ddx, &ddw, NULL, &scratch, &ddo, &dh, &dw, &ds, NULL, 1, NULL));
    else
        MT_CHECK(mt_layernorm_bwd(&ddx, &ddw, &ddb, NULL, &scratch, &ddo, &dh, &dw, &dm, &ds, NULL,
                                  1, NULL));
    float *twice = as_f32(&ddw);
    for (int64_t c = 0; c < C; c++)
        first[c] *= 2.0f;
    char buf[128];
    snprintf(buf, sizeof buf, "%s dweight accumulated", what);
    mt_test_close_f32(buf, twice, first, (size_t)C, 1e-6, 1e-6);
    free(first), free(second), free(twice);
    mt_tensor *hs_all[] = { &hx, &hr,  &hw, &hb, &hdo, &hdr, &ho,
                            &hh, &hdx, &hm, &hs, &hdw, &hdb, &hsum };
    for (size_t i = 0; i < sizeof hs_all / sizeof *hs_all; i++)
        free(hs_all[i]->data);
}

/* The GPU against the PyTorch golden values directly (f32, LayerNorm forward). */
static void golden(void) {
    mt_arena_reset(ar);
    float *x = mt_test_golden_f32("norm_x.npy", NULL, NULL),
          *r = mt_test_golden_f32("norm_res.npy", NULL, NULL);
    float *w = mt_test_golden_f32("norm_w.npy", NULL, NULL),
          *b = mt_test_golden_f32("norm_b.npy", NULL, NULL);
    float *ref = mt_test_golden_f32("norm_ln_out.npy", NULL, NULL), got[14 * 40];
    mt_tensor hx = mt_tensor_2d(x, MT_F32, 14, 40, MT_DEVICE_CPU),
              hr = mt_tensor_2d(r, MT_F32, 14, 40, MT_DEVICE_CPU);
    mt_tensor hw = mt_tensor_2d(w, MT_F32, 1, 40, MT_DEVICE_CPU),
              hb = mt_tensor_2d(b, MT_F32, 1, 40, MT_DEVICE_CPU);
    mt_tensor dx = dev(&hx, MT_F32, 14, 40), dr = dev(&hr, MT_F32, 14, 40),
              dout = dev(NULL, MT_F32, 14, 40);
    mt_tensor dw = dev(&hw, MT_F32, 1, 40), db = dev(&hb, MT_F32, 1, 40);
    MT_CHECK(mt_tensor_reshape(&dw, 1, &dw.shape[1], &dw));
    MT_CHECK(mt_tensor_reshape(&db, 1, &db.shape[1], &db));
    MT_CHECK(mt_layernorm_fwd(&dout, NULL, NULL, NULL, &dx, &dr, &dw, &db, 1e-5f, NULL));
    mt_tensor hg = mt_tensor_2d(got, MT_F32, 14, 40, MT_DEVICE_CPU);
    MT_CHECK(mt_tensor_copy(&hg, &dout, NULL));
    mt_test_close_f32("layernorm cuda vs torch", got, ref, 14 * 40, 2e-5, 2e-5);
    free(x), free(r), free(w), free(b), free(ref);
}

/* mt_head_norm_fwd/bwd on the k heads of a (B,T,H+2G,D) qkv buffer: CUDA against the CPU path
 * (a copy and the row norm), the rest of the buffer untouched, the weight gradients bitwise
 * repeatable. */
static void run_heads(int rms, mt_dtype dt, int64_t Bn, int64_t Tn, int64_t H, int64_t G,
                      int64_t D) {
    char what[96];
    snprintf(what, sizeof what, "head %s %s B%lld T%lld H%lld G%lld D%lld",
             rms ? "rmsnorm" : "layernorm", mt_dtype_name(dt), (long long)Bn, (long long)Tn,
             (long long)H, (long long)G, (long long)D);
    mt_arena_reset(ar);
    double tol = dt == MT_F32 ? 2e-5 : dt == MT_F16 ? 2e-3 : 1.6e-2;
    const int64_t rows = Bn * Tn * G, all = Bn * Tn * (H + 2 * G);
    int64_t sq[4] = { Bn, Tn, H + 2 * G, D };
    mt_tensor hq = host_rand(dt, all, D, -3, 5), hg = host_rand(dt, all, D, -1, 1);
    mt_tensor hw = host_rand(dt, 1, D, 0.5f, 1.5f), hb = host_rand(dt, 1, D, -1, 1);
    mt_tensor hw0 = host_rand(MT_F32, 1, D, -1, 1), hb0 = host_rand(MT_F32, 1, D, -1, 1);
    mt_tensor *vecs[] = { &hw, &hb, &hw0, &hb0 };
    for (int i = 0; i < 4; i++)
        MT_CHECK(mt_tensor_reshape(vecs[i], 1, &vecs[i]->shape[1], vecs[i]));
    mt_tensor dq = to_dev(&hq), dw = to_dev(&hw), db = to_dev(&hb);
    mt_tensor hraw = host_rand(dt, rows, D, 0, 1), hm = host_rand(MT_F32, 1, rows, 0, 1),
              hs = host_rand(MT_F32, 1, rows, 0, 1);
    MT_CHECK(mt_tensor_reshape(&hm, 1, &hm.shape[1], &hm));
    MT_CHECK(mt_tensor_reshape(&hs, 1, &hs.shape[1], &hs));
    mt_tensor draw = dev_nan(dt, 2, hraw.shape), dm = dev_nan(MT_F32, 1, hm.shape),
              ds = dev_nan(MT_F32, 1, hs.shape);
    mt_tensor q4h = mt_tensor_make(hq.data, dt, 4, sq, MT_DEVICE_CPU), kh, q4d, kd;
    MT_CHECK(mt_tensor_slice(&q4h, 2, H, G, &kh));
    MT_CHECK(mt_tensor_reshape(&dq, 4, sq, &q4d));
    MT_CHECK(mt_tensor_slice(&q4d, 2, H, G, &kd));
    MT_CHECK(mt_head_norm_fwd(&kh, &hraw, rms ? NULL : &hm, &hs, &hw, rms ? NULL : &hb, rms, 1e-5f,
                              NULL));
    MT_CHECK(mt_head_norm_fwd(&kd, &draw, rms ? NULL : &dm, &ds, &dw, rms ? NULL : &db, rms, 1e-5f,
                              NULL));
    cmp(what, "raw", &draw, &hraw, 0.0);
    cmp(what, "qkv", &dq, &hq, tol); /* the normalised k heads; q and v as they were */
    cmp(what, "rstd", &ds, &hs, 2e-5);
    if (!rms) cmp(what, "mean", &dm, &hm, 2e-5);
    /* backward from the CPU's statistics, the weight gradients added to */
    MT_CHECK(mt_tensor_copy(&dm, &hm, NULL));
    MT_CHECK(mt_tensor_copy(&ds, &hs, NULL));
    mt_tensor scratch;
    int64_t ns = mt_head_norm_bwd_scratch_numel(D);
    MT_CHECK(mt_tensor_alloc(ar, MT_F32, 1, &ns, &scratch));
    float *first = NULL;
    for (int rep = 0; rep < 2; rep++) {
        mt_tensor g4h = mt_tensor_make(hg.data, dt, 4, sq, MT_DEVICE_CPU), gkh, g4d, gkd;
        mt_tensor dgc = to_dev(&hg), ddw = to_dev(&hw0), ddb = to_dev(&hb0);
        MT_CHECK(mt_tensor_reshape(&dgc, 4, sq, &g4d));
        MT_CHECK(mt_tensor_slice(&g4d, 2, H, G, &gkd));
        MT_CHECK(mt_head_norm_bwd(&gkd, &ddw, rms ? NULL : &ddb, &scratch, &draw, &dw,
                                  rms ? NULL : &dm, &ds, rms, 1, NULL));
        if (rep == 0) {
            mt_tensor hgc = hg; /* the CPU's in place over a copy of the gradients */
            hgc.data = malloc(mt_tensor_nbytes(&hg));
            memcpy(hgc.data, hg.data, mt_tensor_nbytes(&hg));
            g4h.data = hgc.data;
            MT_CHECK(mt_tensor_slice(&g4h, 2, H, G, &gkh));
            mt_tensor hdw = hw0, hdb = hb0;
            hdw.data = malloc(mt_tensor_nbytes(&hw0) + 4),
            hdb.data = malloc(mt_tensor_nbytes(&hb0) + 4);
            memcpy(hdw.data, hw0.data, mt_tensor_nbytes(&hw0));
            memcpy(hdb.data, hb0.data, mt_tensor_nbytes(&hb0));
            MT_CHECK(mt_head_norm_bwd(&gkh, &hdw, rms ? NULL : &hdb, NULL, &hraw, &hw,
                                      rms ? NULL : &hm, &hs, rms, 1, NULL));
            cmp(what, "dqkv", &dgc, &hgc, tol);
            cmp(what, "dweight", &ddw, &hdw, 1e-4);
            if (!rms) cmp(what, "dbias", &ddb, &hdb, 1e-4);
            first = as_f32(&ddw);
            free(hgc.data), free(hdw.data), free(hdb.data);
        } else {
            float *again = as_f32(&ddw);
            MT_EXPECT(memcmp(first, again, (size_t)D * 4) == 0, "%s: dweight not repeatable", what);
            free(again);
        }
    }
    free(first);
    free(hq.data), free(hg.data), free(hw.data), free(hb.data), free(hw0.data), free(hb0.data);
    free(hraw.data), free(hm.data), free(hs.data);
}

int main(void) {
    mt_test_require_gpus(1);
    MT_CHECK(mt_arena_create(mt_device_cuda(0), (size_t)256 << 20, &ar));
    const int64_t shapes[][2] = { { 37, 768 }, { 16, 1600 },  { 5, 4096 }, { 14, 40 },
                                  { 7, 33 },   { 4000, 768 }, { 3, 8192 } };
    const mt_dtype dtypes[3] = { MT_F32, MT_BF16, MT_F16 };
    for (int rms = 0; rms < 2; rms++)
        for (int d = 0; d < 3; d++)
            for (int s = 0; s < 7; s++)
                run(rms, dtypes[d], shapes[s][0], shapes[s][1]);
    golden();
    for (int rms = 0; rms < 2; rms++) { /* per-head norms (--qk-layernorm) */
        run_heads(rms, MT_F32, 2, 16, 4, 2, 64);
        run_heads(rms, MT_BF16, 4, 128, 12, 12, 64);
        run_heads(rms, MT_BF16, 2, 33, 8, 2, 128);
        run_heads(rms, MT_F16, 3, 5, 4, 1, 20); /* D not a multiple of 32 */
    }
    mt_arena_destroy(ar);
    return mt_test_result();
}
