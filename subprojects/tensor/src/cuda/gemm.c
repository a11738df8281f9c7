/* cuBLASLt GEMMs for mt_gemm: row-major calls mapped onto column-major cuBLASLt (C^T = B^T A^T),
 * with a per-handle cache of descriptors, layouts and the heuristic's algorithm per shape. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <stdlib.h>
#include <string.h>

#include <mt/core_cuda.h>

#include "../ops_impl.h"

/* A cuBLAS status becomes MT_ERR_CUDA with the call and the status name. */
#define MT_CUBLAS_TRY(expr)                                                       \
    do {                                                                          \
        cublasStatus_t mt_cb_ = (expr);                                           \
        if (mt_cb_ != CUBLAS_STATUS_SUCCESS)                                      \
            return mt_error_set(MT_ERR_CUDA, __FILE__, __LINE__, "%s: %s", #expr, \
                                cublasLtGetStatusName(mt_cb_));                   \
    } while (0)

#define LT_WORKSPACE  (32u << 20) /* cuBLAS's recommendation for Hopper */
#define LT_PLANS      64
#define LT_BIAS_MAX   (1 << 16) /* floats of the BGRADB scratch */
#define LT_CANDIDATES 8         /* heuristic results MT_GEMM_AUTOTUNE=1 times */

/* Everything that selects a plan; int64 fields only, so memcmp compares it. */
typedef struct plan_key {
    int64_t ab_dtype, c_dtype, trans_a, trans_b, epi, batch, M, N, K;
    int64_t lda, ldb, ldc, ldpre, sa, sb, sc, spre;
    int64_t align_a, align_b, align_c, align_bias, align_pre;
} plan_key;

typedef struct lt_plan {
    int used;
    plan_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    cublasLtMatmulAlgo_t cand[LT_CANDIDATES]; /* the heuristic's top results, best first */
    int n_cand, tuned;
} lt_plan;

struct blas_lt {
    cublasLtHandle_t handle;
    void *workspace;
    size_t workspace_bytes;
    float *bias_scratch; /* LT_BIAS_MAX floats: the BGRADB epilogue's output */
    int autotune;        /* blas_lt_set_autotune (MT_GEMM_AUTOTUNE, when set, wins) */
    lt_plan plans[LT_PLANS];
    int next; /* round-robin eviction */
    /* the grouped GEMM's (gemm_grouped_cuda), made on first use: a cuBLAS handle on the same
     * workspace, GEMM_PTRS_MAX device pointers, and the dtype pairs cuBLAS refused */
    cublasHandle_t cublas;
    void **ptrs;
    unsigned refused; /* bit ab_dtype * 8 + c_dtype (f32, bf16, f16: gemm_setup takes no other) */
};

mt_status blas_lt_create(blas_lt **out) {
    blas_lt *lt = calloc(1, sizeof *lt);
    MT_REQUIRE(lt, MT_ERR_OOM, "blas_lt");
    cublasStatus_t st = cublasLtCreate(&lt->handle);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(lt);
        return MT_ERROR(MT_ERR_CUDA, "cublasLtCreate: %s", cublasLtGetStatusName(st));
    }
    cudaError_t ce = cudaMalloc(&lt->workspace, LT_WORKSPACE);
    if (ce == cudaSuccess) {
        ce = cudaMalloc((void **)&lt->bias_scratch, LT_BIAS_MAX * sizeof(float));
        if (ce != cudaSuccess) cudaFree(lt->workspace);
    }
    if (ce != cudaSuccess) {
        cublasLtDestroy(lt->handle);
        free(lt);
        return MT_ERROR(MT_ERR_OOM, "cuBLASLt workspace of %u bytes: %s", LT_WORKSPACE,
                        cudaGetErrorName(ce));
    }
    lt->workspace_bytes = LT_WORKSPACE;
    lt->autotune = 0;
    *out = lt;
    return MT_OK;
}

