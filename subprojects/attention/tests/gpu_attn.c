/* gpu: CUDA attention forward/backward against the torch goldens and the CPU reference on fresh
 * random inputs (f32, bf16, f16; fast and deterministic backward; contiguous and fused-QKV
 * strides; tensor-core and generic paths; with document masks), whole tensors for small shapes
 * and sampled rows (fp64 on the CPU) for long sequences. Outputs are poisoned first: every
 * element must be written. */
#include <mt/attention.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int B, T, H, Hkv, D, causal;
    mt_dtype dt;
    int det, fused;
    float scale;
    int split; /* mt_attn_config.ds_split */
    int docs;  /* document masks: about this many EOD tokens a row (0: none) */
} shape;

/* The key starts of s's document masks (B,T), or NULL: a document ends at each position where
 * a draw falls below docs/T (Megatron's: the token after an EOD starts the next one). */
static int32_t *key_starts(const shape *s) {
    if (!s->docs) return NULL;
    int32_t *ks = malloc((size_t)s->B * s->T * 4);
    for (int b = 0; b < s->B; b++)
        for (int t = 0, start = 0; t < s->T; t++) {
            ks[b * s->T + t] = start;
            if (mt_philox_u32(31, (uint64_t)b, (uint64_t)t) % (uint32_t)s->T < (uint32_t)s->docs)
                start = t + 1;
        }
    return ks;
}
/* The first key query i of batch entry b sees. */
static int first_key(const int32_t *ks, const shape *s, int b, int i) {
    return ks ? ks[b * s->T + i] : 0;
}

/* The bf16 backward on sm_90a without ds_split rounds each dS once (|error| <= 2^-8 |dS|, round
 * to nearest), as flash-attention does, so dQ = dS K and dK = dS^T Q carry sum_j e_j dS_ij K_jd
 * beyond the other paths' error. Independent bounded terms (Hoeffding): the sum exceeds
 * c * 2^-8 * spread, spread = sqrt(sum_j (dS_ij K_jd)^2), with probability below 2 exp(-c^2/2);
 * c = 8 makes that 3e-14 per element. A missing or misplaced term is the size of the terms. */
#define DS_ROUND_BOUND (8.0 / 256.0)

static int rounds_ds(const shape *s) {
    return s->dt == MT_BF16 && !s->det && !s->split;
}

/* Every bf16/f16 tensor-core path (D 64, 128, 192) rounds P to the dtype for dV = P^T dO, as
 * flash-attention and cuDNN do: dV_jd carries sum_i e_i P_ij dO_id, |e_i| <= u (2^-8 bf16,
 * 2^-11 f16), bounded as dS's is with spread = sqrt(sum_i (P_ij dO_id)^2). It matters where many
 * rows give one key weight and dV cancels: causal key 0 of B2 T237 H4 KV2 D64 bf16 (draw 61-64)
 * had 0.0107 against the plain limit 0.0032, and P's rounding alone gives the same on the CPU. */
static double p_round_bound(const shape *s) {
    if (s->dt == MT_F32 || (s->D != 64 && s->D != 128 && s->D != 192)) return 0.0;
    return 8.0 * (s->dt == MT_BF16 ? 1.0 / 256.0 : 1.0 / 2048.0);
}

static uint64_t seed = 1;

/* Host f32 (values already representable in dt) -> device tensor of dtype dt. */
static void upload(mt_tensor *dev, const float *host) {
    size_t n = (size_t)mt_tensor_numel(dev), es = mt_dtype_size(dev->dtype);
    void *tmp = malloc(n * es);
    mt_tensor h32 = mt_tensor_1d((void *)host, MT_F32, (int64_t)n, MT_DEVICE_CPU);
    mt_tensor ht = mt_tensor_1d(tmp, dev->dtype, (int64_t)n, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&ht, &h32, NULL));
    MT_CHECK(mt_memcpy(dev->data, dev->device, tmp, MT_DEVICE_CPU, n * es, NULL));
    free(tmp);
}

/* Device (B,T,h,D) view (maybe strided, D innermost) -> contiguous host f32. */
static float *download(const mt_tensor *dev) {
    int64_t B = dev->shape[0], T = dev->shape[1], Hh = dev->shape[2], D = dev->shape[3];
    size_t es = mt_dtype_size(dev->dtype);
    size_t span = (size_t)((B - 1) * dev->stride[0] + (T - 1) * dev->stride[1] +
                           (Hh - 1) * dev->stride[2] + D);
    uint16_t *raw = malloc(span * es);
    float *out = malloc((size_t)(B * T * Hh * D) * 4);
    MT_CHECK(mt_memcpy(raw, MT_DEVICE_CPU, dev->data, dev->device, span * es, NULL));
    mt_tensor src = { raw, dev->dtype, 4, { B, T, Hh, D }, { 0 }, MT_DEVICE_CPU };
    for (int i = 0; i < 4; i++)
        src.stride[i] = dev->stride[i];
    size_t x = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < Hh; h++)
                for (int64_t d = 0; d < D; d++) {
                    int64_t off = b * src.stride[0] + t * src.stride[1] + h * src.stride[2] + d;
                    out[x++] = dev->dtype == MT_F32    ? ((float *)raw)[off]
                               : dev->dtype == MT_BF16 ? mt_bf16_to_f32(raw[off])
                                                       : mt_f16_to_f32(raw[off]);
                }
    free(raw);
    return out;
}

