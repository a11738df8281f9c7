/* unit: the fast CPU GEMM (fp32 accumulation, threads) against an fp64 loop on random inputs of
 * awkward shapes, every transpose, batches, bias, GELU, alpha/beta, padded rows; its bits do not
 * depend on MT_CPU_THREADS; MT_CPU_REFERENCE=1 gives the reference's bits. */
#define _POSIX_C_SOURCE 200809L
#include <mt/tensor.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gcase {
    int64_t M, N, K;
    int flags;     /* MT_GEMM_* */
    int64_t batch; /* 0: rank-2 operands */
    int shared;    /* with batch: 1 a is rank 2, 2 b is rank 2 */
    int bias, pre; /* bias; pre_gelu (with MT_GEMM_GELU) */
    float alpha, beta;
    int64_t pad;      /* extra elements at the end of every row */
    mt_dtype dt, cdt; /* inputs, output */
} gcase;

/* A rows x cols operand (batch copies unless rank 2), rows padded, with its float values. */
typedef struct mat {
    mt_tensor t;
    float *v; /* values as stored (bf16-rounded for bf16), padding included */
    int64_t ld, sb;
} mat;

static mat make(mt_dtype dt, int64_t batch, int64_t rows, int64_t cols, int64_t pad,
                uint64_t stream) {
    mat m = { 0 };
    int64_t nb = batch ? batch : 1, ld = cols + pad, n = nb * rows * ld;
    m.ld = ld;
    m.sb = batch ? rows * ld : 0;
    m.v = malloc((size_t)(n ? n : 1) * 4);
    mt_test_fill_uniform(m.v, (size_t)n, 7, stream, -1.0f, 1.0f);
    void *p = malloc((size_t)(n ? n : 1) * 4);
    for (int64_t i = 0; i < n; i++) {
        if (dt == MT_BF16) {
            ((uint16_t *)p)[i] = mt_f32_to_bf16(m.v[i]);
            m.v[i] = mt_bf16_to_f32(((uint16_t *)p)[i]);
        } else {
            ((float *)p)[i] = m.v[i];
        }
    }
    int64_t shape[3] = { nb, rows, cols };
    m.t = batch ? mt_tensor_make(p, dt, 3, shape, MT_DEVICE_CPU)
                : mt_tensor_make(p, dt, 2, shape + 1, MT_DEVICE_CPU);
    m.t.stride[m.t.ndim - 2] = ld;
    if (batch) m.t.stride[0] = rows * ld;
    return m;
}

static void values(float *out, const mat *m, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = m->t.dtype == MT_BF16 ? mt_bf16_to_f32(((uint16_t *)m->t.data)[i])
                                       : ((float *)m->t.data)[i];
}

