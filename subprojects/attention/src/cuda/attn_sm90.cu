/* Attention on Hopper (sm_90a, wgmma).
 *
 * Forward, D64: a block is one warpgroup that owns 64 query rows of one (b, h) and walks 64-key
 * tiles (K, V double-buffered, loaded by TMA): S = Q K^T (both from shared memory), the online
 * softmax of attn_fwd.cu in registers, O += P V (P from registers). Two or more blocks share an
 * SM. D128: two warpgroups of 64 rows share 128-key tiles and take turns at the tensor cores
 * (attn_fwd_sm90_wg2_kernel).
 *
 * Backward: the fused scheme of attn_bwd.cu (dK, dV per key tile, dQ added into an f32
 * accumulator) on wgmma; each tile's dQ part goes through shared memory in the accumulator's
 * fragment order and is added by one bulk (TMA) reduce, so dqa is tiled (attn_impl.h).
 * Warpgroup g of a block owns keys 64g..64g+63 of kv head hk and keeps their dK, dV (64 x D) in
 * registers. The block walks the 64-row query tiles of
 * every query head of the group (Q, dO by TMA, lse, Di by cp.async, or with MT_ATTN_LSE_BULK=1
 * and T % 4 == 0 by bulk copies on the same mbarrier; double-buffered):
 *   S^T = K Q^T, dP^T = V dO^T     wgmma, both operands in shared memory
 *   P^T, dS^T                       registers (f32), as in attn_bwd.cu
 *   dV += P^T dO                    wgmma, A (P^T) from registers
 *   dK += dS^T Q                    wgmma, dS^T through shared memory (in registers as well,
 *                                   bf16's D128 kernel ran out of registers and ptxas
 *                                   serialized every wgmma: warning C7512)
 *   dQ += dS K                      the same dS^T, wgmma on transposed operands,
 *                                   staged in shared memory, bulk-added to dqa
 * and at a key tile's end dK, dV go out through shared memory (16-byte stores).
 * D 64: one warpgroup per block and two blocks per SM (one block's softmax and atomics overlap
 * the other's GEMMs). D 128: two warpgroups per block that split dQ's columns over all 128 keys
 * (one warpgroup per block needs 64 more registers and spills; measured slower on an H200).
 * bf16 with ds_split adds dS's rounding residual as a second term, as attn_bwd.cu does; without,
 * dS is rounded to bf16 once (flash-attention's and cuDNN's numerics). Shared tiles are
 * 64-column panels of 128-byte rows in wgmma's 128-byte swizzle.
 *
 * Both grids run a head's tiles before the next head's (block_work), so the blocks on the GPU at
 * once share a few heads and their Q, dO, K, V and dQ accumulator stay in L2. Causal blocks take a
 * pair of tiles, the longest and the shortest left (pair_blocks_per_head): every block then has
 * the same work, and no long tile starts last; the last few heads' tiles, a tile per block and
 * longest first, fill the last wave (pick_tail_heads). */
#include <mt/sm90.cuh>  /* CUtensorMap, its encoder, mbarriers, bulk copies, wgmma helpers */
#include <mt/wgmma.cuh> /* wg_ss, wg_rs: the wgmma instructions */
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <mutex>
#include <queue>
#include <type_traits>
#include <vector>

#include "attn_common.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTN_SM90_BODY 1
#else
#define ATTN_SM90_BODY 0
#endif

/* Tiles here are load_tile's PANELS layout. */
template <typename T, int R, int D, int NT>
__device__ __forceinline__ void load_panels(T *sm, const T *g, int64_t rs, int nvalid) {
    load_tile<T, R, D, NT, true>(sm, g, rs, nvalid);
}

/* After a wait: reads of d come after it (the compiler cannot hoist them above). */
template <int N> __device__ __forceinline__ void wg_pin(float (&d)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            asm volatile("" : "+f"(d[i][e])::"memory");
}
/* After a wait: registers that an in-flight wgmma reads stay allocated until here. */
template <int N> __device__ __forceinline__ void wg_keep(const uint32_t (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            asm volatile("" ::"r"(r[i][e]) : "memory");
}
/* The 128 threads of warpgroup wg wait for each other (named barrier 1 + wg; a whole block of one
 * warpgroup uses barrier 0). */
__device__ __forceinline__ void wg_bar_sync(int wg, int nwg) {
    if (nwg == 1)
        __syncthreads();
    else
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
}
/* Orders this thread's generic-proxy shared-memory writes before later wgmma reads. */
__device__ __forceinline__ void fence_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Bulk (TMA) f32 add of `bytes` contiguous shared-memory bytes into global memory, its group
 * commit and waits (all groups but the newest N: .read, their shared reads; else, complete). */
__device__ __forceinline__ void bulk_add_f32(float *g, const float *s, uint32_t bytes) {
    asm volatile(
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(g),
        "r"(smem_u32(s)), "r"(bytes)
        : "memory");
}
__device__ __forceinline__ void bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void bulk_wait_all() {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

#if defined(MT_ATTN_SM90A)
/* (predicated, not a branch: ptxas serializes wgmmas in flight across a divergent branch) */
__device__ __forceinline__ void mbar_arrive_if(uint64_t *bar, bool p) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.u32 p, %1, 0;\n"
                 "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(smem_u32(bar)),
                 "r"((unsigned)p)
                 : "memory");
}
/* Named barrier id over n threads: wait for the others, or only arrive. */
__device__ __forceinline__ void named_bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
/* TMA box rows of the wg2 forward's BC-key tiles: 64, or two boxes of 88 for 176. (160 and 192
 * measured the same as 176 on an H100.) */
__host__ __device__ constexpr int wg2_box_rows(int bc) {
    return bc % 64 == 0 ? 64 : bc / 2;
}

/* The (64 columns from c, one head h, `rows` rows from t, one batch b) box of a tile_map. */
__device__ __forceinline__ void tma_box(void *dst, const CUtensorMap *map, int c, int h, int t,
                                        int b, uint64_t *bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(smem_u32(dst)),
                 "l"(map), "r"(c), "r"(h), "r"(t), "r"(b), "r"(smem_u32(bar))
                 : "memory");
}

/* The 64-row tiles (rows from t, head h, batch b) of two tile_maps into the panel layouts sa and
 * sb, one transaction on bar (one thread issues). */
template <typename T, int D>
__device__ __forceinline__ void tma_pair(T *sa, T *sb, const CUtensorMap *ma, const CUtensorMap *mb,
                                         int h, int t, int b, uint64_t *bar, uint32_t extra = 0) {
    mt_mbar_expect(bar, 2 * 64 * D * sizeof(T) + extra); /* extra: more bytes on the transaction */
#pragma unroll
    for (int c = 0; c < D; c += 64) { /* 64-column panels */
        tma_box(sa + c * 64, ma, c, h, t, b, bar);
        tma_box(sb + c * 64, mb, c, h, t, b, bar);
    }
}

/* A TMA map of a (B,T,heads,D) operand with strides st (elements) whose box is 64 columns of one
 * head by `rows` rows of one batch, in wgmma's 128-byte swizzle; rows past T read as zeros. */
