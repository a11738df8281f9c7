/* unit: dynamic loss scaling against megatron-core's DynamicGradScaler (golden/gen_scaler.py: same
 * pattern of found-Inf steps), the constant scaler and argument checks. */
#include <mt/optim.h>
#include <mt/testkit.h>

#include <stdlib.h>
#include <string.h>

int main(void) {
    const char *pattern = "0000000011010111110000000001111111111111100001000010";
    size_t n, len = strlen(pattern);
    float *ref = mt_test_golden_f32("scaler_scale.npy", &n, NULL);
    MT_EXPECT(n == len, "%zu golden scales for %zu updates", n, len);
    float *got = malloc(len * sizeof *got);
    mt_optim_scaler s;
    MT_CHECK(mt_optim_scaler_dynamic(&s, 256.0f, 16.0f, 4, 2));
    for (size_t i = 0; i < len; i++) {
        mt_optim_scaler_update(&s, pattern[i] == '1');
        got[i] = s.scale;
    }
    mt_test_close_f32("dynamic scale", got, ref, n < len ? n : len, 0.0, 0.0);

    MT_CHECK(mt_optim_scaler_constant(&s, 128.0f));
    mt_optim_scaler_update(&s, 1);
    mt_optim_scaler_update(&s, 1);
    MT_EXPECT(s.scale == 128.0f, "constant scale changed to %g", s.scale);
    MT_EXPECT_STATUS(mt_optim_scaler_dynamic(&s, 8.0f, 16.0f, 4, 2), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_optim_scaler_dynamic(&s, 8.0f, 1.0f, 0, 2), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_optim_scaler_constant(&s, 0.0f), MT_ERR_INVALID_ARG);
    free(ref), free(got);
    return mt_test_result();
}