static float gelu(float x) {
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

static float round_to(mt_dtype dt, float v) {
    return dt == MT_BF16 ? mt_bf16_to_f32(mt_f32_to_bf16(v)) : v;
}

/* Runs one case: fast path vs an fp64 loop (tolerance), then MT_CPU_REFERENCE=1 (exact bits). */
static void run(const gcase *c, int idx) {
    int ta = (c->flags & MT_GEMM_TRANS_A) != 0, tb = (c->flags & MT_GEMM_TRANS_B) != 0;
    int gel = (c->flags & MT_GEMM_GELU) != 0;
    int64_t bt = c->batch ? c->batch : 1;
    mat a = make(c->dt, c->shared == 1 ? 0 : c->batch, ta ? c->K : c->M, ta ? c->M : c->K, c->pad,
                 10 * idx + 1);
    mat b = make(c->dt, c->shared == 2 ? 0 : c->batch, tb ? c->N : c->K, tb ? c->K : c->N, c->pad,
                 10 * idx + 2);
    mat c0 = make(c->cdt, c->batch, c->M, c->N, c->pad, 10 * idx + 3);
    mat p0 = make(c->cdt, c->batch, c->M, c->N, c->pad, 10 * idx + 4);
    mat bias = make(c->cdt, 0, 1, c->N, 0, 10 * idx + 5);
    int64_t nc = bt * c->M * c0.ld;
    float *want = malloc((size_t)nc * 4), *wpre = malloc((size_t)nc * 4);
    float *got = malloc((size_t)nc * 4), *gpre = malloc((size_t)nc * 4);
    memcpy(want, c0.v, (size_t)nc * 4); /* padding stays as it was */
    memcpy(wpre, p0.v, (size_t)nc * 4);
    double amax = 0.0, bmax = 0.0;
    for (int64_t i = 0; i < (c->shared == 1 ? 1 : bt) * a.t.shape[a.t.ndim - 2] * a.ld; i++)
        amax = fmax(amax, fabs(a.v[i]));
    for (int64_t i = 0; i < (c->shared == 2 ? 1 : bt) * b.t.shape[b.t.ndim - 2] * b.ld; i++)
        bmax = fmax(bmax, fabs(b.v[i]));
    for (int64_t s = 0; s < bt; s++) {
        for (int64_t i = 0; i < c->M; i++) {
            for (int64_t j = 0; j < c->N; j++) {
                double acc = 0.0;
                for (int64_t k = 0; k < c->K; k++)
                    acc += (double)a.v[s * a.sb + (ta ? k * a.ld + i : i * a.ld + k)] *
                           (double)b.v[s * b.sb + (tb ? j * b.ld + k : k * b.ld + j)];
                int64_t ic = s * c0.sb + i * c0.ld + j;
                double v = (double)c->alpha * acc;
                if (c->beta != 0.0f) v += (double)c->beta * c0.v[ic];
                if (c->bias) v += bias.v[j];
                if (gel) {
                    if (c->pre) wpre[ic] = round_to(c->cdt, (float)v);
                    v = gelu((float)v);
                }
                want[ic] = round_to(c->cdt, (float)v);
            }
        }
    }
    char what[160];
    snprintf(what, sizeof what, "case %d: %s M%lld N%lld K%lld flags %d batch %lld", idx,
             mt_dtype_name(c->dt), (long long)c->M, (long long)c->N, (long long)c->K, c->flags,
             (long long)c->batch);
    /* fp32 accumulation error grows like sqrt(K) * max|a| max|b| */
    double atol = 1e-5 * sqrt((double)(c->K ? c->K : 1)) * amax * bmax * fabs(c->alpha) + 1e-6;
    double rtol = c->cdt == MT_BF16 ? 1e-2 : 1e-5;
    for (int ref = 0; ref < 2; ref++) {
        if (ref) setenv("MT_CPU_REFERENCE", "1", 1);
        mat cc = make(c->cdt, c->batch, c->M, c->N, c->pad, 10 * idx + 3); /* c0 again */
        mat pp = make(c->cdt, c->batch, c->M, c->N, c->pad, 10 * idx + 4);
        MT_CHECK(mt_gemm(NULL, &cc.t, c->pre ? &pp.t : NULL, &a.t, &b.t, c->bias ? &bias.t : NULL,
                         c->flags, c->alpha, c->beta, NULL));
        unsetenv("MT_CPU_REFERENCE");
        values(got, &cc, nc);
        values(gpre, &pp, nc);
        char w2[200];
        snprintf(w2, sizeof w2, "%s %s", what, ref ? "reference (exact)" : "fast");
        char w3[220];
        snprintf(w3, sizeof w3, "%s pre_gelu", w2);
        mt_test_close_f32(w2, got, want, (size_t)nc, ref ? 0.0 : atol, ref ? 0.0 : rtol);
        if (c->pre)
            mt_test_close_f32(w2, gpre, wpre, (size_t)nc, ref ? 0.0 : atol, ref ? 0.0 : rtol);
        free(cc.t.data), free(cc.v), free(pp.t.data), free(pp.v);
    }
    mat *all[] = { &a, &b, &c0, &p0, &bias };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]->t.data), free(all[i]->v);
    free(want), free(wpre), free(got), free(gpre);
}

