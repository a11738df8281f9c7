/* No silent hangs on NCCL: rank 1 skips an all-reduce on group "tp"; the others must get
 * MT_ERR_TIMEOUT from mt_comm_wait within the 2 s timeout, naming group, operation, count, rank. */
#include <mt/comm.h>
#include <mt/testkit.h>

#include <stdio.h>
#include <string.h>

int main(void) {
    if (!mt_comm_have_nccl()) mt_test_skip("built without NCCL");
    mt_test_require_ranks(2);
    mt_comm_env env;
    MT_CHECK(mt_comm_env_read(&env));
    mt_test_require_gpus(env.world_size);
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = MT_COMM_DEVICE;
    cfg.timeout_s = 120;
    mt_comm *w, *tp;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    int me = mt_comm_rank(w);
    MT_CHECK(mt_comm_split(w, 0, me, "tp", &tp));
    const double timeout = 2.0;
    mt_comm_set_timeout(tp, timeout);
    mt_stream s;
    MT_CHECK(mt_stream_create(&s));
    void *p;
    MT_CHECK(mt_device_malloc(&p, 1000 * sizeof(float)));
    MT_CHECK(mt_memset_zero(p, mt_comm_device(w), 1000 * sizeof(float), NULL));
    mt_tensor t = mt_tensor_1d(p, MT_F32, 1000, mt_comm_device(w));
    if (me != 1) {
        double t0 = mt_time_now();
        mt_status st = mt_comm_allreduce(tp, &t, &t, MT_REDOP_SUM, s);
        if (st == MT_OK) st = mt_comm_wait(tp, s);
        double dt = mt_time_now() - t0;
        MT_EXPECT(st == MT_ERR_TIMEOUT, "allreduce -> %s: %s", mt_status_str(st), mt_last_error());
        MT_EXPECT(dt >= timeout - 0.1 && dt < timeout + 5.0, "timed out after %.2f s", dt);
        char want[64];
        snprintf(want, sizeof want, "rank %d of", me);
        const char *e = mt_last_error();
        MT_EXPECT(strstr(e, "allreduce") && strstr(e, "'tp'") && strstr(e, want) &&
                      strstr(e, "1000 x f32"),
                  "error names op, group, rank and count: %s", e);
        MT_EXPECT(mt_comm_allreduce(tp, &t, &t, MT_REDOP_SUM, s) != MT_OK, "aborted comm fails");
    }
    /* the world (MPI for the barrier when built, else NCCL) is still healthy */
    MT_EXPECT_STATUS(mt_comm_barrier(w), MT_OK);
    mt_comm_destroy(tp);
    mt_stream_destroy(s);
    mt_device_free(p);
    mt_comm_destroy(w);
    return mt_test_result();
}
