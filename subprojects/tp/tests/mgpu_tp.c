/* multigpu: mt-tp over NCCL, one GPU a rank (2 and 4), f32 and bf16, against torch's goldens. */
#include "tp_common.h"

int main(void) {
    if (!mt_comm_have_nccl()) mt_test_skip("built without NCCL");
    mt_test_require_ranks(2);
    mt_test_require_gpus(1);
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = MT_COMM_DEVICE;
    cfg.timeout_s = 120;
    mt_comm *w;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    mt_stream s;
    MT_CHECK(mt_stream_create(&s));
    tp_run(w, mt_comm_device(w), MT_F32, s);
    tp_run(w, mt_comm_device(w), MT_BF16, s);
    mt_stream_destroy(s);
    mt_comm_destroy(w);
    return mt_test_result();
}
