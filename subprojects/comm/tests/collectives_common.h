/* Shared by mr_collectives (host tensors, MPI), mgpu_collectives and gpu_comm (device tensors,
 * NCCL): every operation, dtypes f32/bf16/i32/i64, counts 0, 1, odd, in place and out of place.
 * Inputs are small integers from (seed, rank, index), so every sum is exact and the expected value
 * is computed locally for every rank. */
#include <mt/comm.h>
#include <mt/testkit.h>

#include <stdlib.h>
#include <string.h>

typedef struct coll_ctx {
    mt_comm *c;
    mt_device dev;
    mt_stream stream;
    int rank, n;
} coll_ctx;

/* A small integer in [-3, 3] (max and min are then exercised with ties and signs). */
static int coll_val(uint64_t seed, int rank, int64_t i) {
    uint64_t h = seed * 0x9E3779B97F4A7C15ull ^ ((uint64_t)rank << 40) ^ (uint64_t)i;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    return (int)(h % 7) - 3;
}

static void coll_store(mt_dtype dt, void *p, int64_t i, double v) {
    switch (dt) {
    case MT_F32:
        ((float *)p)[i] = (float)v;
        break;
    case MT_BF16:
        ((uint16_t *)p)[i] = mt_f32_to_bf16((float)v);
        break;
    case MT_I32:
        ((int32_t *)p)[i] = (int32_t)v;
        break;
    case MT_I64:
        ((int64_t *)p)[i] = (int64_t)v;
        break;
    default:
        MT_ASSERT(0);
    }
}

static double coll_load(mt_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case MT_F32:
        return ((const float *)p)[i];
    case MT_BF16:
        return mt_bf16_to_f32(((const uint16_t *)p)[i]);
    case MT_I32:
        return ((const int32_t *)p)[i];
    case MT_I64:
        return (double)((const int64_t *)p)[i];
    default:
        MT_ASSERT(0);
    }
    return 0;
}

/* A tensor of n elements on the context's device (at least one element is allocated). */
static mt_tensor coll_alloc(coll_ctx *x, mt_dtype dt, int64_t n) {
    size_t bytes = (size_t)(n ? n : 1) * mt_dtype_size(dt);
    void *p = NULL;
    if (mt_device_is_cuda(x->dev))
        MT_CHECK(mt_device_malloc(&p, bytes));
    else
        p = malloc(bytes);
    MT_ASSERT(p);
    return mt_tensor_1d(p, dt, n, x->dev);
}

static void coll_free(coll_ctx *x, mt_tensor *t) {
    if (mt_device_is_cuda(x->dev))
        mt_device_free(t->data);
    else
        free(t->data);
}

/* Writes vals[0..n) into t (elements [0, n) of a view of the same dtype). */
static void coll_put(coll_ctx *x, mt_tensor *t, const double *vals, int64_t n) {
    (void)x;
    size_t bytes = (size_t)n * mt_dtype_size(t->dtype);
    void *h = malloc(bytes ? bytes : 1);
    for (int64_t i = 0; i < n; i++)
        coll_store(t->dtype, h, i, vals[i]);
    MT_CHECK(mt_memcpy(t->data, t->device, h, MT_DEVICE_CPU, bytes, NULL));
    free(h);
}

static void coll_get(coll_ctx *x, const mt_tensor *t, double *vals, int64_t n) {
    (void)x;
    size_t bytes = (size_t)n * mt_dtype_size(t->dtype);
    void *h = malloc(bytes ? bytes : 1);
    MT_CHECK(mt_memcpy(h, MT_DEVICE_CPU, t->data, t->device, bytes, NULL));
    for (int64_t i = 0; i < n; i++)
        vals[i] = coll_load(t->dtype, h, i);
    free(h);
}

/* Runs after every operation: waits for the stream (device) and checks the status. */
static int coll_done(coll_ctx *x, mt_status st, const char *what) {
    if (st == MT_OK) st = mt_comm_wait(x->c, x->stream);
    return MT_EXPECT(st == MT_OK, "%s: %s: %s", what, mt_status_str(st), mt_last_error());
}

static void coll_compare(const char *what, const double *got, const double *want, int64_t n) {
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (got[i] != want[i]) bad = i;
    MT_EXPECT(bad < 0, "%s: element %lld is %g, want %g", what, (long long)bad,
              bad >= 0 ? got[bad] : 0.0, bad >= 0 ? want[bad] : 0.0);
}

