/* 1F1B and forward-only schedules over mt-comm's point-to-point operations. */
#include <mt/pp.h>

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

int mt_pp_num_slots(int stages, int stage) {
    return stages > 1 ? stages - stage : 1;
}

int mt_pp_1f1b_order(int stages, int stage, int num_micro, int *ops) {
    const int warm = stages - stage - 1 < num_micro ? stages - stage - 1 : num_micro;
    int n = 0, f = 0, b = 0;
#define PUT(v)                 \
    do {                       \
        const int op_ = (v);   \
        if (ops) ops[n] = op_; \
        n++;                   \
    } while (0)
    for (int i = 0; i < warm; i++)
        PUT(f++);
    for (int i = 0; i < num_micro - warm; i++) {
        PUT(f++);
        PUT(-1 - b++);
    }
    while (b < num_micro)
        PUT(-1 - b++);
#undef PUT
    return n;
}

/* The stage's place, and its neighbours' (-1: none). */
typedef struct place {
    int stages, stage, prev, next, slots;
} place;

static mt_status place_of(const mt_pp_stage *s, place *p) {
    MT_REQUIRE(s && s->forward, MT_ERR_INVALID_ARG, "NULL stage or forward callback");
    p->stages = s->comm ? mt_comm_size(s->comm) : 1;
    p->stage = s->comm ? mt_comm_rank(s->comm) : 0;
    p->prev = p->stage > 0 ? p->stage - 1 : -1;
    p->next = p->stage + 1 < p->stages ? p->stage + 1 : -1;
    p->slots = mt_pp_num_slots(p->stages, p->stage);
    MT_REQUIRE(p->prev < 0 || s->input, MT_ERR_INVALID_ARG,
               "pipeline stage %d needs an input callback", p->stage);
    MT_REQUIRE(p->next < 0 || (s->output && s->grad), MT_ERR_INVALID_ARG,
               "pipeline stage %d needs output and grad callbacks", p->stage);
    return MT_OK;
}

/* Sends `send` to stage `to` and receives `recv` from stage `from` together (NULL: none). */
static mt_status p2p(const mt_pp_stage *s, mt_tensor *send, int to, mt_tensor *recv, int from) {
    mt_p2p_op ops[2];
    int n = 0;
    if (send) ops[n++] = (mt_p2p_op){ MT_P2P_SEND, send, to };
    if (recv) ops[n++] = (mt_p2p_op){ MT_P2P_RECV, recv, from };
    return n ? mt_comm_p2p_batch(s->comm, ops, n, s->stream) : MT_OK;
}

/* The tensors a step moves: micro-batch mb's input slot (NULL on the first stage), the output
 * (NULL on the last), the gradient (NULL where nothing is exchanged that way). */
typedef struct bufs {
    mt_tensor in, out, g;
} bufs;

static mt_tensor *in_of(const mt_pp_stage *s, const place *p, bufs *b, int mb) {
    if (p->prev < 0) return NULL;
    b->in = s->input(s->ctx, mb % p->slots);
    return &b->in;
}

mt_status mt_pp_1f1b(const mt_pp_stage *s, int num_micro) {
    place p;
    MT_TRY(place_of(s, &p));
    MT_REQUIRE(s->backward, MT_ERR_INVALID_ARG, "NULL backward callback");
    MT_REQUIRE(num_micro >= 1, MT_ERR_INVALID_ARG, "%d micro-batches", num_micro);
    const int M = num_micro, warm = p.stages - p.stage - 1 < M ? p.stages - p.stage - 1 : M;
    bufs b;
    mt_tensor *out = NULL, *g_next = NULL, *g_prev = NULL;
    if (p.next >= 0) b.out = s->output(s->ctx), out = &b.out;
    if (p.next >= 0 || p.prev >= 0) b.g = s->grad(s->ctx);
    if (p.next >= 0) g_next = &b.g; /* received from the next stage */
    if (p.prev >= 0) g_prev = &b.g; /* sent to the previous stage */
    int f = 0, bw = 0;
    /* warm-up: recv_forward, forward, send_forward */
    for (int i = 0; i < warm; i++, f++) {
        MT_TRY(p2p(s, NULL, 0, in_of(s, &p, &b, f), p.prev));
        MT_TRY(s->forward(s->ctx, f, f % p.slots));
        MT_TRY(p2p(s, out, p.next, NULL, 0));
    }
    if (M > warm) MT_TRY(p2p(s, NULL, 0, in_of(s, &p, &b, f), p.prev));
    /* steady state: forward, send_forward_recv_backward, backward, send_backward_recv_forward */
    for (int i = 0; i < M - warm; i++, f++, bw++) {
        MT_TRY(s->forward(s->ctx, f, f % p.slots));
        MT_TRY(p2p(s, out, p.next, g_next, p.next));
        MT_TRY(s->backward(s->ctx, bw, bw % p.slots));
        const int more = i + 1 < M - warm; /* (a forward follows: its input comes with) */
        MT_TRY(p2p(s, g_prev, p.prev, more ? in_of(s, &p, &b, f + 1) : NULL, p.prev));
    }
    /* cool-down: recv_backward, backward, send_backward */
    for (int i = 0; i < warm; i++, bw++) {
        MT_TRY(p2p(s, NULL, 0, g_next, p.next));
        MT_TRY(s->backward(s->ctx, bw, bw % p.slots));
        MT_TRY(p2p(s, g_prev, p.prev, NULL, 0));
    }
    return MT_OK;
}

