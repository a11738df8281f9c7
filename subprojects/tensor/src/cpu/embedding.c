/* Embedding CPU reference: row gather (+ position row) and the backward as plain sums in token
 * order, fp32 accumulation from the current gradient value, one rounding on store. */
#include <stdlib.h>

#include "../ops_impl.h"

static int64_t ld_id(const mt_tensor *t, int64_t i) {
    return t->dtype == MT_I64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

static mt_status check_range(const mt_tensor *ids, int64_t V) {
    int64_t N = mt_tensor_numel(ids);
    for (int64_t n = 0; n < N; n++) {
        int64_t v = ld_id(ids, n);
        MT_REQUIRE(v >= 0 && v < V, MT_ERR_INVALID_ARG, "ids[%lld] = %lld is outside [0, %lld)",
                   (long long)n, (long long)v, (long long)V);
    }
    return MT_OK;
}

/* The position row of token n: pos[n], or n's index along the last dim. */
static int64_t pos_of(const mt_tensor *pos, int64_t n, int64_t T) {
    return pos ? ld_id(pos, n) : n % T;
}

mt_status embedding_fwd_cpu(mt_tensor *out, const mt_tensor *ids, const mt_tensor *wte,
                            const mt_tensor *wpe, const mt_tensor *pos, int64_t v0, int shard) {
    int64_t N = mt_tensor_numel(ids), T = ids->shape[ids->ndim - 1], C = wte->shape[1];
    int64_t V = wte->shape[0];
    if (!shard) MT_TRY(check_range(ids, V));
    if (pos) MT_TRY(check_range(pos, wpe->shape[0]));
    for (int64_t n = 0; n < N; n++) {
        int64_t v = ld_id(ids, n) - v0, t = pos_of(pos, n, T);
        int held = v >= 0 && v < V; /* a vocab shard's other rows: zeros */
        for (int64_t c = 0; c < C; c++) {
            float e = held ? mt_load_f32(wte->data, wte->dtype, v * C + c) : 0.0f;
            if (wpe) e += mt_load_f32(wpe->data, wpe->dtype, t * C + c);
            mt_store_f32(out->data, out->dtype, n * C + c, e);
        }
    }
    return MT_OK;
}

mt_status embedding_bwd_cpu(mt_tensor *dwte, mt_tensor *dwpe, const mt_tensor *dout,
                            const mt_tensor *ids, const mt_tensor *pos, int64_t v0, int shard) {
    int64_t N = mt_tensor_numel(ids), C = dout->shape[dout->ndim - 1];
    int64_t V = dwte->shape[0], T = dwpe ? dwpe->shape[0] : ids->shape[ids->ndim - 1];
    if (!shard) MT_TRY(check_range(ids, V));
    if (pos) MT_TRY(check_range(pos, T));
    /* fp32 accumulators start from the current gradients; tokens are added in order */
    float *acc = malloc((size_t)(V + T) * (size_t)C * sizeof *acc);
    MT_REQUIRE(acc, MT_ERR_OOM, "embedding backward: %lld floats", (long long)((V + T) * C));
    for (int64_t i = 0; i < V * C; i++)
        acc[i] = mt_load_f32(dwte->data, dwte->dtype, i);
    for (int64_t i = 0; dwpe && i < T * C; i++)
        acc[V * C + i] = mt_load_f32(dwpe->data, dwpe->dtype, i);
    for (int64_t n = 0; n < N; n++) {
        int64_t v = ld_id(ids, n) - v0, t = pos_of(pos, n, ids->shape[ids->ndim - 1]);
        int held = v >= 0 && v < V;
        for (int64_t c = 0; c < C; c++) {
            float d = mt_load_f32(dout->data, dout->dtype, n * C + c);
            if (held) acc[v * C + c] += d;
            acc[(V + t) * C + c] += d;
        }
    }
    for (int64_t i = 0; i < V * C; i++)
        mt_store_f32(dwte->data, dwte->dtype, i, acc[i]);
    for (int64_t i = 0; dwpe && i < T * C; i++)
        mt_store_f32(dwpe->data, dwpe->dtype, i, acc[V * C + i]);
    free(acc);
    return MT_OK;
}
