/* No silent hangs on MPI: rank 1 skips an all-reduce on group "tp"; every other rank must get
 * MT_ERR_TIMEOUT naming the group, the operation and its rank within the 2 s timeout. Then rank 0
 * waits for a message rank 1 never sends. */
#include <mt/comm.h>
#include <mt/testkit.h>

#include <stdio.h>
#include <string.h>

int main(void) {
    if (!mt_comm_have_mpi()) mt_test_skip("built without MPI");
    mt_test_require_ranks(2);
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = MT_COMM_HOST;
    cfg.timeout_s = 60;
    mt_comm *w, *tp;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    int me = mt_comm_rank(w);
    MT_CHECK(mt_comm_split(w, 0, me, "tp", &tp));
    const double timeout = 2.0;
    mt_comm_set_timeout(tp, timeout);
    float v[5] = { 1, 2, 3, 4, 5 };
    mt_tensor t = mt_tensor_1d(v, MT_F32, 5, MT_DEVICE_CPU);
    if (me != 1) {
        double t0 = mt_time_now();
        mt_status st = mt_comm_allreduce(tp, &t, &t, MT_REDOP_SUM, NULL);
        double dt = mt_time_now() - t0;
        MT_EXPECT(st == MT_ERR_TIMEOUT, "allreduce -> %s: %s", mt_status_str(st), mt_last_error());
        MT_EXPECT(dt >= timeout - 0.1 && dt < timeout + 3.0, "timed out after %.2f s", dt);
        char want[64];
        snprintf(want, sizeof want, "rank %d of", me);
        const char *e = mt_last_error();
        MT_EXPECT(strstr(e, "allreduce") && strstr(e, "'tp'") && strstr(e, want) &&
                      strstr(e, "5 x f32"),
                  "error names op, group, rank and count: %s", e);
        /* the aborted communicator fails fast from now on */
        t0 = mt_time_now();
        MT_EXPECT(mt_comm_barrier(tp) != MT_OK && mt_time_now() - t0 < 0.5, "aborted comm");
    }
    /* a receive whose sender never sends: MT_ERR_TIMEOUT too */
    mt_comm *pp;
    MT_CHECK(mt_comm_split(w, 0, me, "pp", &pp));
    mt_comm_set_timeout(pp, 1.0);
    if (me == 0) {
        double t0 = mt_time_now();
        MT_EXPECT_STATUS(mt_comm_recv(pp, &t, 1, NULL), MT_ERR_TIMEOUT);
        MT_EXPECT(strstr(mt_last_error(), "recv on group 'pp'") != NULL, "%s", mt_last_error());
        MT_EXPECT(mt_time_now() - t0 < 4.0, "recv timed out after %.2f s", mt_time_now() - t0);
    }
    /* the world is still healthy: everyone meets here */
    MT_EXPECT_STATUS(mt_comm_barrier(w), MT_OK);
    mt_comm_destroy(pp);
    mt_comm_destroy(tp);
    mt_comm_destroy(w);
    return mt_test_result();
}
