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

/* distributed: 0 all-reduce, 1 ZeRO-1, 2 ZeRO-1 with the params' all-gather left to the caller;
 * | 4: grads reduced in bf16 */
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
    oc.use_distributed_optimizer = (distributed & 3) > 0;
    oc.overlap_param_gather = (distributed & 3) == 2;
    oc.grad_reduce_in_bf16 = (distributed & 4) != 0;
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

/* The optimizers compared with the local reference, by zr_make's `distributed` mode (| 4: grads
 * reduced in bf16, exact here: the inputs are small multiples of 1/4). */
#define ZR_NV 5
static const int zr_modes[ZR_NV] = { 0, 1, 2, 0 | 4, 1 | 4 };
static const char *zr_what[ZR_NV] = { "all-reduce", "ZeRO-1", "ZeRO-1 gathered by the caller",
                                      "all-reduce in bf16", "ZeRO-1 reduced in bf16" };

static void zr_run(mt_comm *w, mt_device dev, mt_dtype dt) {
    int rank = mt_comm_rank(w), n = mt_comm_size(w);
    zr_rig v[ZR_NV], c = zr_make(dev, dt, n, NULL, 0);
    for (int i = 0; i < ZR_NV; i++)
        v[i] = zr_make(dev, dt, n, w, zr_modes[i]);
    int64_t numel = mt_optim_buffer_numel(c.b);
    mt_tensor ea;
    MT_CHECK(mt_optim_state(v[1].o, NULL, &ea, NULL));
    MT_EXPECT(mt_tensor_numel(&ea) * n == numel, "ZeRO-1 state %lld of %lld on %d ranks",
              (long long)mt_tensor_numel(&ea), (long long)numel, n);
    MT_EXPECT(mt_optim_buffer_num_buckets(c.b) > 1, "want several buckets");
    char what[128];
    for (int t = 0; t < 6; t++) {
        int poison = t == 4; /* a NaN on rank 0 only: every rank of every optimizer skips */
        int64_t nan_at = poison && rank == 0 ? numel / 2 + 3 : -1;
        mt_optim_step_info in[ZR_NV], ic;
        double lr = 1e-2 * (t + 1);
        zr_set_grads(&c, -1, n, t, poison ? numel / 2 + 3 : -1);
        MT_CHECK(mt_optim_step(c.o, lr, 0.1, NULL, &ic, NULL));
        for (int i = 0; i < ZR_NV; i++) {
            zr_set_grads(&v[i], rank, n, t, nan_at);
            MT_CHECK(mt_optim_reduce_grads(v[i].o, NULL));
            MT_CHECK(mt_optim_step(v[i].o, lr, 0.1, NULL, &in[i], NULL));
            MT_EXPECT(in[i].skipped == poison, "%s %s step %d rank %d: skipped %d",
                      mt_dtype_name(dt), zr_what[i], t, rank, in[i].skipped);
            if (zr_modes[i] == 2 && !poison) { /* the other shards stay stale until the caller
                                                  gathers (any order) */
                float *pd = zr_params(&v[i]), *pc = zr_params(&c);
                int64_t stale = 0;
                for (int64_t j = 0; j < numel; j++)
                    stale += pd[j] != pc[j];
                MT_EXPECT(stale > 0, "%s step %d rank %d: params updated before the gather",
                          mt_dtype_name(dt), t, rank);
                free(pd), free(pc);
                for (int k = mt_optim_buffer_num_buckets(v[i].b) - 1; k >= 0; k--)
                    MT_CHECK(mt_optim_gather_bucket(v[i].o, k, NULL));
            }
            if (!poison)
                MT_EXPECT(in[i].grad_norm == ic.grad_norm && in[i].num_zeros == ic.num_zeros &&
                              ic.num_zeros > 0,
                          "%s %s step %d rank %d: norm %.17g want %.17g, zeros %lld want %lld",
                          mt_dtype_name(dt), zr_what[i], t, rank, in[i].grad_norm, ic.grad_norm,
                          (long long)in[i].num_zeros, (long long)ic.num_zeros);
            float *pv = zr_params(&v[i]), *pc = zr_params(&c);
            snprintf(what, sizeof what, "%s %s step %d rank %d", mt_dtype_name(dt), zr_what[i], t,
                     rank);
            mt_test_close_f32(what, pv, pc, (size_t)numel, 0.0, 0.0);
            free(pv), free(pc);
        }
    }
    for (int i = 0; i < ZR_NV; i++)
        zr_destroy(&v[i]);
    zr_destroy(&c);
}