static void plan_free(lt_plan *p) {
    if (!p->used) return;
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

void blas_lt_destroy(blas_lt *lt) {
    if (!lt) return;
    for (int i = 0; i < LT_PLANS; i++)
        plan_free(&lt->plans[i]);
    cudaFree(lt->workspace);
    cudaFree(lt->bias_scratch);
    if (lt->cublas) cublasDestroy(lt->cublas);
    cudaFree(lt->ptrs);
    cublasLtDestroy(lt->handle);
    free(lt);
}

static int64_t align_of(const void *p) {
    uintptr_t u = (uintptr_t)p;
    int64_t a = 256;
    while (a > 1 && u % (uintptr_t)a)
        a /= 2;
    return a;
}

static cudaDataType_t cuda_type(int64_t dt) {
    return dt == MT_BF16 ? CUDA_R_16BF : dt == MT_F16 ? CUDA_R_16F : CUDA_R_32F;
}

static mt_status layout(cublasLtMatrixLayout_t *l, int64_t dt, int64_t rows, int64_t cols,
                        int64_t ld, int64_t batch, int64_t stride) {
    MT_CUBLAS_TRY(cublasLtMatrixLayoutCreate(l, cuda_type(dt), (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        int32_t n = (int32_t)batch;
        MT_CUBLAS_TRY(
            cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n));
        MT_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(
            *l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
    return MT_OK;
}

/* Builds plan p for key k (descriptors, layouts; pointers set for the heuristic's alignment). */
static mt_status plan_build(blas_lt *lt, lt_plan *p, const plan_key *k, const gemm_args *g) {
    /* column-major view: D^T(N,M) = op(B^T)(N,K) op(A^T)(K,M); cuBLASLt's A is our b */
    MT_CUBLAS_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    p->used = 1; /* from here plan_free cleans up what exists */
    int32_t ta = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
            tb = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    MT_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    MT_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    uint32_t epi = (uint32_t)k->epi;
    MT_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (g->bias)
        MT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &g->bias, sizeof g->bias));
    if (k->epi == CUBLASLT_EPILOGUE_BGRADB) { /* the bias gradient goes to f32 scratch */
        int32_t bt = CUDA_R_32F;
        MT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                     &bt, sizeof bt));
    }
    if (k->epi == CUBLASLT_EPILOGUE_GELU_AUX || k->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
        k->epi == CUBLASLT_EPILOGUE_DGELU) {
        MT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
            p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->pre_gelu, sizeof g->pre_gelu));
        MT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                     &k->ldpre, sizeof k->ldpre));
        if (k->batch > 1)
            MT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
                p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &k->spre, sizeof k->spre));
    }
    MT_TRY(layout(&p->la, k->ab_dtype, k->trans_b ? k->K : k->N, k->trans_b ? k->N : k->K, k->ldb,
                  k->batch, k->sb));
    MT_TRY(layout(&p->lb, k->ab_dtype, k->trans_a ? k->M : k->K, k->trans_a ? k->K : k->M, k->lda,
                  k->batch, k->sa));
    MT_TRY(layout(&p->lc, k->c_dtype, k->N, k->M, k->ldc, k->batch, k->sc));

    cublasLtMatmulPreference_t pref;
    MT_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = lt->workspace_bytes;
    uint32_t al_a = (uint32_t)k->align_b, al_b = (uint32_t)k->align_a, al_c = (uint32_t)k->align_c;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                         sizeof al_a);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                         sizeof al_b);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c,
                                         sizeof al_c);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c,
                                         sizeof al_c);
    cublasLtMatmulHeuristicResult_t res[LT_CANDIDATES];
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt->handle, p->op, p->la, p->lb, p->lc,
                                                       p->lc, pref, LT_CANDIDATES, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0)
        return MT_ERROR(MT_ERR_UNSUPPORTED,
                        "cublasLtMatmulAlgoGetHeuristic: %s, %d algorithms (M=%lld N=%lld K=%lld "
                        "epilogue %lld)",
                        cublasLtGetStatusName(st), found, (long long)k->M, (long long)k->N,
                        (long long)k->K, (long long)k->epi);
    p->algo = res[0].algo;
    p->n_cand = 0;
    for (int i = 0; i < found; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS) p->cand[p->n_cand++] = res[i].algo;
    p->tuned = p->n_cand < 2;
    p->key = *k;
    return MT_OK;
}

