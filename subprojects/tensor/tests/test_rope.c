/* unit: RoPE forward and backward (CPU reference) against PyTorch: Hugging Face rotate_half with a
 * partial rotary dim, and Meta's interleaved complex form with given position ids (i32 and i64);
 * in place; bf16 vs the f32 path on the same rounded inputs. */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include <stdlib.h>
#include <string.h>

#define B   2
#define T   5
#define H   3
#define D   12
#define NEL (B * T * H * D)

static float *x, *dout;
static int64_t pos64[B * T];
static int32_t pos32[B * T];

/* rope in dtype dt on src -> got (f32). bwd: mt_rope_bwd. */
static void run(float *got, const float *src, mt_dtype dt, const mt_tensor *pos, int rot,
                double theta, int inter, int bwd) {
    uint16_t buf[NEL];
    float f[NEL];
    memcpy(f, src, sizeof f);
    mt_tensor t32 = mt_tensor_4d(f, MT_F32, B, T, H, D, MT_DEVICE_CPU), t = t32;
    if (dt == MT_BF16) {
        t = mt_tensor_4d(buf, MT_BF16, B, T, H, D, MT_DEVICE_CPU);
        MT_CHECK(mt_cast(&t, &t32, NULL));
    }
    /* in place: out aliases x */
    MT_CHECK(bwd ? mt_rope_bwd(&t, &t, pos, rot, theta, inter, NULL)
                 : mt_rope_fwd(&t, &t, pos, rot, theta, inter, NULL));
    mt_tensor g = mt_tensor_4d(got, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&g, &t, NULL));
}

static void check(const char *name, const mt_tensor *pos, int rot, double theta, int inter) {
    char path[64], what[64];
    snprintf(path, sizeof path, "rope_%s_out.npy", name);
    float *out_ref = mt_test_golden_f32(path, NULL, NULL);
    snprintf(path, sizeof path, "rope_%s_dx.npy", name);
    float *dx_ref = mt_test_golden_f32(path, NULL, NULL);
    float got[NEL], ref[NEL], xr[NEL];
    snprintf(what, sizeof what, "rope %s fwd f32", name);
    run(got, x, MT_F32, pos, rot, theta, inter, 0);
    mt_test_close_f32(what, got, out_ref, NEL, 1e-6, 1e-5);
    snprintf(what, sizeof what, "rope %s bwd f32", name);
    run(got, dout, MT_F32, pos, rot, theta, inter, 1);
    mt_test_close_f32(what, got, dx_ref, NEL, 1e-6, 1e-5);
    for (int i = 0; i < NEL; i++)
        xr[i] = mt_bf16_to_f32(mt_f32_to_bf16(x[i]));
    run(ref, xr, MT_F32, pos, rot, theta, inter, 0);
    run(got, x, MT_BF16, pos, rot, theta, inter, 0);
    snprintf(what, sizeof what, "rope %s fwd bf16", name);
    mt_test_close_f32(what, got, ref, NEL, 1e-6, 4e-3);
    free(out_ref), free(dx_ref);
}

int main(void) {
    x = mt_test_golden_f32("rope_x.npy", NULL, NULL);
    dout = mt_test_golden_f32("rope_dout.npy", NULL, NULL);
    float *p = mt_test_golden_f32("rope_pos.npy", NULL, NULL);
    for (int i = 0; i < B * T; i++)
        pos64[i] = (int64_t)p[i], pos32[i] = (int32_t)p[i];
    free(p);
    check("half", NULL, 8, 10000.0, 0);
    mt_tensor tp64 = mt_tensor_2d(pos64, MT_I64, B, T, MT_DEVICE_CPU);
    mt_tensor tp32 = mt_tensor_2d(pos32, MT_I32, B, T, MT_DEVICE_CPU);
    check("inter", &tp64, 12, 500000.0, 1);
    check("inter", &tp32, 12, 500000.0, 1);
    /* positions 0..T-1 given explicitly as (T) equal the default */
    int32_t ar[T] = { 0, 1, 2, 3, 4 };
    mt_tensor tar = mt_tensor_1d(ar, MT_I32, T, MT_DEVICE_CPU);
    float a[NEL], b[NEL];
    run(a, x, MT_F32, NULL, 8, 10000.0, 0, 0);
    run(b, x, MT_F32, &tar, 8, 10000.0, 0, 0);
    mt_test_close_f32("rope pos (T) == default", b, a, NEL, 0, 0);

    /* bad input gets a clear error */
    mt_tensor tx = mt_tensor_4d(x, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    mt_tensor to = mt_tensor_4d(a, MT_F32, B, T, H, D, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_rope_fwd(&to, &tx, NULL, 7, 1e4, 0, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_rope_fwd(&to, &tx, NULL, D + 2, 1e4, 0, NULL), MT_ERR_INVALID_ARG);
    mt_tensor tpb = mt_tensor_1d(ar, MT_I32, T - 1, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_rope_fwd(&to, &tx, &tpb, 8, 1e4, 0, NULL), MT_ERR_INVALID_ARG);
    mt_tensor t3 = mt_tensor_3d(x, MT_F32, B * T, H, D, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_rope_fwd(&t3, &t3, NULL, 8, 1e4, 0, NULL), MT_ERR_INVALID_ARG);
    free(x), free(dout);
    return mt_test_result();
}