template <typename T>
static mt_status tile_map(CUtensorMap *m, const T *base, const int64_t *st, const attn_args &a,
                          int heads, int rows = 64) {
    PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    MT_TRY(mt_tensor_map_encoder(&encode));
    const int es = (int)sizeof(T);
    cuuint64_t dim[4] = { (cuuint64_t)a.D, (cuuint64_t)heads, (cuuint64_t)a.T, (cuuint64_t)a.B };
    cuuint64_t stride[3] = { (cuuint64_t)(st[2] * es), (cuuint64_t)(st[1] * es),
                             (cuuint64_t)(st[0] * es) };
    cuuint32_t box[4] = { 64, 1, (cuuint32_t)rows, 1 }, step[4] = { 1, 1, 1, 1 };
    CUresult r = encode(m,
                        std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                       : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                        4, (void *)base, dim, stride, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return MT_ERROR(MT_ERR_CUDA,
                        "attention: cuTensorMapEncodeTiled failed (%d) for strides %lld "
                        "%lld %lld",
                        (int)r, (long long)st[0], (long long)st[1], (long long)st[2]);
    return MT_OK;
}

/* Pass `pass` of a wgmma forward block that took tile pt of nq (pair_blocks_per_head): causal
 * blocks take query tile nq-1-pt, then pt (a pair visits as many key tiles as any other; the
 * middle tile of an odd count alone). Its first row q0, valid rows qn and key tiles nk (of
 * nk_all). */
struct q_pass {
    int q0, qn, nk;
};
template <int BR, int BC>
__device__ __forceinline__ q_pass q_pass_of(const attn_args &a, int nq, int nk_all, int pt,
                                            int pass) {
    const int qt = a.causal && !pass ? nq - 1 - pt : pt;
    const int q0 = a.qoff + qt * BR, qn = min(BR, a.T - q0);
    return { q0, qn, key_tiles<BC>(a, nk_all, q0, qn) };
}

/* Q's wgmma A fragments (mma.sync order: rows row0 and row0 + 8, columns kk*16 + 2 (lane & 3)
 * (+8)) from global memory, once per query tile; rows past T are zeros. */
template <typename T, int D>
__device__ __forceinline__ void fwd_load_qa(uint32_t (&qa)[D / 16][4], const attn_args &a,
                                            const T *q, int b, int h, int row0, int lane) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + 8 * r;
        const T *g = q + b * a.st[AQ][0] + h * a.st[AQ][2] +
                     (int64_t)min(row, a.T - 1) * a.st[AQ][1] + 2 * (lane & 3);
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            qa[kk][r] = row < a.T ? *(const uint32_t *)(g + kk * 16) : 0u;
            qa[kk][2 + r] = row < a.T ? *(const uint32_t *)(g + kk * 16 + 8) : 0u;
        }
    }
}

template <typename T, int D, bool DOCS, bool DROP>
static __global__ void __launch_bounds__(128, 2)
    attn_fwd_sm90_kernel(attn_args a, T *out, float *lse, const T *q,
                         const __grid_constant__ CUtensorMap tk,
                         const __grid_constant__ CUtensorMap tv) {
#if ATTN_SM90_BODY
    constexpr int BR = 64, BC = 64, NT = 128;
    extern __shared__ __align__(1024) unsigned char smem[];
    T *sQ = (T *)smem, *sK = sQ + BR * D, *sV = sK + 2 * BC * D;
    const int wl = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nq = (a.Tq + BR - 1) / BR, nk_all = (a.T + BC - 1) / BC;
    int pt, bh, npass;
    block_work(a, a.B * a.H, nq, pt, bh, npass);
    const int b = bh / a.H, h = bh % a.H, hk = h / a.group;
    const int64_t sid = DROP ? a.drop.ids[b] : 0; /* attention dropout: the row's sample id */
    __shared__ uint64_t bar[2];                   /* K and V of buffer 0, 1 (TMA) */
    if (threadIdx.x == 0) mt_mbar_init(&bar[0], 1), mt_mbar_init(&bar[1], 1);
    const float sl2 = a.scale * ATTN_LOG2E;
    int j0 = 0; /* key tiles visited by earlier passes */
#pragma unroll
    for (int pass = 0; pass < 2; pass++) {
        if (pass == npass) break;
        const q_pass qp = q_pass_of<BR, BC>(a, nq, nk_all, pt, pass);
        const int q0 = qp.q0, qn = qp.qn;
        const int row0 = q0 + wl * 16 + (lane >> 2);
        const fwd_ks dm = fwd_ks_of<BR, BC, DOCS>(a, b, q0, row0);
        const int nk = qp.nk - dm.kb; /* key tiles dm.kb + j */
        /* key tile dm.kb + j's K, V (rows past T zero-filled) into buffer (j0 + j) & 1, by one
         * thread */
        static_assert(BC == 64, "tma_pair moves 64-row tiles");
        auto issue = [&](int j) {
            const int buf = (j0 + j) & 1;
            if (threadIdx.x == 0)
                tma_pair<T, D>(sK + buf * BC * D, sV + buf * BC * D, &tk, &tv, hk, (dm.kb + j) * BC,
                               b, &bar[buf]);
        };
        /* (the previous pass's closing barrier: every warp is done with sQ) */
        load_panels<T, BR, D, NT>(
            sQ, q + b * a.st[AQ][0] + h * a.st[AQ][2] + (int64_t)q0 * a.st[AQ][1], a.st[AQ][1], qn);
        cp_async_commit();
        issue(0);
        float o[D / 8][4], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f };
        acc_zero(o);
        uint32_t pa[BC / 16][4];
        cp_async_wait<0>();
        fence_async_smem();
        __syncthreads(); // Q is in, the barriers are initialized
        for (int j = 0; j < nk; j++) {
            if (j + 1 < nk) issue(j + 1); // the previous tile's closing barrier freed its buffer
            const int buf = (j0 + j) & 1;
            mt_mbar_wait(&bar[buf], ((j0 + j) >> 1) & 1);
            const T *cK = sK + buf * BC * D, *cV = sV + buf * BC * D;
            float s[BC / 8][4];
            mt_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) /* panel kk/4, 16-column step kk%4 */
                wg_ss<T, BC, 0, 0>::mma(
                    s, mt_wgmma_desc(sQ + (kk >> 2) * BR * 64 + (kk & 3) * 16, 16),
                    mt_wgmma_desc(cK + (kk >> 2) * BC * 64 + (kk & 3) * 16, 16), kk > 0);
            mt_wgmma_commit();
            mt_wgmma_wait<0>();
            wg_pin(s);
            online_softmax_tile<BC, D, DOCS>(a, s, o, m, l, sl2, (dm.kb + j) * BC, q0, row0, dm,
                                             lane);
            if constexpr (DROP) /* (l, the softmax's sums, is the undropped P's) */
                attn_drop_rows<BC>(a, s, sid, h, row0, (dm.kb + j) * BC, lane);
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++)
                acc_pack<T>(s, kk, pa[kk]);
            mt_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++)
                wg_rs<T, D, 1>::mma(o, pa[kk], mt_wgmma_desc(cV + kk * 16 * 64, BC * 128), 1);
            mt_wgmma_commit();
            mt_wgmma_wait<0>();
            wg_keep(pa);
            wg_pin(o);
            __syncthreads(); // every warp is done with this tile's buffers before they are refilled
        }
        fwd_store_out<T, D>(a, out, lse, o, m, l, b, h, row0, lane);
        j0 += nk;
    }
