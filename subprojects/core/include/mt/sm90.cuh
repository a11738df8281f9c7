/* Hopper (sm_90) helpers shared by the libraries' kernels: shared-memory addresses, mbarriers,
 * bulk copies, wgmma fences and shared-memory descriptors (device), and the driver's
 * cuTensorMapEncodeTiled (host). Include from CUDA sources only. The device functions trap when
 * compiled for an older target, so that a multi-architecture build still compiles; callers
 * reach them only on sm_90. wgmma needs sm_90a. */
#ifndef MT_SM90_CUH
#define MT_SM90_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include <mt/core.h>

#if CUDART_VERSION >= 12000
#include <cuda.h> /* CUtensorMap (the type only: the encoder comes through the runtime) */
#include <cudaTypedefs.h>
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define MT_SM90_ASM(...) __trap()
#else
#define MT_SM90_ASM(...) asm volatile(__VA_ARGS__)
#endif

__device__ __forceinline__ uint32_t mt_smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* An mbarrier whose phases complete after `count` arrivals (and their transaction bytes). */
__device__ __forceinline__ void mt_mbar_init(uint64_t *bar, int count) {
    MT_SM90_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mt_smem_u32(bar)), "r"(count)
                : "memory");
    MT_SM90_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/* One arrival that also expects `bytes` of transactions in the current phase. */
__device__ __forceinline__ void mt_mbar_expect(uint64_t *bar, uint32_t bytes) {
    MT_SM90_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mt_smem_u32(bar)),
                "r"(bytes)
                : "memory");
}
__device__ __forceinline__ void mt_mbar_arrive(uint64_t *bar) {
    MT_SM90_ASM("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(mt_smem_u32(bar)) : "memory");
}
/* An arrival on the barrier at bar's offset in the shared memory of cluster CTA `cta` (default
 * .release.cta semantics, as CUTLASS's cluster barrier). */
// why: .release.cluster here (with .acquire.cluster in the wait) halved the rate of gemm_sm90.cu's
// load ring (nvidia-h100-x1, session 19)
__device__ __forceinline__ void mt_mbar_arrive_cluster(uint64_t *bar, uint32_t cta) {
    MT_SM90_ASM("{\n.reg .b32 ra;\n"
                "mapa.shared::cluster.u32 ra, %0, %1;\n"
                "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(mt_smem_u32(bar)),
                "r"(cta)
                : "memory");
}
/* Waits until the phase of parity `parity` has completed. */
__device__ __forceinline__ void mt_mbar_wait(uint64_t *bar, uint32_t parity) {
    MT_SM90_ASM("{\n.reg .pred p;\nMT_WAIT_%=:\n"
                "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                "@!p bra MT_WAIT_%=;\n}\n" ::"r"(mt_smem_u32(bar)),
                "r"(parity)
                : "memory");
}

/* A bulk copy of `bytes` (a multiple of 16, both ends 16-byte aligned) from global memory into
 * shared memory, on bar's transaction. */
__device__ __forceinline__ void mt_bulk_load(void *dst, const void *src, uint32_t bytes,
                                             uint64_t *bar) {
    MT_SM90_ASM("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                " [%0], [%1], %2, [%3];\n" ::"r"(mt_smem_u32(dst)),
                "l"(src), "r"(bytes), "r"(mt_smem_u32(bar))
                : "memory");
}

/* wgmma: the fence before a warpgroup's first wgmma on registers written otherwise, the group
 * commit, and the wait until at most N groups are in flight. */
__device__ __forceinline__ void mt_wgmma_fence() {
    MT_SM90_ASM("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void mt_wgmma_commit() {
    MT_SM90_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void mt_wgmma_wait() {
    MT_SM90_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* wgmma shared-memory descriptor of a tile of 128-byte rows in the 128-byte swizzle (TMA's
 * CU_TENSOR_MAP_SWIZZLE_128B layout), 8-row groups 1024 bytes apart; lbo: bytes between
 * 64-column panels (read for transposed operands wider than one panel; else 16). */
__device__ __forceinline__ uint64_t mt_wgmma_desc(const void *p, uint32_t lbo) {
    const uint64_t a = mt_smem_u32(p);
    return ((a & 0x3FFFF) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(1024 >> 4) << 32 |
           1ull << 62;
}

#if CUDART_VERSION >= 12000
/* The driver's cuTensorMapEncodeTiled, looked up once through the runtime (no libcuda link). */
static inline mt_status mt_tensor_map_encoder(PFN_cuTensorMapEncodeTiled_v12000 *out) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode;
    if (!encode) {
        void *fn = NULL;
        cudaDriverEntryPointQueryResult got;
#if CUDART_VERSION >= 12050
        cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                         cudaEnableDefault, &got);
#else
        cudaError_t e =
            cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &got);
#endif
        if (e != cudaSuccess || got != cudaDriverEntryPointSuccess || !fn)
            return MT_ERROR(MT_ERR_CUDA, "the driver has no cuTensorMapEncodeTiled");
        encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    }
    *out = encode;
    return MT_OK;
}
#endif

#undef MT_SM90_ASM
#endif /* MT_SM90_CUH */
