/* GEMMs with the MLP's GELU epilogues on Hopper (sm_90a): C(M,N) = A(M,K) B(N,K)^T in bf16 with
 * f32 accumulation, for the two GEMMs whose cuBLASLt epilogues run far below its plain rate
 * (bench/README.md): fc1's forward (pre = A W^T + bias, C = GELU(pre)) and fc2's dX through
 * GELU' (C = (dY W) * GELU'(pre); W is transposed into the workspace first, 3072 x 768 at 124M).
 *
 * A persistent grid of 2-CTA clusters; each cluster walks 256 x 256 output tiles (CTA r of the
 * pair takes rows 128r..128r+127 of it), 64-deep K steps through a 3-stage ring:
 *   warp 0 (one thread)   TMA loads: its CTA's A tile (128 x 64), half of B's 256 x 64 tile
 *                         multicast into both CTAs of the cluster (B's L2 reads halve);
 *   warpgroups 1, 2       wgmma m64n256k16 on rows 0-63 / 64-127; at the tile's end they round
 *                         the f32 sums (+ bias) to bf16 into a staging tile in shared memory
 *                         and go on with the next tile;
 *   warps 1-3             the epilogue from the staging tile while the next tile is multiplied:
 *                         GELU (writing pre and C) or the product with GELU'(pre), 16-byte
 *                         stores of whole rows.
 * So the tensor cores wait only for the staging copy, not for the epilogue's memory traffic.
 * Rounding: pre is the bf16 sum; GELU and GELU' read it as mt_gelu_fwd / mt_gelu_bwd do after a
 * plain GEMM (the DGELU product rounds dY W to bf16 first, as that path does), with the hardware
 * tanh (tanh_hw).
 *
 * Opt-in (MT_GEMM_SM90=1), since it is slower than cuBLASLt's epilogues (nvidia-h100-x1,
 * bench_gemm M16384 N3072 K768, session 19): 388-398 TFLOP/s for fc1's GELU forward and 323 for
 * fc2's DGELU against cuBLASLt's 434 and 432. Its main loop alone runs at 670 TFLOP/s (cuBLASLt's
 * plain GEMM of the shape: 580), and with one 16-byte store stream in the epilogue at 580; the
 * second stream (pre, or DGELU's read of pre) brings both down to the rates above (also with both
 * outputs stored by bulk copies of the staging rows). Not a bandwidth limit: under ncu (session
 * 23) this kernel runs at 44% of L2 and 35% of DRAM throughput, cuBLASLt's GELU_AUX kernel at 53%
 * and 44%, so the epilogues are latency-bound. bench/README.md has the numbers. */

#include "../ops_impl.h"
#include "common.cuh"

#include <mt/wgmma.cuh>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GEMM_SM90_BODY 1
#else
#define GEMM_SM90_BODY 0
#endif

#if defined(MT_GEMM_SM90A)
namespace {

constexpr int BM = 128, BN = 256, BK = 64, ST = 3, CM = 2; /* CM: CTAs per cluster (along M) */
constexpr int EPAD = BN + 8; /* staging row stride (elements): conflict-free both ways */
constexpr int THREADS = 384, EPI_THREADS = 96; /* warps 1-3 */
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
constexpr int E_OFF = ST * (A_BYTES + B_BYTES), BAR_OFF = E_OFF + BM * EPAD * 2;
constexpr int SMEM_BYTES = BAR_OFF + 128 + 1024; /* barriers; 1024 for the swizzle alignment */
enum {
    EPI_GELU = 0,
    EPI_DGELU = 1
};

struct epi_args {
    __nv_bfloat16 *c, *pre; /* pre: written (GELU) or read (DGELU) */
    const __nv_bfloat16 *bias;
    long long ldc, ldpre;
    int M, N, K;
};

__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::
                     : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
/* TMA: the box at (c0 = column, c1 = row) of map into dst, on bar's transaction; _mc: into the
 * same offset in every CTA of `mask`, each on its own barrier at bar's offset. */
__device__ __forceinline__ void tma_2d(void *dst, const CUtensorMap *map, int c0, int c1,
                                       uint64_t *bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(mt_smem_u32(dst)),
                 "l"(map), "r"(c0), "r"(c1), "r"(mt_smem_u32(bar))
                 : "memory");
}
__device__ __forceinline__ void tma_2d_mc(void *dst, const CUtensorMap *map, int c0, int c1,
                                          uint64_t *bar, uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(mt_smem_u32(dst)),
                 "l"(map), "r"(c0), "r"(c1), "r"(mt_smem_u32(bar)), "h"(mask)
                 : "memory");
}
__device__ __forceinline__ void prefetch_l2(const void *p, uint32_t bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
}
/* After a wait: reads of d come after it. */
__device__ __forceinline__ void wg_pin(float (&d)[32][4]) {
#pragma unroll
    for (int i = 0; i < 32; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            asm volatile("" : "+f"(d[i][e])::"memory");
}

/* 8 bf16 of a 16-byte pack as floats, and back. */
__device__ __forceinline__ void unpack8(uint4 v, float (&f)[8]) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 t = __bfloat1622float2(h[i]);
        f[2 * i] = t.x, f[2 * i + 1] = t.y;
    }
}
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
    uint4 v;
    __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&v);