#endif
}

/* The D128 forward in FA3's arrangement: a block of two warpgroups owns 128 query rows (64 each,
 * Q in registers) and walks BC-key tiles of K and V (128; 176 without a causal mask, as FA3: fewer
 * tiles for the per-tile softmax, rescale and barrier costs), each loaded by TMA (boxes of RB
 * rows: tk, tv made with tile_map rows RB) into two stages with a
 * full barrier (the transaction) and an empty one (all 8 warps done with it). A warpgroup issues
 * S_j = Q K_j^T and O += P_{j-1} V_{j-1} together, computes P_j's softmax while the tensor cores
 * run them and the other warpgroup's pair (named barriers hand the turn to issue over), and
 * rescales O once P_{j-1} V_{j-1} is done. Thread 128 (the second warpgroup's, which runs behind)
 * issues every load as soon as its stage is empty. */
template <typename T, int BC, bool DOCS>
static __global__ void __launch_bounds__(256, 1)
    attn_fwd_sm90_wg2_kernel(attn_args a, T *out, float *lse, const T *q,
                             const __grid_constant__ CUtensorMap tk,
                             const __grid_constant__ CUtensorMap tv,
                             const __grid_constant__ CUtensorMap tq) {
#if ATTN_SM90_BODY
    constexpr int D = 128, BR = 128, RB = wg2_box_rows(BC);
    /* why: S of a 176-key tile needs 44 more registers; Q's 32 move to shared memory (S by
     * ss-wgmma, Q loaded by TMA through tq) */
    constexpr bool QS = BC > 128;
    extern __shared__ __align__(1024) unsigned char smem[];
    T *sK = (T *)smem, *sV = sK + 2 * BC * D, *sQ = sV + 2 * BC * D;
    const int wg = threadIdx.x >> 7, wl = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const bool producer = threadIdx.x == 128;
    const int nq = (a.Tq + BR - 1) / BR, nk_all = (a.T + BC - 1) / BC;
    int pt, bh, npass;
    block_work(a, a.B * a.H, nq, pt, bh, npass);
    const int b = bh / a.H, h = bh % a.H, hk = h / a.group;
    __shared__ uint64_t full[2][2], empty[2][2]; /* [K, V][stage] */
    __shared__ uint64_t qfull;                   /* QS: Q of the pass */
    if (threadIdx.x == 0) {
        for (int i = 0; i < 4; i++)
            mt_mbar_init(&full[i >> 1][i & 1], 1), mt_mbar_init(&empty[i >> 1][i & 1], 8);
        if (QS) mt_mbar_init(&qfull, 1);
    }
    const float sl2 = a.scale * ATTN_LOG2E;
    int j0 = 0;      /* key tiles visited by earlier passes */
    __syncthreads(); // the barriers are initialized
    /* Before each GEMM pair a warpgroup waits for its turn (barrier 1 + wg), after it hands
     * the turn to the other; warpgroup 0 starts, and takes a last turn at the end to balance */
    if (wg == 1) named_bar_arrive(1, 256);
#pragma unroll
    for (int pass = 0; pass < 2; pass++) {
        if (pass == npass) break;
        const q_pass qp = q_pass_of<BR, BC>(a, nq, nk_all, pt, pass);
        const int q0 = qp.q0;
        const int row0 = q0 + wg * 64 + wl * 16 + (lane >> 2);
        /* (the block's bounds: both warpgroups visit the same tiles) */
        const fwd_ks dm = fwd_ks_of<BR, BC, DOCS>(a, b, q0, row0);
        const int nk = qp.nk - dm.kb, kb0 = dm.kb * BC; /* key tiles dm.kb + j */
        /* key tile dm.kb + j's K (x = 0) or V (x = 1) into stage (j0 + j) & 1, once the tile two
         * before it there is done with (by the producer thread) */
        auto load = [&](int x, int j) {
            const int g = j0 + j, st = g & 1;
            if (g >= 2) mt_mbar_wait(&empty[x][st], ((g >> 1) + 1) & 1);
            T *dst = (x ? sV : sK) + st * BC * D;
            mt_mbar_expect(&full[x][st], BC * D * sizeof(T));
#pragma unroll
            for (int c = 0; c < D; c += 64)
#pragma unroll
                for (int r = 0; r < BC; r += RB)
                    tma_box(dst + c * BC + r * 64, x ? &tv : &tk, c, hk, kb0 + j * BC + r, b,
                            &full[x][st]);
        };
        /* this warp is done with tile j's K (x = 0) or V (x = 1) */
        auto release = [&](int x, int j) { mbar_arrive_if(&empty[x][(j0 + j) & 1], lane == 0); };
        if (producer) {
            if constexpr (QS) { /* (the previous pass ended with every warp done with sQ) */
                mt_mbar_expect(&qfull, BR * D * sizeof(T));
#pragma unroll
                for (int c = 0; c < D; c += 64)
#pragma unroll
                    for (int r = 0; r < BR; r += 64)
                        tma_box(sQ + c * BR + r * 64, &tq, c, h, q0 + r, b, &qfull);
            }
            load(0, 0);
            if (nk > 1) load(0, 1);
            load(1, 0);
        }
        uint32_t qa[QS ? 1 : D / 16][4];
        if constexpr (QS)
            mt_mbar_wait(&qfull, pass & 1);
        else
            fwd_load_qa<T, D>(qa, a, q, b, h, row0, lane);
        float o[D / 8][4], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f };
        acc_zero(o);
        uint32_t pa[BC / 16][4];
        float s[BC / 8][4], alpha[2];
        /* S_j = Q K_j^T */
        auto issue_s = [&](int j) {
            const T *cK = sK + ((j0 + j) & 1) * BC * D;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) { /* panel kk/4, 16-column step kk%4 */
                const uint64_t dk = mt_wgmma_desc(cK + (kk >> 2) * BC * 64 + (kk & 3) * 16, 16);
                if constexpr (QS) /* this warpgroup's 64 rows of the panel */
                    wg_ss<T, BC, 0, 0>::mma(
                        s,
                        mt_wgmma_desc(sQ + (kk >> 2) * BR * 64 + wg * 64 * 64 + (kk & 3) * 16, 16),
                        dk, kk > 0);
                else
                    wg_rs<T, BC, 0>::mma(s, qa[kk], dk, kk > 0);
            }
            mt_wgmma_commit();
        };
        /* O += P_j V_j */
        auto issue_pv = [&](int j) {
            const T *cV = sV + ((j0 + j) & 1) * BC * D;
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++)
                wg_rs<T, D, 1>::mma(o, pa[kk], mt_wgmma_desc(cV + kk * 16 * 64, BC * 128), 1);
            mt_wgmma_commit();
        };
        auto wait_full = [&](int x, int j) {
            mt_mbar_wait(&full[x][(j0 + j) & 1], ((j0 + j) >> 1) & 1);
        };
        auto pack_p = [&]() {
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++)
                acc_pack<T>(s, kk, pa[kk]);
        };
        wait_full(0, 0);
        named_bar_sync(1 + wg, 256);
        mt_wgmma_fence();
        issue_s(0);
        named_bar_arrive(2 - wg, 256);
        mt_wgmma_wait<0>();
        wg_pin(s);
        release(0, 0);
        if (producer && 2 < nk) load(0, 2);
        if (producer && 1 < nk) load(1, 1);
        /* (the block's q0, not the warpgroup's, for the mask test: a uniform branch) */
        softmax_scores<BC, DOCS>(a, s, m, l, alpha, sl2, kb0, q0, row0, dm, lane);
        pack_p();
        for (int j = 1; j < nk; j++) { /* S_j beside P_{j-1} V_{j-1} */
            wait_full(0, j);
            wait_full(1, j - 1);
            named_bar_sync(1 + wg, 256);
            mt_wgmma_fence();
            issue_s(j);
            issue_pv(j - 1);
            named_bar_arrive(2 - wg, 256);
            mt_wgmma_wait<1>(); // S_j
            wg_pin(s);
            release(0, j);
            softmax_scores<BC, DOCS>(a, s, m, l, alpha, sl2, kb0 + j * BC, q0, row0, dm, lane);
            mt_wgmma_wait<0>(); // P_{j-1} V_{j-1}
            wg_keep(pa);
            wg_pin(o);
            release(1, j - 1);
            if (producer && j + 2 < nk) load(0, j + 2);
            if (producer && j + 1 < nk) load(1, j + 1);
            softmax_rescale<D>(o, alpha);
            pack_p();
        }
        wait_full(1, nk - 1);
        named_bar_sync(1 + wg, 256);
        mt_wgmma_fence();
        issue_pv(nk - 1);
        named_bar_arrive(2 - wg, 256);
        mt_wgmma_wait<0>();
        wg_keep(pa);
        wg_pin(o);
        release(1, nk - 1);
        fwd_store_out<T, D>(a, out, lse, o, m, l, b, h, row0, lane);
        j0 += nk;
    }
    if (wg == 0) named_bar_sync(1, 256);
