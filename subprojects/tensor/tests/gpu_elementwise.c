/* gpu: elementwise ops and casts on CUDA equal the CPU reference on seeded random input, in f32,
 * bf16 and f16 (same fp32 math, one rounding: bit-exact except fused multiply-add differences);
 * mt_copy between strided views bitwise. */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include <stdlib.h>
#include <string.h>

static void run(mt_dtype dt, int64_t n) {
    size_t es = mt_dtype_size(dt);
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    mt_test_fill_uniform(x, (size_t)n, 1, 1, -4, 4);
    mt_test_fill_uniform(y, (size_t)n, 1, 2, -4, 4);
    mt_tensor hx32 = mt_tensor_1d(x, MT_F32, n, MT_DEVICE_CPU);
    mt_tensor hy32 = mt_tensor_1d(y, MT_F32, n, MT_DEVICE_CPU);
    void *hx = malloc((size_t)n * es), *hy = malloc((size_t)n * es), *ho = malloc((size_t)n * es);
    mt_tensor tx = mt_tensor_1d(hx, dt, n, MT_DEVICE_CPU),
              ty = mt_tensor_1d(hy, dt, n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&tx, &hx32, NULL));
    MT_CHECK(mt_cast(&ty, &hy32, NULL));
    mt_arena *ar;
    MT_CHECK(mt_arena_create(mt_device_cuda(0), 4 * (size_t)n * 4 + 4096, &ar));
    mt_tensor dx, dy, dout, d32;
    MT_CHECK(mt_tensor_alloc(ar, dt, 1, &n, &dx));
    MT_CHECK(mt_tensor_alloc(ar, dt, 1, &n, &dy));
    MT_CHECK(mt_tensor_alloc(ar, dt, 1, &n, &dout));
    MT_CHECK(mt_tensor_alloc(ar, MT_F32, 1, &n, &d32));
    MT_CHECK(mt_tensor_copy(&dx, &tx, NULL));
    MT_CHECK(mt_tensor_copy(&dy, &ty, NULL));
    float *got = malloc((size_t)n * 4), *want = malloc((size_t)n * 4);
    mt_tensor hgot = mt_tensor_1d(got, MT_F32, n, MT_DEVICE_CPU);
    mt_tensor hwant = mt_tensor_1d(want, MT_F32, n, MT_DEVICE_CPU);
    mt_tensor to = mt_tensor_1d(ho, dt, n, MT_DEVICE_CPU);
    for (int op = 0; op < 4; op++) {
        const char *names[] = { "add", "scale", "axpy", "cast" };
        if (op == 0) {
            MT_CHECK(mt_add(&dout, &dx, &dy, NULL));
            MT_CHECK(mt_add(&to, &tx, &ty, NULL));
        }
        if (op == 1) {
            MT_CHECK(mt_scale(&dout, &dx, 0.3f, NULL));
            MT_CHECK(mt_scale(&to, &tx, 0.3f, NULL));
        }
        if (op == 2) {
            MT_CHECK(mt_tensor_copy(&dout, &ty, NULL));
            memcpy(ho, hy, (size_t)n * es);
            MT_CHECK(mt_axpy(&dout, -1.25f, &dx, NULL));
            MT_CHECK(mt_axpy(&to, -1.25f, &tx, NULL));
        }
        if (op == 3) { /* f32 -> dt on the GPU vs the CPU */
            mt_tensor d32in;
            MT_CHECK(mt_tensor_slice(&d32, 0, 0, n, &d32in));
            MT_CHECK(mt_tensor_copy(&d32in, &hx32, NULL));
            MT_CHECK(mt_cast(&dout, &d32in, NULL));
            MT_CHECK(mt_cast(&to, &hx32, NULL));
        }
        MT_CHECK(mt_cast(&d32, &dout, NULL));
        MT_CHECK(mt_tensor_copy(&hgot, &d32, NULL));
        MT_CHECK(mt_cast(&hwant, &to, NULL));
        char what[64];
        snprintf(what, sizeof what, "%s %s n=%lld", names[op], mt_dtype_name(dt), (long long)n);
        double tol = dt == MT_F32 ? 1e-6 : dt == MT_BF16 ? 8e-3 : 1e-3;
        mt_test_close_f32(what, got, want, (size_t)n, tol, tol);
    }
    /* Philox normals on the device equal the CPU's */
    MT_CHECK(mt_fill_normal(&dout, 0.25f, 2.0f, 99, 3, NULL));
    MT_CHECK(mt_fill_normal(&to, 0.25f, 2.0f, 99, 3, NULL));
    MT_CHECK(mt_cast(&d32, &dout, NULL));
    MT_CHECK(mt_tensor_copy(&hgot, &d32, NULL));
    MT_CHECK(mt_cast(&hwant, &to, NULL));
    mt_test_close_f32("fill_normal", got, want, (size_t)n, 1e-6, dt == MT_F32 ? 1e-6 : 8e-3);
    mt_arena_destroy(ar);
    free(x), free(y), free(hx), free(hy), free(ho), free(got), free(want);
}