/* The same bits for 1, 2, 3, 5 and 8 threads; and not the reference's bits (fp32 accumulation). */
static void threads(int64_t M, int64_t N, int64_t K, int flags) {
    int ta = (flags & MT_GEMM_TRANS_A) != 0, tb = (flags & MT_GEMM_TRANS_B) != 0;
    mat a = make(MT_F32, 0, ta ? K : M, ta ? M : K, 0, 901);
    mat b = make(MT_F32, 0, tb ? N : K, tb ? K : N, 0, 902);
    mat bias = make(MT_F32, 0, 1, N, 0, 903);
    float *c1 = malloc((size_t)(M * N) * 4), *cn = malloc((size_t)(M * N) * 4);
    mt_tensor t1 = mt_tensor_2d(c1, MT_F32, M, N, MT_DEVICE_CPU), tn = t1;
    tn.data = cn;
    static const char *counts[] = { "1", "2", "3", "5", "8" };
    for (int i = 0; i < 5; i++) {
        setenv("MT_CPU_THREADS", counts[i], 1);
        MT_CHECK(mt_gemm(NULL, i ? &tn : &t1, NULL, &a.t, &b.t, &bias.t, flags, 1.0f, 0.0f, NULL));
        if (i)
            MT_EXPECT(memcmp(c1, cn, (size_t)(M * N) * 4) == 0,
                      "M%lld N%lld K%lld: %s threads give other bits than 1", (long long)M,
                      (long long)N, (long long)K, counts[i]);
    }
    unsetenv("MT_CPU_THREADS");
    setenv("MT_CPU_REFERENCE", "1", 1);
    MT_CHECK(mt_gemm(NULL, &tn, NULL, &a.t, &b.t, &bias.t, flags, 1.0f, 0.0f, NULL));
    unsetenv("MT_CPU_REFERENCE");
    MT_EXPECT(memcmp(c1, cn, (size_t)(M * N) * 4) != 0,
              "MT_CPU_REFERENCE=1 gave the fast path's bits (M%lld N%lld K%lld)", (long long)M,
              (long long)N, (long long)K);
    free(a.t.data), free(a.v), free(b.t.data), free(b.v), free(bias.t.data), free(bias.v);
    free(c1), free(cn);
}

int main(void) {
    const int TA = MT_GEMM_TRANS_A, TB = MT_GEMM_TRANS_B, GE = MT_GEMM_GELU;
    const mt_dtype F = MT_F32, H = MT_BF16;
    const gcase cases[] = {
        /* M   N   K    flags         batch sh bias pre alpha beta pad dt cdt */
        { 1, 1, 1, 0, 0, 0, 0, 0, 1.0f, 0.0f, 0, F, F },
        { 7, 5, 3, TA, 0, 0, 0, 0, 1.0f, 0.0f, 0, F, F },
        { 13, 17, 19, TB, 0, 0, 1, 0, 1.0f, 0.0f, 0, F, F },
        { 6, 16, 1, TA | TB, 0, 0, 0, 0, 1.0f, 0.0f, 0, F, F },
        { 37, 29, 67, TA | TB | GE, 0, 0, 1, 1, 0.7f, 0.3f, 3, F, F },
        { 11, 23, 9, TA, 3, 2, 0, 0, 1.0f, 1.0f, 0, F, F },
        { 5, 41, 33, TB | GE, 2, 1, 1, 0, 1.0f, 0.0f, 1, F, F },
        { 1, 100, 50, TB, 0, 0, 1, 0, 1.0f, 0.0f, 0, F, F },
        { 100, 1, 50, 0, 0, 0, 0, 0, -2.0f, 0.5f, 0, F, F },
        { 3, 4, 0, 0, 0, 0, 1, 0, 1.0f, 0.5f, 0, F, F },
        { 19, 35, 23, GE, 4, 0, 1, 1, 1.0f, 0.0f, 2, F, F },
        { 70, 300, 1000, TB, 0, 0, 1, 0, 1.0f, 0.0f, 0, F, F }, /* several mc and nc blocks */
        { 13, 29, 40, TB | GE, 0, 0, 1, 1, 1.0f, 0.0f, 0, H, H },
        { 9, 17, 33, TA, 0, 0, 0, 0, 1.0f, 1.0f, 0, H, F }, /* bf16 in, f32 main grads */
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof *cases); i++)
        run(&cases[i], i);
    threads(300, 200, 270, TB); /* splits M */
    threads(60, 1100, 250, TA); /* splits N */
    threads(30, 500, 1100, 0);  /* k blocks */
    return mt_test_result();
}