#endif
}

/* When a causal grid of block_work runs on `slots` slots that start blocks in grid order as they
 * free up: a model in half-tile units (a tile visits as many tiles of the other operand as its
 * rank from the long end, plus half a tile for each pass's loads and stores). */
static int64_t grid_finish(int heads_all, int ntiles, int slots, int tail) {
    std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> free_at;
    for (int i = 0; i < slots; i++)
        free_at.push(0);
    int64_t end = 0;
    auto run = [&](int64_t cost) {
        int64_t t = free_at.top() + cost;
        free_at.pop();
        free_at.push(t);
        end = t > end ? t : end;
    };
    const int np = (ntiles + 1) / 2;
    for (int h = 0; h < heads_all - tail; h++)
        for (int pt = 0; pt < np; pt++)
            run(ntiles - 1 - pt == pt ? 2 * (pt + 1) + 1 : 2 * (ntiles + 1) + 2);
    for (int r = 0; r < ntiles; r++)
        for (int h = 0; h < tail; h++)
            run(2 * (ntiles - r) + 1);
    return end;
}

/* The count of heads of a causal grid of ntiles tiles per head taken a tile per block at the end
 * (block_work) with which grid_finish ends first on `slots` slots. why: equal pairs just over
 * whole waves leave a last wave of few blocks (GPT-2 1.5B's backward: 1600 pairs on 264 slots
 * end 16% over the balanced time in the model, 1% with 56 heads at the end). */
static int pick_tail_heads(int heads_all, int ntiles, int slots) {
    const int np = (ntiles + 1) / 2;
    if (slots <= 0 || (int64_t)heads_all * np <= slots) return 0; /* one wave */
    /* singles matter in the last waves only: up to about two waves of them */
    const int kmax = std::min(heads_all, 4 * slots / (ntiles + 1) + 1);
    int best = 0;
    int64_t best_t = grid_finish(heads_all, ntiles, slots, 0);
    for (int k = 1; k <= kmax; k++) {
        int64_t t = grid_finish(heads_all, ntiles, slots, k);
        if (t < best_t) best = k, best_t = t;
    }
    return best;
}

/* Blocks of `kernel` resident at once on the current device (SMs x blocks per SM), cached per
 * kernel and device (threads and smem are fixed per kernel); 0 when unknown. */
static int grid_slots(const void *kernel, int threads, int smem) {
    static std::mutex mu;
    static struct {
        const void *fn;
        int dev, slots;
    } cache[16];
    static int next;
    std::lock_guard<std::mutex> lock(mu);
    int dev = 0, sms = 0, per_sm = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    for (auto &c : cache)
        if (c.fn == kernel && c.dev == dev) return c.slots;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) !=
            cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    cache[next] = { kernel, dev, sms * per_sm };
    next = (next + 1) % 16;
    return sms * per_sm;
}

/* attn_args.tail_heads for a causal grid on `slots` slots: pick_tail_heads, cached per slots and
 * shape. MT_ATTN_TAIL=k sets it instead (for comparisons and tests; clamped to the heads). */
static int tail_heads_for(int slots, int heads_all, int ntiles) {
    static int env = MT_ENV_UNREAD;
    if (mt_env_int_once("MT_ATTN_TAIL", -1, &env) >= 0) return std::min(env, heads_all);
    if (slots <= 0) return 0; /* no slots known: no tail */
    static std::mutex mu;
    static struct { int slots, heads, ntiles, tail; } cache[16];
    static int next;
    std::lock_guard<std::mutex> lock(mu);
    for (auto &c : cache)
        if (c.slots == slots && c.heads == heads_all && c.ntiles == ntiles) return c.tail;
    const int tail = pick_tail_heads(heads_all, ntiles, slots);
    cache[next] = { slots, heads_all, ntiles, tail };
    next = (next + 1) % 16;
    return tail;
}

/* The split tail of a non-causal backward grid of `tiles` key tiles whose walks have ntile query
 * tiles (kv_pass_of), on `slots` slots, with room for a.split_cap split tiles: the r tiles past
 * the last whole wave go to min(slots, r * ntile / 4) blocks when a run is then at least 4 query
 * tiles shorter than a walk (why: a run pays a K, V load and its dK, dV reds, about that much in
 * B4 H16 T4096 D128's model). MT_ATTN_SPLIT=0 turns it off; MT_ATTN_SPLIT=k splits the last k
 * tiles into runs of one query tile or more (tests, comparisons). */
static void plan_split(attn_args &a, int slots, int tiles, int ntile) {
    static int env = MT_ENV_UNREAD;
    a.split_tiles = a.split_pieces = 0;
    if (a.causal || slots <= 0) return;
    const int force = mt_env_int_once("MT_ATTN_SPLIT", -1, &env);
    int r = tiles % slots;
    if (force >= 0) r = std::min(std::min(force, tiles), slots);
    if (r == 0 || r > a.split_cap) return;
    const int64_t units = (int64_t)r * ntile;
    const int pieces = (int)std::min<int64_t>(slots, force >= 0 ? units : units / 4);
    if (force < 0 && (pieces <= r || (units + pieces - 1) / pieces + 4 > ntile)) return;
    a.split_tiles = r, a.split_pieces = pieces;
}

/* a with the tail for `kernel`'s grid over heads_all heads of ntiles tiles (causal only), and that
 * grid. Over a key prefix (qoff > 0) every head is tail, a tile per block. why: most tiles there
 * walk as far as the longest (the prefix's keys see every query), so pairs are not balanced but
 * twice as long: a context-parallel chunk's pairs, one wave of them, took as long as the square's
 * whole attention (T 8192 B 1 H 16, CP 2, H100). */
