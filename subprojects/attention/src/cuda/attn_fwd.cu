/* Attention forward on CUDA (placeholder until the kernels land). */
#include <mt/core_cuda.h>

#include "../attn_impl.h"

extern "C" mt_status attn_fwd_cuda(const attn_shape *, mt_tensor *, mt_tensor *, const mt_tensor *,
                                   const mt_tensor *, const mt_tensor *, mt_stream) {
    return MT_ERROR(MT_ERR_UNSUPPORTED, "attention CUDA kernels not built yet");
}
