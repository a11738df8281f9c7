/* multirank (host, MPI) and multigpu ("cuda", NCCL): expert parallelism's exchange over the world
 * (2 or 4 ranks, 8 experts). mt_moe_ep_dispatch equals the exchange then the sort
 * (mt_moe_ep_exchange, mt_moe_permute with mt_moe_ep_sort's map, whose order is checked against
 * megatron-core in moe_golden), bit for bit; mt_moe_ep_combine brings every row back to where it
 * was. Counts with zeros (an expert without rows from a rank, a rank sending a rank nothing). */
#include <mt/comm.h>
#include <mt/moe.h>
#include <mt/testkit.h>

#include <stdlib.h>
#include <string.h>

enum {
    E = 8,
    C = 3
};

static void *alloc_on(mt_device dev, size_t bytes) {
    void *p = NULL;
    if (mt_device_is_cuda(dev))
        MT_CHECK(mt_device_malloc(&p, bytes));
    else
        p = calloc(1, bytes);
    MT_ASSERT(p);
    return p;
}

static mt_tensor dev_rows(mt_device dev, int64_t rows) {
    void *p = alloc_on(dev, (size_t)(rows > 0 ? rows : 1) * C * 4);
    return mt_tensor_make(p, MT_F32, 2, (int64_t[]){ rows, C }, dev);
}

static float *host_rows(const mt_tensor *t) {
    size_t bytes = (size_t)t->shape[0] * C * 4;
    float *h = malloc(bytes + 4);
    MT_CHECK(mt_memcpy(h, MT_DEVICE_CPU, t->data, t->device, bytes, NULL));
    return h;
}

static void drop(mt_tensor *t) {
    if (mt_device_is_cuda(t->device))
        mt_device_free(t->data);
    else
        free(t->data);
}

static void run(mt_comm *w, mt_device dev, int trial) {
    const int n = mt_comm_size(w), me = mt_comm_rank(w);
    int32_t counts[4 * E];
    for (int i = 0; i < n * E; i++) /* (the same on every rank) */
        counts[i] = (int32_t)((i * 7 + trial * 5 + i / 3) % 6);
    counts[1] = 0, counts[n * E - 1] = 0;
    if (trial == 1) /* rank 0 sends rank 1 nothing */
        for (int le = 0; le < E / n; le++)
            counts[E / n + le] = 0;
    int64_t send[4], recv[4], rows = 0, nrecv = 0;
    MT_CHECK(mt_moe_ep_counts(counts, n, me, E, send, recv, NULL));
    for (int j = 0; j < n; j++)
        rows += send[j], nrecv += recv[j];
    float *x = malloc((size_t)(rows + 1) * C * 4);
    for (int64_t r = 0; r < rows * C; r++)
        x[r] = (float)(me * 10000 + r) + 0.25f;
    mt_tensor in = dev_rows(dev, rows + 2); /* (spare rows: the counts place the rest) */
    MT_CHECK(mt_memcpy(in.data, dev, x, MT_DEVICE_CPU, (size_t)rows * C * 4, NULL));
    mt_tensor got = dev_rows(dev, nrecv + 1), xr = dev_rows(dev, nrecv + 1);
    mt_tensor want = dev_rows(dev, nrecv + 1);
    MT_CHECK(mt_moe_ep_dispatch(w, &got, &in, counts, E, NULL));
    MT_CHECK(mt_moe_ep_exchange(w, &xr, &in, send, recv, NULL)); /* the reference */
    int32_t *map = malloc((size_t)(nrecv + 1) * 4);
    MT_CHECK(mt_moe_ep_sort(counts, n, me, E, 0, map, nrecv));
    if (nrecv) {
        mt_tensor w2, x2, m2;
        void *md = alloc_on(dev, (size_t)nrecv * 4);
        MT_CHECK(mt_memcpy(md, dev, map, MT_DEVICE_CPU, (size_t)nrecv * 4, NULL));
        m2 = mt_tensor_make(md, MT_I32, 1, (int64_t[]){ nrecv }, dev);
        MT_CHECK(mt_tensor_slice(&want, 0, 0, nrecv, &w2));
        MT_CHECK(mt_tensor_slice(&xr, 0, 0, nrecv, &x2));
        MT_CHECK(mt_moe_permute(&w2, &x2, &m2, NULL));
        if (mt_device_is_cuda(dev))
            mt_device_free(md);
        else
            free(md);
    }
    if (mt_device_is_cuda(dev)) MT_CHECK(mt_comm_wait(w, NULL));
    float *g = host_rows(&got), *r = host_rows(&want);
    char what[96];
    snprintf(what, sizeof what, "trial %d rank %d of %d: dispatch = exchange + sort", trial, me, n);
    mt_test_close_f32(what, g, r, (size_t)nrecv * C, 0.0, 0.0);
    mt_tensor back = dev_rows(dev, rows + 1);
    MT_CHECK(mt_moe_ep_combine(w, &back, &got, counts, E, NULL));
    if (mt_device_is_cuda(dev)) MT_CHECK(mt_comm_wait(w, NULL));
    float *b = host_rows(&back);
    snprintf(what, sizeof what, "trial %d rank %d of %d: combine(dispatch) = the rows", trial, me,
             n);
    mt_test_close_f32(what, b, x, (size_t)rows * C, 0.0, 0.0);
    /* refusals: too few rows for what the counts place */
    mt_tensor small;
    MT_CHECK(mt_tensor_slice(&got, 0, 0, nrecv > 0 ? nrecv - 1 : 0, &small));
    if (nrecv > 0) {
        MT_EXPECT(mt_moe_ep_dispatch(w, &small, &in, counts, E, NULL) == MT_ERR_INVALID_ARG,
                  "rank %d: a short output taken", me);
        mt_error_clear();
    }
    free(x), free(g), free(r), free(b), free(map);
    drop(&in), drop(&got), drop(&xr), drop(&want), drop(&back);
}

int main(int argc, char **argv) {
    const int cuda = argc > 1 && strcmp(argv[1], "cuda") == 0;
    mt_test_require_ranks(2);
    if (!cuda && !mt_comm_have_mpi()) mt_test_skip("built without MPI");
    if (cuda) {
        const char *e = getenv("OMPI_COMM_WORLD_SIZE");
        mt_test_require_gpus(e ? atoi(e) : 2);
        if (!mt_comm_have_nccl()) mt_test_skip("built without NCCL");
    }
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = cuda ? MT_COMM_DEVICE : MT_COMM_HOST;
    cfg.timeout_s = 60;
    mt_comm *w;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    MT_EXPECT(mt_comm_size(w) <= 4, "at most 4 ranks");
    mt_device dev = cuda ? mt_comm_device(w) : MT_DEVICE_CPU;
    MT_CHECK(mt_device_set(dev));
    for (int t = 0; t < 3; t++)
        run(w, dev, t);
    mt_comm_destroy(w);
    return mt_test_result();
}