/* The cached plan for g with epilogue epi, built on first use. */
static mt_status plan_get(blas_lt *lt, const gemm_args *g, int64_t epi, lt_plan **out) {
    plan_key k;
    memset(&k, 0, sizeof k);
    k.ab_dtype = g->ab_dtype, k.c_dtype = g->c_dtype, k.trans_a = g->trans_a;
    k.trans_b = g->trans_b, k.epi = epi, k.batch = g->batch, k.M = g->M, k.N = g->N, k.K = g->K;
    k.lda = g->lda, k.ldb = g->ldb, k.ldc = g->ldc, k.sa = g->sa, k.sb = g->sb, k.sc = g->sc;
    k.align_a = align_of(g->a), k.align_b = align_of(g->b), k.align_c = align_of(g->c);
    if (g->cin && align_of(g->cin) < k.align_c) k.align_c = align_of(g->cin);
    if (g->bias) k.align_bias = align_of(g->bias);
    if (epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
        epi == CUBLASLT_EPILOGUE_DGELU) {
        k.ldpre = g->ldpre, k.spre = g->spre, k.align_pre = align_of(g->pre_gelu);
    }
    for (int i = 0; i < LT_PLANS; i++) {
        if (lt->plans[i].used && memcmp(&lt->plans[i].key, &k, sizeof k) == 0) {
            *out = &lt->plans[i];
            return MT_OK;
        }
    }
    lt_plan *p = &lt->plans[lt->next];
    lt->next = (lt->next + 1) % LT_PLANS;
    plan_free(p);
    mt_status s = plan_build(lt, p, &k, g);
    if (s != MT_OK) {
        plan_free(p);
        return s;
    }
    *out = p;
    return MT_OK;
}

/* An on/off switch from the environment, read once into *cache (MT_ENV_UNREAD at first): 1 or 0
 * when set, `unset` otherwise (a negative value counts as unset). */
static int env_switch(const char *name, int *cache, int unset) {
    const int v = mt_env_int_once(name, -1, cache);
    return v < 0 ? unset : v != 0;
}

/* Whether the first run of a plan times the heuristic's candidates on the real operands and keeps
 * the fastest: MT_GEMM_AUTOTUNE=0/1 when set, else the handle's mt_blas_set_autotune (off by
 * default: the choice depends on timing, so two processes may pick different algorithms and round
 * differently). */
static int autotune_on(const blas_lt *lt) {
    static int v = MT_ENV_UNREAD;
    return env_switch("MT_GEMM_AUTOTUNE", &v, lt->autotune > 0);
}

static mt_status matmul(blas_lt *lt, lt_plan *p, const cublasLtMatmulAlgo_t *algo,
                        const gemm_args *g, mt_stream stream) {
    MT_CUBLAS_TRY(cublasLtMatmul(lt->handle, p->op, &g->alpha, g->b, p->la, g->a, p->lb, &g->beta,
                                 g->cin ? g->cin : g->c, p->lc, g->c, p->lc, algo, lt->workspace,
                                 lt->workspace_bytes, (cudaStream_t)stream));
    return MT_OK;
}

/* Times every candidate (1 warm-up + 3 runs) and keeps the fastest; c is saved and restored when
 * beta reads it (not g->cin: runs from another input repeat). Any failure keeps the heuristic's
 * first choice. */
