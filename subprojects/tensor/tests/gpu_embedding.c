/* gpu: embedding forward and the sort-based backward on CUDA equal the CPU reference (the same sums
 * in the same token order) on fresh random input in f32 and bf16, with f32 or bf16 gradient tables,
 * hot ids repeated hundreds of times (runs of one warp, of one row tile and of several), i32 and
 * i64 ids, with and without position ids, and a vocab shard's part; the backward is bit-identical
 * run to run. */
#include "gpu_common.h"

static void run(mt_dtype dt, mt_dtype gdt, mt_dtype idt, int64_t V, int64_t C, int64_t B, int64_t T,
                int hot, uint64_t seed, int withpos) {
    mt_arena_reset(ar);
    int64_t tsh[2] = { V, C }, psh[2] = { T + 3, C }, osh[3] = { B, T, C }, ish[2] = { B, T };
    float *w = uniform(V * C, seed, -1, 1), *p = uniform((T + 3) * C, seed + 1, -1, 1);
    float *d = uniform(B * T * C, seed + 2, -1, 1), *u = uniform(B * T, seed + 3, 0, 1);
    float *g0 = uniform(V * C, seed + 4, -1, 1), *gp0 = uniform((T + 3) * C, seed + 5, -1, 1);
    int64_t *i64 = malloc((size_t)(B * T) * 8), *p64 = malloc((size_t)(B * T) * 8);
    int32_t *i32 = malloc((size_t)(B * T) * 4), *p32 = malloc((size_t)(B * T) * 4);
    for (int64_t n = 0; n < B * T; n++) {
        int64_t range = hot ? 7 : V; /* hot: a handful of ids, each hundreds of times */
        i64[n] = (int64_t)(u[n] * (float)range) % range;
        if (n == B * T - 1) i64[n] = V - 1;
        i32[n] = (int32_t)i64[n];
        /* withpos: position ids that restart every 5 tokens after the first 7 (--reset-position-
         * ids), the last one the table's last row */
        p64[n] = n % T < 7 ? n % T : (n % T - 7) % 5;
        if (n == B * T - 1) p64[n] = T + 2;
        p32[n] = (int32_t)p64[n];
    }
    mt_tensor hpos = idt == MT_I64 ? mt_tensor_make(p64, MT_I64, 2, ish, MT_DEVICE_CPU)
                                   : mt_tensor_make(p32, MT_I32, 2, ish, MT_DEVICE_CPU);
    mt_tensor hids = idt == MT_I64 ? mt_tensor_make(i64, MT_I64, 2, ish, MT_DEVICE_CPU)
                                   : mt_tensor_make(i32, MT_I32, 2, ish, MT_DEVICE_CPU);
    mt_tensor hw = host_as(w, dt, 2, tsh), hp = host_as(p, dt, 2, psh);
    mt_tensor hd = host_as(d, dt, 3, osh), ho = host_as(d, dt, 3, osh);
    mt_tensor hgw = host_as(g0, gdt, 2, tsh), hgp = host_as(gp0, gdt, 2, psh);
    mt_tensor dgw0 = to_dev(&hgw), dgp0 = to_dev(&hgp); /* gradients accumulate onto these */
    mt_tensor dids = to_dev(&hids), dw = to_dev(&hw), dp = to_dev(&hp), dd = to_dev(&hd);
    mt_tensor dpos = to_dev(&hpos), *hps = withpos ? &hpos : NULL, *dps = withpos ? &dpos : NULL;
    MT_CHECK(mt_embedding_fwd_pos(&ho, &hids, &hw, &hp, hps, NULL));
    MT_CHECK(mt_embedding_bwd_pos(&hgw, &hgp, &hd, &hids, hps, NULL, 0, NULL));
    mt_tensor dout = dev_nan(dt, 3, osh);
    MT_CHECK(mt_embedding_fwd_pos(&dout, &dids, &dw, &dp, dps, NULL));
    size_t wsb;
    MT_CHECK(mt_embedding_bwd_workspace(&dids, V > T + 3 ? V : T + 3, dids.device, &wsb));
    void *ws;
    MT_CHECK(mt_arena_alloc(ar, wsb, &ws));
    char what[128];
    snprintf(what, sizeof what, "embedding %s grads %s ids %s V=%lld C=%lld B=%lld T=%lld%s%s",
             mt_dtype_name(dt), mt_dtype_name(gdt), mt_dtype_name(idt), (long long)V, (long long)C,
             (long long)B, (long long)T, hot ? " hot" : "", withpos ? " positions" : "");
    close_dev(what, &dout, &ho, 0, 0); /* a gather and one add: exact */
    float *first = NULL;
    for (int rep = 0; rep < 2; rep++) {
        mt_tensor dgw, dgp;
        MT_CHECK(mt_tensor_alloc(ar, gdt, 2, tsh, &dgw));
        MT_CHECK(mt_tensor_alloc(ar, gdt, 2, psh, &dgp));
        MT_CHECK(mt_tensor_copy(&dgw, &dgw0, NULL));
        MT_CHECK(mt_tensor_copy(&dgp, &dgp0, NULL));
        MT_CHECK(mt_embedding_bwd_pos(&dgw, &dgp, &dd, &dids, dps, ws, wsb, NULL));
        /* the same fp32 adds in the same order as the CPU */
        close_dev(what, &dgw, &hgw, 1e-6, 1e-6);
        close_dev(what, &dgp, &hgp, 1e-6, 1e-6);
        float *got = as_f32(&dgw);
        if (rep == 0)
            first = got;
        else {
            MT_EXPECT(memcmp(first, got, (size_t)(V * C) * 4) == 0, "%s: not deterministic", what);
            free(got);
        }
    }
    free(first);
    free(w), free(p), free(d), free(u), free(g0), free(gp0), free(i64), free(i32), free(p64),
        free(p32);
    free(hw.data), free(hp.data), free(hd.data), free(ho.data), free(hgw.data), free(hgp.data);
}