static double coll_reduce(mt_redop op, double acc, double v, int first) {
    if (first) return v;
    switch (op) {
    case MT_REDOP_SUM:
    case MT_REDOP_AVG:
        return acc + v;
    case MT_REDOP_MAX:
        return v > acc ? v : acc;
    case MT_REDOP_MIN:
        return v < acc ? v : acc;
    }
    return acc;
}

static const char *const coll_op_names[] = { "sum", "avg", "max", "min" };

/* AVG inputs are multiples of n so that the average is the exact integer sum of coll_val. */
static double coll_in(coll_ctx *x, mt_redop op, uint64_t seed, int r, int64_t i) {
    return coll_val(seed, r, i) * (op == MT_REDOP_AVG ? x->n : 1);
}

static void test_allreduce(coll_ctx *x, mt_dtype dt, int64_t count, mt_redop op, int in_place) {
    char what[128];
    snprintf(what, sizeof what, "allreduce %s %s n=%lld %s", coll_op_names[op], mt_dtype_name(dt),
             (long long)count, in_place ? "in place" : "out of place");
    uint64_t seed = 100 + (uint64_t)op;
    double *v = malloc((size_t)(count + 1) * sizeof *v), *want = malloc((size_t)(count + 1) * 8);
    for (int64_t i = 0; i < count; i++) {
        v[i] = coll_in(x, op, seed, x->rank, i);
        want[i] = 0;
        for (int r = 0; r < x->n; r++)
            want[i] = coll_reduce(op, want[i], coll_in(x, op, seed, r, i), r == 0);
        if (op == MT_REDOP_AVG) want[i] /= x->n;
    }
    mt_tensor src = coll_alloc(x, dt, count), dst = in_place ? src : coll_alloc(x, dt, count);
    coll_put(x, &src, v, count);
    if (coll_done(x, mt_comm_allreduce(x->c, &dst, &src, op, x->stream), what)) {
        coll_get(x, &dst, v, count);
        coll_compare(what, v, want, count);
    }
    if (!in_place) coll_free(x, &dst);
    coll_free(x, &src);
    free(v);
    free(want);
}

static void test_allgather(coll_ctx *x, mt_dtype dt, int64_t count, int in_place) {
    char what[128];
    snprintf(what, sizeof what, "allgather %s n=%lld %s", mt_dtype_name(dt), (long long)count,
             in_place ? "in place" : "out of place");
    int64_t total = count * x->n;
    double *v = malloc((size_t)(total + 1) * 8), *want = malloc((size_t)(total + 1) * 8);
    for (int r = 0; r < x->n; r++)
        for (int64_t i = 0; i < count; i++)
            want[r * count + i] = coll_val(7, r, i);
    mt_tensor dst = coll_alloc(x, dt, total), src;
    if (in_place) { /* src is this rank's chunk of dst */
        src = mt_tensor_1d((char *)dst.data + (size_t)(x->rank * count) * mt_dtype_size(dt), dt,
                           count, x->dev);
    } else {
        src = coll_alloc(x, dt, count);
    }
    coll_put(x, &src, want + x->rank * count, count);
    if (coll_done(x, mt_comm_allgather(x->c, &dst, &src, x->stream), what)) {
        coll_get(x, &dst, v, total);
        coll_compare(what, v, want, total);
    }
    if (!in_place) coll_free(x, &src);
    coll_free(x, &dst);
    free(v);
    free(want);
}

static void test_reduce_scatter(coll_ctx *x, mt_dtype dt, int64_t count, mt_redop op,
                                int in_place) {
    char what[128];
    snprintf(what, sizeof what, "reduce_scatter %s %s n=%lld %s", coll_op_names[op],
             mt_dtype_name(dt), (long long)count, in_place ? "in place" : "out of place");
    uint64_t seed = 200 + (uint64_t)op;
    int64_t total = count * x->n;
    double *v = malloc((size_t)(total + 1) * 8), *want = malloc((size_t)(count + 1) * 8);
    for (int64_t j = 0; j < total; j++)
        v[j] = coll_in(x, op, seed, x->rank, j);
    for (int64_t i = 0; i < count; i++) {
        int64_t j = x->rank * count + i;
        want[i] = 0;
        for (int r = 0; r < x->n; r++)
            want[i] = coll_reduce(op, want[i], coll_in(x, op, seed, r, j), r == 0);
        if (op == MT_REDOP_AVG) want[i] /= x->n;
    }
    mt_tensor src = coll_alloc(x, dt, total), dst;
    if (in_place) {
        dst = mt_tensor_1d((char *)src.data + (size_t)(x->rank * count) * mt_dtype_size(dt), dt,
                           count, x->dev);
    } else {
        dst = coll_alloc(x, dt, count);
    }
    coll_put(x, &src, v, total);
    if (coll_done(x, mt_comm_reduce_scatter(x->c, &dst, &src, op, x->stream), what)) {
        coll_get(x, &dst, v, count);
        coll_compare(what, v, want, count);
    }
    if (!in_place) coll_free(x, &dst);
    coll_free(x, &src);
    free(v);
    free(want);
}

