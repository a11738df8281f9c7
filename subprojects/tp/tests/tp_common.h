/* Shared by test_tp (no group: TP 1, CPU), mr_tp (host tensors over MPI), gpu_tp (TP 1 on a GPU)
 * and mgpu_tp (device tensors over NCCL): the tensors of golden/gen_tp.py, computed by torch on
 * whole tensors, are sharded as Megatron shards them; every rank runs its part through mt-tp and
 * checks its slice of each result (and the results every rank holds) against the golden. */
#include <mt/testkit.h>
#include <mt/tp.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TN  16 /* tokens */
#define TC  16 /* hidden */
#define TF  64 /* ffn */
#define TV  37 /* real vocabulary */
#define TVP 48 /* padded vocabulary */

typedef struct tp_ctx {
    mt_comm *tp; /* NULL: TP 1 */
    mt_device dev;
    mt_dtype dt;
    mt_stream stream;
    mt_blas *blas;
    mt_arena *ar;
    int rank, n;
    double atol, rtol;
} tp_ctx;

/* A tensor of dt on the device from host floats. */
static mt_tensor tp_up(tp_ctx *c, const float *h, mt_dtype dt, int ndim, const int64_t *shape) {
    mt_tensor host = mt_tensor_make((void *)h, MT_F32, ndim, shape, MT_DEVICE_CPU), f32, out;
    MT_CHECK(mt_tensor_alloc(c->ar, MT_F32, ndim, shape, &f32));
    MT_CHECK(mt_tensor_copy(&f32, &host, c->stream));
    MT_CHECK(mt_tensor_alloc(c->ar, dt, ndim, shape, &out));
    MT_CHECK(mt_cast(&out, &f32, c->stream));
    return out;
}

/* An uninitialised (zeroed) tensor on the device. */
static mt_tensor tp_new(tp_ctx *c, mt_dtype dt, int ndim, const int64_t *shape) {
    mt_tensor t;
    MT_CHECK(mt_tensor_alloc(c->ar, dt, ndim, shape, &t));
    if (mt_dtype_is_float(dt)) MT_CHECK(mt_fill(&t, 0.0f, c->stream));
    return t;
}

/* Host floats of a float tensor (malloc'd). */
static float *tp_down(tp_ctx *c, const mt_tensor *t) {
    int64_t n = mt_tensor_numel(t);
    mt_tensor f32;
    MT_CHECK(mt_tensor_alloc(c->ar, MT_F32, t->ndim, t->shape, &f32));
    MT_CHECK(mt_cast(&f32, t, c->stream));
    float *h = malloc((size_t)n * sizeof *h + 1);
    mt_tensor host = mt_tensor_make(h, MT_F32, t->ndim, t->shape, MT_DEVICE_CPU);
    MT_CHECK(mt_tensor_copy(&host, &f32, c->stream));
    if (c->stream) MT_CHECK(mt_stream_sync(c->stream));
    return h;
}

/* rows [r0, r0 + nr) and columns [c0, c0 + nc) of a golden (rows, cols) array, contiguous */
static float *tp_block(const float *g, int64_t cols, int64_t r0, int64_t nr, int64_t c0,
                       int64_t nc) {
    float *b = malloc((size_t)(nr * nc) * sizeof *b + 1);
    for (int64_t i = 0; i < nr; i++)
        memcpy(b + i * nc, g + (r0 + i) * cols + c0, (size_t)nc * sizeof *b);
    return b;
}

/* f32: atol and rtol as set. 16-bit: every operand and result is rounded to 8 bits, so the bound
 * is relative to the tensor's scale: 4 unit roundoffs (2^-8 each) of its largest element, and of
 * each element (the first bf16 run, with an absolute 3e-2, failed dw1, whose elements reach 10). */
static void tp_expect(tp_ctx *c, const char *what, const mt_tensor *t, const float *ref) {
    float *got = tp_down(c, t);
    size_t n = (size_t)mt_tensor_numel(t);
    double atol = c->atol;
    if (c->dt != MT_F32) {
        double mx = 0;
        for (size_t i = 0; i < n; i++)
            mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
        atol = 0x1p-6 * mx;
    }
    char name[96];
    snprintf(name, sizeof name, "%s (tp %d rank %d, %s)", what, c->n, c->rank,
             mt_dtype_name(c->dt));
    mt_test_close_f32(name, got, ref, n, atol, c->rtol);
    free(got);
}