mt_status mt_pp_forward_only(const mt_pp_stage *s, int num_micro) {
    place p;
    MT_TRY(place_of(s, &p));
    bufs b;
    mt_tensor *out = NULL;
    if (p.next >= 0) b.out = s->output(s->ctx), out = &b.out;
    for (int mb = 0; mb < num_micro; mb++) {
        MT_TRY(p2p(s, NULL, 0, p.prev >= 0 ? (b.in = s->input(s->ctx, 0), &b.in) : NULL, p.prev));
        MT_TRY(s->forward(s->ctx, mb, 0));
        MT_TRY(p2p(s, out, p.next, NULL, 0));
    }
    return MT_OK;
}

/* ---- the interleaved schedule ---- */

mt_status mt_pp_interleaved_check(int stages, int chunks, int num_micro, int group) {
    MT_REQUIRE(stages >= 2, MT_ERR_INVALID_ARG,
               "the interleaved schedule needs pipeline-model-parallel size > 1 (it is %d)",
               stages);
    MT_REQUIRE(chunks >= 1 && chunks <= 64, MT_ERR_INVALID_ARG,
               "%d model chunks a pipeline stage (1 to 64)", chunks);
    const int N = group ? group : stages; /* (schedules.py's checks) */
    MT_REQUIRE(N >= stages && N <= num_micro, MT_ERR_INVALID_ARG,
               "The number of contiguous micro-batches in a virtual pipeline stage should range in "
               "[PP=%d , M=%d]",
               stages, num_micro);
    MT_REQUIRE(!(num_micro % N > 0 && num_micro % N < stages), MT_ERR_INVALID_ARG,
               "The remainder of M (the total micro-batches) divided by N (number of contiguous "
               "micro-batches in a virtual pipeline stage) should be 0, or larger than or equal to "
               "the pipeline-parallel size, but it is %d. Otherwise, it introduces dependency "
               "bubbles in the pipeline and reduces throughput.",
               num_micro % N);
    return MT_OK;
}

/* Megatron's schedule table (get_schedule_table): the micro-batches in groups of N, each group
 * through chunk 0, then chunk 1, ...; the last group takes the rest (from nfull N on, Ms of
 * them), so virtual micro-batch k is of chunk k % (N V) / N in a whole group, else of chunk
 * (k - nfull N V) / Ms. */
typedef struct vsched {
    int P, r, V, M, N, nfull, Ms, total, warm, rest, all_warm;
} vsched;

static int chunk_of(const vsched *v, int k, int fwd) {
    k %= v->total;
    const int whole = v->nfull * v->N * v->V;
    const int c = k < whole ? k % (v->N * v->V) / v->N : (k - whole) / v->Ms;
    return fwd ? c : v->V - 1 - c;
}

/* recv_tensor_from_previous_stage: whether step k receives (from the previous stage going
 * forward, the next going backward) and for which chunk. */
