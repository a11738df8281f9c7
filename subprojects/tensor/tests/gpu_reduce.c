/* gpu: sum, sum of squares, L2 norm, zero count and column sum on CUDA equal the CPU reference on
 * fresh random input in f32 and bf16 (aligned and misaligned, odd sizes), are bit-identical run to
 * run, and match the golden values. */
#include "gpu_common.h"

static void run_reduce(mt_dtype dt, int64_t n, int offset, uint64_t seed) {
    mt_arena_reset(ar);
    int64_t sh[1] = { n + offset };
    float *x = uniform(n + offset, seed, -1, 1);
    for (int64_t i = 0; i < n + offset; i += 7)
        x[i] = 0.0f;
    mt_tensor hall = host_as(x, dt, 1, sh), dall = to_dev(&hall), hx, dx_;
    MT_CHECK(mt_tensor_slice(&hall, 0, offset, n, &hx)); /* offset 1: not 16-byte aligned */
    MT_CHECK(mt_tensor_slice(&dall, 0, offset, n, &dx_));
    size_t wsb;
    void *ws;
    MT_CHECK(mt_reduce_workspace(&dx_, &wsb));
    MT_CHECK(mt_arena_alloc(ar, wsb, &ws));
    const char *names[] = { "sum", "sumsq", "norm2", "count_zero" };
    for (int op = 0; op < 4; op++) {
        float want, got[2];
        mt_tensor hw = mt_tensor_1d(&want, MT_F32, 1, MT_DEVICE_CPU);
        MT_CHECK(mt_reduce(&hw, &hx, (mt_reduce_op)op, NULL, 0, NULL));
        int64_t one = 1;
        for (int rep = 0; rep < 2; rep++) {
            mt_tensor dout = dev_nan(MT_F32, 1, &one);
            MT_CHECK(mt_reduce(&dout, &dx_, (mt_reduce_op)op, ws, wsb, NULL));
            float *g = as_f32(&dout);
            got[rep] = *g;
            free(g);
        }
        char what[96];
        snprintf(what, sizeof what, "reduce %s %s n=%lld offset=%d", names[op], mt_dtype_name(dt),
                 (long long)n, offset);
        /* both accumulate in fp64: only the final rounding to f32 differs */
        mt_test_close_f32(what, &got[0], &want, 1, 1e-6, 1e-6);
        MT_EXPECT(memcmp(&got[0], &got[1], 4) == 0, "%s: not deterministic", what);
    }
    int64_t cz = -1, one = 1;
    mt_tensor di;
    MT_CHECK(mt_tensor_alloc(ar, MT_I64, 1, &one, &di));
    MT_CHECK(mt_reduce(&di, &dx_, MT_REDUCE_COUNT_ZERO, ws, wsb, NULL));
    mt_tensor hi = mt_tensor_1d(&cz, MT_I64, 1, MT_DEVICE_CPU);
    MT_CHECK(mt_tensor_copy(&hi, &di, NULL));
    /* count the input, not i % 7: -1 + 2u is exactly 0 where u is 0.5 (about n / 2^24 times) */
    int64_t want = 0;
    for (int64_t i = offset; i < n + offset; i++)
        want += x[i] == 0.0f;
    MT_EXPECT(cz == want, "count_zero i64 %s n=%lld: %lld, want %lld", mt_dtype_name(dt),
              (long long)n, (long long)cz, (long long)want);
    free(x), free(hall.data);
}

