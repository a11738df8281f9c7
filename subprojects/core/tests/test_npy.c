/* unit: .npy files written by NumPy (golden/gen_npy.py) load exactly; our writer round-trips;
 * damaged files are rejected with MT_ERR_FORMAT. */
#define _POSIX_C_SOURCE 200809L
#include <mt/testkit.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void) {
    mt_npy a;
    MT_CHECK(mt_npy_load(mt_test_golden_path("arange_f8_3x5.npy"), &a));
    MT_EXPECT(a.ndim == 2 && a.shape[0] == 3 && a.shape[1] == 5, "shape (3,5)");
    MT_EXPECT(strcmp(a.descr, "<f8") == 0 && a.itemsize == 8, "descr %s", a.descr);
    for (size_t i = 0; i < a.count; i++)
        MT_EXPECT(mt_npy_get(&a, i) == (double)i * 0.5 - 3, "value %zu", i);
    mt_npy_free(&a);

    MT_CHECK(mt_npy_load(mt_test_golden_path("values_f2_7.npy"), &a));
    const float want_f2[7] = {
        0.0f, 1.0f, -2.5f, 65504.0f, 5.9604645e-08f, 0.333251953125f, -0.0f
    };
    for (int i = 0; i < 7; i++)
        MT_EXPECT(mt_npy_get(&a, (size_t)i) == want_f2[i], "f2 value %d: %g", i,
                  mt_npy_get(&a, (size_t)i));
    mt_npy_free(&a);

    MT_CHECK(mt_npy_load(mt_test_golden_path("scalar_i8.npy"), &a));
    MT_EXPECT(a.ndim == 0 && a.count == 1 && mt_npy_get(&a, 0) == -7, "0-d i8 scalar");
    mt_npy_free(&a);

    /* round trip through our writer */
    const char *tmp = "test_npy_roundtrip.npy";
    int32_t v[6] = { 1, -2, 3, -4, 5, 2147483647 };
    int64_t shape[3] = { 1, 2, 3 };
    MT_CHECK(mt_npy_save(tmp, "<i4", 3, shape, v));
    MT_CHECK(mt_npy_load(tmp, &a));
    MT_EXPECT(a.ndim == 3 && a.shape[2] == 3 && memcmp(a.data, v, sizeof v) == 0, "round trip");
    mt_npy_free(&a);

    /* damaged files */
    FILE *f = fopen(tmp, "wb");
    fwrite("\x93NUMPX\x01\x00", 1, 8, f);
    fclose(f);
    MT_EXPECT_STATUS(mt_npy_load(tmp, &a), MT_ERR_FORMAT);
    MT_CHECK(mt_npy_save(tmp, "<f4", 1, (int64_t[]){ 100 }, (float[100]){ 0 }));
    f = fopen(tmp, "r+b");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fclose(f);
    MT_EXPECT(truncate(tmp, len - 4) == 0, "truncate");
    MT_EXPECT_STATUS(mt_npy_load(tmp, &a), MT_ERR_FORMAT);
    MT_EXPECT(strstr(mt_last_error(), "truncated") != NULL, "says truncated: %s", mt_last_error());
    MT_EXPECT_STATUS(mt_npy_load("/nonexistent/x.npy", &a), MT_ERR_IO);
    remove(tmp);
    return mt_test_result();
}
