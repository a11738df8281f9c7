/* RoPE CUDA kernels: one token (b, t) per block; its cos/sin (fp64 angles pos * inv_freq[i], times
 * attn, as the CPU) go to
 * shared memory once and serve all H heads; 16-byte loads over each head's D channels. out and x
 * are read through their own B, T, H strides (D contiguous), e.g. q and k slices of a fused QKV. */
#include "common.cuh"

/* Element strides of dims B, T, H of out (o*) and x (x*). */
struct rope_strides {
    int64_t ob, ot, oh, xb, xt, xh;
};

/* The inverse frequencies and the cos/sin factor (mt_rope_inv_freq), passed by value. */
struct rope_freqs {
    double inv[MT_ROPE_MAX_PAIRS];
    double attn;
};

template <typename I>
static __device__ void rope_table(float *cs, float *sn, const I *pos, int64_t bt, int64_t T_,
                                  int pos_bt, int rot, const rope_freqs &f, int sign) {
    int64_t p = bt % T_;
    if (pos) p = (int64_t)pos[pos_bt ? bt : bt % T_];
    for (int i = threadIdx.x; i < rot / 2; i += blockDim.x) {
        double s, c;
        sincos((double)p * f.inv[i], &s, &c);
        cs[i] = (float)(f.attn * c);
        sn[i] = (float)(sign * f.attn * s);
    }
    __syncthreads();
}

/* Vectorised: units of N channels per head: rotated (half-split: N pairs (i, i + rot/2);
 * interleaved: N/2 adjacent pairs), then pass-through channels [rot, D). */
template <typename T, typename I, int N, int INTERLEAVED>
static __global__ void rope_kernel(T *out, const T *x, const I *pos, int64_t bt0, int64_t T_,
                                   int pos_bt, int H, int D, int rot, const rope_freqs f, int sign,
                                   rope_strides st) {
    extern __shared__ float sh[];
    float *cs = sh, *sn = sh + rot / 2;
    typedef vec_t<T, N> VT;
    int64_t bt = bt0 + blockIdx.x;
    rope_table<I>(cs, sn, pos, bt, T_, pos_bt, rot, f, sign);
    int64_t b = bt / T_, t = bt % T_;
    int ur = INTERLEAVED ? rot / N : rot / 2 / N, up = (D - rot) / N, upr = ur + up;
    for (int idx = threadIdx.x; idx < H * upr; idx += blockDim.x) {
        int h = idx / upr, u = idx % upr;
        const T *xh = x + b * st.xb + t * st.xt + h * st.xh;
        T *oh = out + b * st.ob + t * st.ot + h * st.oh;
        if (u >= ur) { /* pass-through */
            int c = rot + (u - ur) * N;
            if (oh != xh) *(VT *)(oh + c) = *(const VT *)(xh + c);
        } else if (INTERLEAVED) {
            VT a = *(const VT *)(xh + u * N);
#pragma unroll
            for (int k = 0; k < N; k += 2) {
                int i = (u * N + k) / 2;
                float x0 = ldf(a.v[k]), x1 = ldf(a.v[k + 1]);
                a.v[k] = stf<T>(x0 * cs[i] - x1 * sn[i]);
                a.v[k + 1] = stf<T>(x1 * cs[i] + x0 * sn[i]);
            }
            *(VT *)(oh + u * N) = a;
        } else {
            int half = rot / 2;
            VT a = *(const VT *)(xh + u * N), b = *(const VT *)(xh + half + u * N);
#pragma unroll
            for (int k = 0; k < N; k++) {
                int i = u * N + k;
                float x0 = ldf(a.v[k]), x1 = ldf(b.v[k]);
                a.v[k] = stf<T>(x0 * cs[i] - x1 * sn[i]);
                b.v[k] = stf<T>(x1 * cs[i] + x0 * sn[i]);
            }
            *(VT *)(oh + u * N) = a;
            *(VT *)(oh + half + u * N) = b;
        }
    }
}

