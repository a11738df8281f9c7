/* mt-testkit: golden loading, tolerance comparison with a readable report, and skip helpers for
 * tests. Tests may die; so may this kit (it is never linked into a library). */
#ifndef MT_TESTKIT_H
#define MT_TESTKIT_H

#include <mt/core.h>
#include <mt/npy.h>

#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MT_TEST_SKIP 77 /* Meson/Automake "skipped"; 99 is a hard error */

/* Exits 77 with "SKIP: <why>" on stderr. */
MT_API void mt_test_skip(const char *why);
/* Exits 77 unless at least `n` CUDA devices are usable (CPU builds and driverless machines: 0). */
MT_API void mt_test_require_gpus(int n);
/* Exits 77 unless the process runs under an MPI launcher with at least `n` ranks. */
MT_API void mt_test_require_ranks(int n);

/* Path of golden file `name` under $MT_GOLDEN_DIR (or "golden" when unset). Static buffer. */
MT_API const char *mt_test_golden_path(const char *name);
/* Loads golden .npy `name` (any numeric dtype) as freshly malloc'd floats / doubles; dies with a
 * message when missing or malformed. *n (may be NULL) gets the element count; shape optional. */
MT_API float *mt_test_golden_f32(const char *name, size_t *n, mt_npy *shape_out);
MT_API double *mt_test_golden_f64(const char *name, size_t *n);

/* Compares got[i] with ref[i]: |got - ref| <= atol + rtol*|ref|. Prints max abs/rel error, NMSE and
 * the first mismatches; NaN or Inf in got (where ref is finite) always fails. Returns 1 if close.
 * Every call counts towards mt_test_result(). */
MT_API int mt_test_close_f32(const char *what, const float *got, const float *ref, size_t n,
                             double atol, double rtol);
MT_API int mt_test_close_f64(const char *what, const double *got, const double *ref, size_t n,
                             double atol, double rtol);
/* Exact comparison of integers. */
MT_API int mt_test_equal_i64(const char *what, const int64_t *got, const int64_t *ref, size_t n);

/* Records a boolean check with a message when false. Returns cond. */
MT_API int mt_test_expect(int cond, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
#define MT_EXPECT(cond, ...) mt_test_expect(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
/* Expects `expr` to return status `want`; prints mt_last_error() either way for the log. */
#define MT_EXPECT_STATUS(expr, want)                                                          \
    do {                                                                                      \
        mt_status mt_es_ = (expr);                                                            \
        mt_test_expect(mt_es_ == (want), __FILE__, __LINE__, "%s -> %s (want %s): %s", #expr, \
                       mt_status_str(mt_es_), mt_status_str(want), mt_last_error());          \
    } while (0)

/* 0 when every check passed, else 1; prints "N checks, M failed". Return it from main. */
MT_API int mt_test_result(void);

/* Fills x[0..n) with uniform values in [lo, hi) from Philox (seed, stream). */
MT_API void mt_test_fill_uniform(float *x, size_t n, uint64_t seed, uint64_t stream, float lo,
                                 float hi);

#ifdef __cplusplus
}
#endif

#endif /* MT_TESTKIT_H */
