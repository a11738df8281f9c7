/* unit: mt-tp with no group (tensor parallelism 1) on the CPU, f32 and bf16, against torch's whole-tensor
 * goldens: the column-parallel GELU linear and the row-parallel linear (with and without the
 * sequence-parallel regions), the vocab-parallel embedding and cross-entropy, and the refusals. */
#include "tp_common.h"

int main(void) {
    tp_run(NULL, MT_DEVICE_CPU, MT_F32, NULL);
    tp_run(NULL, MT_DEVICE_CPU, MT_BF16, NULL);
    return mt_test_result();
}