/* fc1 (column-parallel, GELU) then fc2 (row-parallel), forward and backward, sp 0 or 1. */
static void tp_mlp(tp_ctx *c, int sp) {
    float *x = mt_test_golden_f32("mlp_x.npy", NULL, NULL),
          *w1 = mt_test_golden_f32("mlp_w1.npy", NULL, NULL);
    float *b1 = mt_test_golden_f32("mlp_b1.npy", NULL, NULL),
          *w2 = mt_test_golden_f32("mlp_w2.npy", NULL, NULL);
    float *b2 = mt_test_golden_f32("mlp_b2.npy", NULL, NULL),
          *dy = mt_test_golden_f32("mlp_dy.npy", NULL, NULL);
    float *y = mt_test_golden_f32("mlp_y.npy", NULL, NULL),
          *dx = mt_test_golden_f32("mlp_dx.npy", NULL, NULL);
    float *dw1 = mt_test_golden_f32("mlp_dw1.npy", NULL, NULL),
          *db1 = mt_test_golden_f32("mlp_db1.npy", NULL, NULL);
    float *dw2 = mt_test_golden_f32("mlp_dw2.npy", NULL, NULL),
          *db2 = mt_test_golden_f32("mlp_db2.npy", NULL, NULL);
    int64_t f0, fl, t0, tl;
    MT_CHECK(mt_tp_partition(c->tp, TF, "ffn_hidden_size", &f0, &fl));
    if (sp)
        MT_CHECK(mt_tp_partition(c->tp, TN, "tokens", &t0, &tl));
    else
        t0 = 0, tl = TN;
    float *w1s = tp_block(w1, TC, f0, fl, 0, TC), *w2s = tp_block(w2, TF, 0, TC, f0, fl);
    float *xs = tp_block(x, TC, t0, tl, 0, TC), *dys = tp_block(dy, TC, t0, tl, 0, TC);
    mt_tensor tw1 = tp_up(c, w1s, c->dt, 2, (int64_t[]){ fl, TC });
    mt_tensor tb1 = tp_up(c, b1 + f0, c->dt, 1, (int64_t[]){ fl });
    mt_tensor tw2 = tp_up(c, w2s, c->dt, 2, (int64_t[]){ TC, fl });
    mt_tensor tb2 = tp_up(c, b2, c->dt, 1, (int64_t[]){ TC });
    mt_tensor tx = tp_up(c, xs, c->dt, 2, (int64_t[]){ tl, TC });
    mt_tensor tdy = tp_up(c, dys, c->dt, 2, (int64_t[]){ tl, TC });
    mt_tensor all = tp_new(c, c->dt, 2, (int64_t[]){ TN, TC }); /* x_all, then y_all, ... */
    mt_tensor h = tp_new(c, c->dt, 2, (int64_t[]){ TN, fl }),
              pre = tp_new(c, c->dt, 2, (int64_t[]){ TN, fl });
    mt_tensor ty = tp_new(c, c->dt, 2, (int64_t[]){ tl, TC });
    mt_tensor xall = all;
    MT_CHECK(mt_tp_column_fwd(c->tp, c->blas, &h, &pre, &tx, sp ? &xall : NULL, &tw1, &tb1,
                              MT_GEMM_GELU, sp, c->stream));
    /* the backward needs the gathered input: keep it apart from the scratch reused below */
    mt_tensor xkeep = sp ? tp_new(c, c->dt, 2, (int64_t[]){ TN, TC }) : tx;
    if (sp) MT_CHECK(mt_tensor_copy(&xkeep, &xall, c->stream));
    MT_CHECK(mt_tp_row_fwd(c->tp, c->blas, &ty, sp ? &all : NULL, &h, &tw2, &tb2, sp, c->stream));
    float *yref = tp_block(y, TC, t0, tl, 0, TC);
    tp_expect(c, sp ? "mlp y (sp)" : "mlp y", &ty, yref);
    /* with a residual (a layer's projection and its residual add): dy's rows as the residual */
    mt_tensor ty2 = tp_new(c, c->dt, 2, (int64_t[]){ tl, TC });
    MT_CHECK(mt_tp_row_fwd_add(c->tp, c->blas, &ty2, sp ? &all : NULL, &h, &tw2, &tb2, &tdy, sp,
                               c->stream));
    float *yres = malloc((size_t)(tl * TC) * sizeof *yres + 1);
    for (int64_t i = 0; i < tl * TC; i++)
        yres[i] = yref[i] + dys[i];
    tp_expect(c, sp ? "mlp y + resid (sp)" : "mlp y + resid", &ty2, yres);
    free(yres);

    mt_tensor dh = tp_new(c, c->dt, 2, (int64_t[]){ TN, fl });
    mt_tensor dw1t = tp_new(c, MT_F32, 2, (int64_t[]){ fl, TC }),
              db1t = tp_new(c, MT_F32, 1, (int64_t[]){ fl });
    mt_tensor dw2t = tp_new(c, MT_F32, 2, (int64_t[]){ TC, fl }),
              db2t = tp_new(c, MT_F32, 1, (int64_t[]){ TC });
    MT_CHECK(mt_tp_row_bwd(c->tp, c->blas, &dh, &dw2t, &db2t, &tdy, sp ? &all : NULL, &h, &tw2, 0,
                           sp, c->stream));
    MT_CHECK(mt_gelu_bwd(&dh, &dh, &pre, c->stream));
    mt_tensor tdx = tp_new(c, c->dt, 2, (int64_t[]){ tl, TC });
    MT_CHECK(mt_tp_column_bwd(c->tp, c->blas, &tdx, sp ? &all : NULL, &dw1t, &db1t, &dh, &xkeep,
                              &tw1, 0, sp, c->stream));
    float *dxref = tp_block(dx, TC, t0, tl, 0, TC), *dw1ref = tp_block(dw1, TC, f0, fl, 0, TC);
    float *dw2ref = tp_block(dw2, TF, 0, TC, f0, fl);
    tp_expect(c, sp ? "mlp dx (sp)" : "mlp dx", &tdx, dxref);
    tp_expect(c, "mlp dw1", &dw1t, dw1ref);
    tp_expect(c, "mlp db1", &db1t, db1 + f0);
    tp_expect(c, "mlp dw2", &dw2t, dw2ref);
    tp_expect(c, "mlp db2", &db2t, db2);
    /* the collective beside the weight gradient's GEMM (a side stream on CUDA): the same values,
     * bit for bit */
    mt_tp_async as;
    MT_CHECK(mt_tp_async_create(c->dev, &as));
    mt_tensor adx = tp_new(c, c->dt, 2, (int64_t[]){ tl, TC }),
              aall = tp_new(c, c->dt, 2, (int64_t[]){ TN, TC });
    mt_tensor adw = tp_new(c, MT_F32, 2, (int64_t[]){ fl, TC }),
              adb = tp_new(c, MT_F32, 1, (int64_t[]){ fl });
    MT_CHECK(mt_tp_column_bwd_async(c->tp, &as, c->blas, &adx, sp ? &aall : NULL, &adw, &adb, &dh,
                                    &xkeep, &tw1, 0, sp, c->stream));
    const mt_tensor *got[3] = { &adx, &adw, &adb }, *want[3] = { &tdx, &dw1t, &db1t };
    for (int i = 0; i < 3; i++) {
        float *g = tp_down(c, got[i]), *r = tp_down(c, want[i]);
        size_t n = (size_t)mt_tensor_numel(got[i]);
        MT_EXPECT(memcmp(g, r, n * sizeof *g) == 0, "async column backward: %s differs (sp %d)",
                  i == 0   ? "dx"
                  : i == 1 ? "dw"
                           : "dbias",
                  sp);
        free(g), free(r);
    }
    mt_tp_async_destroy(&as);
    float *bufs[] = { x,   w1,  b1,  w2,  b2, dy,  y,    dx,    dw1,    db1,
                      dw2, db2, w1s, w2s, xs, dys, yref, dxref, dw1ref, dw2ref };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
}

