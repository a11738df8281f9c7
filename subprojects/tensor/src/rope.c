/* Rotary position embedding (half-split and interleaved): the frequencies (with Llama 3 / YaRN /
 * linear scaling), validation and device dispatch. */
#include <math.h>

#include "ops_impl.h"

#define ROPE_PI 3.14159265358979323846 /* Python's math.pi */

double mt_rope_yarn_mscale(double s, double k) {
    return s <= 1.0 ? 1.0 : 0.1 * k * log(s) + 1.0;
}

/* YaRN's channel pair where the base frequency turns `rot` times within n positions. */
static double yarn_dim(double rot, int dim, double theta, double n) {
    return dim * log(n / (rot * 2.0 * ROPE_PI)) / (2.0 * log(theta));
}

static double or_default(double v, double d) {
    return v != 0.0 ? v : d;
}

mt_status mt_rope_inv_freq(double *inv_freq, double *attn_factor, int rotary_dim, double theta,
                           const mt_rope_scaling *sc) {
    MT_REQUIRE(inv_freq && attn_factor, MT_ERR_INVALID_ARG, "inv_freq or attn_factor is NULL");
    MT_REQUIRE(rotary_dim >= 2 && rotary_dim % 2 == 0, MT_ERR_INVALID_ARG,
               "rotary_dim = %d, want even >= 2", rotary_dim);
    MT_REQUIRE(theta > 0.0, MT_ERR_INVALID_ARG, "theta = %g, want > 0", theta);
    const int half = rotary_dim / 2, type = sc ? (int)sc->type : MT_ROPE_SCALING_NONE;
    MT_REQUIRE(type >= MT_ROPE_SCALING_NONE && type <= MT_ROPE_SCALING_LONGROPE, MT_ERR_INVALID_ARG,
               "rope scaling type %d is not NONE, LINEAR, LLAMA3, YARN or LONGROPE", type);
    MT_REQUIRE(half <= MT_ROPE_MAX_PAIRS || type != MT_ROPE_SCALING_LONGROPE, MT_ERR_UNSUPPORTED,
               "LongRoPE over %d channel pairs (at most %d)", half, MT_ROPE_MAX_PAIRS);
    MT_REQUIRE(type == MT_ROPE_SCALING_NONE || sc->factor > 0.0, MT_ERR_INVALID_ARG,
               "rope scaling factor = %g, want > 0", type ? sc->factor : 0.0);
    *attn_factor = 1.0;
    for (int i = 0; i < half; i++)
        inv_freq[i] = pow(theta, -2.0 * (double)i / rotary_dim);
    if (type == MT_ROPE_SCALING_LINEAR) {
        for (int i = 0; i < half; i++)
            inv_freq[i] /= sc->factor;
    } else if (type == MT_ROPE_SCALING_LLAMA3) {
        const double lo = or_default(sc->low_freq_factor, 1.0);
        const double hi = or_default(sc->high_freq_factor, 4.0);
        const double n = or_default(sc->original_max_position_embeddings, 8192.0);
        MT_REQUIRE(hi > lo && lo > 0.0 && n > 0.0, MT_ERR_INVALID_ARG,
                   "Llama 3 rope scaling: low_freq_factor %g, high_freq_factor %g, original "
                   "positions %g (want 0 < low < high, positions > 0)",
                   lo, hi, n);
        for (int i = 0; i < half; i++) {
            const double f = inv_freq[i], wl = 2.0 * ROPE_PI / f;
            if (wl > n / lo)
                inv_freq[i] = f / sc->factor;
            else if (wl >= n / hi) {
                const double s = (n / wl - lo) / (hi - lo);
                inv_freq[i] = (1.0 - s) * f / sc->factor + s * f;
            }
        }
    } else if (type == MT_ROPE_SCALING_YARN) {
        const double n = or_default(sc->original_max_position_embeddings, 4096.0);
        const double bf = or_default(sc->beta_fast, 32.0), bs = or_default(sc->beta_slow, 1.0);
        MT_REQUIRE(n > 0.0 && bf > 0.0 && bs > 0.0, MT_ERR_INVALID_ARG,
                   "YaRN: original positions %g, beta_fast %g, beta_slow %g (want > 0)", n, bf, bs);
        double lo = yarn_dim(bf, rotary_dim, theta, n), hi = yarn_dim(bs, rotary_dim, theta, n);
        if (!sc->no_truncate) lo = floor(lo), hi = ceil(hi);
        lo = lo > 0.0 ? lo : 0.0;
        hi = hi < rotary_dim - 1 ? hi : rotary_dim - 1;
        if (lo == hi) hi += 0.001; /* as Megatron and Hugging Face: no division by zero */
        for (int i = 0; i < half; i++) {
            double r = (i - lo) / (hi - lo);
            r = r < 0.0 ? 0.0 : r > 1.0 ? 1.0 : r;
            inv_freq[i] = inv_freq[i] / sc->factor * r + inv_freq[i] * (1.0 - r);
        }
        *attn_factor = mt_rope_yarn_mscale(sc->factor, sc->mscale) /
                       mt_rope_yarn_mscale(sc->factor, sc->mscale_all_dim);
    } else if (type == MT_ROPE_SCALING_LONGROPE) {
        const double n = or_default(sc->original_max_position_embeddings, 4096.0);
        MT_REQUIRE(n > 1.0, MT_ERR_INVALID_ARG, "LongRoPE: original positions %g (want > 1)", n);
        for (int i = 0; i < half; i++) {
            MT_REQUIRE(sc->ext_factors[i] > 0.0, MT_ERR_INVALID_ARG,
                       "LongRoPE: channel pair %d's factor %g (want > 0)", i, sc->ext_factors[i]);
            inv_freq[i] /= sc->ext_factors[i];
        }
        *attn_factor = sc->attention_factor != 0.0 ? sc->attention_factor
                       : sc->factor > 1.0          ? sqrt(1.0 + log(sc->factor) / log(n))
                                                   : 1.0;
    }
    return MT_OK;
}

