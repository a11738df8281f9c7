/* gpu: mt_dropout on CUDA equals the CPU reference bit for bit (the same Philox draws, fp32 math,
 * one rounding) in f32, bf16 and f16, with and without the residual, on the vector path (rows of
 * whole groups of 8, aligned) and the scalar one, in place, and in windows of the tensor. */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include <stdlib.h>
#include <string.h>

static void run(mt_dtype dt, int64_t B, int64_t E, float p, int resid, int offset) {
    const int64_t n = B * E;
    const size_t es = mt_dtype_size(dt);
    float *x = malloc((size_t)n * 4), *r = malloc((size_t)n * 4);
    mt_test_fill_uniform(x, (size_t)n, 3, 1, -4, 4);
    mt_test_fill_uniform(r, (size_t)n, 3, 2, -4, 4);
    mt_tensor hx32 = mt_tensor_2d(x, MT_F32, B, E, MT_DEVICE_CPU);
    mt_tensor hr32 = mt_tensor_2d(r, MT_F32, B, E, MT_DEVICE_CPU);
    void *hx = malloc((size_t)n * es), *hr = malloc((size_t)n * es);
    void *want = malloc((size_t)n * es), *got = malloc((size_t)n * es);
    mt_tensor tx = mt_tensor_2d(hx, dt, B, E, MT_DEVICE_CPU);
    mt_tensor tr = mt_tensor_2d(hr, dt, B, E, MT_DEVICE_CPU);
    mt_tensor tw = mt_tensor_2d(want, dt, B, E, MT_DEVICE_CPU);
    mt_tensor tg = mt_tensor_2d(got, dt, B, E, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&tx, &hx32, NULL));
    MT_CHECK(mt_cast(&tr, &hr32, NULL));
    int64_t *ids = malloc((size_t)B * 8);
    for (int64_t b = 0; b < B; b++)
        ids[b] = 1000003 * b + 17;
    mt_tensor hids = mt_tensor_1d(ids, MT_I64, B, MT_DEVICE_CPU);
    mt_dropout_config hc = { p, 99, 7, &hids, 0, 0 };
    MT_CHECK(mt_dropout(&tw, &tx, resid ? &tr : NULL, &hc, NULL));

    mt_arena *ar;
    MT_CHECK(mt_arena_create(mt_device_cuda(0), 3 * (size_t)(n + 64) * es + 8 * B + 4096, &ar));
    mt_tensor dbuf, dx, dr, dids, dx_off;
    int64_t nn = n + 8;
    MT_CHECK(mt_tensor_alloc(ar, dt, 1, &nn, &dbuf));
    MT_CHECK(mt_tensor_alloc(ar, dt, 2, (int64_t[]){ B, E }, &dr));
    MT_CHECK(mt_tensor_alloc(ar, MT_I64, 1, &B, &dids));
    /* offset: x starts one element into its buffer (the scalar path) */
    MT_CHECK(mt_tensor_slice(&dbuf, 0, offset, n, &dx_off));
    MT_CHECK(mt_tensor_reshape(&dx_off, 2, (int64_t[]){ B, E }, &dx));
    MT_CHECK(mt_tensor_copy(&dx, &tx, NULL));
    MT_CHECK(mt_tensor_copy(&dr, &tr, NULL));
    MT_CHECK(mt_tensor_copy(&dids, &hids, NULL));
    mt_dropout_config dc = { p, 99, 7, &dids, 0, 0 };
    MT_CHECK(mt_dropout(&dx, &dx, resid ? &dr : NULL, &dc, NULL)); /* in place */
    MT_CHECK(mt_tensor_copy(&tg, &dx, NULL));
    MT_CHECK(mt_stream_sync(NULL));
    char what[96];
    snprintf(what, sizeof what, "%s B%lld E%lld p%g resid %d offset %d", mt_dtype_name(dt),
             (long long)B, (long long)E, (double)p, resid, offset);
    MT_EXPECT(memcmp(got, want, (size_t)n * es) == 0, "%s: CUDA differs from the CPU", what);
    mt_arena_destroy(ar);
    free(x), free(r), free(hx), free(hr), free(want), free(got), free(ids);
}