/* Grads of 1 + (rank + 1) 2^-12 everywhere: reduced in bf16 every rank's rounds to 1 and the
 * average is exactly 1 (this rank's shard with ZeRO-1); in fp32 it keeps the 2^-12 steps. */
static void zr_bf16_rounding(mt_comm *w, mt_device dev) {
    int rank = mt_comm_rank(w), n = mt_comm_size(w);
    for (int mode = 0; mode < 4; mode++) { /* all-reduce, ZeRO-1; | 2: in bf16 */
        zr_rig r = zr_make(dev, MT_BF16, n, w, (mode & 1) | (mode & 2) << 1);
        mt_tensor g;
        MT_CHECK(mt_optim_buffer_grads(r.b, &g));
        int64_t total = mt_tensor_numel(&g);
        float *x = malloc((size_t)total * 4);
        for (int64_t j = 0; j < total; j++)
            x[j] = 1.0f + (float)(rank + 1) / 4096.0f;
        mt_tensor h = mt_tensor_1d(x, MT_F32, total, MT_DEVICE_CPU);
        MT_CHECK(mt_tensor_copy(&g, &h, NULL));
        MT_CHECK(mt_optim_reduce_grads(r.o, NULL));
        MT_CHECK(mt_tensor_copy(&h, &g, NULL));
        const float want = mode & 2 ? 1.0f : 1.0f + (float)(n + 1) / 8192.0f;
        int64_t bad = 0, first = -1;
        for (int k = 0; k < mt_optim_buffer_num_buckets(r.b); k++) {
            mt_optim_bucket bk;
            MT_CHECK(mt_optim_buffer_bucket(r.b, k, &bk));
            int64_t s = mode & 1 ? bk.numel / n : bk.numel, at = mode & 1 ? rank * s : 0;
            for (int64_t j = bk.offset + at; j < bk.offset + at + s; j++)
                if (x[j] != want && !bad++) first = j;
        }
        MT_EXPECT(bad == 0, "%s%s rank %d: %lld grads differ from %.9g (first [%lld] = %.9g)",
                  mode & 1 ? "ZeRO-1" : "all-reduce", mode & 2 ? " in bf16" : "", rank,
                  (long long)bad, want, (long long)first, first >= 0 ? x[first] : 0.0);
        free(x);
        zr_destroy(&r);
    }
}

/* Expert parallelism over the world (one rank per expert-parallel rank pair: ep 2, ranks r and
 * r ^ 1 hold different experts, r and r + 2 the same): params 1 and 4 are experts. Every mode
 * (all-reduce, ZeRO-1, either in bf16) against a local reference fed the grads Megatron's DDP
 * gives: the others averaged over the world, an expert's summed over the ranks holding it and
 * divided by the world's size. No clipping (the reference sees only its own experts); the grad
 * norm is checked against the sum over every rank's experts and the others once. */