template <typename K>
static dim3 plan_grid(attn_args &a, K kernel, int threads, int smem, int heads_all, int ntiles) {
    a.tail_heads = !a.causal ? 0
                   : a.qoff  ? heads_all
                             : tail_heads_for(grid_slots((const void *)kernel, threads, smem),
                                              heads_all, ntiles);
    return work_grid(a, heads_all, ntiles);
}

/* Whether non-causal D128 forwards take 176-key tiles (MT_ATTN_WIDE=0: 128, for comparisons and
 * tests; read once). */
static bool wide_fwd_tiles() {
    static int env = MT_ENV_UNREAD;
    return mt_env_int_once("MT_ATTN_WIDE", -1, &env) != 0;
}

template <typename T, int BC, bool DOCS>
static mt_status fwd_wg2(const attn_args &a, T *out, float *lse, const T *q, const T *k, const T *v,
                         mt_stream stream) {
    CUtensorMap tk, tv, tq;
    MT_TRY(tile_map<T>(&tk, k, a.st[AK], a, a.Hkv, wg2_box_rows(BC)));
    MT_TRY(tile_map<T>(&tv, v, a.st[AV], a, a.Hkv, wg2_box_rows(BC)));
    if (BC > 128)
        MT_TRY(tile_map<T>(&tq, q, a.st[AQ], a, a.H));
    else
        memset(&tq, 0, sizeof tq);
    const int smem = (4 * BC + (BC > 128 ? 128 : 0)) * 128 * (int)sizeof(T);
    MT_TRY(attn_smem_attr(attn_fwd_sm90_wg2_kernel<T, BC, DOCS>, smem));
    attn_args g = a;
    const dim3 grid = plan_grid(g, attn_fwd_sm90_wg2_kernel<T, BC, DOCS>, 256, smem, a.B * a.H,
                                (a.Tq + 127) / 128);
    attn_fwd_sm90_wg2_kernel<T, BC, DOCS><<<grid, 256, smem, stream>>>(g, out, lse, q, tk, tv, tq);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

/* The D64 forward (DROP: attention dropout). */
template <typename T, int D, bool DOCS, bool DROP>
static mt_status fwd_d64(const attn_args &a, T *out, float *lse, const T *q, const T *k, const T *v,
                         mt_stream stream) {
    {
        CUtensorMap tk, tv;
        MT_TRY(tile_map<T>(&tk, k, a.st[AK], a, a.Hkv));
        MT_TRY(tile_map<T>(&tv, v, a.st[AV], a, a.Hkv));
        constexpr int BR = 64, BC = 64;
        const int smem = (BR + 4 * BC) * D * (int)sizeof(T);
        MT_TRY(attn_smem_attr(attn_fwd_sm90_kernel<T, D, DOCS, DROP>, smem));
        attn_args g = a;
        const dim3 grid = plan_grid(g, attn_fwd_sm90_kernel<T, D, DOCS, DROP>, 128, smem, a.B * a.H,
                                    (a.Tq + BR - 1) / BR);
        attn_fwd_sm90_kernel<T, D, DOCS, DROP><<<grid, 128, smem, stream>>>(g, out, lse, q, tk, tv);
        MT_CUDA_CHECK_LAUNCH();
    }
    return MT_OK;
}

template <typename T, int D>
mt_status attn_fwd_sm90(const attn_args &a, T *out, float *lse, const T *q, const T *k, const T *v,
                        mt_stream stream) {
    if constexpr (D == 128) {
        if (!a.causal && wide_fwd_tiles()) /* (document masks are causal) */
            return fwd_wg2<T, 176, false>(a, out, lse, q, k, v, stream);
        if (a.ks) return fwd_wg2<T, 128, true>(a, out, lse, q, k, v, stream);
        return fwd_wg2<T, 128, false>(a, out, lse, q, k, v, stream);
    } else {
        if (a.drop.ids)
            return a.ks ? fwd_d64<T, D, true, true>(a, out, lse, q, k, v, stream)
                        : fwd_d64<T, D, false, true>(a, out, lse, q, k, v, stream);
        if (a.ks) return fwd_d64<T, D, true, false>(a, out, lse, q, k, v, stream);
        return fwd_d64<T, D, false, false>(a, out, lse, q, k, v, stream);
    }
}

/* A split tile's f32 dK, dV parts (kv_pass_of): thread t's accumulator fragments, float4 j at
 * j * NT + t (dK's D/8, then dV's), added by 16-byte reds (the order varies: fast mode). */
template <int D, int NT>
__device__ __forceinline__ void split_add(float *acc, const float (&gk)[D / 8][4],
                                          const float (&gv)[D / 8][4]) {
#if ATTN_SM90_BODY
    float4 *p = (float4 *)acc + threadIdx.x;
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
        atomicAdd(p + j * NT, make_float4(gk[j][0], gk[j][1], gk[j][2], gk[j][3]));
        atomicAdd(p + (D / 8 + j) * NT, make_float4(gv[j][0], gv[j][1], gv[j][2], gv[j][3]));
    }
#endif
}

/* A warpgroup's dK (times the softmax scale) and dV rows kw.. (64 keys) from its accumulators,
 * through `stage` (2 x 64 x D elements of shared memory, rows' 16-byte chunks XOR-swizzled by the
 * row: conflict-free both ways) to 16-byte global stores. why: bwd_store_dkdv's 4-byte stores, 32 a
 * thread, and their register hazards were ~8% of the D64 backward's samples (ncu). The sm90 path
 * runs only on 16-byte aligned rows (attn_aligned). */
template <typename T, int D>
__device__ __forceinline__ void
bwd_store_dkdv_staged(const attn_args &a, T *dk, T *dv, T *stage, const float (&gk)[D / 8][4],
                      const float (&gv)[D / 8][4], int b, int hk, int kw, int wg, int nwg) {
#if ATTN_SM90_BODY
    constexpr int CH = D / 8; /* 16-byte chunks of a row */
    const int t = threadIdx.x & 127, wl = t >> 5, lane = t & 31;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = wl * 16 + (lane >> 2) + 8 * r;
#pragma unroll
        for (int dt = 0; dt < CH; dt++) {
            const int o = row * D + (dt ^ (row & 7)) * 8 + 2 * (lane & 3);
            *(uint32_t *)(stage + o) =
                attn_t<T>::pack(gk[dt][2 * r] * a.scale, gk[dt][2 * r + 1] * a.scale);
            *(uint32_t *)(stage + 64 * D + o) = attn_t<T>::pack(gv[dt][2 * r], gv[dt][2 * r + 1]);
        }
    }
    wg_bar_sync(wg, nwg);
#pragma unroll
    for (int i = 0; i < 2 * 64 * CH / 128; i++) {
        const int c = t + 128 * i, x = c / (64 * CH), row = c / CH % 64, ch = c % CH;
        const int key = kw + row, s = x ? ADV : ADK;
        if (key >= a.T) continue;
        const uint4 v = *(const uint4 *)(stage + x * 64 * D + row * D + (ch ^ (row & 7)) * 8);
        *(uint4 *)((x ? dv : dk) + b * a.st[s][0] + (int64_t)key * a.st[s][1] + hk * a.st[s][2] +
                   ch * 8) = v;
    }