static void run_colsum(mt_dtype dt, mt_dtype odt, int64_t R, int64_t C, int acc, uint64_t seed) {
    mt_arena_reset(ar);
    int64_t sh[2] = { R, C }, csh[1] = { C };
    float *x = uniform(R * C, seed, -1, 1), *o0 = uniform(C, seed + 1, -1, 1);
    mt_tensor hx = host_as(x, dt, 2, sh), ho = host_as(o0, odt, 1, csh);
    mt_tensor dx_ = to_dev(&hx), do0 = to_dev(&ho);
    MT_CHECK(mt_colsum(&ho, &hx, acc, NULL, 0, NULL));
    size_t wsb;
    void *ws;
    MT_CHECK(mt_colsum_workspace(&dx_, &wsb));
    MT_CHECK(mt_arena_alloc(ar, wsb, &ws));
    char what[96];
    snprintf(what, sizeof what, "colsum %s -> %s R=%lld C=%lld%s", mt_dtype_name(dt),
             mt_dtype_name(odt), (long long)R, (long long)C, acc ? " accumulate" : "");
    float *first = NULL;
    for (int rep = 0; rep < 2; rep++) {
        mt_tensor dout;
        MT_CHECK(mt_tensor_alloc(ar, odt, 1, csh, &dout));
        MT_CHECK(mt_tensor_copy(&dout, &do0, NULL));
        MT_CHECK(mt_colsum(&dout, &dx_, acc, ws, wsb, NULL));
        /* fp32 partial sums vs the CPU's fp64: |error| <= R * eps * max|x| */
        close_dev(what, &dout, &ho, 2e-7 * (double)R, odt == MT_F32 ? 1e-6 : 1e-2);
        float *g = as_f32(&dout);
        if (rep == 0)
            first = g;
        else {
            MT_EXPECT(memcmp(first, g, (size_t)C * 4) == 0, "%s: not deterministic", what);
            free(g);
        }
    }
    free(first), free(x), free(o0), free(hx.data), free(ho.data);
}

int main(void) {
    mt_test_require_gpus(1);
    MT_CHECK(mt_arena_create(mt_device_cuda(0), (size_t)1 << 28, &ar));
    const int64_t sizes[] = { 1, 1000, (1 << 20) + 3, 12345678 };
    for (int s = 0; s < 4; s++)
        for (int off = 0; off < 2; off++) {
            run_reduce(MT_F32, sizes[s], off, 10 + s);
            run_reduce(MT_BF16, sizes[s], off, 20 + s);
        }
    run_colsum(MT_F32, MT_F32, 1000, 768, 0, 1);
    run_colsum(MT_BF16, MT_F32, 4096, 768, 1, 2);
    run_colsum(MT_BF16, MT_BF16, 333, 4096, 0, 3);
    run_colsum(MT_F32, MT_F32, 333, 37, 1, 4);      /* C % 4 != 0: scalar path */
    run_colsum(MT_BF16, MT_F32, 100000, 24, 0, 5);  /* many row chunks */
    run_colsum(MT_BF16, MT_F32, 4096, 8192, 1, 7);  /* many blocks: longer row chunks */
    run_colsum(MT_BF16, MT_F32, 16384, 2304, 0, 8); /* GPT-2's qkv bias: one wave of chunks */
    run_colsum(MT_F32, MT_F32, 1, 5, 0, 6);

    /* golden values on the GPU */
    mt_arena_reset(ar);
    int64_t sh[3] = { 2, 7, 37 }, one = 1;
    float *x = mt_test_golden_f32("reduce_x.npy", NULL, NULL);
    float *all = mt_test_golden_f32("reduce_all.npy", NULL, NULL);
    float *col = mt_test_golden_f32("reduce_colsum.npy", NULL, NULL);
    mt_tensor hx = mt_tensor_make(x, MT_F32, 3, sh, MT_DEVICE_CPU), dx_ = to_dev(&hx);
    size_t wsb, wsc;
    void *ws;
    MT_CHECK(mt_reduce_workspace(&dx_, &wsb));
    MT_CHECK(mt_colsum_workspace(&dx_, &wsc));
    MT_CHECK(mt_arena_alloc(ar, wsb > wsc ? wsb : wsc, &ws));
    for (int op = 0; op < 4; op++) {
        mt_tensor dout = dev_nan(MT_F32, 1, &one);
        mt_tensor ref = mt_tensor_1d(&all[op], MT_F32, 1, MT_DEVICE_CPU);
        MT_CHECK(mt_reduce(&dout, &dx_, (mt_reduce_op)op, ws, wsb, NULL));
        close_dev("reduce golden (cuda)", &dout, &ref, 1e-5, 1e-6);
    }
    mt_tensor dc = dev_nan(MT_F32, 1, &sh[2]);
    mt_tensor rc = mt_tensor_1d(col, MT_F32, 37, MT_DEVICE_CPU);
    MT_CHECK(mt_colsum(&dc, &dx_, 0, ws, wsc, NULL));
    close_dev("colsum golden (cuda)", &dc, &rc, 1e-5, 1e-5);
    free(x), free(all), free(col);
    mt_arena_destroy(ar);
    return mt_test_result();
}
