/* Softmax CPU reference: rows of the last dim, fp64 accumulation, one rounding on store. */
#include <math.h>

#include "../ops_impl.h"

mt_status softmax_cpu(mt_tensor *out, const mt_tensor *x, const mt_tensor *dy) {
    int64_t C = x->shape[x->ndim - 1], rows = C ? mt_tensor_numel(x) / C : 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = r * C;
        if (!dy) { /* out = exp(x - max) / sum */
            double m = -INFINITY, s = 0.0;
            for (int64_t c = 0; c < C; c++)
                m = fmax(m, mt_load_f32(x->data, x->dtype, o + c));
            for (int64_t c = 0; c < C; c++)
                s += exp(mt_load_f32(x->data, x->dtype, o + c) - m);
            for (int64_t c = 0; c < C; c++)
                mt_store_f32(out->data, out->dtype, o + c,
                             (float)(exp(mt_load_f32(x->data, x->dtype, o + c) - m) / s));
        } else { /* dx = y * (dy - sum(dy * y)); x holds y */
            double d = 0.0;
            for (int64_t c = 0; c < C; c++)
                d += (double)mt_load_f32(dy->data, dy->dtype, o + c) *
                     mt_load_f32(x->data, x->dtype, o + c);
            for (int64_t c = 0; c < C; c++) {
                double y = mt_load_f32(x->data, x->dtype, o + c);
                mt_store_f32(out->data, out->dtype, o + c,
                             (float)(y * (mt_load_f32(dy->data, dy->dtype, o + c) - d)));
            }
        }
    }
    return MT_OK;
}
