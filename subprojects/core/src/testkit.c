/* The test kit: golden files, tolerance comparison, skip helpers. */
#include <mt/testkit.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_checks, n_failed;

void mt_test_skip(const char *why) {
    fprintf(stderr, "SKIP: %s\n", why);
    exit(MT_TEST_SKIP);
}

void mt_test_require_gpus(int n) {
    int have = 0;
    if (mt_device_count(&have) != MT_OK) have = 0;
    if (have < n) {
        char msg[128];
        snprintf(msg, sizeof msg, "needs %d GPU(s), found %d%s", n, have,
                 mt_have_cuda() ? "" : " (built without CUDA)");
        mt_test_skip(msg);
    }
}

void mt_test_require_ranks(int n) {
    const char *vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE", "SLURM_NTASKS" };
    int have = 1;
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *e = getenv(vars[i]);
        if (e) {
            have = atoi(e);
            break;
        }
    }
    if (have < n) {
        char msg[128];
        snprintf(msg, sizeof msg, "needs %d ranks from an MPI launcher, found %d", n, have);
        mt_test_skip(msg);
    }
}

const char *mt_test_golden_path(const char *name) {
    static char buf[4096];
    const char *dir = getenv("MT_GOLDEN_DIR");
    snprintf(buf, sizeof buf, "%s/%s", dir ? dir : "golden", name);
    return buf;
}

static void load_or_die(const char *name, mt_npy *a) {
    mt_status st = mt_npy_load(mt_test_golden_path(name), a);
    if (st != MT_OK) mt_die(__FILE__, __LINE__, "golden %s: %s", name, mt_last_error());
}

float *mt_test_golden_f32(const char *name, size_t *n, mt_npy *shape_out) {
    mt_npy a;
    load_or_die(name, &a);
    float *x = malloc((a.count ? a.count : 1) * sizeof *x);
    MT_ASSERT(x);
    for (size_t i = 0; i < a.count; i++)
        x[i] = (float)mt_npy_get(&a, i);
    if (n) *n = a.count;
    free(a.data);
    a.data = NULL;
    if (shape_out) *shape_out = a;
    return x;
}

double *mt_test_golden_f64(const char *name, size_t *n) {
    mt_npy a;
    load_or_die(name, &a);
    double *x = malloc((a.count ? a.count : 1) * sizeof *x);
    MT_ASSERT(x);
    for (size_t i = 0; i < a.count; i++)
        x[i] = mt_npy_get(&a, i);
    if (n) *n = a.count;
    mt_npy_free(&a);
    return x;
}

static int close_report(const char *what, size_t n, double atol, double rtol,
                        double (*got)(const void *, size_t), const void *g,
                        double (*ref)(const void *, size_t), const void *r) {
    double max_abs = 0, max_rel = 0, err2 = 0, ref2 = 0;
    size_t bad = 0;
    n_checks++;
    for (size_t i = 0; i < n; i++) {
        double x = got(g, i), y = ref(r, i);
        double d = fabs(x - y);
        int ok = d <= atol + rtol * fabs(y);
        if (isnan(y) && isnan(x)) ok = 1, d = 0; // both NaN: a NaN reference is expected
        if (!isfinite(x) && isfinite(y)) ok = 0; // never pass on NaN/Inf
        if (isinf(y) && x == y) ok = 1, d = 0;
        if (isfinite(d)) {
            if (d > max_abs) max_abs = d;
            if (fabs(y) > 0 && d / fabs(y) > max_rel) max_rel = d / fabs(y);
            err2 += d * d;
            ref2 += y * y;
        }
        if (!ok) {
            if (bad < 5)
                fprintf(stderr, "  %s[%zu]: got %.9g want %.9g (|d| %.3g)\n", what, i, x, y, d);
            bad++;
        }
    }
    double nmse = ref2 > 0 ? err2 / ref2 : err2;
    fprintf(stderr, "%s %s: n=%zu max_abs=%.3g max_rel=%.3g nmse=%.3g (atol %.1e rtol %.1e)%s\n",
            bad ? "FAIL" : "ok  ", what, n, max_abs, max_rel, nmse, atol, rtol, bad ? "" : "");
    if (bad) {
        fprintf(stderr, "  %zu of %zu elements out of tolerance\n", bad, n);
        n_failed++;
    }
    return bad == 0;
}

static double get_f32(const void *p, size_t i) {
    return ((const float *)p)[i];
}
static double get_f64(const void *p, size_t i) {
    return ((const double *)p)[i];
}

int mt_test_close_f32(const char *what, const float *got, const float *ref, size_t n, double atol,
                      double rtol) {
    return close_report(what, n, atol, rtol, get_f32, got, get_f32, ref);
}

int mt_test_close_f64(const char *what, const double *got, const double *ref, size_t n, double atol,
                      double rtol) {
    return close_report(what, n, atol, rtol, get_f64, got, get_f64, ref);
}

int mt_test_equal_i64(const char *what, const int64_t *got, const int64_t *ref, size_t n) {
    size_t bad = 0;
    n_checks++;
    for (size_t i = 0; i < n; i++) {
        if (got[i] != ref[i]) {
            if (bad < 5)
                fprintf(stderr, "  %s[%zu]: got %lld want %lld\n", what, i, (long long)got[i],
                        (long long)ref[i]);
            bad++;
        }
    }
    fprintf(stderr, "%s %s: n=%zu, %zu differ\n", bad ? "FAIL" : "ok  ", what, n, bad);
    if (bad) n_failed++;
    return bad == 0;
}

int mt_test_expect(int cond, const char *file, int line, const char *fmt, ...) {
    n_checks++;
    if (!cond) {
        const char *b = strrchr(file, '/');
        fprintf(stderr, "FAIL %s:%d: ", b ? b + 1 : file, line);
        va_list ap;
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        n_failed++;
    }
    return cond;
}

int mt_test_result(void) {
    fprintf(stderr, "%d checks, %d failed\n", n_checks, n_failed);
    if (n_checks == 0) {
        fprintf(stderr, "FAIL: a test that checks nothing\n");
        return 1;
    }
    return n_failed ? 1 : 0;
}

void mt_test_fill_uniform(float *x, size_t n, uint64_t seed, uint64_t stream, float lo, float hi) {
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * mt_philox_uniform(seed, stream, i);
}
