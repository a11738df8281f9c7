/* multirank (host tensors over MPI) / multigpu (argument "cuda": device tensors over NCCL, one
 * GPU a rank): the launcher's ranks as one pipeline, 1F1B for 1, 2, P and 2P + 1 micro-batches.
 * Each stage checks that every input and gradient it receives is its neighbour's for that
 * micro-batch, that a slot's input is still there at its backward (no slot reused too early),
 * and that it ran Megatron's order (mt_pp_1f1b_order); then forward-only. Then the interleaved
 * schedule, 2 and 3 chunks a stage, P, 2P and 3P micro-batches: the same checks by virtual
 * stage, and the order mt_pp_interleaved_order gives. The tensors are 1 MiB, past MPI's eager
 * limit, so a send that is not posted with its receive would deadlock. */
#include <mt/pp.h>
#include <mt/testkit.h>

#include <stdlib.h>
#include <string.h>

#define N         (1 << 18) /* floats a tensor */
#define SLOTS_MAX 8

typedef struct stage {
    mt_device dev;
    int P, r, slots, fwd_only;
    mt_tensor in[SLOTS_MAX], out, g;
    float *host;
    int ops[64], n;
} stage;

/* The activation stage r sends for micro-batch mb, and the gradient it sends back. */
static float act(int r, int mb) {
    return (float)(mb * 10 + r + 1);
}
static float grad(int r, int mb) {
    return -(float)(mb * 7 + r + 1);
}

static void fill(stage *s, mt_tensor *t, float v) {
    for (int i = 0; i < N; i++)
        s->host[i] = v + (float)(i % 5); /* (not one value: a shifted copy would show) */
    MT_CHECK(mt_memcpy(t->data, s->dev, s->host, MT_DEVICE_CPU, N * 4, NULL));
}

static int holds(stage *s, const mt_tensor *t, float v) {
    MT_CHECK(mt_memcpy(s->host, MT_DEVICE_CPU, t->data, s->dev, N * 4, NULL));
    for (int i = 0; i < N; i++)
        if (s->host[i] != v + (float)(i % 5)) return 0;
    return 1;
}

static mt_status fwd(void *ctx, int mb, int slot) {
    stage *s = ctx;
    s->ops[s->n++] = mb;
    MT_EXPECT(slot == (s->fwd_only ? 0 : mb % s->slots), "stage %d: micro-batch %d in slot %d",
              s->r, mb, slot);
    if (s->r > 0)
        MT_EXPECT(holds(s, &s->in[slot], act(s->r - 1, mb)),
                  "stage %d: forward %d's input is not stage %d's", s->r, mb, s->r - 1);
    if (s->r < s->P - 1) fill(s, &s->out, act(s->r, mb));
    return MT_OK;
}

static mt_status bwd(void *ctx, int mb, int slot) {
    stage *s = ctx;
    s->ops[s->n++] = -1 - mb;
    if (s->r > 0)
        MT_EXPECT(holds(s, &s->in[slot], act(s->r - 1, mb)),
                  "stage %d: slot %d no longer holds micro-batch %d's input at its backward", s->r,
                  slot, mb);
    if (s->r < s->P - 1)
        MT_EXPECT(holds(s, &s->g, grad(s->r + 1, mb)),
                  "stage %d: backward %d's gradient is not stage %d's", s->r, mb, s->r + 1);
    if (s->r > 0) fill(s, &s->g, grad(s->r, mb));
    return MT_OK;
}

static mt_tensor input(void *ctx, int slot) {
    return ((stage *)ctx)->in[slot];
}
static mt_tensor output(void *ctx) {
    return ((stage *)ctx)->out;
}
static mt_tensor gradient(void *ctx) {
    return ((stage *)ctx)->g;
}

/* ---- the interleaved schedule: chunk c of stage r is virtual stage c P + r ---- */

typedef struct vstage {
    stage *s;
    int V, slots, nbuf, M, *map;   /* mt_pp_interleaved_slot_map's: slots shared by the chunks */
    mt_tensor *in, *out, *g, *buf; /* in[slot]: any chunk's */
    mt_pp_event *ops;
    int n;
} vstage;

static int vs_of(const vstage *v, int c) {
    return c * v->s->P + v->s->r;
}