/* A (B,T,H,D) view whose D is innermost (stride 1); the B, T and H strides are free. */
static mt_status check_bthd(const mt_tensor *t, const char *what) {
    MT_REQUIRE(t, MT_ERR_INVALID_ARG, "%s is NULL", what);
    MT_REQUIRE(mt_dtype_size(t->dtype) > 0, MT_ERR_INVALID_ARG, "%s has an invalid dtype", what);
    MT_REQUIRE(t->ndim == 4, MT_ERR_INVALID_ARG, "%s is %d-d, expected (B,T,H,D)", what, t->ndim);
    MT_REQUIRE(t->data || mt_tensor_numel(t) == 0, MT_ERR_INVALID_ARG, "%s has no data", what);
    MT_REQUIRE(t->stride[3] == 1 || t->shape[3] <= 1, MT_ERR_INVALID_ARG,
               "%s: D must be innermost (stride %lld, want 1)", what, (long long)t->stride[3]);
    return MT_OK;
}

static mt_status run(mt_tensor *out, const mt_tensor *x, const mt_tensor *pos, int rotary_dim,
                     double theta, int interleaved, const mt_rope_scaling *sc, int sign,
                     mt_stream stream) {
    MT_TRY(check_bthd(out, "out"));
    MT_TRY(check_bthd(x, "x"));
    MT_REQUIRE(mt_dtype_is_float(x->dtype), MT_ERR_UNSUPPORTED, "x: dtype %s is not a float type",
               mt_dtype_name(x->dtype));
    MT_REQUIRE(mt_tensor_same_shape(out, x) && out->dtype == x->dtype &&
                   mt_device_eq(out->device, x->device),
               MT_ERR_INVALID_ARG, "out differs from x (B,T,H,D) in shape, dtype or device");
    int64_t B = x->shape[0], T = x->shape[1], D = x->shape[3];
    MT_REQUIRE(rotary_dim >= 2 && rotary_dim % 2 == 0 && rotary_dim <= D, MT_ERR_INVALID_ARG,
               "rotary_dim = %d, want even in [2, D = %lld]", rotary_dim, (long long)D);
    MT_REQUIRE(rotary_dim <= 2 * MT_ROPE_MAX_PAIRS, MT_ERR_UNSUPPORTED,
               "rotary_dim = %d, at most %d", rotary_dim, 2 * MT_ROPE_MAX_PAIRS);
    MT_REQUIRE(theta > 0.0, MT_ERR_INVALID_ARG, "theta = %g, want > 0", theta);
    if (pos) {
        MT_TRY(mt_tensor_check(pos, "pos", -1));
        MT_REQUIRE(pos->dtype == MT_I32 || pos->dtype == MT_I64, MT_ERR_UNSUPPORTED,
                   "pos: dtype %s, want i32 or i64", mt_dtype_name(pos->dtype));
        MT_REQUIRE((pos->ndim == 1 && pos->shape[0] == T) ||
                       (pos->ndim == 2 && pos->shape[0] == B && pos->shape[1] == T),
                   MT_ERR_INVALID_ARG, "pos must be (T) or (B,T) = (%lld,%lld)", (long long)B,
                   (long long)T);
        MT_REQUIRE(mt_device_eq(pos->device, x->device), MT_ERR_INVALID_ARG,
                   "pos and x are on different devices");
    }
    double inv[MT_ROPE_MAX_PAIRS], attn;
    MT_TRY(mt_rope_inv_freq(inv, &attn, rotary_dim, theta, sc));
    return MT_DISPATCH(x->device, rope_cpu(out, x, pos, rotary_dim, inv, attn, interleaved, sign),
                       rope_cuda(out, x, pos, rotary_dim, inv, attn, interleaved, sign, stream));
}

mt_status mt_rope_fwd(mt_tensor *out, const mt_tensor *x, const mt_tensor *pos, int rotary_dim,
                      double theta, int interleaved, mt_stream stream) {
    return run(out, x, pos, rotary_dim, theta, interleaved, NULL, 1, stream);
}

mt_status mt_rope_bwd(mt_tensor *dx, const mt_tensor *dout, const mt_tensor *pos, int rotary_dim,
                      double theta, int interleaved, mt_stream stream) {
    return run(dx, dout, pos, rotary_dim, theta, interleaved, NULL, -1, stream);
}

mt_status mt_rope_scaled_fwd(mt_tensor *out, const mt_tensor *x, const mt_tensor *pos,
                             int rotary_dim, double theta, int interleaved,
                             const mt_rope_scaling *scaling, mt_stream stream) {
    return run(out, x, pos, rotary_dim, theta, interleaved, scaling, 1, stream);
}

mt_status mt_rope_scaled_bwd(mt_tensor *dx, const mt_tensor *dout, const mt_tensor *pos,
                             int rotary_dim, double theta, int interleaved,
                             const mt_rope_scaling *scaling, mt_stream stream) {
    return run(dx, dout, pos, rotary_dim, theta, interleaved, scaling, -1, stream);
}