/* mt_copy on CUDA equals the CPU's: the k heads of a (B,T,H+2G,D) qkv buffer into contiguous
 * rows, and back into a zeroed buffer's k heads (bitwise: a copy). */
static void run_copy(mt_dtype dt, int64_t Bn, int64_t Tn, int64_t H, int64_t G, int64_t D) {
    int64_t n = Bn * Tn * (H + 2 * G) * D, nk = Bn * Tn * G * D;
    size_t es = mt_dtype_size(dt);
    float *x = malloc((size_t)n * 4);
    mt_test_fill_uniform(x, (size_t)n, 3, 1, -4, 4);
    void *hq = malloc((size_t)n * es), *hr = malloc((size_t)nk * es), *hb = calloc((size_t)n, es);
    mt_tensor x32 = mt_tensor_1d(x, MT_F32, n, MT_DEVICE_CPU),
              t1 = mt_tensor_1d(hq, dt, n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&t1, &x32, NULL));
    int64_t sq[4] = { Bn, Tn, H + 2 * G, D }, sr[4] = { Bn, Tn, G, D };
    mt_tensor hall = mt_tensor_make(hq, dt, 4, sq, MT_DEVICE_CPU), hk, hrow, hball, hbk;
    MT_CHECK(mt_tensor_slice(&hall, 2, H, G, &hk));
    hrow = mt_tensor_make(hr, dt, 4, sr, MT_DEVICE_CPU);
    MT_CHECK(mt_copy(&hrow, &hk, NULL));
    hball = mt_tensor_make(hb, dt, 4, sq, MT_DEVICE_CPU);
    MT_CHECK(mt_tensor_slice(&hball, 2, H, G, &hbk));
    MT_CHECK(mt_copy(&hbk, &hrow, NULL));
    mt_arena *ar;
    MT_CHECK(mt_arena_create(mt_device_cuda(0), (size_t)(2 * n + nk) * es + 4096, &ar));
    mt_tensor dall, drow, dball, dk, dbk;
    MT_CHECK(mt_tensor_alloc(ar, dt, 4, sq, &dall));
    MT_CHECK(mt_tensor_alloc(ar, dt, 4, sr, &drow));
    MT_CHECK(mt_tensor_alloc(ar, dt, 4, sq, &dball));
    mt_tensor hall_c = mt_tensor_make(hq, dt, 4, sq, MT_DEVICE_CPU);
    MT_CHECK(mt_tensor_copy(&dall, &hall_c, NULL));
    MT_CHECK(mt_fill(&dball, 0.0f, NULL));
    MT_CHECK(mt_tensor_slice(&dall, 2, H, G, &dk));
    MT_CHECK(mt_tensor_slice(&dball, 2, H, G, &dbk));
    MT_CHECK(mt_copy(&drow, &dk, NULL));
    MT_CHECK(mt_copy(&dbk, &drow, NULL));
    void *gr = malloc((size_t)nk * es), *gb = malloc((size_t)n * es);
    mt_tensor tgr = mt_tensor_make(gr, dt, 4, sr, MT_DEVICE_CPU),
              tgb = mt_tensor_make(gb, dt, 4, sq, MT_DEVICE_CPU);
    MT_CHECK(mt_tensor_copy(&tgr, &drow, NULL));
    MT_CHECK(mt_tensor_copy(&tgb, &dball, NULL));
    MT_EXPECT(memcmp(gr, hr, (size_t)nk * es) == 0 && memcmp(gb, hb, (size_t)n * es) == 0,
              "mt_copy %s B%lld T%lld H%lld G%lld D%lld: CUDA differs from the CPU",
              mt_dtype_name(dt), (long long)Bn, (long long)Tn, (long long)H, (long long)G,
              (long long)D);
    printf("ok copy %s (%lld,%lld,%lld,%lld) k heads\n", mt_dtype_name(dt), (long long)Bn,
           (long long)Tn, (long long)(H + 2 * G), (long long)D);
    mt_arena_destroy(ar);
    free(x), free(hq), free(hr), free(hb), free(gr), free(gb);
}

int main(void) {
    mt_test_require_gpus(1);
    run_copy(MT_BF16, 2, 16, 4, 2, 16);
    run_copy(MT_F32, 3, 100, 25, 25, 64);
    run_copy(MT_F32, 2, 7, 3, 1, 5); /* 20-byte heads: one element a thread */
    const int64_t sizes[] = { 1, 1000, 1 << 20, (1 << 22) + 3 };
    const mt_dtype dts[] = { MT_F32, MT_BF16, MT_F16 };
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 4; s++)
            run(dts[d], sizes[s]);
    return mt_test_result();
}