/* The vocab-parallel embedding, forward and backward, sp 0 or 1. */
static void tp_embed(tp_ctx *c, int sp) {
    float *wte = mt_test_golden_f32("embed_wte.npy", NULL, NULL),
          *idsf = mt_test_golden_f32("embed_ids.npy", NULL, NULL);
    float *out = mt_test_golden_f32("embed_out.npy", NULL, NULL),
          *dout = mt_test_golden_f32("embed_dout.npy", NULL, NULL);
    float *dwte = mt_test_golden_f32("embed_dwte.npy", NULL, NULL);
    int64_t v0, vl, t0, tl, ids_h[TN];
    MT_CHECK(mt_tp_partition(c->tp, TVP, "padded vocab size", &v0, &vl));
    if (sp)
        MT_CHECK(mt_tp_partition(c->tp, TN, "tokens", &t0, &tl));
    else
        t0 = 0, tl = TN;
    for (int i = 0; i < TN; i++)
        ids_h[i] = (int64_t)idsf[i];
    mt_tensor hid = mt_tensor_1d(ids_h, MT_I64, TN, MT_DEVICE_CPU), ids;
    MT_CHECK(mt_tensor_alloc(c->ar, MT_I64, 1, (int64_t[]){ TN }, &ids));
    MT_CHECK(mt_tensor_copy(&ids, &hid, c->stream));
    mt_tensor tw = tp_up(c, wte + v0 * TC, c->dt, 2, (int64_t[]){ vl, TC });
    mt_tensor to = tp_new(c, c->dt, 2, (int64_t[]){ tl, TC }),
              all = tp_new(c, c->dt, 2, (int64_t[]){ TN, TC });
    MT_CHECK(
        mt_tp_embedding_fwd(c->tp, &to, sp ? &all : NULL, &ids, &tw, NULL, NULL, sp, c->stream));
    tp_expect(c, sp ? "embedding (sp)" : "embedding", &to, out + t0 * TC);
    float *ds = tp_block(dout, TC, t0, tl, 0, TC);
    mt_tensor td = tp_up(c, ds, c->dt, 2, (int64_t[]){ tl, TC });
    mt_tensor tg = tp_new(c, MT_F32, 2, (int64_t[]){ vl, TC });
    size_t wsb = 0;
    void *ws = NULL;
    MT_CHECK(mt_tp_embedding_bwd_workspace(&ids, &tg, NULL, &wsb));
    if (wsb) MT_CHECK(mt_arena_alloc(c->ar, wsb, &ws));
    MT_CHECK(mt_tp_embedding_bwd(c->tp, &tg, NULL, &td, sp ? &all : NULL, &ids, NULL, ws, wsb, sp,
                                 c->stream));
    tp_expect(c, "embedding dwte", &tg, dwte + v0 * TC);
    free(wte), free(idsf), free(out), free(dout), free(dwte), free(ds);
}

