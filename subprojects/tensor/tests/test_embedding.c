/* unit: token + position embedding forward and backward (CPU reference) against PyTorch (repeated
 * ids accumulate; position rows beyond T get nothing); f32 and bf16 activations with f32 and bf16
 * gradient tables, i32 and i64 ids. */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include <stdlib.h>
#include <string.h>

#define V  11
#define C  24
#define B  2
#define T  5
#define TP 7

static float *wte, *wpe, *out_ref, *dout, *dwte_ref, *dwpe_ref;
static int64_t ids64[B * T];
static int32_t ids32[B * T];

static float bf(float v) {
    return mt_bf16_to_f32(mt_f32_to_bf16(v));
}

/* Forward and backward with activations in `dt`, gradient tables in `gdt`, against refs. */
static void check(mt_dtype dt, mt_dtype gdt, mt_dtype idt, const float *oref, const float *dwr,
                  const float *dpr, double tol) {
    size_t es = mt_dtype_size(dt), gs = mt_dtype_size(gdt);
    mt_tensor ids = idt == MT_I64 ? mt_tensor_2d(ids64, MT_I64, B, T, MT_DEVICE_CPU)
                                  : mt_tensor_2d(ids32, MT_I32, B, T, MT_DEVICE_CPU);
    mt_tensor fwte = mt_tensor_2d(wte, MT_F32, V, C, MT_DEVICE_CPU);
    mt_tensor fwpe = mt_tensor_2d(wpe, MT_F32, TP, C, MT_DEVICE_CPU);
    mt_tensor fdout = mt_tensor_3d(dout, MT_F32, B, T, C, MT_DEVICE_CPU);
    void *a = malloc(V * C * es), *p = malloc(TP * C * es), *o = malloc(B * T * C * es);
    void *d = malloc(B * T * C * es), *gw = calloc(V * C, gs), *gp = calloc(TP * C, gs);
    mt_tensor twte = mt_tensor_2d(a, dt, V, C, MT_DEVICE_CPU);
    mt_tensor twpe = mt_tensor_2d(p, dt, TP, C, MT_DEVICE_CPU);
    mt_tensor tout = mt_tensor_3d(o, dt, B, T, C, MT_DEVICE_CPU);
    mt_tensor tdout = mt_tensor_3d(d, dt, B, T, C, MT_DEVICE_CPU);
    mt_tensor tgw = mt_tensor_2d(gw, gdt, V, C, MT_DEVICE_CPU);
    mt_tensor tgp = mt_tensor_2d(gp, gdt, TP, C, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&twte, &fwte, NULL));
    MT_CHECK(mt_cast(&twpe, &fwpe, NULL));
    MT_CHECK(mt_cast(&tdout, &fdout, NULL));
    MT_CHECK(mt_embedding_fwd(&tout, &ids, &twte, &twpe, NULL));
    MT_CHECK(mt_embedding_bwd(&tgw, &tgp, &tdout, &ids, NULL, 0, NULL));
    float got_o[B * T * C], got_w[V * C], got_p[TP * C];
    mt_tensor go = mt_tensor_3d(got_o, MT_F32, B, T, C, MT_DEVICE_CPU);
    mt_tensor gw32 = mt_tensor_2d(got_w, MT_F32, V, C, MT_DEVICE_CPU);
    mt_tensor gp32 = mt_tensor_2d(got_p, MT_F32, TP, C, MT_DEVICE_CPU);
    MT_CHECK(mt_cast(&go, &tout, NULL));
    MT_CHECK(mt_cast(&gw32, &tgw, NULL));
    MT_CHECK(mt_cast(&gp32, &tgp, NULL));
    char what[96];
    snprintf(what, sizeof what, "embedding %s grads %s ids %s", mt_dtype_name(dt),
             mt_dtype_name(gdt), mt_dtype_name(idt));
    mt_test_close_f32(what, got_o, oref, B * T * C, 1e-6, tol);
    mt_test_close_f32(what, got_w, dwr, V * C, 1e-6, tol);
    mt_test_close_f32(what, got_p, dpr, TP * C, 1e-6, tol);
    free(a), free(p), free(o), free(d), free(gw), free(gp);
}

