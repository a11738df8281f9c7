/* Every operation on host tensors over MPI under mpiexec -n 2/4/8, exact values from (seed, rank,
 * index); the 16 MiB case runs only with 2 ranks. */
#include "collectives_common.h"

int main(void) {
    if (!mt_comm_have_mpi()) mt_test_skip("built without MPI");
    mt_test_require_ranks(2);
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = MT_COMM_HOST;
    cfg.timeout_s = 60;
    mt_comm *w;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    coll_ctx x = { w, MT_DEVICE_CPU, NULL, mt_comm_rank(w), mt_comm_size(w) };
    coll_run_all(&x, x.n == 2);
    coll_split(&x);
    /* host tensors need MPI; device tensors need NCCL on this communicator */
    float f = 0;
    mt_tensor dt = mt_tensor_1d(&f, MT_F32, 1, mt_device_cuda(0));
    MT_EXPECT_STATUS(mt_comm_allreduce(w, &dt, &dt, MT_REDOP_SUM, NULL), MT_ERR_UNSUPPORTED);
    mt_tensor a = mt_tensor_1d(&f, MT_F32, 1, MT_DEVICE_CPU), b = a;
    b.dtype = MT_I32;
    MT_EXPECT_STATUS(mt_comm_allreduce(w, &a, &b, MT_REDOP_SUM, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT(strstr(mt_last_error(), "allreduce on group 'world'") != NULL, "error: %s",
              mt_last_error());
    mt_comm_destroy(w);
    return mt_test_result();
}
