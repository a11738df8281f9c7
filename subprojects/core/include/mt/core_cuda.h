/* Error propagation for files that use the CUDA runtime (C or CUDA): MT_CUDA_TRY and the
 * after-launch check. Include only in CUDA-enabled sources. */
#ifndef MT_CORE_CUDA_H
#define MT_CORE_CUDA_H

#include <cuda_runtime.h>
#include <mt/core.h>

/* A CUDA runtime error becomes MT_ERR_CUDA with the call, its name and text. */
#define MT_CUDA_TRY(expr)                                                              \
    do {                                                                               \
        cudaError_t mt_ce_ = (expr);                                                   \
        if (mt_ce_ != cudaSuccess)                                                     \
            return mt_error_set(MT_ERR_CUDA, __FILE__, __LINE__, "%s: %s (%s)", #expr, \
                                cudaGetErrorName(mt_ce_), cudaGetErrorString(mt_ce_)); \
    } while (0)

/* After every kernel launch. */
#define MT_CUDA_CHECK_LAUNCH() MT_CUDA_TRY(cudaGetLastError())

#endif /* MT_CORE_CUDA_H */