static void autotune(blas_lt *lt, lt_plan *p, const gemm_args *g, mt_stream stream) {
    p->tuned = 1;
    cudaStream_t s = (cudaStream_t)stream;
    size_t es = mt_dtype_size((mt_dtype)g->c_dtype);
    size_t bytes = (size_t)(((g->batch - 1) * g->sc + (g->M - 1) * g->ldc + g->N)) * es;
    void *saved = NULL;
    if (g->beta != 0.0f && !g->cin &&
        (cudaMalloc(&saved, bytes) != cudaSuccess ||
         cudaMemcpyAsync(saved, g->c, bytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess)) {
        (void)cudaGetLastError();
        cudaFree(saved);
        return;
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float best = 0;
    int best_i = 0;
    for (int i = 0; i < p->n_cand; i++) {
        float ms = -1;
        if (matmul(lt, p, &p->cand[i], g, stream) == MT_OK) {
            cudaEventRecord(e0, s);
            for (int r = 0; r < 3; r++)
                (void)matmul(lt, p, &p->cand[i], g, stream);
            cudaEventRecord(e1, s);
            if (cudaEventSynchronize(e1) != cudaSuccess ||
                cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
                ms = -1;
        }
        mt_error_clear();
        (void)cudaGetLastError();
        if (ms >= 0 && (i == 0 || ms < best)) best = ms, best_i = i;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    p->algo = p->cand[best_i];
    if (saved) {
        cudaMemcpyAsync(g->c, saved, bytes, cudaMemcpyDeviceToDevice, s);
        cudaStreamSynchronize(s);
        cudaFree(saved);
    }
    MT_LOG_DEBUG("gemm M=%lld N=%lld K=%lld epilogue %lld: candidate %d of %d (%.3f ms for 3)",
                 (long long)g->M, (long long)g->N, (long long)g->K, (long long)p->key.epi, best_i,
                 p->n_cand, best);
}

static mt_status run_plan(blas_lt *lt, lt_plan *p, const gemm_args *g, mt_stream stream) {
    /* the pointers may differ from the ones the plan was built with (same alignment) */
    if (g->bias)
        MT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &g->bias, sizeof g->bias));
    if (p->key.ldpre)
        MT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
            p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->pre_gelu, sizeof g->pre_gelu));
    if (!p->tuned && autotune_on(lt)) autotune(lt, p, g, stream);
    return matmul(lt, p, &p->algo, g, stream);
}

/* MT_GEMM_UNFUSED=1 turns the GELU epilogues (GELU_AUX, DGELU) and BGRADB off, for comparisons. */
static int unfused(void) {
    static int v = MT_ENV_UNREAD;
    return env_switch("MT_GEMM_UNFUSED", &v, 0);
}

