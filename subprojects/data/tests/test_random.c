/* unit: numpy's RandomState(int) and RandomState(array) shuffles and default_rng(0).integers,
 * bit for bit against numpy's own output. */
#include "data_test.h"

int main(void) {
    mt_data_mt19937 r;
    mt_data_mt19937_seed(&r, 5489); /* std::mt19937 default seed: 10000th output is 4123659995 */
    uint32_t v = 0;
    for (int i = 0; i < 10000; i++)
        v = mt_data_mt19937_next(&r);
    MT_EXPECT(v == 4123659995u, "mt19937(5489) 10000th output %u", v);

    size_t n;
    int64_t *ref = golden_i64("rng_shuffle_1234.npy", &n, NULL);
    int64_t a[1000];
    for (int i = 0; i < 1000; i++)
        a[i] = i;
    mt_data_mt19937_seed(&r, 1234);
    mt_data_mt19937_shuffle_i64(&r, a, 1000);
    mt_test_equal_i64("RandomState(1234).shuffle(arange(1000))", a, ref, n);
    free(ref);

    ref = golden_i64("rng_shuffle_array.npy", &n, NULL);
    int32_t *b = malloc(70000 * sizeof *b);
    int64_t b64[256];
    for (int i = 0; i < 70000; i++)
        b[i] = i;
    const uint32_t key[] = { 1, 2, 3, 0xffffffffu };
    mt_data_mt19937_seed_array(&r, key, 4);
    mt_data_mt19937_shuffle_i32(&r, b, 70000);
    for (int i = 0; i < 256; i++)
        b64[i] = b[i];
    mt_test_equal_i64("RandomState([1,2,3,2**32-1]).shuffle(arange(70000))[:256]", b64, ref, n);
    free(ref);
    free(b);

    ref = golden_i64("rng_mock_lengths.npy", &n, NULL);
    mt_data_pcg64 g;
    mt_data_pcg64_seed(&g, 0);
    int64_t got[257], sum = 0;
    for (int i = 0; i < 100000; i++) {
        int32_t x = mt_data_pcg64_integers_i32(&g, 1, 4096);
        if (i < 256) got[i] = x;
        sum += x;
    }
    got[256] = sum;
    mt_test_equal_i64("default_rng(0).integers(1, 4096, 100000) [:256] and sum", got, ref, n);
    free(ref);
    return mt_test_result();
}