#endif
}

/* dK, dV of the split tiles from their sums: block s stores split tile s, each thread the
 * fragments it would have held in attn_bwd_sm90_kernel. */
template <typename T, int D, int NWG>
static __global__ void __launch_bounds__(NWG * 128)
    attn_bwd_split_store_kernel(attn_args a, T *dk, T *dv) {
#if ATTN_SM90_BODY
    constexpr int BC = 64 * NWG, NT = 128 * NWG;
    const int nkt = (a.T + BC - 1) / BC, tile = a.B * a.Hkv * nkt - a.split_tiles + blockIdx.x;
    const float4 *p =
        (const float4 *)(a.split_acc + (int64_t)blockIdx.x * 2 * BC * D) + threadIdx.x;
    float gk[D / 8][4], gv[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
        const float4 x = p[j * NT], y = p[(D / 8 + j) * NT];
        gk[j][0] = x.x, gk[j][1] = x.y, gk[j][2] = x.z, gk[j][3] = x.w;
        gv[j][0] = y.x, gv[j][1] = y.y, gv[j][2] = y.z, gv[j][3] = y.w;
    }
    const int bh = tile / nkt, wg = NWG == 1 ? 0 : threadIdx.x >> 7, wl = (threadIdx.x >> 5) & 3,
              lane = threadIdx.x & 31;
    const int key0 = tile % nkt * BC + wg * 64 + wl * 16 + (lane >> 2);
    bwd_store_dkdv<T, D>(a, dk, dv, gk, gv, bh / a.Hkv, bh % a.Hkv, key0, lane);
#endif
}

template <typename T, int D, int NWG, int TWO, bool DOCS, bool DROP>
static __global__ void __launch_bounds__(NWG * 128, 3 - NWG)
    attn_bwd_sm90_kernel(attn_args a, T *dk, T *dv, float *dqa,
                         const __grid_constant__ CUtensorMap tq, const T *k, const T *v,
                         const __grid_constant__ CUtensorMap tg, const float *lse,
                         const float *Dv) {
#if ATTN_SM90_BODY
    constexpr int BC = 64 * NWG, BR = 64, NT = 128 * NWG;
    static_assert(TWO == 1 || attn_t<T>::two_term, "dS as hi + lo: bf16 only");
    static_assert(NWG == 1 || D == 128, "two warpgroups split dQ's 128 columns");
    extern __shared__ __align__(1024) unsigned char smem[];
    T *sK = (T *)smem, *sV = sK + BC * D, *sQ = sV + BC * D, *sG = sQ + 2 * BR * D;
    T *sS = sG + 2 * BR * D; /* dS^T (BC, BR): hi, then lo */
    float *sL = (float *)(sS + TWO * BC * BR), *sD = sL + 2 * BR;
    int *sKS = (int *)(sD + 2 * BR); /* DOCS: the query tiles' key starts */
    /* two (BR, D) dQ tiles in the fragment order of dqa's */
    float *sDQ = (float *)(sKS + (DOCS ? 2 * BR : 0));
    const int wg = NWG == 1 ? 0 : threadIdx.x >> 7, wl = (threadIdx.x >> 5) & 3,
              lane = threadIdx.x & 31;
    /* a pass per key tile (kv_pass_of): causal, tiles kt and nkt-1-kt, one after the other (a pair
     * walks as many query tiles as any other; the middle tile of an odd count alone); non-causal,
     * one tile, or a split run's part of one or two */
    const int nkt = (a.T + BC - 1) / BC, nq = (a.T + BR - 1) / BR;
    const int nqa = (a.Tq + BR - 1) / BR; /* dqa's tiles of a head */
    __shared__ uint64_t bar[2];           /* Q and dO of buffer 0, 1 (TMA) */
    if (threadIdx.x == 0) mt_mbar_init(&bar[0], 1), mt_mbar_init(&bar[1], 1);
    const float sl2 = a.scale * ATTN_LOG2E;
    int g0 = 0;  /* tiles walked by earlier passes */
#pragma unroll 1 // why: unrolled, the second pass's tile loop reloaded spilled addresses (220 B)
    for (int pass = 0; pass < 2; pass++) {
        kv_pass w;
        if (!kv_pass_of(a, a.B * a.Hkv, nkt, a.group * nq, pass, w)) break;
        const int b = w.bh / a.Hkv, hk = w.bh % a.Hkv, k0 = w.kt * BC;
        const int64_t sid = DROP ? a.drop.ids[b] : 0; /* attention dropout: the row's sample id */
        /* (a key prefix's queries start at row qoff, a whole tile's) */
        const int it0 = (a.causal ? max(k0, a.qoff) : a.qoff) / BR,
                  nqt = kv_walk_tiles<BR, DOCS>(a, b, it0, nq, k0 + BC - 1);
        /* this pass walks tiles n0 .. n0 + ntile - 1 (bwd_tile_of) */
        const int n0 = w.n0, ntile = w.n1 < 0 ? a.group * nqt : w.n1 - n0;
        if (pass) __syncthreads(); // every warp is done with the previous key tile
        bwd_load_kv<T, BC, D, NT, true>(a, sK, sV, k, v, b, hk, k0);
        cp_async_commit(); // why: cp_async_wait skips uncommitted copies (lse_bulk commits none)
        /* tile n's Q, dO by TMA (one thread; rows past T are zeros) into buffer buf, lse and Di by
         * cp.async (one group), or with a.lse_bulk by bulk copies on the same mbarrier */
        auto issue = [&](int n, int buf) {
            int h, q0;
            bwd_tile_of<BR>(a, hk, it0, nqt, n0 + n, h, q0);
            if (a.lse_bulk) { /* lse and Di on the same transaction */
                const int qn = min(BR, a.T - q0);
                /* rows past T: zeros, as cp.async's (the copies stop at T; buffer buf is free) */
                for (int i = qn + threadIdx.x; i < BR; i += NT)
                    sL[buf * BR + i] = sD[buf * BR + i] = 0.0f;
                if (threadIdx.x == 0) {
                    const uint32_t by = qn * 4;
                    const int64_t ro = lse_row(a, b, h, q0);
                    tma_pair<T, D>(sQ + buf * BR * D, sG + buf * BR * D, &tq, &tg, h, q0, b,
                                   &bar[buf], 2 * by);
                    mt_bulk_load(sL + buf * BR, lse + ro, by, &bar[buf]);
                    mt_bulk_load(sD + buf * BR, Dv + ro, by, &bar[buf]);
                }
                return;
            }
            if (threadIdx.x == 0)
                tma_pair<T, D>(sQ + buf * BR * D, sG + buf * BR * D, &tq, &tg, h, q0, b, &bar[buf]);
            bwd_issue_ld<BR, NT, DOCS>(a, sL, sD, sKS, lse, Dv, b, h, q0, buf);
            cp_async_commit();
        };
        if (!pass) __syncthreads(); // the barriers are initialized
        issue(0, g0 & 1);
        float gk[D / 8][4], gv[D / 8][4];
        acc_zero(gk);
        acc_zero(gv);
        const int kw = k0 + wg * 64, key0 = kw + wl * 16 + (lane >> 2); /* this warpgroup's keys */
        uint32_t pa[BR / 16][4];
        /* dQ of tile n, staged in sDQ[(g0 + n) & 1] (fenced, and the block past a barrier),
         * added to its dqa tile by one thread; then the other is free once that add's reads are
         * done */
        auto flush_dq = [&](int n) {
            if (threadIdx.x != 0) return;
            int h, q0;
            bwd_tile_of<BR>(a, hk, it0, nqt, n0 + n, h, q0);
            bulk_add_f32(dqa + (((int64_t)b * a.H + h) * nqa * BR + q0 - a.qoff) * D,
                         sDQ + ((g0 + n) & 1) * BR * D, BR * D * 4);
            bulk_commit();
            bulk_wait_read<1>();
        };
        for (int n = 0; n < ntile; n++) {
            cp_async_wait<0>();
            const int buf = (g0 + n) & 1;
            mt_mbar_wait(&bar[buf], ((g0 + n) >> 1) & 1);
            fence_async_smem(); // (K, V by cp.async; the staged dQ)
            __syncthreads();    // tile n is in; every warp is done with tile n-1's buffers and dS^T
            /* tile n-1's dQ out, tile n+1's loads in (buffer buf ^ 1 is free past the barrier) */
            auto ahead = [&]() {
                if (n > 0) flush_dq(n - 1);
                if (n + 1 < ntile) issue(n + 1, buf ^ 1);
            };
            int h, q0;
            bwd_tile_of<BR>(a, hk, it0, nqt, n0 + n, h, q0);
            const T *cQ = sQ + buf * BR * D, *cG = sG + buf * BR * D;
            const float *cL = sL + buf * BR, *cD = sD + buf * BR;
            const int *cK = sKS + buf * BR;
            if constexpr (NWG == 2) ahead(); // (after the MMAs' issue it spilled more)
            /* one warpgroup: its keys start at the walk's first query (q0 >= k0) */
            if (NWG == 1 || !a.causal || q0 + BR - 1 >= kw) { // else its keys all > queries
                float p[BR / 8][4], ds[BR / 8][4];
                mt_wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) /* panel kk/4, 16-column step kk%4 */
                    wg_ss<T, BR, 0, 0>::mma(
                        p,
                        mt_wgmma_desc(sK + (kk >> 2) * BC * 64 + wg * 64 * 64 + (kk & 3) * 16, 16),
                        mt_wgmma_desc(cQ + (kk >> 2) * BR * 64 + (kk & 3) * 16, 16), kk > 0);
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++)
                    wg_ss<T, BR, 0, 0>::mma(
                        ds,
                        mt_wgmma_desc(sV + (kk >> 2) * BC * 64 + wg * 64 * 64 + (kk & 3) * 16, 16),
                        mt_wgmma_desc(cG + (kk >> 2) * BR * 64 + (kk & 3) * 16, 16), kk > 0);
                mt_wgmma_commit();
                if constexpr (NWG == 1) ahead(); // why: its latencies hide under the MMAs
                mt_wgmma_wait<0>();
                wg_pin(p);
                wg_pin(ds);
                const bool mask = k0 + BC > a.T || q0 + BR > a.T || (a.causal && kw + 63 > q0) ||
                                  bwd_ks_mask<BR, DOCS>(cK, kw);
                bwd_p_ds<BR, DOCS, DROP>(a, p, ds, cL, cD, cK, sl2, key0, q0, mask, lane, sid, h);
                const int sr = wg * 64 + wl * 16 + (lane >> 2);
#pragma unroll
                for (int kk = 0; kk < BR / 16; kk++) {
                    uint32_t sa[4], sl[4];
                    acc_pack<T>(p, kk, pa[kk]);
                    acc_pack<T>(ds, kk, sa);
                    if constexpr (TWO == 2) // why: dK = dS^T Q and dQ = dS K cancel
                        acc_residual<T>(ds, kk, sa, sl);
                    /* dS^T rows sr (+8), query columns kk*16 + 2t (+8) */
                    const int sc = kk * 16 + 2 * (lane & 3);
#pragma unroll
                    for (int t2 = 0; t2 < TWO; t2++)
                        bwd_store_frag<T, BC, BR, true>(sS + t2 * BC * BR, sr, sc, t2 ? sl : sa);
                }
                // why: dK reads dS^T from shared memory, so its registers are free during the MMAs
                fence_async_smem();
                wg_bar_sync(wg, NWG);
                mt_wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BR / 16; kk++) {
                    const uint64_t dg = mt_wgmma_desc(cG + kk * 16 * 64, BR * 128),
                                   dqd = mt_wgmma_desc(cQ + kk * 16 * 64, BR * 128);
                    wg_rs<T, D, 1>::mma(gv, pa[kk], dg, 1);
#pragma unroll
                    for (int t2 = 0; t2 < TWO; t2++)
                        wg_ss<T, D, 0, 1>::mma(
                            gk, mt_wgmma_desc(sS + t2 * BC * BR + wg * 64 * 64 + kk * 16, 16), dqd,
                            1);
                }
                mt_wgmma_commit();
            }
            if constexpr (NWG == 2) { // (one warpgroup: its barrier after dS^T's stores did this)
                fence_async_smem();
                __syncthreads(); // dS^T is in; sDQ[buf] is free
            }
            /* dQ rows q0 + wl*16..: key steps past the causal edge are zero (there is at least
             * one: query tiles start at the key tile's first key) */
            const int lim = a.causal ? q0 + BR - k0 : BC;
            const int kend = min(BC / 16, (lim + 15) / 16);
            float4 *stage = (float4 *)(sDQ + buf * BR * D) + (threadIdx.x & 127);
