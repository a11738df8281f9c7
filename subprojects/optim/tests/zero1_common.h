/* Shared by mr_zero1.c (host, MPI) and mgpu_zero1.c (device, NCCL): the distributed optimizer
 * (ZeRO-1) against the all-reduce optimizer and a local reference fed the averaged grads. Inputs
 * are multiples of 1/16 from (param, element, rank, step), so every sum, average and square is
 * exact and the three must agree bit for bit. */
#include <mt/comm.h>
#include <mt/optim.h>
#include <mt/testkit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ZR_NP 6
static const char *zr_names[ZR_NP] = { "emb.weight",     "l0.fc.weight", "l0.fc.bias",
                                       "l0.norm.weight", "l1.fc.weight", "out.weight" };
static const int64_t zr_shapes[ZR_NP][2] = { { 37, 29 }, { 16, 24 }, { 24, 0 },
                                             { 16, 0 },  { 24, 16 }, { 37, 29 } };
static const int zr_ndims[ZR_NP] = { 2, 2, 1, 1, 2, 2 };

typedef struct {
    mt_optim_buffer *b;
    mt_optim *o;
    mt_arena *ar;
} zr_rig;

/* distributed: 0 all-reduce, 1 ZeRO-1, 2 ZeRO-1 with the params' all-gather left to the caller */
static zr_rig zr_make(mt_device dev, mt_dtype dt, int dp_size, mt_comm *dp, int distributed) {
    zr_rig r;
    mt_optim_buffer_config bc = MT_OPTIM_BUFFER_CONFIG_INIT;
    bc.param_dtype = dt;
    bc.device = dev;
    bc.bucket_numel = 500;
    bc.dp_size = dp_size;
    MT_CHECK(mt_optim_buffer_create(&bc, &r.b));
    for (int i = 0; i < ZR_NP; i++)
        MT_CHECK(mt_optim_buffer_add(r.b, zr_names[i], zr_ndims[i], zr_shapes[i],
                                     i == 5 ? MT_OPTIM_PARAM_SHARED : 0, NULL));
    size_t bytes, sbytes;
    MT_CHECK(mt_optim_buffer_finalize(r.b, &bytes));
    mt_optim_config oc = MT_OPTIM_CONFIG_INIT;
    oc.clip_grad = 1.0f;
    oc.log_num_zeros_in_grad = 1;
    oc.use_distributed_optimizer = distributed > 0;
    oc.overlap_param_gather = distributed == 2;
    oc.dp = dp;
    MT_CHECK(mt_optim_state_bytes(&oc, r.b, &sbytes));
    MT_CHECK(mt_arena_create(dev, bytes + sbytes, &r.ar));
    MT_CHECK(mt_optim_buffer_bind(r.b, r.ar));
    for (int i = 0; i < ZR_NP; i++) {
        mt_tensor p;
        MT_CHECK(mt_optim_buffer_param(r.b, i, &p));
        int64_t n = mt_tensor_numel(&p);
        float *x = malloc((size_t)n * 4);
        uint16_t *h = malloc((size_t)n * 4);
        for (int64_t j = 0; j < n; j++)
            x[j] = (float)((i * 131 + j * 7) % 17 - 8) / 16.0f;
        mt_tensor tx = mt_tensor_1d(x, MT_F32, n, MT_DEVICE_CPU);
        mt_tensor th = mt_tensor_1d(h, dt, n, MT_DEVICE_CPU);
        mt_tensor dst = mt_tensor_1d(p.data, dt, n, dev);
        MT_CHECK(mt_cast(&th, &tx, NULL));
        MT_CHECK(mt_tensor_copy(&dst, &th, NULL));
        free(x), free(h);
    }
    MT_CHECK(mt_optim_create(&oc, r.b, r.ar, &r.o));
    return r;
}

static void zr_destroy(zr_rig *r) {
    mt_optim_destroy(r->o);
    mt_optim_buffer_destroy(r->b);
    mt_arena_destroy(r->ar);
}

static float zr_grad(int rank, int step, int i, int64_t j) {
    return (float)(((rank + 1) * 3 + i * 5 + j * 11 + step * 13) % 9 - 4) / 4.0f;
}

/* rank >= 0: that rank's grads; rank < 0: the average over `n` ranks. nan_at >= 0 poisons one. */
static void zr_set_grads(zr_rig *r, int rank, int n, int step, int64_t nan_at) {
    mt_tensor g;
    MT_CHECK(mt_optim_buffer_grads(r->b, &g));
    int64_t total = mt_tensor_numel(&g);
    float *x = calloc((size_t)total, 4);
    for (int i = 0; i < ZR_NP; i++) {
        mt_optim_param_info in;
        MT_CHECK(mt_optim_buffer_info(r->b, i, &in));
        for (int64_t j = 0; j < in.numel; j++) {
            double s = 0;
            for (int q = 0; q < n; q++)
                s += zr_grad(q, step, i, j);
            x[in.offset + j] = rank >= 0 ? zr_grad(rank, step, i, j) : (float)(s / n);
        }
    }
    if (nan_at >= 0) x[nan_at] = NAN;
    mt_tensor h = mt_tensor_1d(x, MT_F32, total, MT_DEVICE_CPU);
    MT_CHECK(mt_tensor_copy(&g, &h, NULL));
    free(x);
}

