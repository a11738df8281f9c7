/* unit: Philox4x32-10 against Random123's known-answer vectors, and the distributions. */
#include <mt/testkit.h>

#include <math.h>

int main(void) {
    /* Known-answer tests from Random123 (kat_vectors: philox4x32 10 rounds). */
    struct {
        uint32_t ctr[4], key[2], want[4];
    } kat[] = {
        { { 0, 0, 0, 0 }, { 0, 0 }, { 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 } },
        { { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff },
          { 0xffffffff, 0xffffffff },
          { 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd } },
        { { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344 },
          { 0xa4093822, 0x299f31d0 },
          { 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 } },
    };
    for (int t = 0; t < 3; t++) {
        mt_philox4 c = { { kat[t].ctr[0], kat[t].ctr[1], kat[t].ctr[2], kat[t].ctr[3] } };
        mt_philox4 r = mt_philox4x32(c, kat[t].key[0], kat[t].key[1]);
        for (int i = 0; i < 4; i++)
            MT_EXPECT(r.v[i] == kat[t].want[i], "kat %d word %d: %08x want %08x", t, i, r.v[i],
                      kat[t].want[i]);
    }
    /* Block/index mapping: index i is word i%4 of block i/4 with counter (block, stream). */
    mt_philox4 b = mt_philox_block(0x1234567890ull, 7, 5);
    for (int i = 0; i < 4; i++)
        MT_EXPECT(mt_philox_u32(0x1234567890ull, 7, 20 + i) == b.v[i], "u32 index maps to block");

    /* Uniforms in (0,1) with mean 1/2, var 1/12; normals mean 0, var 1 (n = 1e6: 5 sigma). */
    const int n = 1000000;
    double s = 0, s2 = 0, lo = 1, hi = 0, ns = 0, ns2 = 0;
    for (int i = 0; i < n; i++) {
        double u = mt_philox_uniform(42, 1, (uint64_t)i);
        s += u;
        s2 += u * u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        double z = mt_philox_normal(42, 2, (uint64_t)i);
        ns += z;
        ns2 += z * z;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    MT_EXPECT(lo > 0 && hi < 1, "uniform range (%g, %g)", lo, hi);
    MT_EXPECT(fabs(mean - 0.5) < 5 * sqrt(1.0 / 12 / n), "uniform mean %g", mean);
    MT_EXPECT(fabs(var - 1.0 / 12) < 1e-3, "uniform var %g", var);
    double nmean = ns / n, nvar = ns2 / n - nmean * nmean;
    MT_EXPECT(fabs(nmean) < 5 / sqrt((double)n), "normal mean %g", nmean);
    MT_EXPECT(fabs(nvar - 1) < 5 * sqrt(2.0 / n), "normal var %g", nvar);
    MT_EXPECT(mt_philox_normal(42, 2, 10) != mt_philox_normal(42, 3, 10), "streams differ");
    MT_EXPECT(mt_philox_stream_of("a") != mt_philox_stream_of("b"), "name streams differ");
    return mt_test_result();
}