#pragma unroll
            /* one warpgroup: all columns, 64 at a time (32 registers); two: 64 columns each */
            for (int c0 = NWG == 2 ? wg * 64 : 0; c0 < (NWG == 2 ? wg * 64 + 64 : D); c0 += 64) {
                float dq[8][4];
                mt_wgmma_fence();
                for (int kk = 0; kk < kend; kk++) {
                    const uint64_t db = mt_wgmma_desc(sK + c0 * BC + kk * 16 * 64, BC * 128);
                    wg_ss<T, 64, 1, 1>::mma(dq, mt_wgmma_desc(sS + kk * 16 * 64, BC * 128), db,
                                            kk > 0);
                    if constexpr (TWO == 2)
                        wg_ss<T, 64, 1, 1>::mma(
                            dq, mt_wgmma_desc(sS + BC * BR + kk * 16 * 64, BC * 128), db, 1);
                }
                mt_wgmma_commit();
                mt_wgmma_wait<0>();
                wg_pin(dq);
                // why: a bulk add of a staged tile, not per-thread atomics (they stalled the issue)
#pragma unroll
                for (int nt = 0; nt < 8; nt++) /* fragment order: conflict-free 16-byte stores */
                    stage[((c0 >> 6) * 8 + nt) * 128] =
                        make_float4(dq[nt][0], dq[nt][1], dq[nt][2], dq[nt][3]);
            }
            mt_wgmma_wait<0>();
            wg_keep(pa);
        }
        fence_async_smem();
        __syncthreads(); // the last tile's dQ is staged
        flush_dq(ntile - 1);
        if (threadIdx.x == 0) bulk_wait_all(); // why: shared memory must outlive the bulk reads
        mt_wgmma_wait<0>();
        wg_pin(gk);
        wg_pin(gv);
        if (w.split >= 0) {
            split_add<D, NT>(a.split_acc + (int64_t)w.split * 2 * BC * D, gk, gv);
        } else {
            __syncthreads(); // thread 0's bulk reads of sDQ are done: it is the staging area
            bwd_store_dkdv_staged<T, D>(a, dk, dv, (T *)sDQ + wg * 2 * 64 * D, gk, gv, b, hk, kw,
                                        wg, NWG);
        }
        g0 += ntile;
    }