/* Scalar fallback for shapes the vectors do not tile: one pair or one pass-through channel. */
template <typename T, typename I>
static __global__ void rope_scalar_kernel(T *out, const T *x, const I *pos, int64_t bt0, int64_t T_,
                                          int pos_bt, int H, int D, int rot, const rope_freqs f,
                                          int sign, int interleaved, rope_strides st) {
    extern __shared__ float sh[];
    float *cs = sh, *sn = sh + rot / 2;
    int64_t bt = bt0 + blockIdx.x;
    rope_table<I>(cs, sn, pos, bt, T_, pos_bt, rot, f, sign);
    int64_t b = bt / T_, t = bt % T_;
    int half = rot / 2, upr = half + (D - rot);
    for (int idx = threadIdx.x; idx < H * upr; idx += blockDim.x) {
        int h = idx / upr, u = idx % upr;
        const T *xh = x + b * st.xb + t * st.xt + h * st.xh;
        T *oh = out + b * st.ob + t * st.ot + h * st.oh;
        if (u >= half) {
            int c = rot + (u - half);
            if (oh != xh) oh[c] = xh[c];
            continue;
        }
        int i0 = interleaved ? 2 * u : u, i1 = interleaved ? 2 * u + 1 : u + half;
        float x0 = ldf(xh[i0]), x1 = ldf(xh[i1]);
        oh[i0] = stf<T>(x0 * cs[u] - x1 * sn[u]);
        oh[i1] = stf<T>(x1 * cs[u] + x0 * sn[u]);
    }
}

template <typename T, typename I>
static mt_status launch(mt_tensor *out, const mt_tensor *x, const mt_tensor *pos, int rot,
                        const double *inv_freq, double attn, int interleaved, int sign,
                        mt_stream stream) {
    rope_freqs f;
    for (int i = 0; i < rot / 2; i++)
        f.inv[i] = inv_freq[i];
    f.attn = attn;
    int64_t BT = x->shape[0] * x->shape[1], T_ = x->shape[1];
    int H = (int)x->shape[2], D = (int)x->shape[3];
    const int N = 16 / sizeof(T);
    rope_strides st = { out->stride[0], out->stride[1], out->stride[2],
                        x->stride[0],   x->stride[1],   x->stride[2] };
    // why: every head's row must start 16-byte aligned for the vector loads and stores
    int vec = D % N == 0 && rot % (interleaved ? N : 2 * N) == 0 && (uintptr_t)x->data % 16 == 0 &&
              (uintptr_t)out->data % 16 == 0 && st.ob % N == 0 && st.ot % N == 0 &&
              st.oh % N == 0 && st.xb % N == 0 && st.xt % N == 0 && st.xh % N == 0;
    const I *p = pos ? (const I *)pos->data : nullptr;
    int pos_bt = pos && pos->ndim == 2;
    size_t smem = (size_t)rot * sizeof(float);
    T *o = (T *)out->data;
    const T *a = (const T *)x->data;
    for (int64_t r0 = 0; r0 < BT; r0 += 65535LL * 32) { // why: gridDim.x limit per launch
        unsigned g = (unsigned)(BT - r0 < 65535LL * 32 ? BT - r0 : 65535LL * 32);
        if (vec && interleaved)
            rope_kernel<T, I, N, 1>
                <<<g, 128, smem, stream>>>(o, a, p, r0, T_, pos_bt, H, D, rot, f, sign, st);
        else if (vec)
            rope_kernel<T, I, N, 0>
                <<<g, 128, smem, stream>>>(o, a, p, r0, T_, pos_bt, H, D, rot, f, sign, st);
        else
            rope_scalar_kernel<T, I><<<g, 128, smem, stream>>>(o, a, p, r0, T_, pos_bt, H, D, rot,
                                                               f, sign, interleaved, st);
        MT_CUDA_CHECK_LAUNCH();
    }
    return MT_OK;
}

extern "C" mt_status rope_cuda(mt_tensor *out, const mt_tensor *x, const mt_tensor *pos,
                               int rotary_dim, const double *inv_freq, double attn, int interleaved,
                               int sign, mt_stream stream) {
    if (mt_tensor_numel(x) == 0) return MT_OK;
    if (pos && pos->dtype == MT_I64)
        MT_DISPATCH_FLOAT(x->dtype, T,
                          return launch<T, int64_t>(out, x, pos, rotary_dim, inv_freq, attn,
                                                    interleaved, sign, stream));
    else
        MT_DISPATCH_FLOAT(x->dtype, T,
                          return launch<T, int32_t>(out, x, pos, rotary_dim, inv_freq, attn,
                                                    interleaved, sign, stream));
    return MT_OK;
}
