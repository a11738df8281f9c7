/* 1F1B and forward-only schedules over mt-comm's point-to-point operations. */
#include <mt/pp.h>

#include <stddef.h>

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