static void fill(float *x, size_t n, float lo, float hi, mt_dtype dt) {
    mt_test_fill_uniform(x, n, 20240601, seed++, lo, hi);
    for (size_t i = 0; i < n; i++) /* round to dt so CPU and GPU see the same inputs */
        x[i] = dt == MT_BF16  ? mt_bf16_to_f32(mt_f32_to_bf16(x[i]))
               : dt == MT_F16 ? mt_f16_to_f32(mt_f32_to_f16(x[i]))
                              : x[i];
}

static double rms(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return n ? sqrt(s / (double)n) : 0.0;
}

/* |got - ref| <= tol rms(ref) + tol |ref| (+ bound * spread per element, when given: a
 * rounding's bound, DS_ROUND_BOUND or p_round_bound) */
static void close_rel(const char *what, const shape *s, const float *got, const float *ref,
                      size_t n, const float *spread, double bound) {
    double tol = s->dt == MT_BF16 ? 2e-2 : s->dt == MT_F16 ? 5e-3 : 2e-4;
    char msg[200];
    snprintf(msg, sizeof msg, "%s B%d T%d H%d KV%d D%d %s %s det%d fused%d split%d", what, s->B,
             s->T, s->H, s->Hkv, s->D, s->causal ? "causal" : "full", mt_dtype_name(s->dt), s->det,
             s->fused, s->split);
    double atol = tol * rms(ref, n) + 1e-6;
    size_t bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) { /* the first offenders, by index (b, t, head, d) */
        double err = fabs((double)got[i] - ref[i]);
        double lim = atol + tol * fabs((double)ref[i]) + (spread ? bound * spread[i] : 0);
        if (!(err <= lim)) {
            if (bad < 5)
                fprintf(stderr, "  %s[%zu]: got %.7g want %.7g (limit %.3g, spread %.3g)\n", msg, i,
                        got[i], ref[i], lim, spread ? spread[i] : 0.0);
            bad++;
        }
        if (err / lim > worst) worst = err / lim;
    }
    if (!spread) {
        mt_test_close_f32(msg, got, ref, n, atol, tol);
        return;
    }
    MT_EXPECT(bad == 0, "%s: %zu of %zu beyond the rounding bound", msg, bad, n);
    fprintf(stderr, "%s %s: n=%zu, worst error %.2f of its limit (rounding bound)\n",
            bad ? "FAIL" : "ok  ", msg, n, worst);
}

/* spread (see DS_ROUND_BOUND, p_round_bound) of every dq, dk (dS's rounding) and dv (P's)
 * element, in fp64 from the inputs, lse and the GPU's out (for Di, as the backward uses it); dk's
 * and dv's sums run over the group's heads. */
static void round_spread(const shape *s, const int32_t *ks, const float *q, const float *k,
                         const float *v, const float *g, const float *o, const float *lse,
                         float *sq, float *sk, float *sv) {
    int B = s->B, T = s->T, H = s->H, Hkv = s->Hkv, D = s->D, G = H / Hkv;
    double sc = s->scale ? s->scale : 1.0 / sqrt((double)D);
    size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D;
    double *aq = calloc(nq, sizeof *aq), *ak = calloc(nk, sizeof *ak);
    double *av = calloc(nk, sizeof *av);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const float *qi = q + (((size_t)b * T + i) * H + h) * D;
                const float *gi = g + (((size_t)b * T + i) * H + h) * D;
                const float *oi = o + (((size_t)b * T + i) * H + h) * D;
                double Di = 0.0, L = lse[((size_t)b * H + h) * T + i];
                for (int d = 0; d < D; d++)
                    Di += (double)gi[d] * oi[d];
                double *ai = aq + (((size_t)b * T + i) * H + h) * D;
                for (int j = first_key(ks, s, b, i); j < (s->causal ? i + 1 : T); j++) {
                    const float *kj = k + (((size_t)b * T + j) * Hkv + h / G) * D;
                    const float *vj = v + (((size_t)b * T + j) * Hkv + h / G) * D;
                    double x = 0.0, dp = 0.0;
                    for (int d = 0; d < D; d++)
                        x += (double)qi[d] * kj[d], dp += (double)gi[d] * vj[d];
                    double pj = exp(x * sc - L), ds = pj * (dp - Di) * sc;
                    double *aj = ak + (((size_t)b * T + j) * Hkv + h / G) * D;
                    double *vj2 = av + (((size_t)b * T + j) * Hkv + h / G) * D;
                    for (int d = 0; d < D; d++) {
                        ai[d] += ds * kj[d] * ds * kj[d];
                        aj[d] += ds * qi[d] * ds * qi[d];
                        vj2[d] += pj * gi[d] * pj * gi[d];
                    }
                }
            }
    for (size_t e = 0; e < nq && sq; e++)
        sq[e] = (float)sqrt(aq[e]);
    for (size_t e = 0; e < nk; e++) {
        if (sk) sk[e] = (float)sqrt(ak[e]);
        if (sv) sv[e] = (float)sqrt(av[e]);
    }
    free(aq), free(ak), free(av);
}

/* fp64 reference of sampled rows: out/lse/dq for query rows and dk/dv for key rows, using the
 * GPU's lse and Di = dout.out (both checked on the sampled query rows first). */