/* Two windows [0, k) and [k, n) of a (B, E) tensor (offset and row: a sequence-parallel rank's
 * rows) on CUDA equal the CPU's whole-tensor dropout bit for bit: k a multiple of 8 takes the
 * vector path, others the scalar one. */
static void run_window(mt_dtype dt, int64_t B, int64_t E, int64_t k) {
    const int64_t n = B * E;
    const size_t es = mt_dtype_size(dt);
    float *x = malloc((size_t)n * 4);
    mt_test_fill_uniform(x, (size_t)n, 3, 3, -4, 4);
    void *hx = malloc((size_t)n * es), *want = malloc((size_t)n * es),
         *got = malloc((size_t)n * es);
    mt_tensor hx32 = mt_tensor_1d(x, MT_F32, n, MT_DEVICE_CPU);
    mt_tensor tx = mt_tensor_1d(hx, dt, n, MT_DEVICE_CPU),
              tw = mt_tensor_1d(want, dt, n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&tx, &hx32, NULL));
    int64_t *ids = malloc((size_t)B * 8);
    for (int64_t b = 0; b < B; b++)
        ids[b] = 7919 * b + 3;
    mt_tensor hids = mt_tensor_1d(ids, MT_I64, B, MT_DEVICE_CPU);
    mt_dropout_config hc = { 0.3f, 99, 7, &hids, 0, 0 };
    MT_CHECK(mt_dropout(&tw, &tx, NULL, &hc, NULL));
    mt_arena *ar;
    MT_CHECK(mt_arena_create(mt_device_cuda(0), (size_t)n * es + 8 * B + 4096, &ar));
    mt_tensor dx, dids;
    MT_CHECK(mt_tensor_alloc(ar, dt, 1, &n, &dx));
    MT_CHECK(mt_tensor_alloc(ar, MT_I64, 1, &B, &dids));
    MT_CHECK(mt_tensor_copy(&dx, &tx, NULL));
    MT_CHECK(mt_tensor_copy(&dids, &hids, NULL));
    for (int part = 0; part < 2; part++) {
        mt_tensor w;
        MT_CHECK(mt_tensor_slice(&dx, 0, part ? k : 0, part ? n - k : k, &w));
        mt_dropout_config dc = { 0.3f, 99, 7, &dids, part ? k : 0, E };
        MT_CHECK(mt_dropout(&w, &w, NULL, &dc, NULL));
    }
    mt_tensor tg = mt_tensor_1d(got, dt, n, MT_DEVICE_CPU);
    MT_CHECK(mt_tensor_copy(&tg, &dx, NULL));
    MT_CHECK(mt_stream_sync(NULL));
    MT_EXPECT(memcmp(got, want, (size_t)n * es) == 0,
              "%s B%lld E%lld: windows at %lld differ from the CPU's whole tensor",
              mt_dtype_name(dt), (long long)B, (long long)E, (long long)k);
    mt_arena_destroy(ar);
    free(x), free(hx), free(want), free(got), free(ids);
}

int main(void) {
    mt_test_require_gpus(1);
    run_window(MT_BF16, 4, 1024, 2048); /* vector path, on a row boundary */
    run_window(MT_BF16, 4, 1024, 1544); /* vector path, inside a row */
    run_window(MT_F32, 3, 200, 301);    /* scalar */
    const mt_dtype dts[3] = { MT_F32, MT_BF16, MT_F16 };
    for (int d = 0; d < 3; d++)
        for (int resid = 0; resid < 2; resid++) {
            run(dts[d], 4, 8192, 0.1f, resid, 0); /* vector path */
            run(dts[d], 3, 8192, 0.5f, resid, 1); /* unaligned: scalar */
            run(dts[d], 5, 37, 0.1f, resid, 0);   /* rows not groups of 8 */
            run(dts[d], 2, 64, 0.0f, resid, 0);   /* p = 0 */
        }
    return mt_test_result();
}
