/* Reductions CPU reference: fp64 accumulation in element order (sum, sum of squares, norm, zero
 * count), and column sums in row order. */
#include <math.h>

#include "../ops_impl.h"

mt_status reduce_cpu(mt_tensor *out, const mt_tensor *x, mt_reduce_op op) {
    int64_t n = mt_tensor_numel(x);
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double v = mt_load_f32(x->data, x->dtype, i);
        acc += op == MT_REDUCE_SUM ? v : op == MT_REDUCE_COUNT_ZERO ? (double)(v == 0.0) : v * v;
    }
    if (op == MT_REDUCE_NORM2) acc = sqrt(acc);
    if (out->dtype == MT_I64)
        *(int64_t *)out->data = (int64_t)acc;
    else
        *(float *)out->data = (float)acc;
    return MT_OK;
}

mt_status colsum_cpu(mt_tensor *out, const mt_tensor *x, int accumulate) {
    int64_t C = x->shape[x->ndim - 1], R = C ? mt_tensor_numel(x) / C : 0;
    for (int64_t c = 0; c < C; c++) {
        double acc = accumulate ? mt_load_f32(out->data, out->dtype, c) : 0.0;
        for (int64_t r = 0; r < R; r++)
            acc += mt_load_f32(x->data, x->dtype, r * C + c);
        mt_store_f32(out->data, out->dtype, c, (float)acc);
    }
    return MT_OK;
}