static float *zr_params(zr_rig *r) {
    mt_tensor p;
    MT_CHECK(mt_optim_buffer_params(r->b, &p));
    int64_t n = mt_tensor_numel(&p);
    void *raw = malloc((size_t)n * 4);
    float *out = malloc((size_t)n * 4);
    mt_tensor h = mt_tensor_1d(raw, p.dtype, n, MT_DEVICE_CPU);
    mt_tensor f = mt_tensor_1d(out, MT_F32, n, MT_DEVICE_CPU);
    MT_CHECK(mt_tensor_copy(&h, &p, NULL));
    MT_CHECK(mt_cast(&f, &h, NULL));
    free(raw);
    return out;
}

static void zr_run(mt_comm *w, mt_device dev, mt_dtype dt) {
    int rank = mt_comm_rank(w), n = mt_comm_size(w);
    zr_rig a = zr_make(dev, dt, n, w, 0), b = zr_make(dev, dt, n, w, 1);
    zr_rig c = zr_make(dev, dt, n, NULL, 0), d = zr_make(dev, dt, n, w, 2);
    int64_t numel = mt_optim_buffer_numel(a.b);
    mt_tensor ea;
    MT_CHECK(mt_optim_state(b.o, NULL, &ea, NULL));
    MT_EXPECT(mt_tensor_numel(&ea) * n == numel, "ZeRO-1 state %lld of %lld on %d ranks",
              (long long)mt_tensor_numel(&ea), (long long)numel, n);
    MT_EXPECT(mt_optim_buffer_num_buckets(a.b) > 1, "want several buckets");
    char what[128];
    for (int t = 0; t < 6; t++) {
        int poison = t == 4; /* a NaN on rank 0 only: every rank of every optimizer skips */
        int64_t nan_at = poison && rank == 0 ? numel / 2 + 3 : -1;
        zr_set_grads(&a, rank, n, t, nan_at);
        zr_set_grads(&b, rank, n, t, nan_at);
        zr_set_grads(&d, rank, n, t, nan_at);
        zr_set_grads(&c, -1, n, t, poison ? numel / 2 + 3 : -1);
        MT_CHECK(mt_optim_reduce_grads(a.o, NULL));
        MT_CHECK(mt_optim_reduce_grads(b.o, NULL));
        MT_CHECK(mt_optim_reduce_grads(d.o, NULL));
        mt_optim_step_info ia, ib, ic, id;
        double lr = 1e-2 * (t + 1);
        MT_CHECK(mt_optim_step(a.o, lr, 0.1, NULL, &ia, NULL));
        MT_CHECK(mt_optim_step(b.o, lr, 0.1, NULL, &ib, NULL));
        MT_CHECK(mt_optim_step(c.o, lr, 0.1, NULL, &ic, NULL));
        MT_CHECK(mt_optim_step(d.o, lr, 0.1, NULL, &id, NULL));
        MT_EXPECT(id.skipped == poison, "deferred gather: step %d skipped %d", t, id.skipped);
        if (!poison) { /* the other shards stay stale until the caller gathers (any order) */
            float *pd = zr_params(&d), *pc = zr_params(&c);
            int64_t stale = 0;
            for (int64_t j = 0; j < numel; j++)
                stale += pd[j] != pc[j];
            MT_EXPECT(stale > 0, "%s step %d rank %d: params updated before the gather",
                      mt_dtype_name(dt), t, rank);
            free(pd), free(pc);
            for (int k = mt_optim_buffer_num_buckets(d.b) - 1; k >= 0; k--)
                MT_CHECK(mt_optim_gather_bucket(d.o, k, NULL));
        }
        MT_EXPECT(ia.skipped == poison && ib.skipped == poison && ic.skipped == poison,
                  "%s step %d rank %d: skipped %d %d %d", mt_dtype_name(dt), t, rank, ia.skipped,
                  ib.skipped, ic.skipped);
        if (!poison)
            MT_EXPECT(ia.grad_norm == ic.grad_norm && ib.grad_norm == ic.grad_norm &&
                          ia.num_zeros == ic.num_zeros && ib.num_zeros == ic.num_zeros &&
                          ic.num_zeros > 0,
                      "%s step %d rank %d: norm %.17g %.17g %.17g zeros %lld %lld %lld",
                      mt_dtype_name(dt), t, rank, ia.grad_norm, ib.grad_norm, ic.grad_norm,
                      (long long)ia.num_zeros, (long long)ib.num_zeros, (long long)ic.num_zeros);
        float *pa = zr_params(&a), *pb = zr_params(&b), *pc = zr_params(&c);
        snprintf(what, sizeof what, "%s all-reduce step %d rank %d", mt_dtype_name(dt), t, rank);
        mt_test_close_f32(what, pa, pc, (size_t)numel, 0.0, 0.0);
        snprintf(what, sizeof what, "%s ZeRO-1 step %d rank %d", mt_dtype_name(dt), t, rank);
        mt_test_close_f32(what, pb, pc, (size_t)numel, 0.0, 0.0);
        float *pd = zr_params(&d);
        snprintf(what, sizeof what, "%s ZeRO-1 gathered by the caller step %d rank %d",
                 mt_dtype_name(dt), t, rank);
        mt_test_close_f32(what, pd, pc, (size_t)numel, 0.0, 0.0);
        free(pa), free(pb), free(pc), free(pd);
    }
    zr_destroy(&a);
    zr_destroy(&b);
    zr_destroy(&c);
    zr_destroy(&d);
}
