/* RoPE CPU reference: angle pos * inv_freq[i] in fp64 (mt_rope_inv_freq), cos and sin times attn,
 * the 2x2 rotation of each pair in fp32 (both elements read before either is written, so out may alias x). out and x are
 * indexed through their own B, T, H strides; D is contiguous. */
#include <math.h>

#include "../ops_impl.h"

mt_status rope_cpu(mt_tensor *out, const mt_tensor *x, const mt_tensor *pos, int rotary_dim,
                   const double *inv_freq, double attn, int interleaved, int sign) {
    int64_t B = x->shape[0], T = x->shape[1], H = x->shape[2], D = x->shape[3];
    int64_t half = rotary_dim / 2;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            int64_t p = t;
            if (pos) {
                int64_t i = pos->ndim == 2 ? b * T + t : t;
                p = pos->dtype == MT_I64 ? ((const int64_t *)pos->data)[i]
                                         : ((const int32_t *)pos->data)[i];
            }
            for (int64_t h = 0; h < H; h++) {
                int64_t xo = b * x->stride[0] + t * x->stride[1] + h * x->stride[2];
                int64_t o = b * out->stride[0] + t * out->stride[1] + h * out->stride[2];
                for (int64_t i = 0; i < half; i++) {
                    double ang = (double)p * inv_freq[i];
                    float cs = (float)(attn * cos(ang)), sn = (float)(sign * attn * sin(ang));
                    int64_t i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
                    float x0 = mt_load_f32(x->data, x->dtype, xo + i0);
                    float x1 = mt_load_f32(x->data, x->dtype, xo + i1);
                    mt_store_f32(out->data, out->dtype, o + i0, x0 * cs - x1 * sn);
                    mt_store_f32(out->data, out->dtype, o + i1, x1 * cs + x0 * sn);
                }
                for (int64_t d = rotary_dim; d < D; d++)
                    mt_store_f32(out->data, out->dtype, o + d,
                                 mt_load_f32(x->data, x->dtype, xo + d));
            }
        }
    return MT_OK;
}
