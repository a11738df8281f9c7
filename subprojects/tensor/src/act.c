/* GELU (tanh), SiLU, sigmoid and SwiGLU forward/backward: validation and device dispatch. Every operand is
 * viewed as rows x cols with its own row stride, so SwiGLU's halves are plain strided views. */
#include "ops_impl.h"

/* Checks a float tensor whose last dim is contiguous and whose rows are evenly strided, and
 * returns its rows x cols view (rows = product of the leading dims). */
static mt_status rows_view(const mt_tensor *t, const char *what, int64_t *rows, int64_t *cols,
                           int64_t *ld) {
    MT_REQUIRE(t && (t->data || mt_tensor_numel(t) == 0), MT_ERR_INVALID_ARG, "%s is NULL", what);
    MT_REQUIRE(t->ndim >= 1, MT_ERR_INVALID_ARG, "%s must have at least 1 dim", what);
    MT_REQUIRE(t->dtype == MT_F32 || t->dtype == MT_BF16 || t->dtype == MT_F16, MT_ERR_UNSUPPORTED,
               "%s: dtype %s (f32, bf16 or f16)", what, mt_dtype_name(t->dtype));
    int d = t->ndim - 1;
    MT_REQUIRE(t->stride[d] == 1 || t->shape[d] <= 1, MT_ERR_INVALID_ARG,
               "%s: last dim is not contiguous", what);
    *cols = t->shape[d];
    *rows = 1;
    for (int i = 0; i < d; i++)
        *rows *= t->shape[i];
    *ld = d > 0 ? t->stride[d - 1] : *cols;
    /* leading dims must collapse into one evenly strided row index */
    for (int i = d - 1; i > 0; i--)
        MT_REQUIRE(t->stride[i - 1] == t->stride[i] * t->shape[i] || t->shape[i - 1] <= 1,
                   MT_ERR_INVALID_ARG, "%s: leading dims are not evenly strided", what);
    return MT_OK;
}

static mt_status same_view(const mt_tensor *t, const char *what, const mt_tensor *ref, int64_t rows,
                           int64_t cols, int64_t *ld) {
    int64_t r = 0, c = 0;
    MT_TRY(rows_view(t, what, &r, &c, ld));
    MT_REQUIRE(r == rows && c == cols, MT_ERR_INVALID_ARG,
               "%s is %lld x %lld, expected %lld x %lld", what, (long long)r, (long long)c,
               (long long)rows, (long long)cols);
    MT_REQUIRE(t->dtype == ref->dtype, MT_ERR_INVALID_ARG, "%s is %s, expected %s", what,
               mt_dtype_name(t->dtype), mt_dtype_name(ref->dtype));
    MT_REQUIRE(mt_device_eq(t->device, ref->device), MT_ERR_INVALID_ARG, "%s is on another device",
               what);
    return MT_OK;
}

static mt_status run(act_args *a, mt_device dev, mt_stream stream) {
    if (a->rows == 0 || a->cols == 0) return MT_OK;
    return MT_DISPATCH(dev, act_cpu(a), act_cuda(a, stream));
}

/* GELU/SiLU/sigmoid forward (bwd: dx = dout * f'(x), sigmoid's from its output y in x's place):
 * elementwise over same-shaped tensors. */
static mt_status unary(act_op op, mt_tensor *out, const mt_tensor *dout, const mt_tensor *x,
                       mt_stream stream) {
    act_args a = { 0 };
    a.op = op;
    MT_TRY(rows_view(x, "x", &a.rows, &a.cols, &a.ld_in1));
    MT_TRY(same_view(out, dout ? "dx" : "out", x, a.rows, a.cols, &a.ld_out0));
    if (dout) MT_TRY(same_view(dout, "dout", x, a.rows, a.cols, &a.ld_in0));
    a.dtype = x->dtype;
    a.out0 = out->data;
    a.in0 = dout ? dout->data : x->data;
    a.in1 = x->data;
    if (!dout) a.ld_in0 = a.ld_in1;
    return run(&a, x->device, stream);
}

mt_status mt_gelu_fwd(mt_tensor *out, const mt_tensor *x, mt_stream stream) {
    return unary(ACT_GELU_FWD, out, NULL, x, stream);
}