static void test_broadcast(coll_ctx *x, mt_dtype dt, int64_t count, int in_place) {
    char what[128];
    int root = (int)(count % x->n);
    snprintf(what, sizeof what, "broadcast %s n=%lld root %d %s", mt_dtype_name(dt),
             (long long)count, root, in_place ? "in place" : "out of place");
    double *v = malloc((size_t)(count + 1) * 8), *want = malloc((size_t)(count + 1) * 8);
    for (int64_t i = 0; i < count; i++) {
        want[i] = coll_val(11, root, i);
        v[i] = coll_val(11, x->rank, i) + 10; /* what non-roots hold before */
    }
    mt_tensor dst = coll_alloc(x, dt, count), src = in_place ? dst : coll_alloc(x, dt, count);
    coll_put(x, &dst, v, count);
    if (x->rank == root) coll_put(x, &src, want, count);
    if (coll_done(x, mt_comm_broadcast(x->c, &dst, in_place ? NULL : &src, root, x->stream),
                  what)) {
        coll_get(x, &dst, v, count);
        coll_compare(what, v, want, count);
    }
    if (!in_place) coll_free(x, &src);
    coll_free(x, &dst);
    free(v);
    free(want);
}

/* alltoallv counts: rank r sends cnt(r, j) elements to rank j. */
static int64_t coll_cnt(int r, int j, int64_t count) {
    return (r * 2 + j + count) % 4;
}

static void test_alltoall(coll_ctx *x, mt_dtype dt, int64_t count, int vary) {
    char what[128];
    snprintf(what, sizeof what, "%s %s n=%lld", vary ? "alltoallv" : "alltoall", mt_dtype_name(dt),
             (long long)count);
    int n = x->n;
    int64_t *sc = malloc(n * sizeof *sc), *rc = malloc(n * sizeof *rc), ns = 0, nr = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = vary ? coll_cnt(x->rank, j, count) : count;
        rc[j] = vary ? coll_cnt(j, x->rank, count) : count;
        ns += sc[j];
        nr += rc[j];
    }
    double *v = malloc((size_t)(ns + nr + 1) * 8), *want = malloc((size_t)(nr + 1) * 8);
    int64_t o = 0;
    for (int j = 0; j < n; j++) /* the block for j: values keyed by (sender, receiver) */
        for (int64_t k = 0; k < sc[j]; k++)
            v[o++] = coll_val(13, x->rank * 1000 + j, k);
    o = 0;
    for (int i = 0; i < n; i++)
        for (int64_t k = 0; k < rc[i]; k++)
            want[o++] = coll_val(13, i * 1000 + x->rank, k);
    mt_tensor src = coll_alloc(x, dt, ns), dst = coll_alloc(x, dt, nr);
    coll_put(x, &src, v, ns);
    mt_status st = vary ? mt_comm_alltoallv(x->c, &dst, rc, &src, sc, x->stream)
                        : mt_comm_alltoall(x->c, &dst, &src, x->stream);
    if (coll_done(x, st, what)) {
        coll_get(x, &dst, v, nr);
        coll_compare(what, v, want, nr);
    }
    coll_free(x, &src);
    coll_free(x, &dst);
    free(v);
    free(want);
    free(sc);
    free(rc);
}