static int recv_chunk(const vsched *v, int k, int fwd, int *chunk) {
    const int leading = fwd ? v->r == 0 : v->r == v->P - 1;
    if (!leading) {
        *chunk = chunk_of(v, k + 1, fwd);
        return 1;
    }
    int recv = k >= v->P - 1;
    int c = chunk_of(v, recv ? k - (v->P - 1) : k + 1, fwd);
    if (c == (fwd ? v->V - 1 : 0)) recv = 0;
    *chunk = fwd ? c + 1 : c - 1;
    return recv;
}

static int first_vstage(const vsched *v, int c) {
    return c == 0 && v->r == 0;
}
static int last_vstage(const vsched *v, int c) {
    return c == v->V - 1 && v->r == v->P - 1;
}

int mt_pp_interleaved_order(int stages, int stage, int chunks, int num_micro, int group,
                            mt_pp_event *ev) {
    if (mt_pp_interleaved_check(stages, chunks, num_micro, group) != MT_OK || stage < 0 ||
        stage >= stages) {
        mt_error_clear();
        return -1;
    }
    vsched v = { .P = stages, .r = stage, .V = chunks, .M = num_micro };
    v.N = group ? group : stages, v.nfull = (num_micro - 1) / v.N, v.total = num_micro * chunks;
    v.Ms = num_micro - v.nfull * v.N;
    v.warm = (v.P - v.r - 1) * 2 + (v.V - 1) * v.N; /* get_pp_rank_microbatches */
    if (v.warm >= v.total) v.warm = v.total, v.all_warm = 1;
    v.rest = v.total - v.warm;
    int n = 0, nf[64] = { 0 }, nb[64] = { 0 }; /* forwards, backwards done per chunk */
#define EMIT(...)                                     \
    do {                                              \
        if (ev) ev[n] = (mt_pp_event){ __VA_ARGS__ }; \
        n++;                                          \
    } while (0)
#define FWD(k)                                                 \
    do {                                                       \
        const int c_ = chunk_of(&v, (k), 1);                   \
        EMIT(MT_PP_FORWARD, c_, nf[c_]++, 0, 0, 0, 0, -1, -1); \
    } while (0)
#define BWD(k)                                                  \
    do {                                                        \
        const int c_ = chunk_of(&v, (k), 0);                    \
        EMIT(MT_PP_BACKWARD, c_, nb[c_]++, 0, 0, 0, 0, -1, -1); \
    } while (0)
#define XCHG(sn, sp, rp, rn, rpc, rnc)                                                          \
    do {                                                                                        \
        if ((sn) || (sp) || (rp) || (rn))                                                       \
            EMIT(MT_PP_EXCHANGE, -1, -1, sn, sp, rp, rn, (rp) ? (rpc) : -1, (rn) ? (rnc) : -1); \
    } while (0)
    XCHG(0, 0, v.r != 0, 0, 0, -1); /* the first input of chunk 0 */
    for (int k = 0; k < v.warm; k++) {
        const int c = chunk_of(&v, k, 1);
        int fc, rp = recv_chunk(&v, k, 1, &fc);
        if (k == v.total - 1) rp = 0;
        FWD(k);
        if (k == v.warm - 1 && !v.all_warm) /* with the first gradient of the last chunk */
            XCHG(!last_vstage(&v, c), 0, rp, v.r != v.P - 1, fc, v.V - 1);
        else
            XCHG(!last_vstage(&v, c), 0, rp, 0, fc, -1);
    }
    for (int k = 0; k < v.rest; k++) {
        const int kf = k + v.warm, fc0 = chunk_of(&v, kf, 1), bc0 = chunk_of(&v, k, 0);
        FWD(kf);
        BWD(k);
        int fc, bc, rp = recv_chunk(&v, kf, 1, &fc), rn = recv_chunk(&v, k, 0, &bc);
        if (k == v.rest - 1) rp = 0;
        XCHG(!last_vstage(&v, fc0), !first_vstage(&v, bc0), rp, rn, fc, bc);
    }
    if (v.all_warm) XCHG(0, 0, 0, v.r != v.P - 1, -1, v.V - 1);
    for (int k = v.rest; k < v.total; k++) {
        const int c = chunk_of(&v, k, 0);
        int bc, rn = recv_chunk(&v, k, 0, &bc);
        if (k == v.total - 1) rn = 0;
        BWD(k);
        XCHG(0, !first_vstage(&v, c), 0, rn, -1, bc);
    }
#undef XCHG
#undef BWD
#undef FWD
#undef EMIT
    return n;
}

