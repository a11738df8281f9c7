/* A world of one on one GPU: every operation on device tensors through NCCL, on a stream, and the
 * host path alongside. */
#include "collectives_common.h"

int main(void) {
    if (!mt_comm_have_nccl()) mt_test_skip("built without NCCL");
    mt_test_require_gpus(1);
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = MT_COMM_DEVICE;
    cfg.timeout_s = 60;
    mt_comm *w;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    MT_EXPECT(mt_comm_has_device(w) && mt_device_is_cuda(mt_comm_device(w)), "NCCL is up");
    mt_stream s;
    MT_CHECK(mt_stream_create(&s));
    coll_ctx x = { w, mt_comm_device(w), s, mt_comm_rank(w), mt_comm_size(w) };
    coll_run_all(&x, 1);
    coll_split(&x);
    coll_ctx h = { w, MT_DEVICE_CPU, NULL, x.rank, x.n };
    test_allreduce(&h, MT_BF16, 17, MT_REDOP_SUM, 0);
    mt_stream_destroy(s);
    mt_comm_destroy(w);
    return mt_test_result();
}
