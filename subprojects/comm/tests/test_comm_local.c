/* A world of one without a launcher: host collectives are copies, argument errors are caught before
 * any backend, and device tensors without NCCL are MT_ERR_UNSUPPORTED. */
#include "collectives_common.h"

int main(void) {
    const char *vars[] = {
        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",    "PMI_SIZE", "RANK",
        "WORLD_SIZE",           "SLURM_PROCID",         "SLURM_NTASKS"
    };
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = MT_COMM_HOST;
    mt_comm *w;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    MT_EXPECT(mt_comm_size(w) == 1 && mt_comm_rank(w) == 0 && mt_comm_has_host(w) &&
                  !mt_comm_has_device(w),
              "world of one");
    coll_ctx x = { w, MT_DEVICE_CPU, NULL, 0, 1 };
    coll_run_all(&x, 0);
    coll_split(&x);

    float a[4] = { 0 }, b[8] = { 0 };
    mt_tensor ta = mt_tensor_1d(a, MT_F32, 4, MT_DEVICE_CPU);
    mt_tensor tb = mt_tensor_1d(b, MT_F32, 8, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_comm_allreduce(w, &ta, &tb, MT_REDOP_SUM, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_comm_allgather(w, &tb, &ta, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_comm_allreduce(w, &ta, &ta, (mt_redop)9, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_comm_broadcast(w, &ta, NULL, 1, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_comm_send(w, &ta, 1, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_comm_alltoall(w, &ta, &ta, NULL), MT_ERR_INVALID_ARG);
    mt_tensor td = mt_tensor_1d(a, MT_F32, 4, mt_device_cuda(0));
    MT_EXPECT_STATUS(mt_comm_allreduce(w, &td, &td, MT_REDOP_SUM, NULL), MT_ERR_UNSUPPORTED);
    MT_EXPECT(strstr(mt_last_error(), "allreduce on group 'world' (rank 0 of 1, 4 x f32)") != NULL,
              "error names op, group, rank, count: %s", mt_last_error());
    mt_comm_config bad = cfg;
    bad.size = 4;
    mt_comm *nope;
    MT_EXPECT_STATUS(mt_comm_world_create(&bad, &nope), MT_ERR_INVALID_ARG);
    mt_comm_destroy(w);
    return mt_test_result();
}