/* Walks a stage's order (n events of mt_pp_interleaved_order): the slots, slots[0] the stage's
 * (a micro-batch from its first receive or forward to chunk 0's backward) and slots[1 + c] chunk
 * c's (from the receive or forward of its input to its backward), the input gradients waiting
 * for their backward, at most, and (map not NULL) mt_pp_interleaved_slot_map's map and pool. */
static mt_status walk(const mt_pp_event *ev, int n, int stages, int stage, int chunks,
                      int num_micro, int *slots, int *waiting, int *map, int *pool) {
    const size_t cm = (size_t)(chunks + 1) * (size_t)num_micro;
    int *rin = calloc((size_t)chunks, sizeof(int)), *open = calloc(cm, sizeof(int));
    int *live = calloc((size_t)chunks + 1, sizeof(int));
    char *used = calloc(cm, 1); /* the stage-wide slots taken */
    mt_status st = rin && open && live && used ? MT_OK : MT_ERROR(MT_ERR_OOM, "pipeline walk");
    int wait = 0, npool = 0;
    *waiting = 0;
    for (int k = 0; k <= chunks; k++)
        slots[k] = 1;
    for (const mt_pp_event *e = ev; st == MT_OK && e < ev + n; e++) {
        int mb = -1, c = -1;
        if (e->op == MT_PP_EXCHANGE && e->recv_prev) c = e->recv_prev_chunk, mb = rin[c]++;
        if (e->op == MT_PP_FORWARD) c = e->chunk, mb = e->mb;
        /* (k = 0: the stage's window; 1 + c: the chunk's) */
        for (int k = 0; mb >= 0 && k <= 1 + c; k += 1 + c) {
            int *o = &open[(size_t)k * (size_t)num_micro + (size_t)mb];
            if (!*o && k > 0 && map) { /* its stage-wide slot: the lowest free */
                int f = 0;
                while (used[f])
                    f++;
                used[f] = 1, map[c * num_micro + mb] = f;
                if (f + 1 > npool) npool = f + 1;
            }
            if (!*o) *o = 1, live[k]++;
            if (live[k] > slots[k]) slots[k] = live[k];
        }
        if (e->op == MT_PP_EXCHANGE && e->recv_next) wait++;
        if (e->op == MT_PP_BACKWARD && !(e->chunk == chunks - 1 && stage == stages - 1)) wait--;
        if (e->op == MT_PP_BACKWARD) live[1 + e->chunk]--, live[0] -= e->chunk == 0;
        if (e->op == MT_PP_BACKWARD && map) used[map[e->chunk * num_micro + e->mb]] = 0;
        if (wait > *waiting) *waiting = wait;
    }
    if (pool) *pool = npool;
    free(rin), free(open), free(live), free(used);
    return st;
}

/* The stage's order for num_micro micro-batches (*ev: malloc'ed, *n events). */
static mt_status order_of(int stages, int stage, int chunks, int num_micro, int group,
                          mt_pp_event **ev, int *n) {
    MT_TRY(mt_pp_interleaved_check(stages, chunks, num_micro, group));
    *n = mt_pp_interleaved_order(stages, stage, chunks, num_micro, group, NULL);
    MT_REQUIRE(*n >= 0, MT_ERR_INVALID_ARG, "stage %d of %d", stage, stages);
    *ev = malloc((size_t)*n * sizeof **ev);
    MT_REQUIRE(*ev, MT_ERR_OOM, "pipeline order");
    mt_pp_interleaved_order(stages, stage, chunks, num_micro, group, *ev);
    return MT_OK;
}

mt_status mt_pp_interleaved_counts(int stages, int stage, int chunks, int num_micro, int group,
                                   int *slots, int *buffers) {
    MT_REQUIRE(slots && buffers, MT_ERR_INVALID_ARG, "NULL slots or buffers");
    mt_pp_event *ev;
    int n, waiting = 0;
    MT_TRY(order_of(stages, stage, chunks, num_micro, group, &ev, &n));
    mt_status st = walk(ev, n, stages, stage, chunks, num_micro, slots, &waiting, NULL, NULL);
    *buffers = 2 + waiting; /* (two for the outputs sent) */
    free(ev);
    return st;
}