/* The vocab-parallel cross-entropy: losses on every rank, this rank's columns of the gradient. */
static void tp_xent(tp_ctx *c) {
    float *lg = mt_test_golden_f32("xent_logits.npy", NULL, NULL),
          *tf = mt_test_golden_f32("xent_targets.npy", NULL, NULL);
    float *dl = mt_test_golden_f32("xent_dloss.npy", NULL, NULL),
          *losses = mt_test_golden_f32("xent_losses.npy", NULL, NULL);
    float *dlg = mt_test_golden_f32("xent_dlogits.npy", NULL, NULL);
    int64_t v0, vl, tg_h[TN];
    MT_CHECK(mt_tp_partition(c->tp, TVP, "padded vocab size", &v0, &vl));
    for (int i = 0; i < TN; i++)
        tg_h[i] = (int64_t)tf[i];
    mt_tensor ht = mt_tensor_1d(tg_h, MT_I64, TN, MT_DEVICE_CPU), tg;
    MT_CHECK(mt_tensor_alloc(c->ar, MT_I64, 1, (int64_t[]){ TN }, &tg));
    MT_CHECK(mt_tensor_copy(&tg, &ht, c->stream));
    float *ls = tp_block(lg, TVP, 0, TN, v0, vl), *dref = tp_block(dlg, TVP, 0, TN, v0, vl);
    mt_tensor tl = tp_up(c, ls, c->dt, 2, (int64_t[]){ TN, vl });
    mt_tensor tdl = tp_up(c, dl, MT_F32, 1, (int64_t[]){ TN });
    mt_tensor tloss = tp_new(c, MT_F32, 1, (int64_t[]){ TN }),
              st = tp_new(c, MT_F32, 2, (int64_t[]){ 3, TN });
    /* losses alone, then in place with the gradient */
    MT_CHECK(mt_tp_xent(c->tp, &tloss, NULL, &tl, &tg, NULL, TV, -100, &st, c->stream));
    tp_expect(c, "xent losses", &tloss, losses);
    MT_CHECK(mt_fill(&tloss, 0.0f, c->stream));
    MT_CHECK(mt_tp_xent(c->tp, &tloss, &tl, &tl, &tg, &tdl, TV, -100, &st, c->stream));
    tp_expect(c, "xent losses (with the gradient)", &tloss, losses);
    tp_expect(c, "xent dlogits", &tl, dref);
    /* a target outside the real vocabulary: refused on the CPU, NaN on CUDA */
    if (!mt_device_is_cuda(c->dev)) {
        tg_h[4] = TV; /* a padding column */
        MT_CHECK(mt_tensor_copy(&tg, &ht, c->stream));
        MT_EXPECT_STATUS(mt_tp_xent(c->tp, &tloss, NULL, &tl, &tg, NULL, TV, -100, &st, c->stream),
                         MT_ERR_INVALID_ARG);
    }
    free(lg), free(tf), free(dl), free(losses), free(dlg), free(ls), free(dref);
}

