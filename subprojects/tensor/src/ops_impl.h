/* Private: the CPU and CUDA implementations share these signatures (CUDA adds the stream).
 * Arguments are already validated. */
#ifndef MT_TENSOR_OPS_IMPL_H
#define MT_TENSOR_OPS_IMPL_H

#include <mt/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* elementwise: op 0 add (out = a + b), 1 scale (out = alpha*a), 2 axpy (out = out + alpha*a),
 * 3 cast (out = a), 4 fill (out = alpha) */
typedef enum ew_op { EW_ADD, EW_SCALE, EW_AXPY, EW_CAST, EW_FILL } ew_op;
mt_status elementwise_cpu(ew_op op, mt_tensor *out, const mt_tensor *a, const mt_tensor *b,
                          float alpha);
mt_status elementwise_cuda(ew_op op, mt_tensor *out, const mt_tensor *a, const mt_tensor *b,
                           float alpha, mt_stream stream);

#ifdef __cplusplus
}
#endif

/* Dispatch helper for op front-ends: run the CPU reference or the CUDA launcher. */
#if MT_HAVE_CUDA
#define MT_DISPATCH(dev, cpu_call, cuda_call) (mt_device_is_cuda(dev) ? (cuda_call) : (cpu_call))
#else
#define MT_DISPATCH(dev, cpu_call, cuda_call)                                                      \
    (mt_device_is_cuda(dev) ? MT_ERROR(MT_ERR_UNSUPPORTED, "built without CUDA") : (cpu_call))
#endif

#endif /* MT_TENSOR_OPS_IMPL_H */