mt_status gemm_cuda(blas_lt *lt, const gemm_args *g, mt_stream stream) {
    int64_t base = g->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    lt_plan *p;
    if (gemm_gemv_cuda(g, stream) == MT_OK) return MT_OK; /* (a few rows: decoding) */
    if ((g->dgelu || (g->gelu && g->pre_gelu)) && gemm_sm90_cuda(g, stream) == MT_OK) return MT_OK;
    mt_error_clear();
    if (g->dgelu) {
        /* cuBLASLt's DGELU epilogue reads pre_gelu as aux (ld a multiple of 8); f32 keeps our
         * kernel, as for the forward's GELU */
        int aux_ok = g->ldpre % 8 == 0 && (g->batch == 1 || g->spre % 8 == 0);
        if (aux_ok && g->c_dtype != MT_F32 && !unfused() &&
            plan_get(lt, g, CUBLASLT_EPILOGUE_DGELU, &p) == MT_OK)
            return run_plan(lt, p, g, stream);
        mt_error_clear();
        MT_TRY(plan_get(lt, g, base, &p));
        MT_TRY(run_plan(lt, p, g, stream));
        return gemm_dgelu_apply(g, 1, stream);
    }
    if (!g->gelu) {
        MT_TRY(plan_get(lt, g, base, &p));
        return run_plan(lt, p, g, stream);
    }
    /* GELU in the epilogue when cuBLASLt offers it (aux ld must be a multiple of 8) */
    int64_t epi = g->pre_gelu
                      ? (g->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                      : (g->bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
    int aux_ok = !g->pre_gelu || (g->ldpre % 8 == 0 && (g->batch == 1 || g->spre % 8 == 0));
    // why: f32 is the tight-comparison mode; our GELU kernel matches the CPU's tanhf exactly
    // enough, while the accuracy of cuBLASLt's GELU epilogue is not documented
    aux_ok = aux_ok && g->c_dtype != MT_F32 && !g->gelu_split;
    if (aux_ok && !unfused() && plan_get(lt, g, epi, &p) == MT_OK)
        return run_plan(lt, p, g, stream);
    mt_error_clear();
    /* otherwise: the GEMM (+ bias) into pre_gelu (or c), then GELU from there into c */
    gemm_args h = *g;
    if (g->pre_gelu) h.c = g->pre_gelu, h.ldc = g->ldpre, h.sc = g->spre, h.pre_gelu = NULL;
    h.gelu = 0;
    MT_TRY(plan_get(lt, &h, base, &p));
    MT_TRY(run_plan(lt, p, &h, stream));
    return gemm_gelu_apply(g, h.c, h.ldc, h.sc, 1, stream);
}

mt_status bias_grad_cuda(blas_lt *lt, mt_tensor *dbias, const mt_tensor *dy, int accumulate,
                         mt_stream stream) {
    size_t need;
    MT_TRY(mt_colsum_workspace(dy, &need));
    MT_REQUIRE(need <= lt->workspace_bytes, MT_ERR_UNSUPPORTED,
               "bias gradient: %zu bytes of partial sums exceed the %zu-byte workspace", need,
               lt->workspace_bytes);
    return colsum_cuda(dbias, dy, accumulate, lt->workspace, stream);
}

mt_status gemm_dgelu_colsum_cuda(blas_lt *lt, const gemm_args *g, mt_tensor *dx_sum, int accumulate,
                                 mt_stream stream) {
    if (g->M % 32 != 0)
        return MT_ERROR(MT_ERR_UNSUPPORTED, "DGELU column sums: M = %lld", (long long)g->M);
    /* the partial sums at the workspace's start, colsum's own partials after them */
    mt_tensor parts =
        mt_tensor_make(lt->workspace, MT_F32, 2, (int64_t[]){ g->M / 32, g->N }, dx_sum->device);
    const size_t off = ((size_t)(g->M / 32) * (size_t)g->N * 4 + 255) / 256 * 256;
    size_t need;
    MT_TRY(mt_colsum_workspace(&parts, &need));
    if (off + need > lt->workspace_bytes)
        return MT_ERROR(MT_ERR_UNSUPPORTED, "DGELU column sums: %zu bytes exceed the workspace",
                        off + need);
    gemm_args h = *g;
    h.colsum = (float *)lt->workspace;
    MT_TRY(gemm_sm90_cuda(&h, stream)); /* MT_ERR_UNSUPPORTED: nothing done */
    return colsum_cuda(dx_sum, &parts, accumulate, (char *)lt->workspace + off, stream);
}

/* MT_GEMM_BGRADB=1: the bias gradient from cuBLASLt's BGRADB epilogue. Off by default: on Hopper
 * it runs as a separate cuBLASLt kernel, slower than ours (H200, GPT-2 124M: see bench/README.md). */
static int bgradb(void) {
    static int v = MT_ENV_UNREAD;
    return env_switch("MT_GEMM_BGRADB", &v, 0);
}

mt_status gemm_dw_bgrad_cuda(blas_lt *lt, const gemm_args *g, mt_tensor *dbias, int accumulate,
                             mt_stream stream) {
    if (unfused() || !bgradb())
        return MT_ERROR(MT_ERR_UNSUPPORTED, "MT_GEMM_UNFUSED is set or MT_GEMM_BGRADB is not");
    if (g->M > LT_BIAS_MAX || g->batch != 1 || g->bias || g->gelu || g->dgelu)
        return MT_ERROR(MT_ERR_UNSUPPORTED, "BGRADB: %lld bias elements, batch %lld",
                        (long long)g->M, (long long)g->batch);
    gemm_args gb = *g;
    gb.bias = lt->bias_scratch;
    lt_plan *p;
    if (plan_get(lt, &gb, CUBLASLT_EPILOGUE_BGRADB, &p) != MT_OK)
        return MT_ERROR(MT_ERR_UNSUPPORTED, "cuBLASLt has no BGRADB algorithm here: %s",
                        mt_last_error());
    MT_TRY(run_plan(lt, p, &gb, stream));
    /* dbias (+)= scratch: one row's column sums (the GEMM has released the workspace: same
     * stream) */
    mt_tensor row =
        mt_tensor_make(lt->bias_scratch, MT_F32, 2, (int64_t[]){ 1, g->M }, dbias->device);
    return bias_grad_cuda(lt, dbias, &row, accumulate, stream);
}

void blas_lt_set_autotune(blas_lt *lt, int on) {
    lt->autotune = on;
}

/* MT_GEMM_GROUPED=0: mt_gemm_grouped runs its GEMMs one by one, for comparisons. */
static int grouped_on(void) {
    static int v = MT_ENV_UNREAD;
    return env_switch("MT_GEMM_GROUPED", &v, 1);
}

/* A chunk of at most GEMM_PTRS_MAX / 3 problems: column-major D^T = op(b^T) op(a^T) per problem,
 * a group of one each (cuBLAS's groups share a shape; ours differ). */
static mt_status grouped_chunk(blas_lt *lt, int n, const gemm_args *g, mt_stream stream) {
    cublasOperation_t ta[GEMM_PTRS_MAX / 3], tb[GEMM_PTRS_MAX / 3];
    int m[GEMM_PTRS_MAX / 3], nn[GEMM_PTRS_MAX / 3], k[GEMM_PTRS_MAX / 3], one[GEMM_PTRS_MAX / 3];
    int lda[GEMM_PTRS_MAX / 3], ldb[GEMM_PTRS_MAX / 3], ldc[GEMM_PTRS_MAX / 3];
    float alpha[GEMM_PTRS_MAX / 3], beta[GEMM_PTRS_MAX / 3];
    const void *p[GEMM_PTRS_MAX];
    for (int i = 0; i < n; i++) {
        const gemm_args *q = &g[i];
        if (q->M > INT32_MAX || q->N > INT32_MAX || q->K > INT32_MAX || q->lda > INT32_MAX ||
            q->ldb > INT32_MAX || q->ldc > INT32_MAX)
            return MT_ERR_UNSUPPORTED;
        ta[i] = q->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
        tb[i] = q->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
        m[i] = (int)q->N, nn[i] = (int)q->M, k[i] = (int)q->K, one[i] = 1;
        lda[i] = (int)q->ldb, ldb[i] = (int)q->lda, ldc[i] = (int)q->ldc;
        alpha[i] = q->alpha, beta[i] = q->beta;
        p[i] = q->b, p[n + i] = q->a, p[2 * n + i] = q->c;
    }
    MT_TRY(gemm_ptrs_cuda(lt->ptrs, p, 3 * n, stream));
    MT_CUBLAS_TRY(cublasSetStream(lt->cublas, (cudaStream_t)stream));
    cublasStatus_t st = cublasGemmGroupedBatchedEx(
        lt->cublas, ta, tb, m, nn, k, alpha, (const void *const *)lt->ptrs, cuda_type(g->ab_dtype),
        lda, (const void *const *)lt->ptrs + n, cuda_type(g->ab_dtype), ldb, beta, lt->ptrs + 2 * n,
        cuda_type(g->c_dtype), ldc, n, one, CUBLAS_COMPUTE_32F);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)
        return MT_ERR_UNSUPPORTED;
    MT_CUBLAS_TRY(st);
    return MT_OK;
}

/* The layouts of plan p set to g's dims (g of p's transposes, dtypes and strides). */
static mt_status plan_dims(lt_plan *p, const gemm_args *g) {
    const uint64_t d[3][2] = {
        { (uint64_t)(g->trans_b ? g->K : g->N), (uint64_t)(g->trans_b ? g->N : g->K) },
        { (uint64_t)(g->trans_a ? g->M : g->K), (uint64_t)(g->trans_a ? g->K : g->M) },
        { (uint64_t)g->N, (uint64_t)g->M }
    };
    cublasLtMatrixLayout_t l[3] = { p->la, p->lb, p->lc };
    for (int i = 0; i < 3; i++) {
        MT_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_ROWS, &d[i][0],
                                                       sizeof d[i][0]));
        MT_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_COLS, &d[i][1],
                                                       sizeof d[i][1]));
    }
    return MT_OK;
}

