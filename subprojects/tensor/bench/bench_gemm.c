/* GEMM on the GPU through cuBLASLt (bf16, fp32 accumulation): the nn.Linear forward y = x @ W^T and
 * its two backward layouts dX = dY @ W and dW = dY^T @ X, at GPT-2 shapes, and the MLP's GELU
 * epilogues (fc1 forward with bias + GELU, fc2's dX through GELU'); TFLOP/s. On the CPU: the
 * fast f32 path and the reference at a small GPT's shapes; GFLOP/s. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "bench_common.h"

#if MT_HAVE_CUDA

typedef struct {
    int op; /* 0 fwd, 1 fwd + bias + GELU (pre-GELU saved), 2 dx, 3 dw, 4 dx through GELU, 5 dw
             * into f32 (the model's gradients), 6 fwd + bias + GELU alone, 7 dx through GELU with
             * its column sums (fc1's bias gradient, f32) */
    int64_t M, N, K; /* tokens, out features, in features */
} gemm_case;

static mt_status run_case(mt_blas *blas, const gemm_case *c, mt_tensor *x, mt_tensor *w,
                          mt_tensor *b, mt_tensor *y, mt_tensor *pre, mt_tensor *g) {
    switch (c->op) {
    case 0:
        return mt_linear_fwd(blas, y, NULL, x, w, NULL, 0, NULL);
    case 1:
        return mt_linear_fwd(blas, y, pre, x, w, b, MT_GEMM_GELU, NULL);
    case 2: /* dX(M,K) = dY(M,N) @ W(N,K); y holds dY, x receives dX */
        return mt_linear_bwd(blas, x, NULL, NULL, y, NULL, w, 0, NULL);
    case 3: /* dW(N,K) = dY^T @ X */
        return mt_linear_bwd(blas, NULL, w, NULL, y, x, NULL, 0, NULL);
    case 5: /* the same into f32, as the model's gradients (written, not added) */
        return mt_linear_bwd(blas, NULL, g, NULL, y, x, NULL, 0, NULL);
    case 6: /* fwd + bias + GELU without saving the pre-GELU values (one output) */
        return mt_linear_fwd(blas, y, NULL, x, w, b, MT_GEMM_GELU, NULL);
    case 7: { /* the same and dX's column sums, as the model calls it */
        mt_tensor sums;
        mt_status st = mt_tensor_reshape(g, 1, (int64_t[]){ c->N * c->K }, &sums);
        if (st == MT_OK) st = mt_tensor_slice(&sums, 0, 0, c->K, &sums);
        if (st != MT_OK) return st;
        return mt_linear_bwd_dgelu(blas, x, &sums, pre, NULL, NULL, y, NULL, w, 0, NULL);
    }
    default: /* fc2's dX(M,K) = (dY(M,N) @ W(N,K)) * GELU'(pre(M,K)) */
        return mt_linear_bwd_dgelu(blas, x, NULL, pre, NULL, NULL, y, NULL, w, 0, NULL);
    }
}