mt_status mt_pp_interleaved_slot_map(int stages, int stage, int chunks, int num_micro, int group,
                                     int *map, int *pool) {
    MT_REQUIRE(map && pool, MT_ERR_INVALID_ARG, "NULL map or pool");
    mt_pp_event *ev;
    int n, waiting;
    MT_TRY(order_of(stages, stage, chunks, num_micro, group, &ev, &n));
    int *slots = malloc((size_t)(chunks + 1) * sizeof(int));
    mt_status st = slots ? walk(ev, n, stages, stage, chunks, num_micro, slots, &waiting, map, pool)
                         : MT_ERROR(MT_ERR_OOM, "pipeline slots");
    free(slots), free(ev);
    return st;
}

/* One of mt_pp_interleaved_counts' answers: chunk's slots (-1: the stage's), or with chunk -2 the
 * buffers; -1 for a shape the schedule refuses. */
static int one_count(int stages, int stage, int chunks, int num_micro, int group, int chunk) {
    if (chunks < 1 || chunk < -2 || chunk >= chunks) return -1;
    int *slots = malloc((size_t)(chunks + 1) * sizeof(int)), buffers, k = -1;
    if (slots &&
        mt_pp_interleaved_counts(stages, stage, chunks, num_micro, group, slots, &buffers) == MT_OK)
        k = chunk == -2 ? buffers : slots[1 + chunk];
    mt_error_clear();
    free(slots);
    return k;
}

int mt_pp_interleaved_slots(int stages, int stage, int chunks, int num_micro, int group,
                            int chunk) {
    return chunk < -1 ? -1 : one_count(stages, stage, chunks, num_micro, group, chunk);
}

int mt_pp_interleaved_buffers(int stages, int stage, int chunks, int num_micro, int group) {
    return one_count(stages, stage, chunks, num_micro, group, -2);
}

/* The input gradients received ahead of their backward: buffer indices (2...) queued per chunk
 * in arrival order (a chunk's backwards take them in micro-batch order), and the free ones. */
typedef struct waitq {
    int V, cap, *q, *len, *free_, nfree;
} waitq;

static mt_status waitq_init(waitq *w, int V, int cap) {
    w->V = V, w->cap = cap, w->nfree = cap;
    w->q = malloc((size_t)(V * cap) * sizeof(int));
    w->len = calloc((size_t)V, sizeof(int));
    w->free_ = malloc((size_t)cap * sizeof(int));
    MT_REQUIRE(w->q && w->len && w->free_, MT_ERR_OOM, "pipeline queues");
    for (int k = 0; k < cap; k++)
        w->free_[k] = cap + 1 - k; /* (buffers 2..cap + 1) */
    return MT_OK;
}

static void waitq_free(waitq *w) {
    free(w->q), free(w->len), free(w->free_);
}

/* The state of an interleaved run. With a comm stream the exchanges go there, and the compute
 * stream waits only for what it reads or overwrites: the exchange that received a slot's input
 * or a buffer's gradient (x_in, x_buf), or that sends from a buffer or a chunk's gradient
 * (x_buf, x_grad); ev[k] marks exchange k's end, ready the compute stream's point before it. */
typedef struct vrun {
    const mt_pp_chunks *s;
    int P, r, V, M, *map, *rin, nx; /* map: mt_pp_interleaved_slot_map's */
    int *x_in, *x_buf, *x_grad;     /* [slots], [buffers], [V]: an exchange, or -1 */
    mt_event *ev, ready;
} vrun;

/* The compute stream waits for exchange *x (if any, and once). */
static mt_status wait_x(vrun *v, int *x) {
    if (*x < 0 || !v->s->comm_stream) return MT_OK;
    mt_status st = mt_stream_wait_event(v->s->stream, v->ev[*x]);
    *x = -1;
    return st;
}

