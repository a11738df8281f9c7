/* gpu: mt-tp with no group on one GPU (f32 and bf16) against torch's goldens: the CUDA paths of
 * the vocab shard's lookup and of the cross-entropy's passes. */
#include "tp_common.h"

int main(void) {
    mt_test_require_gpus(1);
    mt_stream s;
    MT_CHECK(mt_stream_create(&s));
    tp_run(NULL, mt_device_cuda(0), MT_F32, s);
    tp_run(NULL, mt_device_cuda(0), MT_BF16, s);
    mt_stream_destroy(s);
    return mt_test_result();
}
