/* mt-tensor: dtypes, tensor views, .npy/safetensors IO and the tensor kernels (CPU reference and
 * CUDA). Umbrella header. */
#ifndef MT_TENSOR_H
#define MT_TENSOR_H

#include <mt/core.h>
#include <mt/tensor/dtype.h>
#include <mt/tensor/io.h>
#include <mt/tensor/ops.h>
#include <mt/tensor/view.h>

#endif /* MT_TENSOR_H */