#pragma unroll
    for (int i = 0; i < 4; i++)
        h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return v;
}

/* GELU and GELU' with the hardware tanh (one MUFU op; relative error about 2^-11, under bf16's
 * 2^-9 rounding of the result): the epilogue warps' arithmetic must keep up with the tensor
 * cores. */
__device__ __forceinline__ float tanh_hw(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float gelu_epi(float x) {
    const float h = 0.5f * x;
    return fmaf(h, tanh_hw(0.7978845608028654f * x * fmaf(0.044715f, x * x, 1.0f)), h);
}
__device__ __forceinline__ float gelu_grad_epi(float x) {
    const float x2 = x * x, t = tanh_hw(0.7978845608028654f * x * fmaf(0.044715f, x2, 1.0f));
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * 0.7978845608028654f * fmaf(3.0f * 0.044715f, x2, 1.0f);
}

/* The cluster's i-th tile pair: its first rows (this CTA's) and columns. */
struct tile_at {
    int m0, n0;
};
__device__ __forceinline__ tile_at tile_of(int p, int nt, uint32_t rank) {
    return { (p / nt * CM + (int)rank) * BM, p % nt * BN };
}

template <int EPI>
__global__ void __launch_bounds__(THREADS, 1)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap tmA,
                     const __grid_constant__ CUtensorMap tmB, const epi_args e) {
#if GEMM_SM90_BODY
    extern __shared__ uint8_t smem_raw[];
    // why: the 128-byte swizzle repeats every 1024 bytes, and TMA and wgmma agree on it only there
    uint8_t *sm = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    __nv_bfloat16 *sA = (__nv_bfloat16 *)sm, *sB = (__nv_bfloat16 *)(sm + ST * A_BYTES),
                  *sE = (__nv_bfloat16 *)(sm + E_OFF);
    uint64_t *full = (uint64_t *)(sm + BAR_OFF), *empty = full + ST, *efull = empty + ST,
             *eempty = efull + 1;
    const int tid = threadIdx.x, wg = tid / 128, warp = tid / 32, lane = tid % 32;
    const uint32_t rank = cluster_rank();
    const int nt = e.N / BN, KT = e.K / BK, pairs = e.M / (BM * CM) * nt;
    const int cid = blockIdx.x / CM, ncl = gridDim.x / CM;
    if (tid == 0) {
        for (int s = 0; s < ST; s++)
            mt_mbar_init(&full[s], 1), mt_mbar_init(&empty[s], 8 * CM); /* every consumer warp */
        mt_mbar_init(efull, 256), mt_mbar_init(eempty, EPI_THREADS);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    cluster_sync();

    if (wg == 0) {
        if (warp == 0) {
            if (lane == 0) { /* producer */
                int it = 0;
                for (int p = cid; p < pairs; p += ncl) {
                    const tile_at t = tile_of(p, nt, rank);
                    for (int kt = 0; kt < KT; kt++, it++) {
                        const int s = it % ST;
                        mt_mbar_wait(&empty[s], ((it / ST) & 1) ^ 1);
                        mt_mbar_expect(&full[s], A_BYTES + B_BYTES);
                        tma_2d(sA + s * BM * BK, &tmA, kt * BK, t.m0, &full[s]);
                        tma_2d_mc(sB + s * BN * BK + rank * (BN / CM) * BK, &tmB, kt * BK,
                                  t.n0 + (int)rank * (BN / CM), &full[s], (1 << CM) - 1);
                    }
                }
            }
        } else { /* epilogue warps */
            const int et = tid - 32;
            int tc = 0;
            for (int p = cid; p < pairs; p += ncl, tc++) {
                const tile_at t = tile_of(p, nt, rank);
                if (EPI == EPI_DGELU && p + ncl < pairs) { /* the next tile's pre into L2 */
                    const tile_at u = tile_of(p + ncl, nt, rank);
                    for (int r = et; r < BM; r += EPI_THREADS)
                        prefetch_l2(e.pre + (u.m0 + r) * e.ldpre + u.n0, BN * 2);
                }
                mt_mbar_wait(efull, tc & 1);
                constexpr int CH = BN / 8;                  /* 16-byte chunks of a row */
                constexpr int U = EPI == EPI_DGELU ? 4 : 2; /* chunks in flight (pre from L2) */
                for (int i0 = et; i0 < BM * CH; i0 += U * EPI_THREADS) {
                    uint4 v[U], g[U];
#pragma unroll
                    for (int u = 0; u < U; u++) { /* loads first: pre comes from L2 */
                        const int i = min(i0 + u * EPI_THREADS, BM * CH - 1);
                        v[u] = *(const uint4 *)(sE + i / CH * EPAD + i % CH * 8);
                        if (EPI == EPI_DGELU)
                            g[u] = *(const uint4 *)(e.pre + (t.m0 + i / CH) * e.ldpre + t.n0 +
                                                    i % CH * 8);
                    }
#pragma unroll
                    for (int u = 0; u < U; u++) {
                        const int i = i0 + u * EPI_THREADS;
                        if (i >= BM * CH) break;
                        const long long gm = t.m0 + i / CH;
                        const int gn = t.n0 + i % CH * 8;
                        float f[8];
                        unpack8(v[u], f);
                        if (EPI == EPI_GELU) {
                            if (e.pre) *(uint4 *)(e.pre + gm * e.ldpre + gn) = v[u];
#pragma unroll
                            for (int j = 0; j < 8; j++)
                                f[j] = gelu_epi(f[j]);
                        } else {
                            float d[8];
                            unpack8(g[u], d);
#pragma unroll
                            for (int j = 0; j < 8; j++)
                                f[j] *= gelu_grad_epi(d[j]);
                        }
                        *(uint4 *)(e.c + gm * e.ldc + gn) = pack8(f);
                    }
                }
                mt_mbar_arrive(eempty);
            }
        }
    } else { /* consumers: rows 64 (wg - 1) .. of the tile */
        const int cw = wg - 1;
        float acc[32][4];
        int it = 0, tc = 0;
        for (int p = cid; p < pairs; p += ncl, tc++) {
            const tile_at t = tile_of(p, nt, rank);
            for (int kt = 0; kt < KT; kt++, it++) {
                const int s = it % ST;
                mt_mbar_wait(&full[s], (it / ST) & 1);
                mt_wgmma_fence();
                const __nv_bfloat16 *a = sA + s * BM * BK + cw * 64 * BK, *b = sB + s * BN * BK;
#pragma unroll
                for (int kk = 0; kk < BK / 16; kk++)
                    wg_ss<__nv_bfloat16, 256, 0, 0>::mma(acc, mt_wgmma_desc(a + kk * 16, 16),
                                                         mt_wgmma_desc(b + kk * 16, 16),
                                                         kt > 0 || kk > 0);
                mt_wgmma_commit();
                mt_wgmma_wait<1>(); /* the previous step's wgmma is done with its stage */
                if (kt > 0 && lane == 0)
                    for (uint32_t r = 0; r < CM; r++)
                        mt_mbar_arrive_cluster(&empty[(it - 1) % ST], r);
            }
            mt_wgmma_wait<0>();
            wg_pin(acc);
            if (lane == 0)
                for (uint32_t r = 0; r < CM; r++)
                    mt_mbar_arrive_cluster(&empty[(it - 1) % ST], r);
            /* the staging tile, once the epilogue warps are done with the last one */
            mt_mbar_wait(eempty, (tc & 1) ^ 1);
            const int row = cw * 64 + (warp % 4) * 16 + lane / 4, q = lane % 4;
            __nv_bfloat16 *e0 = sE + row * EPAD + 2 * q, *e1 = e0 + 8 * EPAD;
#pragma unroll
            for (int j = 0; j < 32; j++) {
                float2 bb = make_float2(0.0f, 0.0f);
                if (EPI == EPI_GELU && e.bias)
                    bb = __bfloat1622float2(
                        *(const __nv_bfloat162 *)(e.bias + t.n0 + 8 * j + 2 * q));
                *(__nv_bfloat162 *)(e0 + 8 * j) =
                    __floats2bfloat162_rn(acc[j][0] + bb.x, acc[j][1] + bb.y);
                *(__nv_bfloat162 *)(e1 + 8 * j) =
                    __floats2bfloat162_rn(acc[j][2] + bb.x, acc[j][3] + bb.y);
            }
            mt_mbar_arrive(efull);
        }
    }
    __syncwarp();
    cluster_sync(); /* no CTA leaves while the other may still write to its shared memory */
#endif
}

/* out(N,K) = in(K,N)^T, bf16 (W for fc2's dX GEMM, whose B must be K-major). */
__global__ void transpose_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *in, int K, int N,
                                 long long ld_in) {
    __shared__ __nv_bfloat16 t[32][33];
    const int n0 = blockIdx.x * 32, k0 = blockIdx.y * 32;
    for (int r = threadIdx.y; r < 32; r += 8)
        if (k0 + r < K && n0 + (int)threadIdx.x < N)
            t[r][threadIdx.x] = in[(long long)(k0 + r) * ld_in + n0 + threadIdx.x];
    __syncthreads();
    for (int r = threadIdx.y; r < 32; r += 8)
        if (n0 + r < N && k0 + (int)threadIdx.x < K)
            out[(long long)(n0 + r) * K + k0 + threadIdx.x] = t[threadIdx.x][r];
}

} // namespace
#endif /* MT_GEMM_SM90A */

