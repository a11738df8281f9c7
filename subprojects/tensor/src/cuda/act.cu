/* GELU (tanh), SiLU, sigmoid, SwiGLU CUDA kernels: 16-byte packs when every operand allows them, fp32
 * math, one rounding on store. Rows in blockIdx.y, packs of a row across blockIdx.x. */
#include "common.cuh"

template <typename T, int W> struct alignas(sizeof(T) * W) act_pack { T v[W]; };

static __device__ __forceinline__ float gelu_grad_f(float x) {
    const float k = 0.7978845608028654f;
    float t = tanh_fast(k * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

static __device__ __forceinline__ float sigmoid_f(float x) {
    return 1.0f / (1.0f + expf(-x));
}

template <typename T, int W>
static __device__ __forceinline__ act_pack<T, W> ld_pack(const void *base, int64_t off) {
    return *reinterpret_cast<const act_pack<T, W> *>((const T *)base + off);
}

template <typename T, int W>
static __device__ __forceinline__ void st_pack(void *base, int64_t off, act_pack<T, W> p) {
    *reinterpret_cast<act_pack<T, W> *>((T *)base + off) = p;
}

template <int OP, typename T, int W> static __global__ void act_kernel(act_args a) {
    int64_t npk = a.cols / W;
    for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
        for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < npk;
             p += (int64_t)gridDim.x * blockDim.x) {
            int64_t c = p * W;
            act_pack<T, W> v0 = ld_pack<T, W>(a.in0, r * a.ld_in0 + c), v1, v2, o0, o1;
            if (OP != ACT_GELU_FWD && OP != ACT_SILU_FWD && OP != ACT_SIGMOID_FWD)
                v1 = ld_pack<T, W>(a.in1, r * a.ld_in1 + c);
            if (OP == ACT_SWIGLU_BWD) v2 = ld_pack<T, W>(a.in2, r * a.ld_in2 + c);
#pragma unroll
            for (int j = 0; j < W; j++) {
                float x0 = ldf(v0.v[j]);
                if (OP == ACT_GELU_FWD) {
                    o0.v[j] = stf<T>(gelu_f(x0));
                } else if (OP == ACT_GELU_BWD) {
                    o0.v[j] = stf<T>(x0 * gelu_grad_f(ldf(v1.v[j])));
                } else if (OP == ACT_SILU_FWD) {
                    o0.v[j] = stf<T>(x0 * sigmoid_f(x0));
                } else if (OP == ACT_SILU_BWD) {
                    float x = ldf(v1.v[j]), s = sigmoid_f(x);
                    o0.v[j] = stf<T>(x0 * s * (1.0f + x * (1.0f - s)));
                } else if (OP == ACT_SIGMOID_FWD) {
                    o0.v[j] = stf<T>(sigmoid_f(x0));
                } else if (OP == ACT_SIGMOID_BWD) {
                    float y = ldf(v1.v[j]);
                    o0.v[j] = stf<T>(x0 * y * (1.0f - y));
                } else if (OP == ACT_SWIGLU_FWD) {
                    o0.v[j] = stf<T>(x0 * sigmoid_f(x0) * ldf(v1.v[j]));
                } else {
                    float g = ldf(v1.v[j]), u = ldf(v2.v[j]), s = sigmoid_f(g);
                    o0.v[j] = stf<T>(x0 * u * s * (1.0f + g * (1.0f - s)));
                    o1.v[j] = stf<T>(x0 * g * s);
                }
            }
            st_pack<T, W>(a.out0, r * a.ld_out0 + c, o0);
            if (OP == ACT_SWIGLU_BWD) st_pack<T, W>(a.out1, r * a.ld_out1 + c, o1);
        }
    }
}

template <int OP, typename T, int W> static mt_status launch(const act_args *a, mt_stream stream) {
    const int block = 256;
    int64_t npk = a->cols / W;
    unsigned gx = mt_grid_1d(npk, block);
    unsigned gy = (unsigned)(a->rows < 65535 ? a->rows : 65535);
    act_kernel<OP, T, W><<<dim3(gx, gy), block, 0, stream>>>(*a);
    MT_CUDA_CHECK_LAUNCH();
    return MT_OK;
}

/* 1 when a pointer and row stride allow 16-byte packs of W elements. */
static int pack_ok(const void *p, int64_t ld, int W, size_t es) {
    return p == nullptr || (((uintptr_t)p % (W * es)) == 0 && ld % W == 0);
}

template <int OP, typename T> static mt_status launch_w(const act_args *a, mt_stream stream) {
    const int W = 16 / sizeof(T);
    size_t es = sizeof(T);
    if (a->cols % W == 0 && pack_ok(a->out0, a->ld_out0, W, es) &&
        pack_ok(a->out1, a->ld_out1, W, es) && pack_ok(a->in0, a->ld_in0, W, es) &&
        pack_ok(a->in1, a->ld_in1, W, es) && pack_ok(a->in2, a->ld_in2, W, es))
        return launch<OP, T, W>(a, stream);
    return launch<OP, T, 1>(a, stream);
}

template <typename T> static mt_status launch_op(const act_args *a, mt_stream stream) {
    switch (a->op) {
    case ACT_GELU_FWD:
        return launch_w<ACT_GELU_FWD, T>(a, stream);
    case ACT_GELU_BWD:
        return launch_w<ACT_GELU_BWD, T>(a, stream);
    case ACT_SILU_FWD:
        return launch_w<ACT_SILU_FWD, T>(a, stream);
    case ACT_SILU_BWD:
        return launch_w<ACT_SILU_BWD, T>(a, stream);
    case ACT_SIGMOID_FWD:
        return launch_w<ACT_SIGMOID_FWD, T>(a, stream);
    case ACT_SIGMOID_BWD:
        return launch_w<ACT_SIGMOID_BWD, T>(a, stream);
    case ACT_SWIGLU_FWD:
        return launch_w<ACT_SWIGLU_FWD, T>(a, stream);
    case ACT_SWIGLU_BWD:
        return launch_w<ACT_SWIGLU_BWD, T>(a, stream);
    }
    return MT_ERROR(MT_ERR_INTERNAL, "act op %d", (int)a->op);
}

extern "C" mt_status act_cuda(const act_args *args, mt_stream stream) {
    act_args a = *args;
    // why: contiguous operands collapse to one long row, so short rows do not waste blocks
    if (a.ld_out0 == a.cols && a.ld_in0 == a.cols && (!a.in1 || a.ld_in1 == a.cols) && !a.in2 &&
        !a.out1) {
        a.cols *= a.rows;
        a.ld_out0 = a.ld_in0 = a.ld_in1 = a.cols;
        a.rows = 1;
    }
    switch (a.dtype) {
    case MT_F32:
        return launch_op<float>(&a, stream);
    case MT_BF16:
        return launch_op<__nv_bfloat16>(&a, stream);
    case MT_F16:
        return launch_op<__half>(&a, stream);
    default:
        return MT_ERROR(MT_ERR_UNSUPPORTED, "act: dtype %s", mt_dtype_name(a.dtype));
    }
}