static mt_status vfwd(void *ctx, int c, int mb, int slot) {
    vstage *v = ctx;
    stage *s = v->s;
    const int vs = vs_of(v, c), last = v->V * s->P - 1;
    v->ops[v->n++] = (mt_pp_event){ MT_PP_FORWARD, c, mb, 0, 0, 0, 0, -1, -1 };
    MT_EXPECT(slot == (s->fwd_only ? 0 : v->map[c * v->M + mb]),
              "stage %d chunk %d: micro-batch %d in "
              "slot %d",
              s->r, c, mb, slot);
    if (vs > 0)
        MT_EXPECT(holds(s, &v->in[slot], act(vs - 1, mb)),
                  "stage %d chunk %d: forward %d's input is not virtual stage %d's", s->r, c, mb,
                  vs - 1);
    if (vs < last) fill(s, &v->out[c], act(vs, mb));
    return MT_OK;
}

static mt_status vbwd(void *ctx, int c, int mb, int slot) {
    vstage *v = ctx;
    stage *s = v->s;
    const int vs = vs_of(v, c), last = v->V * s->P - 1;
    v->ops[v->n++] = (mt_pp_event){ MT_PP_BACKWARD, c, mb, 0, 0, 0, 0, -1, -1 };
    if (vs > 0)
        MT_EXPECT(holds(s, &v->in[slot], act(vs - 1, mb)),
                  "stage %d chunk %d: slot %d no longer holds micro-batch %d's input", s->r, c,
                  slot, mb);
    if (vs < last)
        MT_EXPECT(holds(s, &v->g[c], grad(vs + 1, mb)),
                  "stage %d chunk %d: backward %d's gradient is not virtual stage %d's", s->r, c,
                  mb, vs + 1);
    if (vs > 0) fill(s, &v->g[c], grad(vs, mb));
    return MT_OK;
}

static mt_tensor vinput(void *ctx, int c, int slot) {
    vstage *v = ctx;
    MT_EXPECT(slot >= 0 && slot < v->slots, "chunk %d: slot %d of %d", c, slot, v->slots);
    return v->in[slot];
}
static mt_tensor voutput(void *ctx, int c) {
    return ((vstage *)ctx)->out[c];
}
static mt_tensor vgrad(void *ctx, int c) {
    return ((vstage *)ctx)->g[c];
}
static mt_tensor vbuffer(void *ctx, int k) {
    vstage *v = ctx;
    MT_EXPECT(k >= 0 && k < v->nbuf, "buffer %d of %d", k, v->nbuf);
    return v->buf[k];
}

/* comm: a stream for the exchanges (overlapped with the chunks' work), or NULL */
static void run_interleaved(stage *s, mt_comm *w, int V, int M, mt_stream comm, int G) {
    vstage v = { .s = s, .V = V, .nbuf = mt_pp_interleaved_buffers(s->P, s->r, V, M, G), .M = M };
    v.map = calloc((size_t)(V * M), sizeof(int));
    MT_CHECK(mt_pp_interleaved_slot_map(s->P, s->r, V, M, G, v.map, &v.slots));
    const int tensors = v.slots + 2 * V + v.nbuf;
    mt_arena *a;
    MT_CHECK(mt_arena_create(s->dev, (size_t)tensors * (N * 4 + MT_ARENA_ALIGN), &a));
    mt_tensor *all = calloc((size_t)tensors, sizeof(mt_tensor));
    for (int k = 0; k < tensors; k++)
        MT_CHECK(mt_tensor_alloc(a, MT_F32, 1, (int64_t[]){ N }, &all[k]));
    v.in = all, v.out = all + v.slots, v.g = v.out + V, v.buf = v.g + V;
    const int n = mt_pp_interleaved_order(s->P, s->r, V, M, G, NULL);
    v.ops = calloc((size_t)n, sizeof *v.ops);
    mt_pp_event *want = calloc((size_t)n, sizeof *want);
    mt_pp_interleaved_order(s->P, s->r, V, M, G, want);
    mt_pp_chunks ch = { w, NULL, &v, V, vfwd, vbwd, vinput, voutput, vgrad, vbuffer, comm, G };
    s->fwd_only = 0;
    MT_CHECK(mt_pp_interleaved(&ch, M));
    int same = 1, j = 0; /* (the order's forwards and backwards, exchanges left out) */
    for (int k = 0; k < n; k++) {
        if (want[k].op == MT_PP_EXCHANGE) continue;
        same &= j < v.n && want[k].op == v.ops[j].op && want[k].chunk == v.ops[j].chunk &&
                want[k].mb == v.ops[j].mb;
        j++;
    }
    MT_EXPECT(same && j == v.n && v.n == 2 * V * M,
              "stage %d, %d chunks, %d micro-batches: not "
              "the interleaved order (%d ops)",
              s->r, V, M, v.n);
    v.n = 0; /* forward-only: each micro-batch round the ring, every chunk */
    s->fwd_only = 1;
    ch.backward = NULL;
    MT_CHECK(mt_pp_interleaved_forward_only(&ch, 2));
    MT_EXPECT(v.n == 2 * V, "forward only: %d ops", v.n);
    free(want), free(v.ops), free(all), free(v.map);
    mt_arena_destroy(a);
}

