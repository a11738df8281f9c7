/* LayerNorm/RMSNorm with the fused residual add on the GPU (bf16): forward (x + residual -> resid_out,
 * out, mean, rstd; layernorm_fwd_nores: x -> out, mean, rstd, as the model runs it) and backward (dx with the residual gradient, dweight, dbias; layernorm_bwd_sum
 * also dx's column sums, as the model asks for a linear's bias gradient); GB/s counting the bytes
 * of the row tensors read and written once. */
#include "bench_common.h"

#if MT_HAVE_CUDA

typedef struct {
    int op; /* 0 layernorm_fwd, 1 layernorm_bwd, 2 rmsnorm_fwd, 3 rmsnorm_bwd, 4 layernorm_bwd_sum,
             * 5 layernorm_fwd_nores */
    int64_t N, C;
} norm_case;

typedef struct {
    mt_tensor x, r, h, out, w, b, mean, rstd, dout, dx, dw, db, ds, scratch;
} norm_bufs;

static mt_status run_case(const norm_case *c, norm_bufs *t) {
    switch (c->op) {
    case 0:
        return mt_layernorm_fwd(&t->out, &t->h, &t->mean, &t->rstd, &t->x, &t->r, &t->w, &t->b,
                                1e-5f, NULL);
    case 1:
        return mt_layernorm_bwd(&t->dx, &t->dw, &t->db, NULL, &t->scratch, &t->dout, &t->h, &t->w,
                                &t->mean, &t->rstd, &t->dx, 0, NULL);
    case 4:
        return mt_layernorm_bwd(&t->dx, &t->dw, &t->db, &t->ds, &t->scratch, &t->dout, &t->h, &t->w,
                                &t->mean, &t->rstd, &t->dx, 0, NULL);
    case 5:
        return mt_layernorm_fwd(&t->out, NULL, &t->mean, &t->rstd, &t->x, NULL, &t->w, &t->b, 1e-5f,
                                NULL);
    case 2:
        return mt_rmsnorm_fwd(&t->out, &t->h, &t->rstd, &t->x, &t->r, &t->w, 1e-5f, NULL);
    default:
        return mt_rmsnorm_bwd(&t->dx, &t->dw, NULL, &t->scratch, &t->dout, &t->h, &t->w, &t->rstd,
                              &t->dx, 0, NULL);
    }
}

static void bench_norm(mt_bench_state *st, void *arg) {
    norm_case *c = arg;
    mt_arena *ar = NULL;
    norm_bufs t;
    int64_t s2[2] = { c->N, c->C }, ns = mt_norm_bwd_scratch_numel(c->N, c->C);
    size_t bytes = (size_t)6 * c->N * c->C * 2 + (size_t)ns * 4 + (size_t)c->N * 8 + (16u << 20);
    mt_status s = mt_arena_create(mt_device_cuda(0), bytes, &ar);
    mt_tensor *rows[] = { &t.x, &t.r, &t.h, &t.out, &t.dout, &t.dx };
    for (int i = 0; s == MT_OK && i < 6; i++) {
        s = mt_tensor_alloc(ar, MT_BF16, 2, s2, rows[i]);
        if (s == MT_OK) s = bench_fill_uniform(rows[i], -1, 1, 42, (uint64_t)i + 1);
    }
    if (s == MT_OK) s = mt_tensor_alloc(ar, MT_BF16, 1, &c->C, &t.w);
    if (s == MT_OK) s = mt_tensor_alloc(ar, MT_BF16, 1, &c->C, &t.b);
    if (s == MT_OK) s = mt_tensor_alloc(ar, MT_F32, 1, &c->C, &t.dw);
    if (s == MT_OK) s = mt_tensor_alloc(ar, MT_F32, 1, &c->C, &t.db);
    if (s == MT_OK) s = mt_tensor_alloc(ar, MT_F32, 1, &c->C, &t.ds);
    if (s == MT_OK) s = mt_tensor_alloc(ar, MT_F32, 1, &c->N, &t.mean);
    if (s == MT_OK) s = mt_tensor_alloc(ar, MT_F32, 1, &c->N, &t.rstd);
    if (s == MT_OK) s = mt_tensor_alloc(ar, MT_F32, 1, &ns, &t.scratch);
    if (s == MT_OK) s = bench_fill_uniform(&t.w, -1, 1, 42, 10);
    if (s == MT_OK) s = bench_fill_uniform(&t.b, -1, 1, 42, 11);
    /* the statistics of a real forward, then the op once (warm-up) */
    if (s == MT_OK)
        s = mt_layernorm_fwd(&t.out, &t.h, &t.mean, &t.rstd, &t.x, &t.r, &t.w, &t.b, 1e-5f, NULL);
    if (s == MT_OK) s = run_case(c, &t);
    if (s == MT_OK) s = mt_stream_sync(NULL);
    if (s != MT_OK) {
        mt_bench_error(st, mt_last_error());
        mt_arena_destroy(ar);
        return;
    }
    BENCH_LOOP(st, run_case(c, &t));
    /* fwd: x, residual read; resid_out, out written (nores: x read, out written). bwd: dout, h,
     * dresid read; dx written */
    mt_bench_set_bytes(st, (c->op == 5 ? 2 : 4) * c->N * c->C * 2);
    mt_arena_destroy(ar);
}
#endif

int main(int argc, char **argv) {
#if MT_HAVE_CUDA
    if (bench_cuda_init()) {
        static const char *ops[] = { "layernorm_fwd", "layernorm_bwd",     "rmsnorm_fwd",
                                     "rmsnorm_bwd",   "layernorm_bwd_sum", "layernorm_fwd_nores" };
        static const int64_t Cs[] = { 768, 1600, 4096 };
        static norm_case cases[18];
        static char names[18][96];
        int n = 0;
        for (int op = 0; op < 6; op++) {
            for (int i = 0; i < 3; i++) {
                cases[n] = (norm_case){ op, 16384, Cs[i] };
                snprintf(names[n], sizeof names[n], "%s/cuda/bf16_N16384_C%lld", ops[op],
                         (long long)Cs[i]);
                mt_bench_register(names[n], bench_norm, &cases[n], MT_BENCH_MANUAL_TIME);
                n++;
            }
        }
    }
#endif
    return mt_bench_main(argc, argv);
}