static void sampled(const shape *s, const int32_t *ks, const float *q, const float *k,
                    const float *v, const float *g, const float *o, const float *lse,
                    const float *dq, const float *dk, const float *dv, int nsample) {
    int B = s->B, T = s->T, H = s->H, Hkv = s->Hkv, D = s->D, G = H / Hkv;
    double sc = s->scale ? s->scale : 1.0 / sqrt((double)D);
    float *got = malloc((size_t)nsample * 5 * D * 4), *ref = malloc((size_t)nsample * 5 * D * 4);
    float *spr = calloc((size_t)nsample * 5 * D, 4); /* dq's, dk's and dv's spread */
    double *a2 = malloc((size_t)2 * D * sizeof *a2);
    float *gl = malloc((size_t)nsample * 4), *rl = malloc((size_t)nsample * 4);
    double *p = malloc((size_t)T * sizeof *p), *acc = malloc((size_t)4 * D * sizeof *acc);
#define QI(b, t, h) ((((size_t)(b)*T + (t)) * H + (h)) * D)
#define KI(b, t, h) ((((size_t)(b)*T + (t)) * Hkv + (h)) * D)
    for (int n = 0; n < nsample; n++) {
        uint32_t r = mt_philox_u32(7, 7, (uint64_t)n);
        int b = (int)(r % B), h = (int)(r / B % H), i = n == 0 ? T - 1 : (int)(r / B / H % T);
        int hk = h / G, nk = s->causal ? i + 1 : T, j0 = first_key(ks, s, b, i);
        double m = -INFINITY, l = 0.0, Di = 0.0;
        for (int j = j0; j < nk; j++) {
            double x = 0.0;
            for (int d = 0; d < D; d++)
                x += (double)q[QI(b, i, h) + d] * k[KI(b, j, hk) + d];
            p[j] = x * sc;
            m = p[j] > m ? p[j] : m;
        }
        for (int d = 0; d < 2 * D; d++)
            acc[d] = 0.0;
        for (int d = 0; d < D; d++)
            a2[d] = 0.0;
        for (int j = j0; j < nk; j++)
            l += exp(p[j] - m);
        for (int d = 0; d < D; d++)
            Di += (double)g[QI(b, i, h) + d] * o[QI(b, i, h) + d];
        for (int j = j0; j < nk; j++) {
            double pj = exp(p[j] - m) / l, dp = 0.0;
            for (int d = 0; d < D; d++)
                dp += (double)g[QI(b, i, h) + d] * v[KI(b, j, hk) + d];
            for (int d = 0; d < D; d++) {
                double t = pj * (dp - Di) * sc * k[KI(b, j, hk) + d];
                acc[d] += pj * v[KI(b, j, hk) + d];
                acc[D + d] += t;
                a2[d] += t * t;
            }
        }
        rl[n] = (float)(m + log(l));
        gl[n] = lse[((size_t)b * H + h) * T + i];
        for (int d = 0; d < D; d++) {
            ref[(n * 5 + 0) * D + d] = (float)acc[d], got[(n * 5 + 0) * D + d] = o[QI(b, i, h) + d];
            ref[(n * 5 + 1) * D + d] = (float)acc[D + d];
            got[(n * 5 + 1) * D + d] = dq[QI(b, i, h) + d];
            spr[(n * 5 + 1) * D + d] = (float)sqrt(a2[d]);
        }
        /* key row j = i of kv head hk: sum over the group's heads and the queries that see it */
        int j = i;
        for (int d = 0; d < 2 * D; d++)
            acc[d] = 0.0;
        for (int d = 0; d < 2 * D; d++)
            a2[d] = 0.0;
        for (int hq = hk * G; hq < (hk + 1) * G; hq++)
            for (int t = s->causal ? j : 0; t < T; t++) {
                if (first_key(ks, s, b, t) > j) continue; /* (document masks) */
                double x = 0.0, dp = 0.0, Dt = 0.0;
                for (int d = 0; d < D; d++) {
                    x += (double)q[QI(b, t, hq) + d] * k[KI(b, j, hk) + d];
                    dp += (double)g[QI(b, t, hq) + d] * v[KI(b, j, hk) + d];
                    Dt += (double)g[QI(b, t, hq) + d] * o[QI(b, t, hq) + d];
                }
                double pt = exp(x * sc - lse[((size_t)b * H + hq) * T + t]);
                for (int d = 0; d < D; d++) {
                    double u = pt * (dp - Dt) * sc * q[QI(b, t, hq) + d];
                    acc[d] += u;
                    acc[D + d] += pt * g[QI(b, t, hq) + d];
                    a2[d] += u * u;
                    a2[D + d] += pt * g[QI(b, t, hq) + d] * pt * g[QI(b, t, hq) + d];
                }
            }
        for (int d = 0; d < D; d++) {
            ref[(n * 5 + 2) * D + d] = (float)acc[d],
                                  got[(n * 5 + 2) * D + d] = dk[KI(b, j, hk) + d];
            spr[(n * 5 + 2) * D + d] = (float)sqrt(a2[d]);
            ref[(n * 5 + 3) * D + d] = (float)acc[D + d];
            got[(n * 5 + 3) * D + d] = dv[KI(b, j, hk) + d];
            spr[(n * 5 + 3) * D + d] = (float)sqrt(a2[D + d]);
            ref[(n * 5 + 4) * D + d] = got[(n * 5 + 4) * D + d] = 0.0f;
        }
    }
    static const char *names[4] = { "sampled out", "sampled dq", "sampled dk", "sampled dv" };
    for (int w = 0; w < 4; w++) {
        float *gw = malloc((size_t)nsample * D * 4), *rw = malloc((size_t)nsample * D * 4);
        float *sw = malloc((size_t)nsample * D * 4);
        for (int n = 0; n < nsample; n++) {
            memcpy(gw + n * D, got + (n * 5 + w) * D, (size_t)D * 4);
            memcpy(rw + n * D, ref + (n * 5 + w) * D, (size_t)D * 4);
            memcpy(sw + n * D, spr + (n * 5 + w) * D, (size_t)D * 4);
        }
        const int ds_w = rounds_ds(s) && (w == 1 || w == 2), p_w = w == 3 && p_round_bound(s) > 0;
        close_rel(names[w], s, gw, rw, (size_t)nsample * D, ds_w || p_w ? sw : NULL,
                  ds_w ? DS_ROUND_BOUND : p_round_bound(s));
        free(gw), free(rw), free(sw);
    }
    char msg[64];
    snprintf(msg, sizeof msg, "sampled lse T%d", T);
    mt_test_close_f32(msg, gl, rl, (size_t)nsample, 2e-3, 2e-3);
    free(got), free(ref), free(gl), free(rl), free(p), free(acc), free(spr), free(a2);
#undef QI
#undef KI
}