int main(void) {
    wte = mt_test_golden_f32("emb_wte.npy", NULL, NULL);
    wpe = mt_test_golden_f32("emb_wpe.npy", NULL, NULL);
    out_ref = mt_test_golden_f32("emb_out.npy", NULL, NULL);
    dout = mt_test_golden_f32("emb_dout.npy", NULL, NULL);
    dwte_ref = mt_test_golden_f32("emb_dwte.npy", NULL, NULL);
    dwpe_ref = mt_test_golden_f32("emb_dwpe.npy", NULL, NULL);
    float *ids = mt_test_golden_f32("emb_ids.npy", NULL, NULL);
    for (int i = 0; i < B * T; i++)
        ids64[i] = (int64_t)ids[i], ids32[i] = (int32_t)ids[i];
    check(MT_F32, MT_F32, MT_I64, out_ref, dwte_ref, dwpe_ref, 1e-6);
    check(MT_F32, MT_F32, MT_I32, out_ref, dwte_ref, dwpe_ref, 1e-6);

    /* bf16: the references are the same sums over bf16-rounded inputs, exact in float here */
    float o2[B * T * C], w2[V * C] = { 0 }, p2[TP * C] = { 0 };
    for (int n = 0; n < B * T; n++)
        for (int c = 0; c < C; c++) {
            float g = bf(dout[n * C + c]);
            o2[n * C + c] = bf(wte[ids64[n] * C + c]) + bf(wpe[(n % T) * C + c]);
            w2[ids64[n] * C + c] += g;
            p2[(n % T) * C + c] += g;
        }
    check(MT_BF16, MT_F32, MT_I32, o2, w2, p2, 4e-3);  /* out rounded once to bf16 */
    check(MT_BF16, MT_BF16, MT_I64, o2, w2, p2, 4e-3); /* grads rounded once to bf16 */

    /* a vocab shard (mt_embedding_*_shard): rows [4, 11) and [0, 4) of the table; the lookups
     * give the held ids' rows and zeros, the gradients concatenate to torch's */
    for (int sh = 0; sh < 2; sh++) {
        int64_t v0 = sh ? 0 : 4, rows = sh ? 4 : V - 4;
        float so[B * T * C], sg[V * C] = { 0 };
        mt_tensor ids = mt_tensor_2d(ids64, MT_I64, B, T, MT_DEVICE_CPU);
        mt_tensor tw = mt_tensor_2d(wte + v0 * C, MT_F32, rows, C, MT_DEVICE_CPU);
        mt_tensor to = mt_tensor_3d(so, MT_F32, B, T, C, MT_DEVICE_CPU);
        mt_tensor tg = mt_tensor_2d(sg, MT_F32, rows, C, MT_DEVICE_CPU);
        mt_tensor td = mt_tensor_3d(dout, MT_F32, B, T, C, MT_DEVICE_CPU);
        MT_CHECK(mt_embedding_fwd_shard(&to, &ids, &tw, v0, NULL, NULL, NULL));
        MT_CHECK(mt_embedding_bwd_shard(&tg, NULL, &td, &ids, v0, NULL, NULL, 0, NULL));
        float ref[B * T * C];
        for (int n = 0; n < B * T; n++)
            for (int c = 0; c < C; c++)
                ref[n * C + c] =
                    ids64[n] >= v0 && ids64[n] < v0 + rows ? wte[ids64[n] * C + c] : 0.0f;
        mt_test_close_f32("embedding shard lookup", so, ref, B * T * C, 0, 0);
        mt_test_close_f32("embedding shard gradient", sg, dwte_ref + v0 * C, (size_t)(rows * C),
                          1e-6, 1e-6);
    }

    /* bad input gets a clear error */
    float buf[B * T * C];
    mt_tensor tids = mt_tensor_2d(ids64, MT_I64, B, T, MT_DEVICE_CPU);
    mt_tensor twte = mt_tensor_2d(wte, MT_F32, V, C, MT_DEVICE_CPU);
    mt_tensor tout = mt_tensor_3d(buf, MT_F32, B, T, C, MT_DEVICE_CPU);
    mt_tensor tshort = mt_tensor_2d(wpe, MT_F32, T - 1, C, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_embedding_fwd(&tout, &tids, &twte, &tshort, NULL), MT_ERR_INVALID_ARG);
    mt_tensor tf = mt_tensor_2d(buf, MT_F32, B, T, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_embedding_fwd(&tout, &tf, &twte, NULL, NULL), MT_ERR_UNSUPPORTED);
    mt_tensor tbf = mt_tensor_3d(buf, MT_BF16, B, T, C, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_embedding_fwd(&tbf, &tids, &twte, NULL, NULL), MT_ERR_INVALID_ARG);
    int64_t bad[B * T];
    memcpy(bad, ids64, sizeof bad);
    bad[7] = V;
    mt_tensor tbad = mt_tensor_2d(bad, MT_I64, B, T, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_embedding_fwd(&tout, &tbad, &twte, NULL, NULL), MT_ERR_INVALID_ARG);
    free(wte), free(wpe), free(out_ref), free(dout), free(dwte_ref), free(dwpe_ref), free(ids);
    return mt_test_result();
}
