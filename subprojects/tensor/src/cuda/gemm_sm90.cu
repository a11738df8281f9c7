/* GEMMs with the MLP's GELU epilogues on Hopper (sm_90a): C(M,N) = A(M,K) op(B) in bf16 with f32
 * accumulation, for the two GEMMs whose cuBLASLt epilogues run far below its plain rate
 * (bench/README.md): fc1's forward (pre = A W^T + bias, C = GELU(pre); W is (N, K)) and fc2's dX
 * through GELU' (C = (dY W) * GELU'(pre); W is (K, N)), which can also leave the column sums of C
 * (fc1's bias gradient) as partial sums per 32 rows.
 *
 * A persistent grid of 2-CTA clusters along M; the pair shares B's tile (each CTA loads half and
 * multicasts it), so the cluster walks 256 x 128 output tiles, 128 x 128 a CTA:
 *   warp 0 (one thread)   TMA loads of 128 x 64 A and 64 x 128 B tiles into a ring of 6 (GELU)
 *                         or 5 (DGELU) stages;
 *   warpgroups 1, 2       "ping-pong": each owns every other tile of the CTA and runs its whole
 *                         main loop (wgmma m64n128k16, two per 16-deep step) while the other
 *                         runs its epilogue; named barriers hand the tensor cores over after each
 *                         main loop (which also keeps a warpgroup from waiting on a ring stage's
 *                         barrier more than one phase ahead).
 * The epilogue rounds the accumulators (+ bias) to bf16, applies GELU or the product with GELU'
 * (pre's tile arrives by TMA while the main loop runs) and hands the tile to TMA stores through a
 * 128-byte-swizzled staging tile in shared memory. Setmaxnreg gives the consumers 232 registers.
 * Rounding: pre is the bf16 sum (+ bias); GELU reads that rounded value, as mt_gelu_fwd after a
 * plain GEMM does; GELU' multiplies the f32 product; both with the hardware tanh (tanh_hw). The
 * column sums add the f32 values before they are rounded.
 *
 * On by default where built for sm_90a and run on an sm_90 device; MT_GEMM_SM90=0 hands both to
 * cuBLASLt. nvidia-h100-x1, M65536 N3072 K768 (GPT-2 124M at 64 sequences): GELU forward 497 us
 * against cuBLASLt's GELU_AUX_BIAS 588, DGELU 544 against 570 (and fc1's bias column sum, 92 us,
 * comes with it); bench/README.md has the rest. */

#include "../ops_impl.h"
#include "common.cuh"

#include <mt/wgmma.cuh>

#include <type_traits>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GEMM_SM90_BODY 1
#else
#define GEMM_SM90_BODY 0
#endif