int main(int argc, char **argv) {
    const int cuda = argc > 1 && strcmp(argv[1], "cuda") == 0;
    if (!cuda && !mt_comm_have_mpi()) mt_test_skip("built without MPI");
    if (cuda && !mt_comm_have_nccl()) mt_test_skip("built without NCCL");
    mt_test_require_ranks(2);
    if (cuda) mt_test_require_gpus(1);
    mt_comm_config cfg = MT_COMM_CONFIG_INIT;
    cfg.backends = cuda ? MT_COMM_DEVICE : MT_COMM_HOST;
    cfg.timeout_s = 60;
    mt_comm *w;
    MT_CHECK(mt_comm_world_create(&cfg, &w));
    stage s = { 0 };
    s.dev = cuda ? mt_comm_device(w) : MT_DEVICE_CPU;
    s.P = mt_comm_size(w), s.r = mt_comm_rank(w), s.slots = mt_pp_num_slots(s.P, s.r);
    if (s.P > SLOTS_MAX) mt_test_skip("more ranks than the test's slots");
    mt_arena *a;
    MT_CHECK(mt_arena_create(s.dev, (size_t)(s.slots + 2) * (N * 4 + MT_ARENA_ALIGN), &a));
    for (int k = 0; k < s.slots; k++)
        MT_CHECK(mt_tensor_alloc(a, MT_F32, 1, (int64_t[]){ N }, &s.in[k]));
    MT_CHECK(mt_tensor_alloc(a, MT_F32, 1, (int64_t[]){ N }, &s.out));
    MT_CHECK(mt_tensor_alloc(a, MT_F32, 1, (int64_t[]){ N }, &s.g));
    s.host = malloc(N * 4);
    mt_pp_stage st = { w, NULL, &s, fwd, bwd, input, output, gradient };
    const int Ms[4] = { 1, 2, s.P, 2 * s.P + 1 };
    for (int i = 0; i < 4; i++) {
        s.n = 0;
        MT_CHECK(mt_pp_1f1b(&st, Ms[i]));
        int want[64];
        int n = mt_pp_1f1b_order(s.P, s.r, Ms[i], want);
        MT_EXPECT(s.n == n && memcmp(s.ops, want, sizeof *want * (size_t)n) == 0,
                  "stage %d of %d, %d micro-batches: not 1F1B's order", s.r, s.P, Ms[i]);
    }
    s.n = 0;
    st.backward = NULL;
    s.fwd_only = 1;
    MT_CHECK(mt_pp_forward_only(&st, 3));
    MT_EXPECT(s.n == 3 && s.ops[0] == 0 && s.ops[2] == 2, "forward only: %d ops", s.n);
    fprintf(stderr, "stage %d of %d (%s): 1F1B for 1, 2, %d, %d micro-batches and forward-only\n",
            s.r, s.P, cuda ? "NCCL" : "MPI", s.P, 2 * s.P + 1);
    mt_stream comm = NULL; /* (on GPUs the exchanges also run on a stream of their own) */
    if (cuda) MT_CHECK(mt_stream_create(&comm));
    for (int V = 2; V <= 3; V++)
        for (int m = 1; m <= 3; m++) {
            run_interleaved(&s, w, V, m * s.P, NULL, 0);
            if (comm) run_interleaved(&s, w, V, m * s.P, comm, 0);
        }
    for (int V = 2; V <= 3;
         V++) /* groups of P + 1 (Megatron's microbatch_group_size_per_vp_stage) */
        run_interleaved(&s, w, V, 2 * (s.P + 1), comm, s.P + 1);
    if (comm) mt_stream_destroy(comm);
    fprintf(stderr,
            "stage %d of %d (%s): interleaved, 2 and 3 chunks, %d, %d, %d micro-batches, and %d in "
            "groups of %d\n",
            s.r, s.P, cuda ? "NCCL" : "MPI", s.P, 2 * s.P, 3 * s.P, 2 * (s.P + 1), s.P + 1);
    free(s.host);
    mt_arena_destroy(a);
    mt_comm_destroy(w);
    return mt_test_result();
}