mt_status mt_gelu_bwd(mt_tensor *dx, const mt_tensor *dout, const mt_tensor *x, mt_stream stream) {
    MT_REQUIRE(dout, MT_ERR_INVALID_ARG, "dout is NULL");
    return unary(ACT_GELU_BWD, dx, dout, x, stream);
}

mt_status mt_silu_fwd(mt_tensor *out, const mt_tensor *x, mt_stream stream) {
    return unary(ACT_SILU_FWD, out, NULL, x, stream);
}

mt_status mt_silu_bwd(mt_tensor *dx, const mt_tensor *dout, const mt_tensor *x, mt_stream stream) {
    MT_REQUIRE(dout, MT_ERR_INVALID_ARG, "dout is NULL");
    return unary(ACT_SILU_BWD, dx, dout, x, stream);
}

mt_status mt_sigmoid_fwd(mt_tensor *out, const mt_tensor *x, mt_stream stream) {
    return unary(ACT_SIGMOID_FWD, out, NULL, x, stream);
}

mt_status mt_sigmoid_bwd(mt_tensor *dx, const mt_tensor *dout, const mt_tensor *y,
                         mt_stream stream) {
    MT_REQUIRE(dout, MT_ERR_INVALID_ARG, "dout is NULL");
    return unary(ACT_SIGMOID_BWD, dx, dout, y, stream);
}

/* Gate/up views of SwiGLU's input: the two halves of a fused (..., 2F) tensor, or two tensors. */
static mt_status glu_inputs(act_args *a, const mt_tensor *gate, const mt_tensor *up) {
    int64_t rows = 0, cols = 0, ld = 0;
    MT_TRY(rows_view(gate, "gate", &rows, &cols, &ld));
    a->dtype = gate->dtype;
    a->rows = rows;
    a->in1 = gate->data;
    a->ld_in1 = ld;
    if (!up) {
        MT_REQUIRE(cols % 2 == 0, MT_ERR_INVALID_ARG, "fused SwiGLU input has odd last dim %lld",
                   (long long)cols);
        a->cols = cols / 2;
        a->in2 = (const char *)gate->data + (size_t)a->cols * mt_dtype_size(gate->dtype);
        a->ld_in2 = ld;
    } else {
        a->cols = cols;
        MT_TRY(same_view(up, "up", gate, rows, cols, &a->ld_in2));
        a->in2 = up->data;
    }
    return MT_OK;
}

mt_status mt_swiglu_fwd(mt_tensor *out, const mt_tensor *gate, const mt_tensor *up,
                        mt_stream stream) {
    act_args a = { 0 };
    a.op = ACT_SWIGLU_FWD;
    MT_TRY(glu_inputs(&a, gate, up));
    MT_TRY(same_view(out, "out", gate, a.rows, a.cols, &a.ld_out0));
    a.out0 = out->data;
    /* act_cpu/act_cuda read in0 and in1 for the fwd */
    a.in0 = a.in1;
    a.ld_in0 = a.ld_in1;
    a.in1 = a.in2;
    a.ld_in1 = a.ld_in2;
    a.in2 = NULL;
    return run(&a, gate->device, stream);
}

mt_status mt_swiglu_bwd(mt_tensor *dgate, mt_tensor *dup, const mt_tensor *dout,
                        const mt_tensor *gate, const mt_tensor *up, mt_stream stream) {
    act_args a = { 0 };
    a.op = ACT_SWIGLU_BWD;
    MT_TRY(glu_inputs(&a, gate, up));
    MT_TRY(same_view(dout, "dout", gate, a.rows, a.cols, &a.ld_in0));
    a.in0 = dout->data;
    if (!up) {
        MT_REQUIRE(!dup, MT_ERR_INVALID_ARG, "fused SwiGLU: dup must be NULL (dgate gets both)");
        MT_TRY(same_view(dgate, "dgate", gate, a.rows, 2 * a.cols, &a.ld_out0));
        a.out1 = (char *)dgate->data + (size_t)a.cols * mt_dtype_size(gate->dtype);
        a.ld_out1 = a.ld_out0;
    } else {
        MT_REQUIRE(dup, MT_ERR_INVALID_ARG, "dup is NULL");
        MT_TRY(same_view(dgate, "dgate", gate, a.rows, a.cols, &a.ld_out0));
        MT_TRY(same_view(dup, "dup", gate, a.rows, a.cols, &a.ld_out1));
        a.out1 = dup->data;
    }
    a.out0 = dgate->data;
    return run(&a, gate->device, stream);
}