static void zr_expert(mt_comm *w, mt_device dev, mt_dtype dt) {
    const int rank = mt_comm_rank(w), n = mt_comm_size(w), ep = 2, edp = n / 2;
    mt_comm *edp_c, *emp_c;
    MT_CHECK(mt_comm_split(w, rank % ep, rank / ep, "expert-dp", &edp_c));
    MT_CHECK(mt_comm_split(w, rank / ep, rank % ep, "expert-mp", &emp_c));
    for (int mode = 0; mode < 4; mode++) { /* | 1: ZeRO-1, | 2: in bf16 */
        zr_rig v, c;
        for (int ref = 0; ref < 2; ref++) {
            zr_rig *r = ref ? &c : &v;
            mt_optim_buffer_config bc = MT_OPTIM_BUFFER_CONFIG_INIT;
            bc.param_dtype = dt;
            bc.device = dev;
            bc.bucket_numel = 500;
            bc.dp_size = ref ? 1 : n;
            bc.expert_dp_size = ref ? 1 : edp;
            MT_CHECK(mt_optim_buffer_create(&bc, &r->b));
            for (int i = 0; i < ZR_NP; i++) {
                const int ex = !ref && (i == 1 || i == 4);
                MT_CHECK(mt_optim_buffer_add(
                    r->b, zr_names[i], zr_ndims[i], zr_shapes[i],
                    (i == 5 ? MT_OPTIM_PARAM_SHARED : 0) | (ex ? MT_OPTIM_PARAM_EXPERT : 0), NULL));
            }
            size_t bytes, sbytes;
            MT_CHECK(mt_optim_buffer_finalize(r->b, &bytes));
            mt_optim_config oc = MT_OPTIM_CONFIG_INIT;
            oc.clip_grad = 0.0f;
            oc.use_distributed_optimizer = !ref && (mode & 1);
            oc.grad_reduce_in_bf16 = !ref && (mode & 2);
            oc.dp = ref ? NULL : w;
            oc.expert_dp = ref ? NULL : edp_c;
            oc.expert_mp = ref ? NULL : emp_c;
            MT_CHECK(mt_optim_state_bytes(&oc, r->b, &sbytes));
            MT_CHECK(mt_arena_create(dev, bytes + sbytes, &r->ar));
            MT_CHECK(mt_optim_buffer_bind(r->b, r->ar));
            MT_CHECK(mt_optim_create(&oc, r->b, r->ar, &r->o));
        }
        for (int k = 0; k < mt_optim_buffer_num_buckets(v.b); k++) { /* one kind a bucket */
            mt_optim_bucket bk;
            MT_CHECK(mt_optim_buffer_bucket(v.b, k, &bk));
            for (int i = 0; i < ZR_NP; i++) {
                mt_optim_param_info in;
                MT_CHECK(mt_optim_buffer_info(v.b, i, &in));
                if (in.offset >= bk.offset && in.offset < bk.offset + bk.numel)
                    MT_EXPECT(in.expert == bk.expert && in.expert == (i == 1 || i == 4),
                              "param %d (expert %d) in bucket %d (expert %d)", i, in.expert, k,
                              bk.expert);
            }
        }
        for (int t = 0; t < 3; t++) {
            zr_set_grads(&v, rank, n, t, -1);
            mt_tensor g; /* the reference's grads: as above */
            MT_CHECK(mt_optim_buffer_grads(c.b, &g));
            float *x = calloc((size_t)mt_tensor_numel(&g), 4);
            double sumsq = 0.0;
            for (int i = 0; i < ZR_NP; i++) {
                mt_optim_param_info in;
                MT_CHECK(mt_optim_buffer_info(c.b, i, &in));
                const int ex = i == 1 || i == 4;
                for (int64_t j = 0; j < in.numel; j++) {
                    double s[2] = { 0.0, 0.0 }; /* (per expert-parallel rank) */
                    for (int q = 0; q < n; q++)
                        s[q % ep] += zr_grad(q, t, i, j);
                    x[in.offset + j] = (float)((ex ? s[rank % ep] : s[0] + s[1]) / n);
                    if (i == 5) continue;
                    if (ex)
                        sumsq += (s[0] / n) * (s[0] / n) + (s[1] / n) * (s[1] / n);
                    else
                        sumsq += (s[0] + s[1]) / n * ((s[0] + s[1]) / n);
                }
            }
            mt_tensor h = mt_tensor_1d(x, MT_F32, mt_tensor_numel(&g), MT_DEVICE_CPU);
            MT_CHECK(mt_tensor_copy(&g, &h, NULL));
            free(x);
            mt_optim_step_info iv, ic;
            MT_CHECK(mt_optim_step(c.o, 1e-2 * (t + 1), 0.1, NULL, &ic, NULL));
            MT_CHECK(mt_optim_reduce_grads(v.o, NULL));
            MT_CHECK(mt_optim_step(v.o, 1e-2 * (t + 1), 0.1, NULL, &iv, NULL));
            MT_EXPECT(iv.grad_norm == sqrt(sumsq), "mode %d step %d rank %d: norm %.17g want %.17g",
                      mode, t, rank, iv.grad_norm, sqrt(sumsq));
            float *pc = zr_params(&c), *pv = zr_params(&v);
            for (int i = 0; i < ZR_NP; i++) { /* (the two buffers lay parameters out apart) */
                mt_optim_param_info a, b;
                MT_CHECK(mt_optim_buffer_info(v.b, i, &a));
                MT_CHECK(mt_optim_buffer_info(c.b, i, &b));
                char what[128];
                snprintf(what, sizeof what, "%s expert-parallel mode %d step %d rank %d param %d",
                         mt_dtype_name(dt), mode, t, rank, i);
                mt_test_close_f32(what, pv + a.offset, pc + b.offset, (size_t)a.numel, 0.0, 0.0);
            }
            free(pc), free(pv);
        }
        zr_destroy(&v);
        zr_destroy(&c);
    }
    mt_comm_destroy(emp_c);
    mt_comm_destroy(edp_c);
}