/* A vocab shard (mt_embedding_*_shard): table rows [V/3, 2V/3) of a V-id vocabulary; CUDA equals
 * the CPU (zeros for the ids the shard does not hold, their gradients skipped). */
static void run_shard(mt_dtype dt, mt_dtype gdt, int64_t V, int64_t C, int64_t N, int hot,
                      uint64_t seed) {
    mt_arena_reset(ar);
    int64_t v0 = V / 3, rows = V / 3, tsh[2] = { rows, C }, osh[2] = { N, C };
    float *w = uniform(rows * C, seed, -1, 1), *d = uniform(N * C, seed + 1, -1, 1);
    float *u = uniform(N, seed + 2, 0, 1), *g0 = uniform(rows * C, seed + 3, -1, 1);
    int64_t *ids = malloc((size_t)N * 8);
    for (int64_t n = 0; n < N; n++)
        ids[n] = hot ? v0 - 2 + (int64_t)(u[n] * 5.0f) % 5 : (int64_t)(u[n] * (float)V) % V;
    mt_tensor hids = mt_tensor_1d(ids, MT_I64, N, MT_DEVICE_CPU);
    mt_tensor hw = host_as(w, dt, 2, tsh), hd = host_as(d, dt, 2, osh), ho = host_as(d, dt, 2, osh);
    mt_tensor hg = host_as(g0, gdt, 2, tsh);
    mt_tensor dids = to_dev(&hids), dw = to_dev(&hw), dd = to_dev(&hd), dg = to_dev(&hg);
    MT_CHECK(mt_embedding_fwd_shard(&ho, &hids, &hw, v0, NULL, NULL, NULL));
    MT_CHECK(mt_embedding_bwd_shard(&hg, NULL, &hd, &hids, v0, NULL, NULL, 0, NULL));
    mt_tensor dout = dev_nan(dt, 2, osh);
    MT_CHECK(mt_embedding_fwd_shard(&dout, &dids, &dw, v0, NULL, NULL, NULL));
    size_t wsb;
    MT_CHECK(mt_embedding_bwd_workspace(&dids, rows, dids.device, &wsb));
    void *ws;
    MT_CHECK(mt_arena_alloc(ar, wsb, &ws));
    MT_CHECK(mt_embedding_bwd_shard(&dg, NULL, &dd, &dids, v0, NULL, ws, wsb, NULL));
    char what[128];
    snprintf(what, sizeof what, "embedding shard %s grads %s V=%lld C=%lld N=%lld%s",
             mt_dtype_name(dt), mt_dtype_name(gdt), (long long)V, (long long)C, (long long)N,
             hot ? " hot" : "");
    close_dev(what, &dout, &ho, 0, 0);
    close_dev(what, &dg, &hg, 1e-6, 1e-6);
    free(w), free(d), free(u), free(g0), free(ids), free(hw.data), free(hd.data), free(ho.data),
        free(hg.data);
}

int main(void) {
    mt_test_require_gpus(1);
    MT_CHECK(mt_arena_create(mt_device_cuda(0), (size_t)1 << 30, &ar));
    run(MT_F32, MT_F32, MT_I64, 1000, 768, 4, 64, 0, 1, 0);
    run(MT_F32, MT_F32, MT_I32, 1000, 768, 4, 64, 1, 2, 0);
    run(MT_BF16, MT_F32, MT_I32, 50257, 768, 8, 128, 0, 3, 0);
    run(MT_BF16, MT_F32, MT_I64, 50257, 768, 8, 128, 1, 4, 0);
    run(MT_BF16, MT_BF16, MT_I32, 1000, 256, 2, 300, 1, 5, 0);
    run(MT_BF16, MT_BF16, MT_I64, 333, 36, 3, 17, 0, 6, 0); /* C % 8 != 0: scalar path */
    run(MT_F32, MT_F32, MT_I32, 333, 37, 3, 17, 1, 7, 0);
    run(MT_BF16, MT_F32, MT_I32, 1000, 768, 8, 256, 1, 8, 0); /* runs of ~290: several row tiles */
    run(MT_BF16, MT_BF16, MT_I64, 333, 36, 4, 300, 1, 9, 0);  /* long runs on the scalar path */
    /* position ids (--reset-position-ids): the position table sorted and scattered as the tokens */
    run(MT_F32, MT_F32, MT_I32, 1000, 768, 4, 64, 0, 10, 1);
    run(MT_BF16, MT_F32, MT_I64, 50257, 768, 8, 128, 1, 11, 1);
    run(MT_BF16, MT_BF16, MT_I32, 333, 36, 3, 17, 0, 12, 1);
    /* vocab shards: ids on both sides of the shard's range (hot: the two ids below it, three in
     * it), the vector and the scalar paths */
    run_shard(MT_F32, MT_F32, 1000, 768, 512, 0, 13);
    run_shard(MT_BF16, MT_F32, 50304, 768, 1024, 1, 14);
    run_shard(MT_BF16, MT_BF16, 333, 36, 300, 1, 15);
    mt_arena_destroy(ar);
    return mt_test_result();
}