static mt_status exchange(vrun *v, const mt_pp_event *e, int k, int sbuf, int last_bwd, waitq *w) {
    const mt_pp_chunks *s = v->s;
    const int next = (v->r + 1) % v->P, prev = (v->r + v->P - 1) % v->P;
    mt_p2p_op ops[4];
    mt_tensor out, in, gs, gr;
    int n = 0;
    /* the activations first, then the gradients (P = 2: one peer both ways) */
    if (e->send_next) {
        out = s->buffer(s->ctx, sbuf);
        v->x_buf[sbuf] = k;
        ops[n++] = (mt_p2p_op){ MT_P2P_SEND, &out, next };
    }
    if (e->recv_prev) {
        const int c = e->recv_prev_chunk, slot = v->map[c * v->M + v->rin[c]++];
        in = s->input(s->ctx, c, slot);
        v->x_in[slot] = k;
        ops[n++] = (mt_p2p_op){ MT_P2P_RECV, &in, prev };
    }
    if (e->send_prev) {
        gs = s->grad(s->ctx, last_bwd);
        v->x_grad[last_bwd] = k;
        ops[n++] = (mt_p2p_op){ MT_P2P_SEND, &gs, prev };
    }
    if (e->recv_next) {
        const int c = e->recv_next_chunk;
        MT_ASSERT(w->nfree > 0 && w->len[c] < w->cap);
        const int b = w->free_[--w->nfree];
        w->q[c * w->cap + w->len[c]++] = b;
        gr = s->buffer(s->ctx, b);
        v->x_buf[b] = k;
        ops[n++] = (mt_p2p_op){ MT_P2P_RECV, &gr, next };
    }
    if (!s->comm_stream) return mt_comm_p2p_batch(s->comm, ops, n, s->stream);
    MT_TRY(mt_event_record(v->ready, s->stream));
    MT_TRY(mt_stream_wait_event(s->comm_stream, v->ready));
    MT_TRY(mt_comm_p2p_batch(s->comm, ops, n, s->comm_stream));
    return mt_event_record(v->ev[k], s->comm_stream);
}

static mt_status run_events(vrun *v, const mt_pp_event *ev, int n, waitq *w) {
    const mt_pp_chunks *s = v->s;
    const int last_vs = v->r == v->P - 1;
    int k = 0, last_bwd = -1, sbuf = 0; /* exchanges so far; the send buffer (0 or 1) */
    for (int i = 0; i < n; i++) {
        const mt_pp_event *e = &ev[i];
        const int slot = e->op == MT_PP_EXCHANGE ? -1 : v->map[e->chunk * v->M + e->mb];
        if (e->op == MT_PP_FORWARD) {
            MT_TRY(wait_x(v, &v->x_in[slot]));
            MT_TRY(s->forward(s->ctx, e->chunk, e->mb, slot));
            if (!(e->chunk == v->V - 1 && last_vs)) { /* the output waits in a send buffer */
                sbuf ^= 1;
                mt_tensor o = s->output(s->ctx, e->chunk), b = s->buffer(s->ctx, sbuf);
                MT_TRY(wait_x(v, &v->x_buf[sbuf]));
                MT_TRY(mt_tensor_copy(&b, &o, s->stream));
            }
        } else if (e->op == MT_PP_BACKWARD) {
            MT_TRY(wait_x(v, &v->x_grad[e->chunk]));
            if (!(e->chunk == v->V - 1 && last_vs)) { /* its gradient from the queue */
                int *q = w->q + e->chunk * w->cap;
                MT_REQUIRE(w->len[e->chunk] > 0, MT_ERR_INTERNAL,
                           "stage %d chunk %d: no input gradient for micro-batch %d", v->r,
                           e->chunk, e->mb);
                mt_tensor b = s->buffer(s->ctx, q[0]), g = s->grad(s->ctx, e->chunk);
                MT_TRY(wait_x(v, &v->x_buf[q[0]]));
                w->free_[w->nfree++] = q[0];
                memmove(q, q + 1, (size_t)--w->len[e->chunk] * sizeof(int));
                MT_TRY(mt_tensor_copy(&g, &b, s->stream));
            }
            MT_TRY(s->backward(s->ctx, e->chunk, e->mb, slot));
            last_bwd = e->chunk;
        } else {
            MT_TRY(exchange(v, e, k++, sbuf, last_bwd, w));
        }
    }
    /* (the compute stream goes on after every transfer: buffers and slots are free again) */
    return k > 0 && s->comm_stream ? mt_stream_wait_event(s->stream, v->ev[k - 1]) : MT_OK;
}