/* Refusals that name the problem, the same on every rank (so no rank waits in a collective). */
static void tp_refusals(tp_ctx *c) {
    int64_t s, l;
    int n = c->n;
    MT_EXPECT_STATUS(mt_tp_partition(c->tp, 3 * n + 1, "num_attention_heads", &s, &l),
                     n == 1 ? MT_OK : MT_ERR_INVALID_ARG);
    MT_EXPECT(n == 1 || strstr(mt_last_error(), "num_attention_heads") != NULL,
              "the partition's error names the size: %s", mt_last_error());
    mt_tensor x = tp_new(c, c->dt, 2, (int64_t[]){ TN / n, TC }),
              w = tp_new(c, c->dt, 2, (int64_t[]){ 8, TC });
    mt_tensor y = tp_new(c, c->dt, 2, (int64_t[]){ TN, 8 }),
              odd = tp_new(c, c->dt, 2, (int64_t[]){ TN + 1, TC });
    MT_EXPECT_STATUS(
        mt_tp_column_fwd(c->tp, c->blas, &y, NULL, &x, NULL, &w, NULL, 0, 1, c->stream),
        MT_ERR_INVALID_ARG); /* sp without x_all */
    MT_EXPECT_STATUS(
        mt_tp_column_fwd(c->tp, c->blas, &y, NULL, &x, &odd, &w, NULL, 0, 1, c->stream),
        MT_ERR_INVALID_ARG); /* x_all of the wrong size */
    MT_EXPECT_STATUS(
        mt_tp_column_fwd(c->tp, c->blas, &y, NULL, &x, &odd, &w, NULL, 0, 0, c->stream),
        MT_ERR_INVALID_ARG); /* x_all without sp */
    MT_EXPECT_STATUS(
        mt_tp_column_fwd(c->tp, c->blas, &y, NULL, &x, NULL, &w, NULL, 0, 2, c->stream),
        MT_ERR_INVALID_ARG);
}

static void tp_run_all(tp_ctx *c) {
    for (int sp = 0; sp <= 1; sp++) {
        tp_mlp(c, sp);
        tp_embed(c, sp);
    }
    tp_xent(c);
    tp_refusals(c);
}

/* Sets up c for group tp (NULL: one rank) on dev with dtype dt, runs everything, tears down. */
static void tp_run(mt_comm *tp, mt_device dev, mt_dtype dt, mt_stream stream) {
    tp_ctx c = { 0 };
    c.tp = tp;
    c.dev = dev;
    c.dt = dt;
    c.stream = stream;
    c.rank = mt_tp_rank(tp);
    c.n = mt_tp_size(tp);
    c.atol = 2e-5; /* f32 only (see tp_expect) */
    c.rtol = dt == MT_F32 ? 1e-4 : 0x1p-6;
    MT_CHECK(mt_blas_create(dev, &c.blas));
    MT_CHECK(mt_arena_create(dev, 16u << 20, &c.ar));
    tp_run_all(&c);
    if (stream) MT_CHECK(mt_stream_sync(stream));
    mt_arena_destroy(c.ar);
    mt_blas_destroy(c.blas);
}
