/* multirank: mt-tp over MPI host tensors, the world as one tensor-parallel group (2 and 4 ranks),
 * each rank's shards against torch's whole-tensor goldens, with and without sequence parallelism. */
#include "tp_common.h"

int main(void) {
    if (!mt_comm_have_mpi()) mt_test_skip("built without MPI");
    mt_test_require_ranks(2);
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = MT_COMM_HOST;
    cfg.timeout_s = 60;
    mt_comm *w;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    tp_run(w, MT_DEVICE_CPU, MT_F32, NULL);
    mt_comm_destroy(w);
    return mt_test_result();
}