/* A grouped GEMM's problem run alone (where cuBLAS has no grouped GEMM for the dtypes: bf16 and
 * f16 into f32, the experts' weight gradients). Their row counts change every step, and a
 * heuristic call per new shape costs more than the GEMM, so the plan is the one of the shape with
 * M and K rounded up to multiples of 256 where they are not a contiguous dim (row counts are not),
 * its layouts set to the exact dims for the call and back after it. An algorithm that refuses
 * the exact dims leaves it to the exact shape's own plan. */
static mt_status gemm_flex(blas_lt *lt, const gemm_args *g, mt_stream stream) {
    gemm_args r = *g;
    if (!g->trans_a) r.M = (g->M + 255) / 256 * 256;
    if (g->trans_a && !g->trans_b) r.K = (g->K + 255) / 256 * 256;
    if ((r.M == g->M && r.K == g->K) || g->batch != 1) return gemm_cuda(lt, g, stream);
    lt_plan *p;
    MT_TRY(plan_get(lt, &r, CUBLASLT_EPILOGUE_DEFAULT, &p));
    MT_TRY(plan_dims(p, g));
    cublasStatus_t st = cublasLtMatmul(lt->handle, p->op, &g->alpha, g->b, p->la, g->a, p->lb,
                                       &g->beta, g->c, p->lc, g->c, p->lc, &p->algo, lt->workspace,
                                       lt->workspace_bytes, (cudaStream_t)stream);
    MT_TRY(plan_dims(p, &r));
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)
        return gemm_cuda(lt, g, stream);
    MT_CUBLAS_TRY(st);
    return MT_OK;
}