static void bench_gemm(mt_bench_state *st, void *arg) {
    gemm_case *c = arg;
    mt_arena *ar = NULL;
    mt_blas *blas = NULL;
    /* x, w, b, y and pre (M x N, or M x K for op 4) in bf16, and room for alignment */
    size_t bytes = (size_t)2 * (c->M * c->K + c->N * c->K + c->M * c->N + c->N +
                                c->M * (c->op == 4 || c->op == 7 ? c->K : c->N)) +
                   (size_t)4 * c->N * c->K + (8u << 20);
    mt_tensor x, w, b, y, pre, g;
    int64_t sx[2] = { c->M, c->K }, sw[2] = { c->N, c->K }, sy[2] = { c->M, c->N };
    if (mt_arena_create(mt_device_cuda(0), bytes, &ar) != MT_OK ||
        mt_blas_create(mt_device_cuda(0), &blas) != MT_OK ||
        mt_tensor_alloc(ar, MT_BF16, 2, sx, &x) != MT_OK ||
        mt_tensor_alloc(ar, MT_BF16, 2, sw, &w) != MT_OK ||
        mt_tensor_alloc(ar, MT_BF16, 1, &c->N, &b) != MT_OK ||
        mt_tensor_alloc(ar, MT_BF16, 2, sy, &y) != MT_OK ||
        mt_tensor_alloc(ar, MT_BF16, 2, c->op == 4 || c->op == 7 ? sx : sy, &pre) != MT_OK ||
        mt_tensor_alloc(ar, MT_F32, 2, sw, &g) != MT_OK ||
        bench_fill_uniform(&x, -1, 1, 42, 1) != MT_OK ||
        bench_fill_uniform(&w, -1, 1, 42, 1) != MT_OK ||
        bench_fill_uniform(&b, -1, 1, 42, 1) != MT_OK ||
        bench_fill_uniform(&y, -1, 1, 42, 1) != MT_OK ||
        bench_fill_uniform(&pre, -1, 1, 43, 1) != MT_OK ||
        run_case(blas, c, &x, &w, &b, &y, &pre, &g) != MT_OK || mt_stream_sync(NULL) != MT_OK) {
        mt_bench_error(st, mt_last_error());
        goto done;
    }
    BENCH_LOOP(st, run_case(blas, c, &x, &w, &b, &y, &pre, &g));
    mt_bench_rate(st, "FLOPS", 2.0 * (double)c->M * (double)c->N * (double)c->K);
done:
    mt_blas_destroy(blas);
    mt_arena_destroy(ar);
}
#endif

/* CPU: f32 nn.Linear at a small GPT's shapes (C=128: its LM head and MLP), forward and the two
 * backward GEMMs, the fast path with MT_CPU_THREADS threads or the plain-loop reference (arg->ref,
 * MT_CPU_REFERENCE=1). GFLOP/s as FLOPS. */
typedef struct {
    int op; /* 0 fwd, 2 dx, 3 dw, as in gemm_case */
    int64_t M, N, K;
    int ref;
} cpu_case;