/* mt_attn_bwd_bias's sums against the column sums (fp64) of the same call's dq, dk, dv: |error|
 * within tol times the column's sum of magnitudes (dv's with dout's of its query heads, since
 * the fused path sums dout; dk's sums are zero there, its column sums rounding noise). */
static void check_sums(const shape *s, const char *what, const float *got, const float *x,
                       const float *g, int heads, double factor) {
    const int64_t rows = (int64_t)s->B * s->T, D = s->D, group = s->H / s->Hkv;
    const double tol = s->dt == MT_F32 ? 1e-5 : 1e-2;
    int bad = 0;
    double worst = 0.0;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t d = 0; d < D; d++) {
            double want = 0.0, mag = 0.0;
            for (int64_t r = 0; r < rows; r++) {
                const double e = x[(r * heads + h) * D + d];
                want += e, mag += fabs(e);
                for (int64_t f = 0; g && f < group; f++)
                    mag += fabs(g[(r * s->H + h * group + f) * D + d]);
            }
            const double err = fabs(got[h * D + d] - factor * want);
            /* (plus 1e-6 per row: with one key a gradient of zero comes as rounding noise) */
            if (!(err <= tol * factor * mag + 1e-6 * (double)rows)) bad++;
            if (mag > 0 && err / mag > worst) worst = err / mag;
        }
    MT_EXPECT(bad == 0,
              "bias sums %s (B%d T%d H%d/%d D%d %s det %d): %d of %d columns off, worst %.3g", what,
              s->B, s->T, s->H, s->Hkv, s->D, mt_dtype_name(s->dt), s->det, bad, (int)(heads * D),
              worst);
}

/* Runs one shape on the GPU; compares with ref_* when given, else with the CPU reference
 * (T <= 700) or sampled rows. */