#if defined(MT_GEMM_SM90A)
static long long sm90_calls; /* GEMMs run here (mt_gemm_sm90_count) */
static int sm90_clusters(void);
#endif

extern "C" long long mt_gemm_sm90_count(void) {
#if defined(MT_GEMM_SM90A)
    return sm90_clusters() > 0 ? sm90_calls : -1;
#else
    return -1;
#endif
}

#if defined(MT_GEMM_SM90A)
/* Off unless MT_GEMM_SM90=1 (read on every call): slower than cuBLASLt's epilogues here (see the
 * comment at the top). */
static int sm90_on(void) {
    return mt_env_int("MT_GEMM_SM90", 0) == 1;
}

/* The K-major (rows x K, row stride ld elements) bf16 operand at base as a TMA map of
 * (64 columns x box_rows) boxes in the 128-byte swizzle. */
static mt_status kmajor_map(CUtensorMap *m, const void *base, long long rows, long long K,
                            long long ld, int box_rows) {
    PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    MT_TRY(mt_tensor_map_encoder(&encode));
    cuuint64_t dim[2] = { (cuuint64_t)K, (cuuint64_t)rows }, stride[1] = { (cuuint64_t)ld * 2 };
    cuuint32_t box[2] = { BK, (cuuint32_t)box_rows }, step[2] = { 1, 1 };
    CUresult r = encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dim, stride, box,
                        step, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return MT_ERROR(MT_ERR_CUDA, "gemm: cuTensorMapEncodeTiled failed (%d) for %lld x %lld",
                        (int)r, rows, K);
    return MT_OK;
}

