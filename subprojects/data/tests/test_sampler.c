/* unit: MegatronPretrainingSampler's order: chunks of micro_batch * dp_size from consumed_samples,
 * rank r's slice of each, the partial last chunk kept or dropped. */
#include "data_test.h"

int main(void) {
    mt_data_sampler s;
    int64_t ids[8];
    /* 10 samples, mbs 2, dp 2, rank 1, from 0: [2,3], [6,7], then the partial [8,9] -> [] */
    MT_CHECK(mt_data_sampler_init(&s, 10, 0, 2, 1, 2, 0));
    MT_EXPECT(mt_data_sampler_next(&s, ids) == 2 && ids[0] == 2 && ids[1] == 3, "rank 1 first");
    MT_EXPECT(mt_data_sampler_next(&s, ids) == 2 && ids[0] == 6 && ids[1] == 7, "rank 1 second");
    MT_EXPECT(mt_data_sampler_next(&s, ids) == 0, "rank 1 gets nothing of [8, 9]");
    MT_EXPECT(mt_data_sampler_next(&s, ids) == 0, "exhausted");
    /* rank 0 keeps the partial chunk without drop_last */
    MT_CHECK(mt_data_sampler_init(&s, 10, 0, 2, 0, 2, 0));
    mt_data_sampler_next(&s, ids);
    mt_data_sampler_next(&s, ids);
    MT_EXPECT(mt_data_sampler_next(&s, ids) == 2 && ids[0] == 8 && ids[1] == 9, "partial chunk");
    MT_CHECK(mt_data_sampler_init(&s, 10, 0, 2, 0, 2, 1));
    mt_data_sampler_next(&s, ids);
    mt_data_sampler_next(&s, ids);
    MT_EXPECT(mt_data_sampler_next(&s, ids) == 0, "drop_last drops it");
    /* resume from consumed_samples = 12 with mbs 3, dp 2, rank 0: [12,13,14], [18,19,20] */
    MT_CHECK(mt_data_sampler_init(&s, 100, 12, 3, 0, 2, 1));
    MT_EXPECT(mt_data_sampler_next(&s, ids) == 3 && ids[0] == 12 && ids[2] == 14, "resume");
    MT_EXPECT(mt_data_sampler_next(&s, ids) == 3 && ids[0] == 18, "resume next");
    MT_EXPECT_STATUS(mt_data_sampler_init(&s, 10, 10, 2, 0, 1, 0), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_data_sampler_init(&s, 10, 0, 2, 2, 2, 0), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_data_sampler_init(&s, 0, 0, 2, 0, 1, 0), MT_ERR_INVALID_ARG);
    return mt_test_result();
}