mt_status mt_pp_interleaved(const mt_pp_chunks *s, int num_micro) {
    MT_REQUIRE(s && s->forward && s->backward && s->input && s->output && s->grad && s->buffer,
               MT_ERR_INVALID_ARG, "NULL chunks or callback");
    vrun v = { .s = s,
               .P = s->comm ? mt_comm_size(s->comm) : 1,
               .r = s->comm ? mt_comm_rank(s->comm) : 0,
               .V = s->num_chunks,
               .M = num_micro };
    mt_pp_event *ev;
    int n, pool = 0, waiting = 0;
    MT_TRY(order_of(v.P, v.r, v.V, num_micro, s->group, &ev, &n));
    int *counts = calloc((size_t)v.V + 1, sizeof(int)); /* (walk's slots) */
    v.map = malloc((size_t)(v.V * num_micro) * sizeof(int));
    v.rin = calloc((size_t)v.V, sizeof(int));
    waitq w = { 0 };
    mt_status st = counts && v.map && v.rin ? MT_OK : MT_ERROR(MT_ERR_OOM, "pipeline order");
    if (st == MT_OK) st = walk(ev, n, v.P, v.r, v.V, num_micro, counts, &waiting, v.map, &pool);
    const int nbuf = 2 + waiting; /* (buffers 0, 1: sends) */
    if (st == MT_OK) st = waitq_init(&w, v.V, nbuf - 2);
    if (st == MT_OK) {
        for (int i = 0; i < n; i++)
            v.nx += ev[i].op == MT_PP_EXCHANGE;
        v.x_in = malloc((size_t)pool * sizeof(int));
        v.x_buf = malloc((size_t)nbuf * sizeof(int));
        v.x_grad = malloc((size_t)v.V * sizeof(int));
        v.ev = calloc((size_t)v.nx + 1, sizeof(mt_event));
        st =
            v.x_in && v.x_buf && v.x_grad && v.ev ? MT_OK : MT_ERROR(MT_ERR_OOM, "pipeline events");
    }
    if (st == MT_OK) {
        memset(v.x_in, 0xff, (size_t)pool * sizeof(int)); /* (-1: none) */
        memset(v.x_buf, 0xff, (size_t)nbuf * sizeof(int));
        memset(v.x_grad, 0xff, (size_t)v.V * sizeof(int));
    }
    for (int k = 0; st == MT_OK && s->comm_stream && k < v.nx; k++)
        st = mt_event_create(&v.ev[k], 0);
    if (st == MT_OK && s->comm_stream) st = mt_event_create(&v.ready, 0);
    if (st == MT_OK) st = run_events(&v, ev, n, &w);
    for (int k = 0; v.ev && k < v.nx; k++)
        if (v.ev[k]) mt_event_destroy(v.ev[k]);
    if (v.ready) mt_event_destroy(v.ready);
    waitq_free(&w);
    free(ev), free(counts), free(v.map), free(v.rin), free(v.x_in), free(v.x_buf), free(v.x_grad);
    free(v.ev);
    return st;
}

mt_status mt_pp_interleaved_forward_only(const mt_pp_chunks *s, int num_micro) {
    MT_REQUIRE(s && s->forward && s->input && s->output, MT_ERR_INVALID_ARG,
               "NULL chunks or callback");
    const int P = s->comm ? mt_comm_size(s->comm) : 1, r = s->comm ? mt_comm_rank(s->comm) : 0;
    const int V = s->num_chunks;
    MT_REQUIRE(P >= 2 && V >= 1, MT_ERR_INVALID_ARG, "%d stages of %d chunks", P, V);
    for (int mb = 0; mb < num_micro; mb++)
        for (int c = 0; c < V; c++) {
            if (c > 0 || r > 0) {
                mt_tensor in = s->input(s->ctx, c, 0);
                mt_p2p_op op = { MT_P2P_RECV, &in, (r + P - 1) % P };
                MT_TRY(mt_comm_p2p_batch(s->comm, &op, 1, s->stream));
            }
            MT_TRY(s->forward(s->ctx, c, mb, 0));
            if (c < V - 1 || r < P - 1) {
                mt_tensor o = s->output(s->ctx, c);
                mt_p2p_op op = { MT_P2P_SEND, &o, (r + 1) % P };
                MT_TRY(mt_comm_p2p_batch(s->comm, &op, 1, s->stream));
            }
        }
    return MT_OK;
}
