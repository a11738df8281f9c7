/* bench_tp: a tensor-parallel MLP (column-parallel fc1 with GELU, row-parallel fc2), forward and
 * backward, bf16, over NCCL: one rank a GPU under mpirun; without and with sequence parallelism.
 * Prints one JSON line a case (rank 0): ms an iteration (the slowest rank's mean) and TFLOP/s a
 * GPU. Its peer, peers/peer_tp.py, runs Megatron's pattern in PyTorch (torchrun, same shape).
 *   mpirun -np N bench_tp [tokens hidden ffn]     (default GPT-2 1.5B's layer: 8192 1600 6400) */
#include <mt/tp.h>

#include <stdio.h>
#include <stdlib.h>

#define WARMUP 5
#define ITERS  30

static mt_tensor alloc(mt_arena *ar, int64_t r, int64_t c, float std, uint64_t seed) {
    mt_tensor t;
    MT_CHECK(mt_tensor_alloc(ar, MT_BF16, c ? 2 : 1, (int64_t[]){ r, c }, &t));
    MT_CHECK(mt_fill_normal(&t, 0.0f, std, seed, 0, NULL));
    return t;
}

int main(int argc, char **argv) {
    int64_t N = argc > 1 ? atoll(argv[1]) : 8192, C = argc > 2 ? atoll(argv[2]) : 1600;
    int64_t F = argc > 3 ? atoll(argv[3]) : 6400;
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = MT_COMM_DEVICE;
    mt_comm *w;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    int n = mt_comm_size(w), rank = mt_comm_rank(w);
    mt_device dev = mt_comm_device(w);
    int64_t f0, fl, t0, tl;
    MT_CHECK(mt_tp_partition(w, F, "ffn", &f0, &fl));
    MT_CHECK(mt_tp_partition(w, N, "tokens", &t0, &tl));
    mt_arena *ar;
    MT_CHECK(mt_arena_create(
        dev, (size_t)(2 * (6 * N * C + 3 * N * fl + 2 * fl * C) + 4 * 2 * fl * C + (64 << 20)),
        &ar));
    mt_blas *blas;
    MT_CHECK(mt_blas_create(dev, &blas));
    mt_stream s;
    MT_CHECK(mt_stream_create(&s));
    mt_tensor w1 = alloc(ar, fl, C, 0.02f, 1), b1 = alloc(ar, fl, 0, 0.02f, 2);
    mt_tensor w2 = alloc(ar, C, fl, 0.02f, 3), b2 = alloc(ar, C, 0, 0.02f, 4);
    mt_tensor x = alloc(ar, N, C, 1.0f, 5), dy = alloc(ar, N, C, 1.0f, 6);
    mt_tensor all = alloc(ar, N, C, 1.0f, 7), xall = alloc(ar, N, C, 1.0f, 8);
    mt_tensor h = alloc(ar, N, fl, 1.0f, 9), pre = alloc(ar, N, fl, 1.0f, 10);
    mt_tensor y = alloc(ar, N, C, 1.0f, 11), dx = alloc(ar, N, C, 1.0f, 12);
    mt_tensor dh = alloc(ar, N, fl, 1.0f, 13);
    mt_tensor dw1, db1, dw2, db2;
    MT_CHECK(mt_tensor_alloc(ar, MT_F32, 2, (int64_t[]){ fl, C }, &dw1));
    MT_CHECK(mt_tensor_alloc(ar, MT_F32, 1, (int64_t[]){ fl }, &db1));
    MT_CHECK(mt_tensor_alloc(ar, MT_F32, 2, (int64_t[]){ C, fl }, &dw2));
    MT_CHECK(mt_tensor_alloc(ar, MT_F32, 1, (int64_t[]){ C }, &db2));
    for (int sp = 0; sp <= 1; sp++) {
        int64_t rows = sp ? tl : N;
        mt_tensor xs, ys, dys, dxs;
        MT_CHECK(mt_tensor_slice(&x, 0, 0, rows, &xs));
        MT_CHECK(mt_tensor_slice(&y, 0, 0, rows, &ys));
        MT_CHECK(mt_tensor_slice(&dy, 0, 0, rows, &dys));
        MT_CHECK(mt_tensor_slice(&dx, 0, 0, rows, &dxs));
        double t = 0;
        for (int it = 0; it < WARMUP + ITERS; it++) {
            if (it == WARMUP) {
                MT_CHECK(mt_comm_wait(w, s));
                MT_CHECK(mt_comm_barrier(w));
                t = mt_time_now();
            }
            MT_CHECK(mt_tp_column_fwd(w, blas, &h, &pre, &xs, sp ? &xall : NULL, &w1, &b1,
                                      MT_GEMM_GELU, sp, s));
            MT_CHECK(mt_tp_row_fwd(w, blas, &ys, sp ? &all : NULL, &h, &w2, &b2, sp, s));
            MT_CHECK(
                mt_tp_row_bwd(w, blas, &dh, &dw2, &db2, &dys, sp ? &all : NULL, &h, &w2, 1, sp, s));
            MT_CHECK(mt_gelu_bwd(&dh, &dh, &pre, s));
            MT_CHECK(mt_tp_column_bwd(w, blas, &dxs, sp ? &all : NULL, &dw1, &db1, &dh,
                                      sp ? &xall : &xs, &w1, 1, sp, s));
        }
        MT_CHECK(mt_comm_wait(w, s));
        double ms = (mt_time_now() - t) * 1e3 / ITERS;
        MT_CHECK(mt_comm_barrier(w)); /* (the collectives keep the ranks in step) */
        double tflops = 6.0 * 2.0 * (double)N * (double)C * (double)F / n / (ms * 1e-3) / 1e12;
        if (rank == 0)
            printf("{\"bench\": \"tp_mlp\", \"tp\": %d, \"sp\": %d, \"tokens\": %lld, \"hidden\": "
                   "%lld, "
                   "\"ffn\": %lld, \"ms\": %.4f, \"tflops_per_gpu\": %.1f}\n",
                   n, sp, (long long)N, (long long)C, (long long)F, ms, tflops);
    }
    mt_stream_destroy(s);
    mt_blas_destroy(blas);
    mt_arena_destroy(ar);
    mt_comm_destroy(w);
    return 0;
}