#if defined(MT_GEMM_SM90A)
namespace {

enum {
    EPI_GELU = 0,
    EPI_DGELU = 1,
    EPI_DGELU_ACT = 2 /* DGELU that also stores GELU(pre): an activation recomputed */
};
constexpr int BM = 128, BN = 128, BK = 64, CM = 2; /* CM: CTAs per cluster (along M) */
constexpr int THREADS = 384;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
/* GELU stages its outputs 64 rows at a time (16 KB a warpgroup) and keeps 6 ring stages;
 * DGELU holds pre's whole tile (32 KB a warpgroup) and keeps 5 */
template <int EPI> struct cfg {
    static constexpr int ST = EPI == EPI_GELU ? 6 : 5, E_BYTES = EPI == EPI_GELU ? 16384 : 32768;
    static constexpr int E_OFF = ST * (A_BYTES + B_BYTES), BAR_OFF = E_OFF + 2 * E_BYTES;
    static constexpr int SMEM_BYTES = BAR_OFF + 256 + 1024; /* barriers; 1024: swizzle alignment */
};
constexpr int SMEM_BYTES = cfg<EPI_GELU>::SMEM_BYTES > cfg<EPI_DGELU>::SMEM_BYTES
                               ? cfg<EPI_GELU>::SMEM_BYTES
                               : cfg<EPI_DGELU>::SMEM_BYTES;

struct epi_args {
    const __nv_bfloat16 *bias; /* GELU: (N) or NULL */
    float *colsum;             /* DGELU: partial column sums of C, (M / 32, N), or NULL */
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
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *map, int c0, int c1,
                                             const void *src) {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(map),
        "r"(c0), "r"(c1), "r"(mt_smem_u32(src))
        : "memory");
}
__device__ __forceinline__ void bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read0() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait0() {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
__device__ __forceinline__ void fence_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
template <int N> __device__ __forceinline__ void pin(float (&d)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            asm volatile("" : "+f"(d[i][e])::"memory");
}
__device__ __forceinline__ float tanh_hw(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
/* GELU (tanh form) and its derivative with sqrt(2/pi) folded into the cubic's constants */
constexpr float K0 = 0.7978845608028654f, K1 = 0.7978845608028654f * 0.044715f;
__device__ __forceinline__ float gelu_epi(float x) {
    const float h = 0.5f * x;
    return fmaf(h, tanh_hw(x * fmaf(K1, x * x, K0)), h);
}
/* GELU'(x), and GELU(x) in *act, bitwise as gelu_epi (the same tanh) */
__device__ __forceinline__ float gelu_grad_epi(float x, float *act) {
    const float x2 = x * x, t = tanh_hw(x * fmaf(K1, x2, K0)), h = 0.5f * x;
    *act = fmaf(h, t, h);
    /* 0.5 (1 + t) + 0.5 x (1 - t^2) (K0 + 3 K1 x^2) */
    return fmaf(0.5f, fmaf(x * fmaf(-t, t, 1.0f), fmaf(3.0f * K1, x2, K0), t), 0.5f);
}

__device__ __forceinline__ void st_b32(uint32_t a, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_b32(uint32_t a) {
    uint32_t v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ uint32_t pack2(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(uint32_t *)&h;
}
// why: bit ops, not conversions: F2F/F2FP run at 16 a clock per SM, like MUFU (-4% measured)
__device__ __forceinline__ float2 unpack2(uint32_t v) {
    return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
}

struct tile_at {
    int m0, n0;
};
__device__ __forceinline__ tile_at tile_of(int p, int nt, uint32_t rank) {
    return { (p / nt * CM + (int)rank) * BM, p % nt * BN };
}

template <int EPI>
__global__ void __launch_bounds__(THREADS, 1)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap tmA,
                     const __grid_constant__ CUtensorMap tmB,
                     const __grid_constant__ CUtensorMap tmC,
                     const __grid_constant__ CUtensorMap tmP,
                     const __grid_constant__ CUtensorMap tmX, const epi_args e) {
#if GEMM_SM90_BODY
    constexpr int ST = cfg<EPI>::ST, E_BYTES = cfg<EPI>::E_BYTES, E_OFF = cfg<EPI>::E_OFF,
                  BAR_OFF = cfg<EPI>::BAR_OFF;
    extern __shared__ uint8_t smem_raw[];
    uint8_t *sm = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    __nv_bfloat16 *sA = (__nv_bfloat16 *)sm, *sB = (__nv_bfloat16 *)(sm + ST * A_BYTES);
    uint8_t *sE = sm + E_OFF;
    uint64_t *full = (uint64_t *)(sm + BAR_OFF), *empty = full + ST, *pbar = empty + ST;
    // why: a warp-uniform warpgroup index lets the compiler keep the ring's addresses and the
    // wgmma descriptors in uniform registers
    const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0), lane = tid % 32;
    const uint32_t rank = cluster_rank();
    const int nt = e.N / BN, KT = e.K / BK, pairs = e.M / (BM * CM) * nt;
    const int cid = blockIdx.x / CM, ncl = gridDim.x / CM;
    if (tid == 0) {
        for (int s = 0; s < ST; s++)
            mt_mbar_init(&full[s], 1), mt_mbar_init(&empty[s], 4 * CM);
        mt_mbar_init(&pbar[0], 1), mt_mbar_init(&pbar[1], 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    cluster_sync();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (tid == 0) { /* producer */
            int it = 0;
            for (int p = cid; p < pairs; p += ncl) {
                const tile_at t = tile_of(p, nt, rank);
                for (int kt = 0; kt < KT; kt++, it++) {
                    const int s = it % ST;
                    mt_mbar_wait(&empty[s], ((it / ST) & 1) ^ 1);
                    mt_mbar_expect(&full[s], A_BYTES + B_BYTES);
                    tma_2d(sA + s * BM * BK, &tmA, kt * BK, t.m0, &full[s]);
                    if (EPI != EPI_GELU) /* B = W (K x N): its N-major panel rank */
                        tma_2d_mc(sB + s * BN * BK + rank * 64 * 64, &tmB, t.n0 + 64 * (int)rank,
                                  kt * BK, &full[s], (1 << CM) - 1);
                    else /* B (N x K), K-major: rows rank * 64.. of the tile */
                        tma_2d_mc(sB + s * BN * BK + rank * (BN / CM) * BK, &tmB, kt * BK,
                                  t.n0 + (int)rank * (BN / CM), &full[s], (1 << CM) - 1);
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int c = wg - 1, ct = tid - 128 * wg, w = ct / 32;
        uint8_t *E = sE + c * E_BYTES;
        float acc[2][16][4];
        /* B N-major (DGELU): two 64-column panels of 64 k-rows, 8 KB apart; 16 k-rows = 2 KB */
        constexpr int TB = EPI != EPI_GELU, DB_K = TB ? 128 : 2;
        const uint64_t da0 = mt_wgmma_desc(sA, 16), db0 = mt_wgmma_desc(sB, TB ? 8192 : 16);
        int j = c;
        for (int p = cid + c * ncl; p < pairs; p += 2 * ncl, j += 2) {
            const tile_at t = tile_of(p, nt, rank);
            if (EPI != EPI_GELU && ct == 0) { /* pre's tile into E once its last store read it */
                bulk_wait_read0();
                mt_mbar_expect(&pbar[c], E_BYTES);
                for (int b = 0; b < 4; b++) /* E0 = rows 0-63, E1 = rows 64-127; two panels each */
                    tma_2d(E + b * 8192, &tmP, t.n0 + 64 * (b & 1), t.m0 + 64 * (b >> 1), &pbar[c]);
            }
            /* the tensor cores in turns: wait for the other warpgroup's main loop */
            if (j > 0) bar_sync(3 + c, 256);
            int it = j * KT;
            for (int kt = 0; kt < KT; kt++, it++) {
                const int s = it % ST;
                mt_mbar_wait(&full[s], (it / ST) & 1);
                mt_wgmma_fence();
                /* descriptors: the start address (16-byte units) is the low field; +2 per 16
                 * columns inside the swizzled 128-byte rows, +512 for rows 64-127 of A */
                const uint64_t da = da0 + (uint64_t)(s * (A_BYTES >> 4)),
                               db = db0 + (uint64_t)(s * (B_BYTES >> 4));
#pragma unroll
                for (int kk = 0; kk < BK / 16; kk++) {
                    wg_ss<__nv_bfloat16, 128, 0, TB>::mma(acc[0], da + 2 * kk, db + DB_K * kk,
                                                          kt > 0 || kk > 0);
                    wg_ss<__nv_bfloat16, 128, 0, TB>::mma(acc[1], da + 512 + 2 * kk, db + DB_K * kk,
                                                          kt > 0 || kk > 0);
                }
                mt_wgmma_commit();
                mt_wgmma_wait<1>();
                if (kt > 0 && lane == 0)
                    for (uint32_t r = 0; r < CM; r++)
                        mt_mbar_arrive_cluster(&empty[(it - 1) % ST], r);
            }
            /* the other's turn, while this tile's last MMAs drain (its waits are all done) */
            if (p + ncl < pairs) bar_arrive(3 + (1 - c), 256);
            mt_wgmma_wait<0>();
            pin(acc[0]);
            pin(acc[1]);
            if (lane == 0)
                for (uint32_t r = 0; r < CM; r++)
                    mt_mbar_arrive_cluster(&empty[(it - 1) % ST], r);

            /* epilogue: E holds 64-row halves (DGELU two, GELU one), each two 64-column panels of
             * 64 128-byte rows in the 128-byte swizzle, stored by TMA as soon as written */
            const int lr = lane / 4, q = lane % 4;
            /* this thread's (row 16w + lane/4, columns 2q, 2q+1) in a half, with the row's
             * swizzle (row % 8 = lane / 4) folded in: chunk jj % 8 is an XOR away */
            const uint32_t eb =
                mt_smem_u32(E) + (uint32_t)(((16 * w + lr) * 128 + 4 * q) | (lr << 4));
            auto at = [&](int b, int jj, int hr) {
                return (eb ^ ((jj & 7) << 4)) + b * 16384 + (jj >> 3) * 8192 + hr * 1024;
            };
            /* one thread: half b of E as rows 64 h.. of the tile */
            auto store_half = [&](const CUtensorMap *m, int b, int h) {
                tma_store_2d(m, t.n0, t.m0 + 64 * h, E + b * 16384);
                tma_store_2d(m, t.n0 + 64, t.m0 + 64 * h, E + b * 16384 + 8192);
                bulk_commit();
            };
            /* v through half b of E once its last store has read it, stored as rows 64 h.. */
            auto stage = [&](const uint32_t(&v)[16][2], const CUtensorMap *m, int b, int h) {
                if (ct == 0) bulk_wait_read0();
                bar_sync(1 + c, 128);
#pragma unroll
                for (int jj = 0; jj < 16; jj++)
#pragma unroll
                    for (int hr = 0; hr < 2; hr++)
                        st_b32(at(b, jj, hr), v[jj][hr]);
                fence_async_smem();
                bar_sync(1 + c, 128);
                if (ct == 0) store_half(m, b, h);
            };
            if (EPI == EPI_GELU) {
                /* four steps a tile (pre, GELU(pre) of rows 0-63, then of rows 64-127) through one
                 * 64-row staging half (E is 16 KB here), each once the last store has read it */
                float2 bb[16];
#pragma unroll
                for (int jj = 0; jj < 16; jj++)
                    bb[jj] = e.bias ? __bfloat1622float2(
                                          *(const __nv_bfloat162 *)(e.bias + t.n0 + 8 * jj + 2 * q))
                                    : make_float2(0.0f, 0.0f);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    uint32_t v[16][2];
#pragma unroll
                    for (int jj = 0; jj < 16; jj++)
#pragma unroll
                        for (int hr = 0; hr < 2; hr++)
                            v[jj][hr] = pack2(acc[h][jj][2 * hr] + bb[jj].x,
                                              acc[h][jj][2 * hr + 1] + bb[jj].y);
#pragma unroll
                    for (int b = 0; b < 2; b++) { /* b = 0: pre, 1: GELU(pre) */
                        if (b == 1)
#pragma unroll
                            for (int jj = 0; jj < 16; jj++)
#pragma unroll
                                for (int hr = 0; hr < 2; hr++) {
                                    const float2 x = unpack2(v[jj][hr]);
                                    v[jj][hr] = pack2(gelu_epi(x.x), gelu_epi(x.y));
                                }
                        stage(v, b ? &tmC : &tmP, 0, h);
                    }
                }
            } else {
                mt_mbar_wait(&pbar[c], (j / 2) & 1);
                float2 cs[16];
#pragma unroll
                for (int jj = 0; jj < 16; jj++)
                    cs[jj] = make_float2(0.0f, 0.0f);
#pragma unroll
                for (int h = 0; h < 2; h++) { /* in place: pre's rows of half h -> C's */
                    uint32_t g[16][2];        /* pre, loaded first: the loads' latencies overlap */
#pragma unroll
                    for (int jj = 0; jj < 16; jj++)
#pragma unroll
                        for (int hr = 0; hr < 2; hr++)
                            g[jj][hr] = ld_b32(at(h, jj, hr));
#pragma unroll
                    for (int jj = 0; jj < 16; jj++)
#pragma unroll
                        for (int hr = 0; hr < 2; hr++) {
                            const float2 x = unpack2(g[jj][hr]);
                            float a0, a1;
                            const float y0 = acc[h][jj][2 * hr] * gelu_grad_epi(x.x, &a0),
                                        y1 = acc[h][jj][2 * hr + 1] * gelu_grad_epi(x.y, &a1);
                            st_b32(at(h, jj, hr), pack2(y0, y1));
                            cs[jj].x += y0, cs[jj].y += y1;
                            if (EPI == EPI_DGELU_ACT) g[jj][hr] = pack2(a0, a1);
                        }
                    fence_async_smem();
                    bar_sync(1 + c, 128);
                    if (ct == 0) store_half(&tmC, h, h);
                    if (EPI == EPI_DGELU_ACT) stage(g, &tmX, h, h); /* GELU(pre), after C */
                }
                if (e.colsum) {
                    /* the warp's 32 rows' column sums, as a reduce-scatter over the 8 lanes of a
                     * column (lane / 4): 16 + 8 + 4 shuffles; lane ends with 4 of the 32 */
                    float v[32];
#pragma unroll
                    for (int jj = 0; jj < 16; jj++)
                        v[2 * jj] = cs[jj].x, v[2 * jj + 1] = cs[jj].y;
                    /* 2n values -> n with the partner lane ^ n; `up` keeps the upper n */
                    auto fold = [&](auto nc) {
                        constexpr int n = decltype(nc)::value;
                        const bool up = lane & n;
#pragma unroll
                        for (int i = 0; i < n; i++) {
                            const float mine = up ? v[n + i] : v[i], give = up ? v[i] : v[n + i];
                            v[i] = mine + __shfl_xor_sync(0xffffffffu, give, n);
                        }
                    };
                    fold(std::integral_constant<int, 16>());
                    fold(std::integral_constant<int, 8>());
                    fold(std::integral_constant<int, 4>());
                    /* v[0..3] = values 16 b4 + 8 b3 + 4 b2 + 0..3 (b: lane bits, so 4 lr + 0..3):
                     * columns 8 jj + 2 q + (0, 1) of jj = 2 lr and 2 lr + 1 */
                    const int jj0 = 2 * lr;
                    float *dst = e.colsum + (size_t)(t.m0 / 32 + w) * e.N + t.n0 + 8 * jj0 + 2 * q;
                    *(float2 *)dst = make_float2(v[0], v[1]);
                    *(float2 *)(dst + 8) = make_float2(v[2], v[3]);
                }
            }
        }
        if (ct == 0) bulk_wait0();
    }
    __syncwarp();
    cluster_sync(); /* no CTA leaves while the other may still write to its shared memory */
#endif
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
/* On unless MT_GEMM_SM90=0 (read on every call: gpu_gemm switches it between calls). */
static int sm90_on(void) {
    return mt_env_int("MT_GEMM_SM90", 1) != 0;
}

/* The row-major bf16 matrix at base (rows x cols, row stride ld elements) as a TMA map of
 * 64-column x box_rows boxes in the 128-byte swizzle. */
static mt_status tile_map(CUtensorMap *m, const void *base, long long rows, long long cols,
                          long long ld, int box_rows) {
    PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    MT_TRY(mt_tensor_map_encoder(&encode));
    cuuint64_t dim[2] = { (cuuint64_t)cols, (cuuint64_t)rows }, stride[1] = { (cuuint64_t)ld * 2 };
    cuuint32_t box[2] = { 64, (cuuint32_t)box_rows }, step[2] = { 1, 1 };
    CUresult r = encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dim, stride, box,
                        step, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return MT_ERROR(MT_ERR_CUDA, "gemm: cuTensorMapEncodeTiled failed (%d) for %lld x %lld",
                        (int)r, rows, cols);
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
    auto k0 = gemm_sm90_kernel<EPI_GELU>; /* the occupancy below is k0's: all take SMEM_BYTES */
    for (auto k : { k0, gemm_sm90_kernel<EPI_DGELU>, gemm_sm90_kernel<EPI_DGELU_ACT> })
        if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES) !=
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

extern "C" mt_status gemm_sm90_cuda(const gemm_args *g, mt_stream stream) {
#if !defined(MT_GEMM_SM90A)
    (void)g, (void)stream;
    return MT_ERR_UNSUPPORTED; /* not built for sm_90a: no message to format on every GEMM */
#else
    if (!sm90_on()) return MT_ERR_UNSUPPORTED; /* switched off: the same, cheaply */
    const int epi = !g->dgelu ? EPI_GELU : g->gelu_out ? EPI_DGELU_ACT : EPI_DGELU;
    /* the layouts, shapes and epilogues these kernels take; cuBLASLt does the rest */
    int ok = g->ab_dtype == MT_BF16 && g->c_dtype == MT_BF16 && g->batch == 1 && g->alpha == 1.0f &&
             g->beta == 0.0f && g->pre_gelu && !g->trans_a &&
             (g->dgelu ? !g->trans_b && !g->bias
                       : g->gelu && g->trans_b && !g->colsum && !g->gelu_out) &&
             g->M % (BM * CM) == 0 && g->N % BN == 0 && g->K % BK == 0 && g->K > 0 &&
             g->M <= INT32_MAX && g->N <= INT32_MAX && g->lda % 8 == 0 && g->ldb % 8 == 0 &&
             g->ldc % 8 == 0 && g->ldpre % 8 == 0 && (uintptr_t)g->a % 16 == 0 &&
             (uintptr_t)g->b % 16 == 0 && (uintptr_t)g->c % 16 == 0 &&
             (uintptr_t)g->pre_gelu % 16 == 0 && (uintptr_t)g->bias % 4 == 0 &&
             (uintptr_t)g->colsum % 8 == 0 && g->ldgo % 8 == 0 && (uintptr_t)g->gelu_out % 16 == 0;
    if (!ok) return MT_ERROR(MT_ERR_UNSUPPORTED, "gemm: not a case of the sm_90a GELU kernels");
    const int clusters = sm90_clusters();
    if (clusters <= 0) return MT_ERROR(MT_ERR_UNSUPPORTED, "gemm: no sm_90 device");
    CUtensorMap ma, mb, mc, mp, mx;
    MT_TRY(tile_map(&ma, g->a, g->M, g->K, g->lda, BM));
    if (g->dgelu)
        MT_TRY(tile_map(&mb, g->b, g->K, g->N, g->ldb, 64)); /* W (K, N): 64 x 64 boxes */
    else
        MT_TRY(tile_map(&mb, g->b, g->N, g->K, g->ldb, BN / CM)); /* W (N, K) */
    MT_TRY(tile_map(&mc, g->c, g->M, g->N, g->ldc, 64));
    MT_TRY(tile_map(&mp, g->pre_gelu, g->M, g->N, g->ldpre, 64));
    if (g->gelu_out)
        MT_TRY(tile_map(&mx, g->gelu_out, g->M, g->N, g->ldgo, 64));
    else
        mx = mc; /* unused */
    epi_args e;
    e.bias = (const __nv_bfloat16 *)g->bias;
    e.colsum = g->colsum;
    e.M = (int)g->M, e.N = (int)g->N, e.K = (int)g->K;
    /* MT_GEMM_SM90_CTAS caps the grid (tests: several tiles per CTA at small shapes) */
    const long long tiles = g->M / (BM * CM) * (g->N / BN);
    int grid = CM * (int)(tiles < clusters ? tiles : clusters);
    const int cap = mt_env_int("MT_GEMM_SM90_CTAS", 0);
    if (cap >= CM && cap < grid) grid = cap / CM * CM;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = CM, at.val.clusterDim.y = 1, at.val.clusterDim.z = 1;
    cfg.gridDim = dim3((unsigned)grid), cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = SMEM_BYTES, cfg.stream = (cudaStream_t)stream, cfg.attrs = &at;
    cfg.numAttrs = 1;
    auto kernel = epi == EPI_GELU    ? gemm_sm90_kernel<EPI_GELU>
                  : epi == EPI_DGELU ? gemm_sm90_kernel<EPI_DGELU>
                                     : gemm_sm90_kernel<EPI_DGELU_ACT>;
    MT_CUDA_TRY(cudaLaunchKernelEx(&cfg, kernel, ma, mb, mc, mp, mx, e));
    sm90_calls++;
    return MT_OK;
#endif
}
