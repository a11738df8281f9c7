/* multigpu: the distributed optimizer (ZeRO-1) on device tensors over NCCL, one GPU per rank,
 * equals the all-reduce optimizer and the single-rank reference bit for bit (grads reduced in
 * fp32 or bf16), and grads reduced in bf16 are rounded to it. */
#include "zero1_common.h"

int main(void) {
    mt_test_require_ranks(2);
    int n = 0;
    const char *e = getenv("OMPI_COMM_WORLD_SIZE");
    n = e ? atoi(e) : 2;
    mt_test_require_gpus(n);
    if (!mt_comm_have_nccl()) mt_test_skip("built without NCCL");
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = MT_COMM_DEVICE;
    cfg.timeout_s = 120;
    mt_comm *w;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    mt_device dev = mt_comm_device(w);
    zr_run(w, dev, MT_F32);
    zr_run(w, dev, MT_BF16);
    zr_bf16_rounding(w, dev);
    zr_expert(w, dev, MT_F32);
    zr_expert(w, dev, MT_BF16);
    mt_comm_destroy(w);
    return mt_test_result();
}
