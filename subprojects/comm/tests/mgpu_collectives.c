/* Every operation on device tensors over NCCL under mpiexec -n 2/4 (one GPU per rank), exact values
 * from (seed, rank, index); the host path over MPI in the same world. */
#include "collectives_common.h"

int main(void) {
    if (!mt_comm_have_nccl()) mt_test_skip("built without NCCL");
    mt_test_require_ranks(2);
    mt_comm_env env;
    MT_CHECK(mt_comm_env_read(&env));
    mt_test_require_gpus(env.world_size); /* one node: a GPU per rank */
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = MT_COMM_DEVICE;
    cfg.timeout_s = 120;
    mt_comm *w;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    MT_EXPECT(mt_device_eq(mt_comm_device(w), mt_device_cuda(env.local_rank)),
              "local rank %d picks cuda:%d", env.local_rank, mt_comm_device(w).index);
    mt_stream s;
    MT_CHECK(mt_stream_create(&s));
    coll_ctx x = { w, mt_comm_device(w), s, mt_comm_rank(w), mt_comm_size(w) };
    coll_run_all(&x, x.n == 2);
    coll_split(&x);
    mt_grid g; /* the grid's NCCL sub-communicators */
    MT_CHECK(mt_grid_init(&g, x.n, 2, 1, 1, x.n >= 4 ? 2 : 1, 0, NULL));
    mt_comm_groups groups;
    MT_CHECK(mt_comm_groups_create(w, &g, &groups));
    coll_ctx tp = { groups.comm[MT_GROUP_TP], x.dev, s, 0, 2 };
    tp.rank = mt_comm_rank(tp.c);
    test_allreduce(&tp, MT_BF16, 1001, MT_REDOP_SUM, 1);
    mt_comm_groups_destroy(&groups);
    if (mt_comm_has_host(w)) {
        coll_ctx h = { w, MT_DEVICE_CPU, NULL, x.rank, x.n };
        test_allreduce(&h, MT_BF16, 17, MT_REDOP_SUM, 0);
    }
    mt_stream_destroy(s);
    mt_comm_destroy(w);
    return mt_test_result();
}