/* Whether this process's device runs sm_90a code, and the clusters it holds at once. */
static int sm90_clusters(void) {
    static int n = -1;
    if (n >= 0) return n;
    int dev = 0, major = 0, minor = 0;
    n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        major != 9 || minor != 0)
        return n;
    auto k0 = gemm_sm90_kernel<EPI_GELU>, k1 = gemm_sm90_kernel<EPI_DGELU>;
    if (cudaFuncSetAttribute(k0, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES) !=
            cudaSuccess ||
        cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES) !=
            cudaSuccess) {
        (void)cudaGetLastError();
        return n;
    }
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = CM, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
    cfg.gridDim = dim3(CM * 64), cfg.blockDim = dim3(THREADS), cfg.dynamicSmemBytes = SMEM_BYTES;
    cfg.attrs = &at, cfg.numAttrs = 1;
    int c = 0;
    if (cudaOccupancyMaxActiveClusters(&c, (void *)k0, &cfg) != cudaSuccess) c = 0;
    (void)cudaGetLastError();
    n = c;
    return n;
}
#endif

extern "C" mt_status gemm_sm90_cuda(const gemm_args *g, void *ws, size_t ws_bytes,
                                    mt_stream stream) {
#if !defined(MT_GEMM_SM90A)
    (void)g, (void)ws, (void)ws_bytes, (void)stream;
    return MT_ERR_UNSUPPORTED; /* not built for sm_90a: no message to format on every GEMM */
#else
    if (!sm90_on()) return MT_ERR_UNSUPPORTED; /* the default: the same, cheaply */
    const int epi = g->dgelu ? EPI_DGELU : EPI_GELU;
    const size_t wt_bytes = (size_t)g->N * (size_t)g->K * 2;
    /* the layouts, shapes and epilogues these kernels take; cuBLASLt does the rest */
    int ok = g->ab_dtype == MT_BF16 && g->c_dtype == MT_BF16 && g->batch == 1 && g->alpha == 1.0f &&
             g->beta == 0.0f && g->pre_gelu && !g->trans_a &&
             (g->dgelu ? !g->trans_b && !g->bias && wt_bytes <= ws_bytes : g->gelu && g->trans_b) &&
             g->M % (BM * CM) == 0 && g->N % BN == 0 && g->K % BK == 0 && g->K > 0 &&
             g->M <= INT32_MAX && g->lda % 8 == 0 && g->ldb % 8 == 0 && g->ldc % 8 == 0 &&
             g->ldpre % 8 == 0 && (uintptr_t)g->a % 16 == 0 && (uintptr_t)g->b % 16 == 0 &&
             (uintptr_t)g->c % 16 == 0 && (uintptr_t)g->pre_gelu % 16 == 0 &&
             (uintptr_t)g->bias % 4 == 0;
    if (!ok) return MT_ERROR(MT_ERR_UNSUPPORTED, "gemm: not a case of the sm_90a GELU kernels");
    const int clusters = sm90_clusters();
    if (clusters <= 0) return MT_ERROR(MT_ERR_UNSUPPORTED, "gemm: no sm_90 device");
    cudaStream_t s = (cudaStream_t)stream;
    const void *b = g->b;
    if (g->dgelu) { /* W(K,N) -> W^T(N,K) in the workspace (idle between GEMMs of a stream) */
        transpose_kernel<<<dim3((unsigned)(g->N + 31) / 32, (unsigned)(g->K + 31) / 32),
                           dim3(32, 8), 0, s>>>((__nv_bfloat16 *)ws, (const __nv_bfloat16 *)g->b,
                                                (int)g->K, (int)g->N, (long long)g->ldb);
        MT_CUDA_TRY(cudaGetLastError());
        b = ws;
    }
    CUtensorMap ma, mb;
    MT_TRY(kmajor_map(&ma, g->a, g->M, g->K, g->lda, BM));
    MT_TRY(kmajor_map(&mb, b, g->N, g->K, g->dgelu ? g->K : g->ldb, BN / CM));
    epi_args e;
    e.c = (__nv_bfloat16 *)g->c, e.pre = (__nv_bfloat16 *)g->pre_gelu;
    e.bias = (const __nv_bfloat16 *)g->bias;
    e.ldc = g->ldc, e.ldpre = g->ldpre;
    e.M = (int)g->M, e.N = (int)g->N, e.K = (int)g->K;
    /* MT_GEMM_SM90_CTAS caps the grid (tests: several tiles per CTA at small shapes) */
    int grid = CM * clusters;
    const int cap = mt_env_int("MT_GEMM_SM90_CTAS", 0);
    if (cap >= CM && cap < grid) grid = cap / CM * CM;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = CM, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
    cfg.gridDim = dim3((unsigned)grid), cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = SMEM_BYTES, cfg.stream = s, cfg.attrs = &at, cfg.numAttrs = 1;
    if (epi == EPI_GELU)
        MT_CUDA_TRY(cudaLaunchKernelEx(&cfg, gemm_sm90_kernel<EPI_GELU>, ma, mb, e));
    else
        MT_CUDA_TRY(cudaLaunchKernelEx(&cfg, gemm_sm90_kernel<EPI_DGELU>, ma, mb, e));
    sm90_calls++;
    return MT_OK;
#endif
}