#endif
}

/* Whether the backward may load lse and Di by bulk copies: opt-in (MT_ATTN_LSE_BULK=1; read
 * once) until it is timed again. Its session-17 gain was measured while the K/V loads of a pass
 * were never waited for (uncommitted cp.async; fixed in the kernel): wrong gradients, every bf16
 * step skipped, and the board's clocks up on NaN data. */
static bool lse_bulk_on() {
    static int env = MT_ENV_UNREAD;
    return mt_env_int_once("MT_ATTN_LSE_BULK", -1, &env) > 0;
}

/* TWO: dS as bf16 hi + lo (2) or rounded once (1); DOCS: document masks (a.ks); DROP: attention
 * dropout. */
template <typename T, int D, int TWO, bool DOCS, bool DROP = false>
static mt_status bwd_sm90_launch(const attn_args &a, T *dk, T *dv, float *dqa, const T *k,
                                 const T *v, const CUtensorMap &tq, const CUtensorMap &tg,
                                 const float *lse, const float *Dv, mt_stream stream) {
    constexpr int NWG = D == 128 ? 2 : 1, BC = 64 * NWG, BR = 64;
    const int smem = (2 * BC * D + 4 * BR * D + TWO * BC * BR) * (int)sizeof(T) +
                     (DOCS ? 6 : 4) * BR * 4 + 2 * BR * D * 4;
    const auto kernel = attn_bwd_sm90_kernel<T, D, NWG, TWO, DOCS, DROP>;
    MT_TRY(attn_smem_attr(kernel, smem));
    attn_args g = a;
    // why: lse and Di rows then start 16-byte aligned, as bulk copies need
    g.lse_bulk = lse_bulk_on() && a.Tq % 4 == 0 && a.qoff % 4 == 0 &&
                 ((uintptr_t)lse | (uintptr_t)Dv) % 16 == 0 &&
                 !DOCS; /* (document masks: their key starts come by cp.async) */
    const int nkt = (a.T + BC - 1) / BC, tiles = a.B * a.Hkv * nkt;
    dim3 grid = plan_grid(g, kernel, NWG * 128, smem, a.B * a.Hkv, nkt);
    plan_split(g, grid_slots((const void *)kernel, NWG * 128, smem), tiles,
               a.group * ((a.T + BR - 1) / BR));
    if (g.split_tiles) {
        MT_CUDA_TRY(
            cudaMemsetAsync(g.split_acc, 0, (size_t)g.split_tiles * 2 * BC * D * 4, stream));
        grid.x = (unsigned)(tiles - g.split_tiles + g.split_pieces);
    }
    kernel<<<grid, NWG * 128, smem, stream>>>(g, dk, dv, dqa, tq, k, v, tg, lse, Dv);
    MT_CUDA_CHECK_LAUNCH();
    if (g.split_tiles) {
        attn_bwd_split_store_kernel<T, D, NWG><<<g.split_tiles, NWG * 128, 0, stream>>>(g, dk, dv);
        MT_CUDA_CHECK_LAUNCH();
    }
    return MT_OK;
}

template <typename T, int D>
mt_status attn_bwd_sm90(const attn_args &a, T *dk, T *dv, float *dqa, const T *q, const T *k,
                        const T *v, const T *dout, const float *lse, const float *Dv,
                        mt_stream stream) {
    CUtensorMap tq, tg;
    MT_TRY(tile_map<T>(&tq, q, a.st[AQ], a, a.H));
    MT_TRY(tile_map<T>(&tg, dout, a.st[ADO], a, a.H));
    if constexpr (D == 64) /* (D128 takes attention dropout on the mma.sync kernels) */
        if (a.drop.ids) {
            if constexpr (attn_t<T>::two_term)
                if (a.ds_split)
                    return a.ks ? bwd_sm90_launch<T, D, 2, true, true>(a, dk, dv, dqa, k, v, tq, tg,
                                                                       lse, Dv, stream)
                                : bwd_sm90_launch<T, D, 2, false, true>(a, dk, dv, dqa, k, v, tq,
                                                                        tg, lse, Dv, stream);
            return a.ks ? bwd_sm90_launch<T, D, 1, true, true>(a, dk, dv, dqa, k, v, tq, tg, lse,
                                                               Dv, stream)
                        : bwd_sm90_launch<T, D, 1, false, true>(a, dk, dv, dqa, k, v, tq, tg, lse,
                                                                Dv, stream);
        }
    if constexpr (attn_t<T>::two_term)
        if (a.ds_split)
            return a.ks ? bwd_sm90_launch<T, D, 2, true>(a, dk, dv, dqa, k, v, tq, tg, lse, Dv,
                                                         stream)
                        : bwd_sm90_launch<T, D, 2, false>(a, dk, dv, dqa, k, v, tq, tg, lse, Dv,
                                                          stream);
    if (a.ks) return bwd_sm90_launch<T, D, 1, true>(a, dk, dv, dqa, k, v, tq, tg, lse, Dv, stream);
    return bwd_sm90_launch<T, D, 1, false>(a, dk, dv, dqa, k, v, tq, tg, lse, Dv, stream);
}

#else /* without sm_90a (attn_sm90_enabled() is 0): never called */
template <typename T, int D>
mt_status attn_fwd_sm90(const attn_args &, T *, float *, const T *, const T *, const T *,
                        mt_stream) {
    return MT_ERROR(MT_ERR_UNSUPPORTED, "attention: built without sm_90a kernels");
}
template <typename T, int D>
mt_status attn_bwd_sm90(const attn_args &, T *, T *, float *, const T *, const T *, const T *,
                        const T *, const float *, const float *, mt_stream) {
    return MT_ERROR(MT_ERR_UNSUPPORTED, "attention: built without sm_90a kernels");
}
#endif

#define INST(T, D)                                                                                \
    template mt_status attn_fwd_sm90<T, D>(const attn_args &, T *, float *, const T *, const T *, \
                                           const T *, mt_stream);                                 \
    template mt_status attn_bwd_sm90<T, D>(const attn_args &, T *, T *, float *, const T *,       \
                                           const T *, const T *, const T *, const float *,        \
                                           const float *, mt_stream);
INST(__nv_bfloat16, 64)
INST(__nv_bfloat16, 128)
INST(__half, 64)
INST(__half, 128)

int attn_sm90_enabled(void) {
#if defined(MT_ATTN_SM90A)
    static int cached[64]; /* per device: 0 unknown, 1 yes, 2 no */
    if (mt_env_int("MT_ATTN_SM90", 1) == 0) return 0;
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
    if (!cached[dev]) {
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
        cached[dev] = major == 9 && minor == 0 ? 1 : 2; // why: sm_90a code runs on 9.0 alone
    }
    return cached[dev] == 1;
#else
    return 0;
#endif
}
