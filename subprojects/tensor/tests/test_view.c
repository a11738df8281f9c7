/* unit: dtypes, tensor views (make, slice, reshape, contiguity, alloc, copy) and .npy views. */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include <stdio.h>
#include <string.h>

int main(void) {
    MT_EXPECT(mt_dtype_size(MT_BF16) == 2 && mt_dtype_size(MT_I64) == 8, "dtype sizes");
    mt_dtype dt;
    MT_CHECK(mt_dtype_parse("BF16", &dt));
    MT_EXPECT(dt == MT_BF16, "parse BF16");
    MT_CHECK(mt_dtype_parse("i32", &dt));
    MT_EXPECT(dt == MT_I32, "parse i32");
    MT_EXPECT_STATUS(mt_dtype_parse("F64", &dt), MT_ERR_UNSUPPORTED);

    float buf[2 * 3 * 4];
    for (int i = 0; i < 24; i++)
        buf[i] = (float)i;
    mt_tensor t = mt_tensor_3d(buf, MT_F32, 2, 3, 4, MT_DEVICE_CPU);
    MT_EXPECT(t.stride[0] == 12 && t.stride[1] == 4 && t.stride[2] == 1, "C-order strides");
    MT_EXPECT(mt_tensor_numel(&t) == 24 && mt_tensor_nbytes(&t) == 96, "numel/nbytes");
    char s[64];
    MT_EXPECT(strcmp(mt_tensor_str(&t, s, sizeof s), "f32[2,3,4]@cpu:0") == 0, "str %s", s);

    mt_tensor sl;
    MT_CHECK(mt_tensor_slice(&t, 0, 1, 1, &sl));
    MT_EXPECT(((float *)sl.data)[0] == 12 && mt_tensor_is_contiguous(&sl), "slice dim 0");
    MT_CHECK(mt_tensor_slice(&t, 2, 1, 2, &sl));
    MT_EXPECT(((float *)sl.data)[0] == 1 && !mt_tensor_is_contiguous(&sl), "slice dim 2 strided");
    MT_EXPECT_STATUS(mt_tensor_check(&sl, "sl", 3), MT_ERR_INVALID_ARG);
    MT_EXPECT(strstr(mt_last_error(), "sl is not contiguous") != NULL, "%s", mt_last_error());
    MT_EXPECT_STATUS(mt_tensor_slice(&t, 1, 2, 2, &sl), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_tensor_slice(&t, 3, 0, 1, &sl), MT_ERR_INVALID_ARG);

    mt_tensor r;
    MT_CHECK(mt_tensor_reshape(&t, 2, (int64_t[]){ 6, 4 }, &r));
    MT_EXPECT(r.shape[0] == 6 && r.stride[0] == 4, "reshape");
    MT_EXPECT_STATUS(mt_tensor_reshape(&t, 2, (int64_t[]){ 5, 4 }, &r), MT_ERR_INVALID_ARG);

    mt_arena *a;
    MT_CHECK(mt_arena_create(MT_DEVICE_CPU, 4096, &a));
    mt_tensor c;
    MT_CHECK(mt_tensor_alloc(a, MT_F32, 3, t.shape, &c));
    MT_CHECK(mt_tensor_copy(&c, &t, NULL));
    MT_EXPECT(memcmp(c.data, buf, sizeof buf) == 0, "copy");
    mt_tensor small = mt_tensor_1d(buf, MT_F32, 5, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_tensor_copy(&c, &small, NULL), MT_ERR_INVALID_ARG);
    mt_arena_destroy(a);

    mt_npy n;
    MT_CHECK(mt_npy_load(mt_test_golden_path("ew_x.npy"), &n)); /* float64: no tensor dtype */
    MT_EXPECT_STATUS(mt_tensor_from_npy(&n, &r), MT_ERR_UNSUPPORTED);
    mt_npy_free(&n);
    MT_CHECK(mt_tensor_save_npy("test_view.npy", &t));
    MT_CHECK(mt_npy_load("test_view.npy", &n));
    MT_CHECK(mt_tensor_from_npy(&n, &r));
    MT_EXPECT(mt_tensor_same_shape(&r, &t) && memcmp(r.data, buf, sizeof buf) == 0, "npy view");
    mt_npy_free(&n);
    remove("test_view.npy");
    { /* mt_copy: the middle heads of a (2,3,4,5) "qkv" buffer into contiguous rows and back */
        float qkv[2 * 3 * 4 * 5], rows[2 * 3 * 2 * 5], back[2 * 3 * 4 * 5];
        for (int i = 0; i < 120; i++)
            qkv[i] = (float)i, back[i] = -1.0f;
        mt_tensor all = mt_tensor_4d(qkv, MT_F32, 2, 3, 4, 5, MT_DEVICE_CPU), mid, r, ball, bmid;
        MT_CHECK(mt_tensor_slice(&all, 2, 1, 2, &mid)); /* heads 1 and 2: strided */
        r = mt_tensor_4d(rows, MT_F32, 2, 3, 2, 5, MT_DEVICE_CPU);
        MT_CHECK(mt_copy(&r, &mid, NULL));
        int bad = 0;
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++)
                for (int h = 0; h < 2; h++)
                    for (int d = 0; d < 5; d++)
                        bad += rows[((a * 3 + b) * 2 + h) * 5 + d] !=
                               qkv[((a * 3 + b) * 4 + h + 1) * 5 + d];
        ball = mt_tensor_4d(back, MT_F32, 2, 3, 4, 5, MT_DEVICE_CPU);
        MT_CHECK(mt_tensor_slice(&ball, 2, 1, 2, &bmid));
        MT_CHECK(mt_copy(&bmid, &r, NULL));
        for (int i = 0; i < 120; i++) {
            int h = i / 5 % 4;
            bad += back[i] != (h == 1 || h == 2 ? qkv[i] : -1.0f);
        }
        MT_EXPECT(bad == 0, "mt_copy: %d elements wrong", bad);
        mt_tensor r3 = mt_tensor_3d(rows, MT_F32, 6, 2, 5, MT_DEVICE_CPU);
        MT_EXPECT_STATUS(mt_copy(&r3, &mid, NULL), MT_ERR_INVALID_ARG); /* other shape */
        mt_error_clear();
    }
    return mt_test_result();
}