/* A ring through one batch (send to next, receive from previous), then plain send/recv pairs. */
static void test_p2p(coll_ctx *x, mt_dtype dt, int64_t count) {
    char what[128];
    snprintf(what, sizeof what, "p2p ring %s n=%lld", mt_dtype_name(dt), (long long)count);
    int next = (x->rank + 1) % x->n, prev = (x->rank + x->n - 1) % x->n;
    double *v = malloc((size_t)(count + 1) * 8), *want = malloc((size_t)(count + 1) * 8);
    for (int64_t i = 0; i < count; i++) {
        v[i] = coll_val(17, x->rank, i);
        want[i] = coll_val(17, prev, i);
    }
    mt_tensor s = coll_alloc(x, dt, count), r = coll_alloc(x, dt, count);
    coll_put(x, &s, v, count);
    mt_p2p_op ops[2] = { { MT_P2P_SEND, &s, next }, { MT_P2P_RECV, &r, prev } };
    if (coll_done(x, mt_comm_p2p_batch(x->c, ops, 2, x->stream), what)) {
        coll_get(x, &r, v, count);
        coll_compare(what, v, want, count);
    }
    if (x->n % 2 == 0) { /* pairs (0,1), (2,3), ...: even ranks send, odd ranks receive */
        snprintf(what, sizeof what, "send/recv %s n=%lld", mt_dtype_name(dt), (long long)count);
        int even = x->rank % 2 == 0, peer = even ? x->rank + 1 : x->rank - 1;
        mt_status st = even ? mt_comm_send(x->c, &s, peer, x->stream)
                            : mt_comm_recv(x->c, &r, peer, x->stream);
        if (coll_done(x, st, what) && !even) {
            for (int64_t i = 0; i < count; i++)
                want[i] = coll_val(17, peer, i);
            coll_get(x, &r, v, count);
            coll_compare(what, v, want, count);
        }
    }
    coll_free(x, &s);
    coll_free(x, &r);
    free(v);
    free(want);
}

/* Everything, for every dtype and count; one allreduce over 16 MiB when `big`. */
static void coll_run_all(coll_ctx *x, int big) {
    const mt_dtype dts[] = { MT_F32, MT_BF16, MT_I32, MT_I64 };
    const int64_t counts[] = { 0, 1, 17, 1001 };
    for (size_t d = 0; d < 4; d++) {
        for (size_t k = 0; k < 4; k++) {
            int64_t n = counts[k];
            for (int op = 0; op < 4; op++) {
                test_allreduce(x, dts[d], n, (mt_redop)op, 0);
                test_allreduce(x, dts[d], n, (mt_redop)op, 1);
                test_reduce_scatter(x, dts[d], n, (mt_redop)op, op & 1);
            }
            test_allgather(x, dts[d], n, 0);
            test_allgather(x, dts[d], n, 1);
            test_broadcast(x, dts[d], n, 0);
            test_broadcast(x, dts[d], n, 1);
            test_alltoall(x, dts[d], n, 0);
            test_alltoall(x, dts[d], n, 1);
            test_p2p(x, dts[d], n);
        }
    }
    MT_EXPECT_STATUS(mt_comm_barrier(x->c), MT_OK);
    if (big) test_allreduce(x, MT_F32, (1 << 22) + 3, MT_REDOP_SUM, 0); /* 16 MiB + 12 B */
}

/* Splits by rank parity and checks that each half sums only its own ranks. */
static void coll_split(coll_ctx *x) {
    mt_comm *half = NULL;
    MT_CHECK(mt_comm_split(x->c, x->rank % 2, x->rank, "parity", &half));
    int hn = mt_comm_size(half);
    int ok =
        MT_EXPECT(half && hn == (x->n + 1 - x->rank % 2) / 2 && mt_comm_rank(half) == x->rank / 2,
                  "split: rank %d of %d", mt_comm_rank(half), hn);
    ok = ok && MT_EXPECT(!mt_device_is_cuda(x->dev) || mt_comm_has_device(half),
                         "split: NCCL is not up on the new communicator");
    if (ok) { /* else the allreduce would only repeat the failure */
        coll_ctx h = { half, x->dev, x->stream, mt_comm_rank(half), hn };
        double v = x->rank, want = 0;
        for (int r = x->rank % 2; r < x->n; r += 2)
            want += r;
        mt_tensor t = coll_alloc(&h, MT_F32, 1);
        coll_put(&h, &t, &v, 1);
        if (coll_done(&h, mt_comm_allreduce(half, &t, &t, MT_REDOP_SUM, x->stream),
                      "split allreduce")) {
            coll_get(&h, &t, &v, 1);
            coll_compare("split allreduce", &v, &want, 1);
        }
        coll_free(&h, &t);
    }
    mt_comm *none = (mt_comm *)1;
    MT_CHECK(mt_comm_split(x->c, x->rank == 0 ? 0 : -1, 0, "rank0", &none));
    MT_EXPECT((x->rank == 0) == (none != NULL), "split with color -1 gives NULL");
    mt_comm_destroy(none);
    mt_comm_destroy(half);
}