static void run(const shape *s, const float *q, const float *k, const float *v, const float *g,
                const float *ref_o, const float *ref_l, const float *ref_dq, const float *ref_dk,
                const float *ref_dv) {
    int64_t B = s->B, T = s->T, H = s->H, Hkv = s->Hkv, D = s->D;
    size_t nq = (size_t)(B * T * H * D), nk = (size_t)(B * T * Hkv * D), es = mt_dtype_size(s->dt);
    mt_attn_config cfg = MT_ATTN_CONFIG_INIT;
    cfg.causal = s->causal, cfg.deterministic = s->det, cfg.scale = s->scale;
    cfg.ds_split = s->split;
    mt_arena *ar;
    MT_CHECK(mt_arena_create(mt_device_cuda(0),
                             (4 * nq + 4 * nk) * es + 8 * (nq + nk) + (1 << 22) +
                                 3 * (size_t)(H + Hkv) * D * 4 + (size_t)(B * T) * 4 + 1024,
                             &ar));
    int32_t *ks = key_starts(s);
    mt_tensor tks, hks = mt_tensor_2d(ks, MT_I32, B, T, MT_DEVICE_CPU);
    if (ks) {
        MT_CHECK(mt_tensor_alloc(ar, MT_I32, 2, (int64_t[]){ B, T }, &tks));
        MT_CHECK(mt_memcpy(tks.data, tks.device, ks, MT_DEVICE_CPU, (size_t)(B * T) * 4, NULL));
        cfg.key_start = &tks;
    }
    mt_tensor tq, tk, tv, to, tg, tdq, tdk, tdv, tl;
    int64_t shq[4] = { B, T, H, D }, shk[4] = { B, T, Hkv, D }, shl[3] = { B, H, T };
    if (s->fused) { /* q, k, v (and dq, dk, dv) are slices of one (B,T,H+2Hkv,D) buffer */
        int64_t shf[4] = { B, T, H + 2 * Hkv, D };
        mt_tensor f, fg;
        MT_CHECK(mt_tensor_alloc(ar, s->dt, 4, shf, &f));
        MT_CHECK(mt_tensor_alloc(ar, s->dt, 4, shf, &fg));
        MT_CHECK(mt_tensor_slice(&f, 2, 0, H, &tq));
        MT_CHECK(mt_tensor_slice(&f, 2, H, Hkv, &tk));
        MT_CHECK(mt_tensor_slice(&f, 2, H + Hkv, Hkv, &tv));
        MT_CHECK(mt_tensor_slice(&fg, 2, 0, H, &tdq));
        MT_CHECK(mt_tensor_slice(&fg, 2, H, Hkv, &tdk));
        MT_CHECK(mt_tensor_slice(&fg, 2, H + Hkv, Hkv, &tdv));
        float *hf = malloc((size_t)mt_tensor_numel(&f) * 4);
        for (int64_t bt = 0; bt < B * T; bt++) {
            int64_t W = H + 2 * Hkv;
            memcpy(hf + bt * W * D, q + bt * H * D, (size_t)(H * D) * 4);
            memcpy(hf + (bt * W + H) * D, k + bt * Hkv * D, (size_t)(Hkv * D) * 4);
            memcpy(hf + (bt * W + H + Hkv) * D, v + bt * Hkv * D, (size_t)(Hkv * D) * 4);
        }
        upload(&f, hf);
        free(hf);
        MT_CHECK(mt_memset_zero(fg.data, fg.device, mt_tensor_nbytes(&fg), NULL));
    } else {
        MT_CHECK(mt_tensor_alloc(ar, s->dt, 4, shq, &tq));
        MT_CHECK(mt_tensor_alloc(ar, s->dt, 4, shk, &tk));
        MT_CHECK(mt_tensor_alloc(ar, s->dt, 4, shk, &tv));
        MT_CHECK(mt_tensor_alloc(ar, s->dt, 4, shq, &tdq));
        MT_CHECK(mt_tensor_alloc(ar, s->dt, 4, shk, &tdk));
        MT_CHECK(mt_tensor_alloc(ar, s->dt, 4, shk, &tdv));
        upload(&tq, q), upload(&tk, k), upload(&tv, v);
    }
    MT_CHECK(mt_tensor_alloc(ar, s->dt, 4, shq, &to));
    MT_CHECK(mt_tensor_alloc(ar, s->dt, 4, shq, &tg));
    MT_CHECK(mt_tensor_alloc(ar, MT_F32, 3, shl, &tl));
    upload(&tg, g);
    size_t wsb;
    void *ws = NULL;
    MT_CHECK(mt_attn_bwd_workspace(&tq, &tk, &cfg, &wsb));
    if (wsb) MT_CHECK(mt_arena_alloc(ar, wsb, &ws));
    /* poison: NaN bytes everywhere an output goes (dq/dk/dv of fused: their own slices only) */
    mt_tensor outs[5] = { to, tl, tdq, tdk, tdv };
    for (int i = 0; i < 5; i++) {
        if (s->fused && i >= 2) continue;
        size_t nb = mt_tensor_nbytes(&outs[i]);
        void *ff = malloc(nb);
        memset(ff, 0xff, nb);
        MT_CHECK(mt_memcpy(outs[i].data, outs[i].device, ff, MT_DEVICE_CPU, nb, NULL));
        free(ff);
    }
    /* the bias sums (mt_attn_bwd_bias), NaN first: they must be written */
    mt_tensor tb[3];
    float *hb[3], *hb2[3];
    for (int i = 0; i < 3; i++) {
        const int64_t n = (i == 0 ? H : Hkv) * D;
        MT_CHECK(mt_tensor_alloc(ar, MT_F32, 1, &n, &tb[i]));
        hb[i] = malloc((size_t)n * 4), hb2[i] = malloc((size_t)n * 4);
        memset(hb[i], 0xff, (size_t)n * 4);
        MT_CHECK(mt_memcpy(tb[i].data, tb[i].device, hb[i], MT_DEVICE_CPU, (size_t)n * 4, NULL));
    }
    MT_CHECK(mt_attn_fwd(&to, &tl, &tq, &tk, &tv, &cfg, NULL));
    MT_CHECK(mt_attn_bwd_bias(&tdq, &tdk, &tdv, &tb[0], &tb[1], &tb[2], 0, &tg, &tq, &tk, &tv, &to,
                              &tl, &cfg, ws, wsb, NULL));
    MT_CHECK(mt_stream_sync(NULL));
    float *o = download(&to), *dq = download(&tdq), *dk = download(&tdk), *dv = download(&tdv);
    for (int i = 0; i < 3; i++)
        MT_CHECK(mt_memcpy(hb[i], MT_DEVICE_CPU, tb[i].data, tb[i].device, mt_tensor_nbytes(&tb[i]),
                           NULL));
    check_sums(s, "dq", hb[0], dq, NULL, (int)H, 1.0);
    check_sums(s, "dk", hb[1], dk, NULL, (int)Hkv, 1.0);
    check_sums(s, "dv", hb[2], dv, g, (int)Hkv, 1.0);
    /* accumulate: a second call adds the same sums again */
    MT_CHECK(mt_attn_bwd_bias(&tdq, &tdk, &tdv, &tb[0], &tb[1], &tb[2], 1, &tg, &tq, &tk, &tv, &to,
                              &tl, &cfg, ws, wsb, NULL));
    for (int i = 0; i < 3; i++)
        MT_CHECK(mt_memcpy(hb2[i], MT_DEVICE_CPU, tb[i].data, tb[i].device,
                           mt_tensor_nbytes(&tb[i]), NULL));
    check_sums(s, "dq accumulated", hb2[0], dq, NULL, (int)H, 2.0);
    check_sums(s, "dk accumulated", hb2[1], dk, NULL, (int)Hkv, 2.0);
    check_sums(s, "dv accumulated", hb2[2], dv, g, (int)Hkv, 2.0);
    for (int i = 0; i < 3; i++)
        free(hb[i]), free(hb2[i]);
    if (!s->det && !s->fused) { /* the backward without bias sums writes every dq too */
        size_t nb = mt_tensor_nbytes(&tdq);
        void *ff = malloc(nb);
        memset(ff, 0xff, nb);
        MT_CHECK(mt_memcpy(tdq.data, tdq.device, ff, MT_DEVICE_CPU, nb, NULL));
        free(ff);
        MT_CHECK(mt_attn_bwd(&tdq, &tdk, &tdv, &tg, &tq, &tk, &tv, &to, &tl, &cfg, ws, wsb, NULL));
        float *dq3 = download(&tdq);
        close_rel("dq without bias sums", s, dq3, dq, nq, NULL, 0.0);
        free(dq3);
    }
    float *l = malloc((size_t)(B * H * T) * 4);
    MT_CHECK(mt_memcpy(l, MT_DEVICE_CPU, tl.data, tl.device, (size_t)(B * H * T) * 4, NULL));
    if (s->det) { /* deterministic: a second run gives the same bits */
        MT_CHECK(mt_attn_bwd(&tdq, &tdk, &tdv, &tg, &tq, &tk, &tv, &to, &tl, &cfg, ws, wsb, NULL));
        float *dq2 = download(&tdq), *dk2 = download(&tdk);
        MT_EXPECT(!memcmp(dq, dq2, nq * 4) && !memcmp(dk, dk2, nk * 4),
                  "deterministic backward differs between runs (T=%d)", s->T);
        free(dq2), free(dk2);
    }
    float *cpu[5] = { 0 };
    if (!ref_o && T <= 700) { /* CPU reference on the same (rounded) inputs, f32 out */
        for (int i = 0; i < 5; i++)
            cpu[i] = malloc((i == 1 ? (size_t)(B * H * T) : nq) * 4);
        mt_tensor cq = mt_tensor_4d((void *)q, MT_F32, B, T, H, D, MT_DEVICE_CPU);
        mt_tensor ck = mt_tensor_4d((void *)k, MT_F32, B, T, Hkv, D, MT_DEVICE_CPU);
        mt_tensor cv = mt_tensor_4d((void *)v, MT_F32, B, T, Hkv, D, MT_DEVICE_CPU);
        mt_tensor cg = mt_tensor_4d((void *)g, MT_F32, B, T, H, D, MT_DEVICE_CPU);
        mt_tensor co = mt_tensor_4d(cpu[0], MT_F32, B, T, H, D, MT_DEVICE_CPU);
        mt_tensor cl = mt_tensor_3d(cpu[1], MT_F32, B, H, T, MT_DEVICE_CPU);
        mt_tensor cdq = mt_tensor_4d(cpu[2], MT_F32, B, T, H, D, MT_DEVICE_CPU);
        mt_tensor cdk = mt_tensor_4d(cpu[3], MT_F32, B, T, Hkv, D, MT_DEVICE_CPU);
        mt_tensor cdv = mt_tensor_4d(cpu[4], MT_F32, B, T, Hkv, D, MT_DEVICE_CPU);
        mt_attn_config ccfg = cfg; /* (the key starts on the host) */
        ccfg.key_start = ks ? &hks : NULL;
        MT_CHECK(mt_attn_fwd(&co, &cl, &cq, &ck, &cv, &ccfg, NULL));
        /* why: the GPU's rounded out feeds Di, as in its backward */
        mt_tensor go = mt_tensor_4d(o, MT_F32, B, T, H, D, MT_DEVICE_CPU);
        MT_CHECK(mt_attn_bwd(&cdq, &cdk, &cdv, &cg, &cq, &ck, &cv, &go, &cl, &ccfg, NULL, 0, NULL));
        ref_o = cpu[0], ref_l = cpu[1], ref_dq = cpu[2], ref_dk = cpu[3], ref_dv = cpu[4];
    }
    if (ref_o) {
        close_rel("out", s, o, ref_o, nq, NULL, 0.0);
        char msg[64];
        snprintf(msg, sizeof msg, "lse T%d %s", s->T, mt_dtype_name(s->dt));
        mt_test_close_f32(msg, l, ref_l, (size_t)(B * H * T), 2e-3, 2e-3);
        float *sq = NULL, *sk = NULL, *sv = NULL;
        if (rounds_ds(s)) sq = malloc(nq * 4), sk = malloc(nk * 4);
        if (p_round_bound(s) > 0) sv = malloc(nk * 4);
        if (sq || sv) round_spread(s, ks, q, k, v, g, o, ref_l, sq, sk, sv);
        close_rel("dq", s, dq, ref_dq, nq, sq, DS_ROUND_BOUND);
        close_rel("dk", s, dk, ref_dk, nk, sk, DS_ROUND_BOUND);
        close_rel("dv", s, dv, ref_dv, nk, sv, p_round_bound(s));
        free(sq), free(sk), free(sv);
    } else {
        sampled(s, ks, q, k, v, g, o, l, dq, dk, dv, 6);
    }
    for (int i = 0; i < 5; i++)
        free(cpu[i]);
    free(o), free(dq), free(dk), free(dv), free(l), free(ks);
    mt_arena_destroy(ar);
}

