/* unit: status names, the error record, TRY/GOTO propagation, arenas, logging, the profiler and
 * environment switches. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <mt/testkit.h>

#include <stdlib.h>
#include <string.h>

static mt_status fails_with_format(void) {
    return MT_ERROR(MT_ERR_FORMAT, "field %s is %d", "magic", 7);
}

static mt_status propagates(int *reached) {
    MT_TRY(fails_with_format());
    *reached = 1;
    return MT_OK;
}

static mt_status cleans_up(int *cleaned) {
    mt_status st = MT_OK;
    MT_TRY_GOTO(fails_with_format(), st, fail);
    return MT_OK;
fail:
    *cleaned = 1;
    return st;
}

int main(void) {
    MT_EXPECT(strcmp(mt_status_str(MT_OK), "MT_OK") == 0, "MT_OK name");
    MT_EXPECT(strcmp(mt_status_str(MT_ERR_TIMEOUT), "MT_ERR_TIMEOUT") == 0, "timeout name");
    MT_EXPECT(strcmp(mt_status_str((mt_status)999), "MT_ERR_UNKNOWN") == 0, "unknown name");

    mt_error_clear();
    MT_EXPECT(mt_last_error()[0] == '\0', "cleared error is empty");
    int reached = 0, cleaned = 0;
    MT_EXPECT(propagates(&reached) == MT_ERR_FORMAT && !reached, "MT_TRY returns early");
    const char *e = mt_last_error();
    MT_EXPECT(strstr(e, "test_core.c:") == e, "error starts with file:line: %s", e);
    MT_EXPECT(strstr(e, "MT_ERR_FORMAT: field magic is 7") != NULL, "error detail: %s", e);
    MT_EXPECT(cleans_up(&cleaned) == MT_ERR_FORMAT && cleaned, "MT_TRY_GOTO reaches cleanup");

    /* arenas: alignment, capacity, reset, OOM message */
    mt_arena *a = NULL;
    MT_CHECK(mt_arena_create(MT_DEVICE_CPU, 1000, &a));
    void *p1, *p2, *p3;
    MT_CHECK(mt_arena_alloc(a, 10, &p1));
    MT_CHECK(mt_arena_alloc(a, 100, &p2));
    MT_EXPECT((uintptr_t)p1 % MT_ARENA_ALIGN == 0 && (uintptr_t)p2 % MT_ARENA_ALIGN == 0,
              "arena allocations are aligned");
    MT_EXPECT((char *)p2 - (char *)p1 == MT_ARENA_ALIGN, "second allocation follows the first");
    MT_EXPECT(mt_arena_used(a) == MT_ARENA_ALIGN + 100, "used %zu", mt_arena_used(a));
    MT_EXPECT_STATUS(mt_arena_alloc(a, 900, &p3), MT_ERR_OOM);
    MT_EXPECT(strstr(mt_last_error(), "asked 900 bytes") != NULL, "OOM names the size");
    mt_arena_reset(a);
    MT_CHECK(mt_arena_alloc(a, 1000, &p3));
    MT_EXPECT(p3 == p1, "reset reuses the memory");
    mt_arena_destroy(a);
    mt_arena_destroy(NULL);

    /* devices: a CPU build or a machine without a GPU has 0 devices and no crash */
    int n = -1;
    MT_CHECK(mt_device_count(&n));
    MT_EXPECT(n >= 0, "device count %d", n);
    if (!mt_have_cuda()) {
        void *d;
        MT_EXPECT_STATUS(mt_device_malloc(&d, 16), MT_ERR_UNSUPPORTED);
        MT_EXPECT_STATUS(mt_arena_create(mt_device_cuda(0), 16, &a), MT_ERR_UNSUPPORTED);
    }
    char buf[4] = "abc", dst[4];
    MT_CHECK(mt_memcpy(dst, MT_DEVICE_CPU, buf, MT_DEVICE_CPU, 4, NULL));
    MT_EXPECT(strcmp(dst, "abc") == 0, "host memcpy");

    mt_log_set_rank(3);
    MT_LOG_INFO("log line with rank prefix %d", 42);
    mt_log_set_rank(-1);
    MT_EXPECT(mt_time_now() > 0, "monotonic clock");

    /* the wall-clock profiler: totals per name survive a collect forced by a small capacity */
    mt_prof *pr = NULL;
    MT_CHECK(mt_prof_create(&pr, 0, 2));
    for (int i = 0; i < 5; i++) {
        MT_CHECK(mt_prof_begin(pr, i % 2 ? "odd" : "even", NULL));
        double t0 = mt_time_now();
        while (mt_time_now() - t0 < (i % 2 ? 2e-3 : 1e-4)) {
        }
        MT_CHECK(mt_prof_end(pr, NULL));
    }
    MT_EXPECT_STATUS(mt_prof_end(pr, NULL), MT_ERR_INVALID_ARG);
    MT_CHECK(mt_prof_collect(pr));
    long codd = 0, ceven = 0;
    double odd = mt_prof_total_ms(pr, "odd", &codd), even = mt_prof_total_ms(pr, "even", &ceven);
    MT_EXPECT(codd == 2 && ceven == 3, "region counts %ld %ld", codd, ceven);
    /* lower bounds only: a busy wait can be preempted (longer), never shorter */
    MT_EXPECT(odd >= 4.0 && even >= 0.3, "totals odd %.3f even %.3f ms", odd, even);
    mt_prof_print(pr, stdout, 1);
    mt_prof_destroy(pr);
    MT_CHECK(mt_prof_begin(NULL, "x", NULL)); /* a NULL profiler ignores everything */

    /* environment switches: unset and empty give the default; the cached read keeps its first */
    unsetenv("MT_TEST_SWITCH");
    MT_EXPECT(mt_env_int("MT_TEST_SWITCH", 7) == 7, "unset switch");
    setenv("MT_TEST_SWITCH", "", 1);
    MT_EXPECT(mt_env_int("MT_TEST_SWITCH", 7) == 7, "empty switch");
    setenv("MT_TEST_SWITCH", "0", 1);
    MT_EXPECT(mt_env_int("MT_TEST_SWITCH", 7) == 0, "switch 0");
    int cache = MT_ENV_UNREAD;
    setenv("MT_TEST_SWITCH", "-3", 1);
    MT_EXPECT(mt_env_int_once("MT_TEST_SWITCH", 7, &cache) == -3, "first cached read");
    setenv("MT_TEST_SWITCH", "5", 1);
    MT_EXPECT(mt_env_int_once("MT_TEST_SWITCH", 7, &cache) == -3, "cached read kept");
    MT_EXPECT(mt_env_int("MT_TEST_SWITCH", 7) == 5, "uncached read sees the change");
    unsetenv("MT_TEST_SWITCH");
    return mt_test_result();
}
