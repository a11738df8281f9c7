/* MT_DISPATCH for library front-ends: run the CPU reference or the CUDA launcher of an op by the
 * device of its tensors. For library sources compiled with -DMT_HAVE_CUDA=0 or 1 (every
 * megatron-c library passes it); a CPU-only build answers MT_ERR_UNSUPPORTED for CUDA tensors. */
#ifndef MT_DISPATCH_H
#define MT_DISPATCH_H

#include <mt/core.h>

#if MT_HAVE_CUDA
#define MT_DISPATCH(dev, cpu_call, cuda_call) (mt_device_is_cuda(dev) ? (cuda_call) : (cpu_call))
#else
/* why sizeof: the CUDA call's arguments (the stream) count as used; nothing is evaluated or linked */
#define MT_DISPATCH(dev, cpu_call, cuda_call)                                            \
    (mt_device_is_cuda(dev)                                                              \
         ? ((void)sizeof(cuda_call), MT_ERROR(MT_ERR_UNSUPPORTED, "built without CUDA")) \
         : (cpu_call))
#endif

#endif /* MT_DISPATCH_H */