static void random_inputs(const shape *s) {
    size_t nq = (size_t)s->B * s->T * s->H * s->D, nk = (size_t)s->B * s->T * s->Hkv * s->D;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *g = malloc(nq * 4);
    fill(q, nq, -1.5f, 1.5f, s->dt), fill(k, nk, -1.5f, 1.5f, s->dt);
    fill(v, nk, -1.0f, 1.0f, s->dt), fill(g, nq, -1.0f, 1.0f, s->dt);
    run(s, q, k, v, g, NULL, NULL, NULL, NULL, NULL);
    free(q), free(k), free(v), free(g);
}

static void golden(const char *name, int causal, float scale, mt_dtype dt, int det) {
    char f[9][128];
    const char *keys[9] = { "q", "k", "v", "dout", "out", "lse", "dq", "dk", "dv" };
    float *x[9];
    mt_npy qs, ks;
    for (int i = 0; i < 9; i++) {
        snprintf(f[i], sizeof f[i], "attn_%s_%s.npy", name, keys[i]);
        x[i] = mt_test_golden_f32(f[i], NULL, i == 0 ? &qs : i == 1 ? &ks : NULL);
    }
    shape s = { (int)qs.shape[0],
                (int)qs.shape[1],
                (int)qs.shape[2],
                (int)ks.shape[2],
                (int)qs.shape[3],
                causal,
                dt,
                det,
                0,
                scale,
                0,
                0 };
    if (dt == MT_F32)
        run(&s, x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8]);
    else /* golden inputs are f32: compare with the CPU reference on their rounded values */
        for (int i = 0; i < 4; i++) {
            size_t n = (size_t)s.B * s.T * (i == 1 || i == 2 ? s.Hkv : s.H) * s.D;
            for (size_t e = 0; e < n; e++)
                x[i][e] = dt == MT_BF16 ? mt_bf16_to_f32(mt_f32_to_bf16(x[i][e]))
                                        : mt_f16_to_f32(mt_f32_to_f16(x[i][e]));
        }
    if (dt != MT_F32) run(&s, x[0], x[1], x[2], x[3], NULL, NULL, NULL, NULL, NULL);
    for (int i = 0; i < 9; i++)
        free(x[i]);
}

