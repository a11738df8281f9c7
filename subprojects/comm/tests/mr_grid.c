/* The grid's communicators under mpiexec: every group this rank belongs to sums its members'
 * global ranks, which must equal the sum over mt_grid_group_ranks(). */
#include <mt/comm.h>
#include <mt/testkit.h>

int main(void) {
    if (!mt_comm_have_mpi()) mt_test_skip("built without MPI");
    mt_test_require_ranks(4);
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = MT_COMM_HOST;
    cfg.timeout_s = 60;
    mt_comm *w;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    int n = mt_comm_size(w), me = mt_comm_rank(w);
    mt_grid g;
    MT_CHECK(mt_grid_init(&g, n, 2, 1, n >= 8 ? 2 : 1, 2, 0, NULL)); /* tp 2, pp 2, ep 2 at 8 */
    mt_comm_groups groups;
    MT_CHECK(mt_comm_groups_create(w, &g, &groups));
    int ranks[64];
    for (int k = 0; k < MT_GROUP_COUNT; k++) {
        int idx, pos;
        MT_CHECK(mt_grid_locate(&g, (mt_group)k, me, &idx, &pos));
        mt_comm *c = groups.comm[k];
        if (!MT_EXPECT((idx >= 0) == (c != NULL), "%s: index %d, comm %p", mt_group_name(k), idx,
                       (void *)c) ||
            !c)
            continue;
        int size = mt_grid_group_size(&g, (mt_group)k, idx);
        MT_CHECK(mt_grid_group_ranks(&g, (mt_group)k, idx, ranks));
        MT_EXPECT(mt_comm_size(c) == size && mt_comm_rank(c) == pos,
                  "%s: rank %d of %d, want %d of %d", mt_group_name(k), mt_comm_rank(c),
                  mt_comm_size(c), pos, size);
        MT_EXPECT(strcmp(mt_comm_name(c), mt_group_name(k)) == 0, "name %s", mt_comm_name(c));
        int64_t v = me, want = 0;
        for (int i = 0; i < size; i++)
            want += ranks[i];
        mt_tensor t = mt_tensor_1d(&v, MT_I64, 1, MT_DEVICE_CPU);
        MT_EXPECT_STATUS(mt_comm_allreduce(c, &t, &t, MT_REDOP_SUM, NULL), MT_OK);
        MT_EXPECT(v == want, "%s group %d: sum of ranks %lld, want %lld", mt_group_name(k), idx,
                  (long long)v, (long long)want);
    }
    mt_comm_groups_destroy(&groups);
    mt_grid bad;
    MT_CHECK(mt_grid_init(&bad, n * 2, 1, 1, 1, 1, 0, NULL));
    MT_EXPECT_STATUS(mt_comm_groups_create(w, &bad, &groups), MT_ERR_INVALID_ARG);
    mt_comm_destroy(w);
    return mt_test_result();
}
