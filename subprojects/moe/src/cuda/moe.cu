/* The CUDA kernels: a thread a token for the router, a block an expert for the dispatch map (a
 * block-wide scan keeps token order), a block a token (or permuted row) for the row moves. Fixed
 * reduction orders throughout (no float atomics). */
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mt/core_cuda.h>
#include <mt/tensor/cuda.cuh> /* ldf, stf, MT_DISPATCH_FLOAT */

#include "../moe_impl.h"

static unsigned blocks_for(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 16 ? 65535 * 16 : b);
}

/* ---- router ---- */

static __global__ void topk_kernel(moe_args a) {
    const int64_t n = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (n >= a.N) return;
    const float *l = a.logits + n * a.E;
    int32_t *id = a.idx + n * a.k;
    float *p = a.probs + n * a.k, mx = 0.0f, sum = 1.0f;
    if (a.pre_softmax) moe_row_stats(l, a.E, &mx, &sum); /* (the softmax over all E) */
    const uint64_t groups = moe_group_mask(&a, l, mx, sum);
    for (int64_t j = 0; j < a.k; j++) {
        id[j] = moe_pick(&a, l, groups, id, j);
        atomicAdd(&a.counts[(a.seq ? n / a.seq * a.E : 0) + id[j]], 1); // why: exact in any order
    }
    if (a.sigmoid) {
        moe_sigmoid_probs(&a, l, id, p);
        return;
    }
    if (a.pre_softmax) {
        for (int64_t j = 0; j < a.k; j++)
            p[j] = expf(l[id[j]] - mx) / sum * a.scaling;
        return;
    }
    sum = 0.0f;
    for (int64_t j = 0; j < a.k; j++)
        sum += p[j] = expf(l[id[j]] - l[id[0]]);
    for (int64_t j = 0; j < a.k; j++)
        p[j] = p[j] / sum * a.scaling;
}