int main(void) {
    mt_test_require_gpus(1);
    static const struct {
        const char *name;
        int causal;
        float scale;
    } gold[] = { { "mha_t16_d64_causal", 1, 0 },   { "mqa_t1_d64", 0, 0 },
                 { "gqa4_t70_d40_causal", 1, 0 },  { "gqa8_t33_d96", 0, 0 },
                 { "gqa2_t67_d64_s0.3", 0, 0.3f }, { "gqa2_t67_d64_causal", 1, 0 } };
    for (size_t i = 0; i < sizeof gold / sizeof gold[0]; i++) {
        golden(gold[i].name, gold[i].causal, gold[i].scale, MT_F32, 1);
        golden(gold[i].name, gold[i].causal, gold[i].scale, MT_BF16, 0);
        golden(gold[i].name, gold[i].causal, gold[i].scale, MT_F16, 1);
    }
    static const shape fixed[] = {
        /* B  T    H  KV D   causal dtype  det fused scale split */
        { 2, 128, 4, 4, 64, 1, MT_BF16, 0, 0, 0, 0, 0 },
        { 1, 200, 8, 2, 128, 1, MT_BF16, 1, 0, 0, 0, 0 },
        { 2, 77, 4, 1, 64, 0, MT_F16, 0, 0, 0, 0, 0 },
        { 1, 1, 2, 2, 128, 0, MT_BF16, 0, 0, 0, 0, 0 },
        { 1, 333, 4, 4, 128, 0, MT_F16, 1, 1, 0, 0, 0 },
        { 3, 65, 6, 3, 64, 1, MT_BF16, 0, 1, 0, 0, 0 },
        { 1, 100, 8, 1, 128, 1, MT_BF16, 0, 0, 0, 0, 0 },
        { 1, 129, 2, 2, 96, 1, MT_BF16, 0, 0, 0, 0, 0 },
        { 1, 50, 2, 1, 256, 0, MT_F16, 0, 0, 0, 0, 0 },
        { 1, 64, 2, 2, 40, 1, MT_F32, 0, 0, 0, 0, 0 },
        { 1, 191, 4, 2, 64, 1, MT_F16, 1, 0, 0.2f, 0, 0 },
        { 1, 257, 2, 2, 128, 0, MT_BF16, 0, 1, 0, 0, 0 },
        /* D64 with T % 4 == 0 and a partial last tile (the wgmma backward's bulk lse, Di) */
        { 2, 100, 4, 2, 64, 1, MT_BF16, 0, 0, 0, 0, 0 },
        { 1, 300, 4, 4, 64, 0, MT_BF16, 0, 0, 0, 0, 0 },
        /* causal rows with few keys: |dS| ~ 1 and dQ cancels (bf16 dS alone failed the plain
         * tolerance here); with ds_split (hi + lo) the plain tolerance holds */
        { 1, 283, 16, 2, 64, 1, MT_BF16, 1, 1, 0, 0, 0 },
        { 2, 237, 4, 2, 64, 1, MT_BF16, 0, 1, 0, 0, 0 },
        { 2, 237, 4, 2, 64, 1, MT_BF16, 0, 1, 0, 1, 0 },
        { 1, 200, 8, 2, 128, 1, MT_BF16, 0, 0, 0, 1, 0 },
        { 1, 2500, 4, 1, 128, 1, MT_BF16, 0, 0, 0, 1, 0 },
        /* causal D64 with whole 64-row tiles: 1, 2 and 4 pairs of key tiles a head */
        { 2, 512, 4, 4, 64, 1, MT_BF16, 0, 0, 0, 0, 0 },
        { 1, 256, 2, 2, 64, 1, MT_F16, 0, 0, 0, 0, 0 },
        { 3, 128, 2, 2, 64, 1, MT_BF16, 0, 0, 0, 1, 0 },
        /* GPT-2 124M's and 1.5B's attention at B16 and B8 (q, k, v slices of one buffer, as the
         * model's): many heads and tiles per block of the wgmma grids */
        { 16, 1024, 12, 12, 64, 1, MT_BF16, 0, 1, 0, 0, 0 },
        { 8, 1024, 25, 25, 64, 1, MT_BF16, 0, 1, 0, 0, 0 },
        /* long sequences: sampled rows */
        { 1, 4096, 2, 1, 128, 1, MT_BF16, 0, 0, 0, 0, 0 },
        { 1, 2048, 4, 2, 64, 0, MT_F16, 1, 0, 0, 0, 0 },
        { 2, 1500, 2, 2, 128, 0, MT_BF16, 1, 1, 0, 0, 0 },
        { 1, 3001, 8, 1, 64, 1, MT_BF16, 0, 0, 0, 0, 0 },
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        random_inputs(&fixed[i]);
    for (int i = 0; i < 12; i++) { /* random shapes */
        uint32_t r0 = mt_philox_u32(99, 1, (uint64_t)i), r1 = mt_philox_u32(99, 2, (uint64_t)i);
        static const int ratios[4] = { 1, 2, 4, 8 };
        int Hkv = 1 + (int)(r0 % 2), H = Hkv * ratios[(r0 >> 4) % 4];
        shape s = { 1 + (int)(r1 % 2),
                    1 + (int)((r1 >> 8) % 400),
                    H,
                    Hkv,
                    (r0 >> 8) & 1 ? 128 : 64,
                    (int)((r0 >> 9) & 1),
                    (r0 >> 10) & 1 ? MT_F16 : MT_BF16,
                    (int)((r0 >> 11) & 1),
                    (int)((r0 >> 12) & 1),
                    0,
                    (int)((r0 >> 13) & 1),
                    0 };
        random_inputs(&s);
    }
    /* appended after the random shapes, so that every earlier draw keeps its seeds */
    static const shape later[] = {
        /* the D128 forward's 128-row blocks on sm_90a: causal pairs over an odd tile count (0 and
         * 2, then 1 alone), a last tile of 44 rows */
        { 2, 300, 4, 2, 128, 1, MT_F16, 0, 1, 0, 0, 0 },
        /* the non-causal D128 forward's 176-key tiles (boxes of 88 rows): GQA, a last tile of
         * 172 keys, Q by TMA (6 query tiles of 128 rows, the last of 60) */
        { 2, 700, 8, 2, 128, 0, MT_BF16, 0, 1, 0, 0, 0 },
        /* document masks (--reset-attention-mask): GPT-2 124M's shape (sampled rows, the wgmma
         * kernels' skipped key tiles and shortened walks), whole tensors on the CPU at D64 and
         * D128 (sm_90a: the two-warpgroup forward and backward), deterministic (the mma.sync dK,
         * dV and dQ kernels), f32 (generic), many one- and two-token documents with ds_split */
        { 16, 1024, 12, 12, 64, 1, MT_BF16, 0, 1, 0, 0, 8 },
        { 2, 600, 4, 2, 64, 1, MT_BF16, 0, 0, 0, 0, 6 },
        { 1, 500, 8, 2, 128, 1, MT_BF16, 0, 1, 0, 0, 5 },
        { 2, 300, 4, 4, 64, 1, MT_F16, 1, 0, 0, 0, 10 },
        { 1, 333, 4, 2, 128, 1, MT_BF16, 1, 0, 0, 0, 3 },
        { 1, 200, 2, 1, 40, 1, MT_F32, 0, 0, 0, 0, 4 },
        { 2, 256, 4, 2, 64, 1, MT_BF16, 0, 0, 0, 1, 90 },
        /* D 192 (multi-latent attention's 128 + 64) on the mma.sync kernels: causal and not,
         * deterministic and not, a partial last tile, fused-QKV strides, document masks, long */
        { 2, 200, 4, 4, 192, 1, MT_BF16, 0, 1, 0, 0, 0 },
        { 1, 129, 2, 2, 192, 0, MT_F16, 1, 0, 0, 0, 0 },
        { 1, 300, 4, 4, 192, 1, MT_BF16, 1, 0, 0, 0, 4 },
        { 1, 2048, 2, 2, 192, 1, MT_BF16, 0, 1, 0, 0, 0 },
    };
    for (size_t i = 0; i < sizeof later / sizeof later[0]; i++)
        random_inputs(&later[i]);
    return mt_test_result();
}