static void bench_gemm_cpu(mt_bench_state *st, void *arg) {
    const cpu_case *c = arg;
    float *x = malloc((size_t)(c->M * c->K) * 4), *w = malloc((size_t)(c->N * c->K) * 4);
    float *y = malloc((size_t)(c->M * c->N) * 4);
    if (!x || !w || !y) {
        mt_bench_error(st, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < c->M * c->K; i++)
        x[i] = 2.0f * mt_philox_uniform(42, 1, (uint64_t)i) - 1.0f;
    for (int64_t i = 0; i < c->N * c->K; i++)
        w[i] = 2.0f * mt_philox_uniform(42, 2, (uint64_t)i) - 1.0f;
    mt_tensor tx = mt_tensor_2d(x, MT_F32, c->M, c->K, MT_DEVICE_CPU);
    mt_tensor tw = mt_tensor_2d(w, MT_F32, c->N, c->K, MT_DEVICE_CPU);
    mt_tensor ty = mt_tensor_2d(y, MT_F32, c->M, c->N, MT_DEVICE_CPU);
    if (c->ref) setenv("MT_CPU_REFERENCE", "1", 1);
    while (mt_bench_keep_running(st))
        if ((c->op == 0   ? mt_linear_fwd(NULL, &ty, NULL, &tx, &tw, NULL, 0, NULL)
             : c->op == 2 ? mt_linear_bwd(NULL, &tx, NULL, NULL, &ty, NULL, &tw, 0, NULL)
                          : mt_linear_bwd(NULL, NULL, &tw, NULL, &ty, &tx, NULL, 0, NULL)) != MT_OK)
            mt_bench_error(st, mt_last_error());
    if (c->ref) unsetenv("MT_CPU_REFERENCE");
    mt_bench_rate(st, "FLOPS", 2.0 * (double)c->M * (double)c->N * (double)c->K);
done:
    free(x), free(w), free(y);
}

int main(int argc, char **argv) {
    static const cpu_case cpu_cases[] = {
        { 0, 1024, 50304, 128, 0 }, { 2, 1024, 50304, 128, 0 }, { 3, 1024, 50304, 128, 0 },
        { 0, 1024, 384, 128, 0 },   { 0, 1024, 384, 128, 1 },
    };
    static const char *cpu_ops[] = { "gemm_fwd", "", "gemm_dx", "gemm_dw" };
    static char cpu_names[5][96];
    for (int i = 0; i < 5; i++) {
        const cpu_case *c = &cpu_cases[i];
        snprintf(cpu_names[i], sizeof cpu_names[i], "%s/%s/f32_M%lld_N%lld_K%lld", cpu_ops[c->op],
                 c->ref ? "cpu_ref" : "cpu", (long long)c->M, (long long)c->N, (long long)c->K);
        mt_bench_register(cpu_names[i], bench_gemm_cpu, (void *)c, MT_BENCH_REAL_TIME);
    }
#if MT_HAVE_CUDA
    if (bench_cuda_init()) {
        static const char *ops[] = { "gemm_fwd",
                                     "gemm_fwd_bias_gelu",
                                     "gemm_dx",
                                     "gemm_dw",
                                     "gemm_dx_dgelu",
                                     "gemm_dw_f32",
                                     "gemm_fwd_bias_gelu_noaux",
                                     "gemm_dx_dgelu_sum" };
        static gemm_case cases[48];
        static char names[48][96];
        int n = 0;
#define GEMM_CASE(OP, M_, N_, K_)                                                             \
    do {                                                                                      \
        cases[n] = (gemm_case){ OP, M_, N_, K_ };                                             \
        snprintf(names[n], sizeof names[n], "%s/cuda/bf16_M%d_N%d_K%d", ops[OP], M_, N_, K_); \
        mt_bench_register(names[n], bench_gemm, &cases[n], MT_BENCH_MANUAL_TIME);             \
        n++;                                                                                  \
    } while (0)
        /* GPT-2 124M (16 sequences): qkv, fc1 and the LM head; GELU only on fc1 */
        static const int outs[] = { 2304, 3072, 50304 };
        for (int o = 0; o < 3; o++)
            for (int op = 0; op < 6; op++)
                if (op != 4 && (op != 1 || outs[o] == 3072)) GEMM_CASE(op, 16384, outs[o], 768);
        GEMM_CASE(6, 16384, 3072, 768);
        /* fc2's dX through the GELU backward: dY (M, 768) @ W (768, 3072), also with fc1's bias
         * gradient; and both GELU GEMMs at the 124M step's 64 sequences and 1.5B's 32 */
        GEMM_CASE(4, 16384, 768, 3072);
        GEMM_CASE(7, 16384, 768, 3072);
        GEMM_CASE(1, 65536, 3072, 768);
        GEMM_CASE(7, 65536, 768, 3072);
        GEMM_CASE(1, 32768, 6400, 1600);
        GEMM_CASE(7, 32768, 1600, 6400);
        /* GPT-2 1.5B's four linears at 32 sequences (its benchmark's batch): where the forward's
         * and the backward's rates differ */
        static const int big[4][2] = {
            { 4800, 1600 }, { 1600, 1600 }, { 6400, 1600 }, { 1600, 6400 }
        };
        for (int l = 0; l < 4; l++)
            for (int op = 0; op < 6; op++)
                if (op != 1 && op != 4) GEMM_CASE(op, 32768, big[l][0], big[l][1]);
        /* decoding: one token's rows (the GEMV kernel, gemv.cu): 124M's qkv, fc1 with GELU and
         * LM head, 1.5B's fc1 */
        GEMM_CASE(0, 1, 2304, 768);
        GEMM_CASE(1, 1, 3072, 768);
        GEMM_CASE(0, 1, 50304, 768);
        GEMM_CASE(0, 1, 6400, 1600);
#undef GEMM_CASE
    }
#endif
    return mt_bench_main(argc, argv);
}
