/* Tensor kernels. Each op validates its arguments, then runs on the tensors' device: the CPU
 * reference (src/cpu/, the spec) or CUDA (src/cuda/, enqueued on `stream`, returns before the work
 * completes). All tensors of one call must be on the same device. Float ops accept f32 and bf16
 * (and f16 where noted) and accumulate in fp32. Shapes: B batch, T sequence, C channels, V vocab. */
#ifndef MT_TENSOR_OPS_H
#define MT_TENSOR_OPS_H

#include <mt/tensor/view.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise (any shape, same numel; out may alias an input) ---- */

/* out = a + b */
MT_API mt_status mt_add(mt_tensor *out, const mt_tensor *a, const mt_tensor *b, mt_stream stream);
/* out = alpha * x */
MT_API mt_status mt_scale(mt_tensor *out, const mt_tensor *x, float alpha, mt_stream stream);
/* y = y + alpha * x (y updated in place) */
MT_API mt_status mt_axpy(mt_tensor *y, float alpha, const mt_tensor *x, mt_stream stream);
/* out = x converted to out's dtype (f32, bf16, f16 in any direction; round to nearest even) */
MT_API mt_status mt_cast(mt_tensor *out, const mt_tensor *x, mt_stream stream);
/* x = 0 .. fills with a constant (any float dtype) */
MT_API mt_status mt_fill(mt_tensor *x, float value, mt_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* MT_TENSOR_OPS_H */