mt_status gemm_grouped_cuda(blas_lt *lt, int n, const gemm_args *g, mt_stream stream) {
    const unsigned bit = 1u << (g->ab_dtype * 8 + g->c_dtype);
    if (!grouped_on()) return MT_ERR_UNSUPPORTED;
    if (lt->refused & bit) {
        for (int i = 0; i < n; i++)
            MT_TRY(gemm_flex(lt, &g[i], stream));
        return MT_OK;
    }
    if (!lt->cublas) {
        if (cublasCreate(&lt->cublas) != CUBLAS_STATUS_SUCCESS) {
            lt->cublas = NULL;
            return MT_ERR_UNSUPPORTED;
        }
        /* cuBLAS's calls share the cuBLASLt workspace: one stream's calls run in order */
        if (cublasSetWorkspace(lt->cublas, lt->workspace, lt->workspace_bytes) !=
                CUBLAS_STATUS_SUCCESS ||
            cudaMalloc((void **)&lt->ptrs, GEMM_PTRS_MAX * sizeof(void *)) != cudaSuccess) {
            (void)cudaGetLastError();
            cublasDestroy(lt->cublas);
            lt->cublas = NULL, lt->ptrs = NULL;
            return MT_ERR_UNSUPPORTED;
        }
    }
    for (int i = 0; i < n; i += GEMM_PTRS_MAX / 3) {
        const int c = n - i < GEMM_PTRS_MAX / 3 ? n - i : GEMM_PTRS_MAX / 3;
        mt_status st = grouped_chunk(lt, c, g + i, stream);
        if (st == MT_ERR_UNSUPPORTED && i == 0 && !(lt->refused & bit)) {
            lt->refused |= bit;
            MT_LOG_DEBUG("grouped gemm: cuBLAS has none for %s -> %s; one by one",
                         mt_dtype_name(g->ab_dtype), mt_dtype_name(g->c_dtype));
        }
        if (st == MT_ERR_UNSUPPORTED) /* this chunk's GEMMs one by one */
            for (int j = 0; j < c; j++)
                MT_TRY(gemm_flex(lt, &g[i + j], stream));
        else
            MT_TRY(st);
    }
    return MT_OK;
}