extern "C" mt_status moe_topk_cuda(const moe_args *a, mt_stream s) {
    const int64_t rows = a->seq ? a->N / a->seq : 1; /* (seq_aux_loss: each sequence's counts) */
    MT_CUDA_TRY(
        cudaMemsetAsync(a->counts, 0, (size_t)(rows * a->E) * sizeof(int32_t), (cudaStream_t)s));
    if (a->N == 0) return MT_OK;
    topk_kernel<<<blocks_for(a->N, 128), 128, 0, (cudaStream_t)s>>>(*a);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

#define LOSS_THREADS 1024
static __global__ void losses_kernel(moe_args a) {
    typedef cub::BlockReduce<double, LOSS_THREADS> R;
    __shared__ typename R::TempStorage tmp;
    double aux = 0.0, z = 0.0;
    for (int64_t n = threadIdx.x; n < a.N; n += LOSS_THREADS) {
        const float *l = a.logits + n * a.E;
        float mx, sum;
        moe_row_stats(l, a.E, &mx, &sum);
        const float t = a.sigmoid ? moe_sigmoid_sum(&a, l) : 0.0f;
        const int32_t *cnt = moe_aux_row(&a, n);
        for (int64_t e = 0; e < a.E; e++) /* (sigmoid: the sigmoids over their sum) */
            aux += (double)(a.sigmoid ? moe_score(&a, l, e) / t : expf(l[e] - mx) / sum) * cnt[e];
        const float lse = mx + logf(sum);
        z += (double)lse * lse;
    }
    aux = R(tmp).Sum(aux);
    __syncthreads();
    z = R(tmp).Sum(z);
    if (threadIdx.x == 0) {
        a.losses[0] += (float)(aux * (double)a.E / moe_aux_den(&a));
        a.losses[1] += (float)(z / a.N);
    }
}

extern "C" mt_status moe_router_losses_cuda(const moe_args *a, mt_stream s) {
    losses_kernel<<<1, LOSS_THREADS, 0, (cudaStream_t)s>>>(*a);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

static __global__ void router_bwd_kernel(moe_args a) {
    const int64_t n = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (n >= a.N) return;
    const float *l = a.logits + n * a.E, *p = a.probs_in + n * a.k, *dp = a.dprobs + n * a.k;
    const int32_t *id = a.idx_in + n * a.k;
    float *dl = a.dlogits + n * a.E;
    const float c = a.aux_scale * (float)a.E / (float)moe_aux_den(&a);
    const int32_t *cnt = moe_aux_row(&a, n);
    float mx, sum, pdp = 0.0f, sc = 0.0f;
    moe_row_stats(l, a.E, &mx, &sum);
    if (a.sigmoid) {
        moe_sigmoid_bwd_row(&a, l, dp, id, mx, sum, dl);
        return;
    }
    const float lse = mx + logf(sum);
    for (int64_t j = 0; j < a.k; j++)
        pdp += p[j] * dp[j];
    for (int64_t e = 0; e < a.E; e++)
        sc += expf(l[e] - mx) / sum * (float)cnt[e];
    for (int64_t e = 0; e < a.E; e++) {
        const float se = expf(l[e] - mx) / sum;
        dl[e] = c * se * ((float)cnt[e] - sc) + a.z_scale * 2.0f * lse * se / (float)a.N -
                (a.pre_softmax ? se * pdp : 0.0f);
    }
    for (int64_t j = 0; j < a.k; j++)
        dl[id[j]] += a.pre_softmax ? p[j] * dp[j] : p[j] * (dp[j] - pdp / a.scaling);
}

extern "C" mt_status moe_router_bwd_cuda(const moe_args *a, mt_stream s) {
    if (a->N == 0) return MT_OK;
    router_bwd_kernel<<<blocks_for(a->N, 128), 128, 0, (cudaStream_t)s>>>(*a);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

/* ---- the expert bias: tokens += counts; bias += sign(mean - tokens) rate, one router a block */

static __global__ void bias_tokens_kernel(moe_args a) {
    const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (e < a.E) a.probs[e] += (float)a.counts_in[e];
}

extern "C" mt_status moe_expert_bias_tokens_cuda(const moe_args *a, mt_stream s) {
    bias_tokens_kernel<<<blocks_for(a->E, 128), 128, 0, (cudaStream_t)s>>>(*a);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

static __global__ void bias_update_kernel(moe_args a) {
    float *b = a.probs + blockIdx.x * a.E, *t = a.dlogits + blockIdx.x * a.E;
    if (threadIdx.x != 0) return;
    float mean = 0.0f; /* (the CPU's order: E is small) */
    for (int64_t e = 0; e < a.E; e++)
        mean += t[e];
    mean /= (float)a.E;
    for (int64_t e = 0; e < a.E; e++) {
        const float off = mean - t[e];
        b[e] += (off > 0.0f ? a.rate : off < 0.0f ? -a.rate : 0.0f);
        t[e] = 0.0f;
    }
}

extern "C" mt_status moe_expert_bias_update_cuda(const moe_args *a, mt_stream s) {
    if (a->N == 0) return MT_OK;
    bias_update_kernel<<<(unsigned)a->N, 32, 0, (cudaStream_t)s>>>(*a);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

/* ---- dispatch map: block e finds expert e's entries of idx in order ---- */

#define MAP_THREADS 256
static __global__ void map_kernel(moe_args a) {
    typedef cub::BlockScan<int, MAP_THREADS> S;
    __shared__ typename S::TempStorage tmp;
    __shared__ int64_t base;
    const int e = blockIdx.x;
    if (threadIdx.x == 0) {
        int64_t b = 0;
        for (int i = 0; i < e; i++)
            b += a.counts_in[i];
        base = b;
    }
    __syncthreads();
    const int64_t R = a.N * a.k;
    for (int64_t i0 = 0; i0 < R; i0 += MAP_THREADS) {
        const int64_t i = i0 + threadIdx.x;
        const int hit = i < R && a.idx_in[i] == e;
        int before, total;
        S(tmp).ExclusiveSum(hit, before, total);
        if (hit) {
            a.rows[base + before] = (int32_t)(i / a.k);
            a.pos[i] = (int32_t)(base + before);
        }
        __syncthreads(); /* (tmp and base reused) */
        if (threadIdx.x == 0) base += total;
        __syncthreads();
    }
}

extern "C" mt_status moe_dispatch_map_cuda(const moe_args *a, mt_stream s) {
    map_kernel<<<(unsigned)a->E, MAP_THREADS, 0, (cudaStream_t)s>>>(*a);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

/* ---- capacity map: block e lists expert e's candidates in token order (into the workspace, at
 * the sum of the earlier experts' counts), then keeps those under the capacity in order ---- */

static __global__ void capacity_kernel(moe_args a) {
    typedef cub::BlockScan<int, MAP_THREADS> S;
    __shared__ typename S::TempStorage tmp;
    __shared__ int64_t base, out, n_in;
    const int e = blockIdx.x;
    if (threadIdx.x == 0) {
        int64_t b = 0, o = 0;
        for (int i = 0; i < e; i++) {
            b += a.counts_in[i];
            o += a.counts_in[i] < a.capacity ? a.counts_in[i] : a.capacity;
        }
        base = b, out = a.region ? (int64_t)e * a.region : o, n_in = 0;
    }
    __syncthreads();
    const int64_t R = a.N * a.k, count = a.counts_in[e];
    int32_t *cand = a.scratch + base;
    for (int64_t i0 = 0; i0 < R; i0 += MAP_THREADS) { /* the candidates, in token order */
        const int64_t i = i0 + threadIdx.x;
        const int hit = i < R && a.idx_in[i] == e;
        int before, total;
        S(tmp).ExclusiveSum(hit, before, total);
        if (hit) cand[n_in + before] = (int32_t)i;
        __syncthreads();
        if (threadIdx.x == 0) n_in += total;
        __syncthreads();
    }
    for (int64_t c0 = 0; c0 < count; c0 += MAP_THREADS) { /* the kept ones, in order */
        const int64_t c = c0 + threadIdx.x;
        int keep = 0;
        if (c < count) {
            if (count <= a.capacity || a.by_position) {
                keep = c < a.capacity;
            } else { /* rank among the candidates: larger probabilities, then earlier tokens */
                const float p = a.probs_in[cand[c]];
                int64_t before = 0;
                for (int64_t d = 0; d < count; d++) {
                    const float q = a.probs_in[cand[d]];
                    before += q > p || (q == p && d < c);
                }
                keep = before < a.capacity;
            }
        }
        int before, total;
        S(tmp).ExclusiveSum(keep, before, total);
        if (keep) {
            const int64_t r = out + before;
            a.rows[r] = cand[c] / (int32_t)a.k;
            a.pos[cand[c]] = (int32_t)r;
        }
        __syncthreads();
        if (threadIdx.x == 0) out += total;
        __syncthreads();
    }
    if (threadIdx.x == 0) a.counts[e] = (int32_t)(count < a.capacity ? count : a.capacity);
}

extern "C" mt_status moe_capacity_map_cuda(const moe_args *a, mt_stream s) {
    MT_CUDA_TRY(cudaMemsetAsync(a->rows, 0xff, (size_t)a->R * 4, (cudaStream_t)s)); /* -1 */
    MT_CUDA_TRY(cudaMemsetAsync(a->pos, 0xff, (size_t)(a->N * a->k) * 4, (cudaStream_t)s));
    capacity_kernel<<<(unsigned)a->E, MAP_THREADS, 0, (cudaStream_t)s>>>(*a);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

/* ---- row moves: a block a row ---- */

template <typename T> static __global__ void permute_kernel(moe_args a) {
    const int64_t r = blockIdx.x, src = a.rows_in[r];
    const T *x = (const T *)a.x + src * a.C;
    T *y = (T *)a.y + r * a.C;
    for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x)
        y[c] = src < 0 ? stf<T>(0.0f) : x[c]; /* (a padding row: zeros) */
}

template <typename T> static __global__ void permute_bwd_kernel(moe_args a) {
    const int64_t n = blockIdx.x;
    T *dx = (T *)a.y + n * a.C;
    for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) {
        float v = a.accumulate ? ldf(dx[c]) : 0.0f;
        for (int64_t j = 0; j < a.k; j++)
            if (a.pos_in[n * a.k + j] >= 0)
                v += ldf(((const T *)a.x)[(int64_t)a.pos_in[n * a.k + j] * a.C + c]);
        dx[c] = stf<T>(v);
    }
}

template <typename T> static __global__ void unpermute_kernel(moe_args a) {
    const int64_t n = blockIdx.x;
    T *y = (T *)a.y + n * a.C;
    for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) {
        float v = a.resid ? ldf(((const T *)a.resid)[n * a.C + c]) : 0.0f;
        for (int64_t j = 0; j < a.k; j++)
            if (a.pos_in[n * a.k + j] >= 0)
                v += a.probs_in[n * a.k + j] *
                     ldf(((const T *)a.x)[(int64_t)a.pos_in[n * a.k + j] * a.C + c]);
        y[c] = stf<T>(v);
    }
}

#define ROW_THREADS 256
template <typename T> static __global__ void unpermute_bwd_kernel(moe_args a) {
    typedef cub::BlockReduce<float, ROW_THREADS> R;
    __shared__ typename R::TempStorage tmp;
    const int64_t n = blockIdx.x;
    const T *dy = (const T *)a.x + n * a.C;
    for (int64_t j = 0; j < a.k; j++) {
        const int64_t r = a.pos_in[n * a.k + j];
        const float p = a.probs_in[n * a.k + j];
        if (r < 0) { /* dropped (uniform over the block: no reduction to skip) */
            if (threadIdx.x == 0) a.dprobs_out[n * a.k + j] = 0.0f;
            continue;
        }
        const T *yp = (const T *)a.x2 + r * a.C;
        T *dyp = (T *)a.y2 + r * a.C;
        float dot = 0.0f;
        for (int64_t c = threadIdx.x; c < a.C; c += ROW_THREADS) {
            const float d = ldf(dy[c]);
            dot += d * ldf(yp[c]);
            dyp[c] = stf<T>(p * d);
        }
        dot = R(tmp).Sum(dot);
        if (threadIdx.x == 0) a.dprobs_out[n * a.k + j] = dot;
        __syncthreads();
    }
}

extern "C" mt_status moe_permute_cuda(const moe_args *a, mt_stream s) {
    if (a->R == 0) return MT_OK;
    MT_DISPATCH_FLOAT(a->dtype, T,
                      (permute_kernel<T><<<(unsigned)a->R, ROW_THREADS, 0, (cudaStream_t)s>>>(*a)));
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status moe_permute_bwd_cuda(const moe_args *a, mt_stream s) {
    if (a->N == 0) return MT_OK;
    MT_DISPATCH_FLOAT(
        a->dtype, T,
        (permute_bwd_kernel<T><<<(unsigned)a->N, ROW_THREADS, 0, (cudaStream_t)s>>>(*a)));
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status moe_unpermute_cuda(const moe_args *a, mt_stream s) {
    if (a->N == 0) return MT_OK;
    MT_DISPATCH_FLOAT(
        a->dtype, T,
        (unpermute_kernel<T><<<(unsigned)a->N, ROW_THREADS, 0, (cudaStream_t)s>>>(*a)));
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

extern "C" mt_status moe_unpermute_bwd_cuda(const moe_args *a, mt_stream s) {
    if (a->N == 0) return MT_OK;
    MT_DISPATCH_FLOAT(
        a->dtype, T,
        (unpermute_bwd_kernel<T><<<(unsigned)a->N, ROW_THREADS, 0, (cudaStream_t)s>>>(*a)));
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}
