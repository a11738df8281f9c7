/* multirank: the distributed optimizer (ZeRO-1) on host tensors over MPI, DP 2 and 4, equals the
 * all-reduce optimizer and the single-rank reference bit for bit (f32 and bf16 params). */
#include "zero1_common.h"

int main(void) {
    if (!mt_comm_have_mpi()) mt_test_skip("built without MPI");
    mt_test_require_ranks(2);
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = MT_COMM_HOST;
    cfg.timeout_s = 60;
    mt_comm *w;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    zr_run(w, MT_DEVICE_CPU, MT_F32);
    zr_run(w, MT_DEVICE_CPU, MT_BF16);
    mt_comm_destroy(w);
    return mt_test_result();
}
