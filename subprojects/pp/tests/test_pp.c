/* unit: 1F1B's order (Megatron's forward_backward_pipelining_without_interleaving: the warm-up
 * forwards min(P - r - 1, M), one forward and one backward in turn, the remaining backwards)
 * against tables written from that definition; the slots it needs; without a pipeline group a
 * stage runs each micro-batch's forward then backward in slot 0; bad stages are refused. */
#include <mt/pp.h>
#include <mt/testkit.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void order(int P, int r, int M, const int *want, int n) {
    int got[64];
    int k = mt_pp_1f1b_order(P, r, M, got);
    MT_EXPECT(k == n && mt_pp_1f1b_order(P, r, M, NULL) == n, "P %d r %d M %d: %d ops, want %d", P,
              r, M, k, n);
    MT_EXPECT(k != n || memcmp(got, want, sizeof *want * (size_t)n) == 0,
              "P %d r %d M %d: order differs", P, r, M);
}

/* the last micro-batch's backward is -1 - mb: B0 = -1, B1 = -2, ... */
static void test_orders(void) {
    order(1, 0, 3, (int[]){ 0, -1, 1, -2, 2, -3 }, 6);
    order(4, 0, 6, (int[]){ 0, 1, 2, 3, -1, 4, -2, 5, -3, -4, -5, -6 }, 12);
    order(4, 1, 6, (int[]){ 0, 1, 2, -1, 3, -2, 4, -3, 5, -4, -5, -6 }, 12);
    order(4, 2, 6, (int[]){ 0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5, -6 }, 12);
    order(4, 3, 6, (int[]){ 0, -1, 1, -2, 2, -3, 3, -4, 4, -5, 5, -6 }, 12);
    order(4, 0, 2, (int[]){ 0, 1, -1, -2 }, 4); /* fewer micro-batches than warm-up */
    order(2, 0, 1, (int[]){ 0, -1 }, 2);
    MT_EXPECT(mt_pp_num_slots(4, 0) == 4 && mt_pp_num_slots(4, 3) == 1 &&
                  mt_pp_num_slots(1, 0) == 1,
              "slots");
}

typedef struct rec {
    int ops[16], n;
} rec;

static mt_status fwd(void *ctx, int mb, int slot) {
    rec *r = ctx;
    MT_EXPECT(slot == 0, "one stage: slot %d", slot);
    r->ops[r->n++] = mb;
    return MT_OK;
}
static mt_status bwd(void *ctx, int mb, int slot) {
    rec *r = ctx;
    MT_EXPECT(slot == 0, "one stage: slot %d", slot);
    r->ops[r->n++] = -1 - mb;
    return r->n > 6 ? MT_ERROR(MT_ERR_INVALID_ARG, "stop") : MT_OK;
}

static void test_one_stage(void) {
    rec r = { { 0 }, 0 };
    mt_pp_stage s = { NULL, NULL, &r, fwd, bwd, NULL, NULL, NULL };
    MT_CHECK(mt_pp_1f1b(&s, 3));
    MT_EXPECT(r.n == 6 && memcmp(r.ops, (int[]){ 0, -1, 1, -2, 2, -3 }, 6 * sizeof(int)) == 0,
              "one stage ran %d ops", r.n);
    r.n = 0;
    MT_CHECK(mt_pp_forward_only(&s, 2));
    MT_EXPECT(r.n == 2 && r.ops[0] == 0 && r.ops[1] == 1, "forward only ran %d ops", r.n);
    r.n = 0; /* a callback's error stops the schedule and comes back */
    MT_EXPECT_STATUS(mt_pp_1f1b(&s, 5), MT_ERR_INVALID_ARG);
    MT_EXPECT(r.n == 8, "the schedule did not stop at B3's error (%d ops)", r.n);
    MT_EXPECT_STATUS(mt_pp_1f1b(&s, 0), MT_ERR_INVALID_ARG);
    s.backward = NULL;
    MT_EXPECT_STATUS(mt_pp_1f1b(&s, 1), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_pp_1f1b(NULL, 1), MT_ERR_INVALID_ARG);
}

/* ---- the interleaved schedule ---- */

static void event_str(const mt_pp_event *e, char *buf, size_t n) {
    if (e->op == MT_PP_EXCHANGE)
        snprintf(buf, n, "X %d %d %d %d", e->send_next, e->send_prev, e->recv_prev, e->recv_next);
    else
        snprintf(buf, n, "%c %d %d", e->op == MT_PP_FORWARD ? 'F' : 'B', e->chunk, e->mb);
}

/* Every stage's order against megatron-core's (golden/interleaved.json, gen_interleaved.py). */
static void test_interleaved_golden(const char *path) {
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    MT_EXPECT(root != NULL, "%s: %s", path, err.text);
    if (!root) return;
    json_t *cases = json_object_get(root, "cases"), *c;
    size_t i;
    int checked = 0;
    json_array_foreach(cases, i, c) {
        const int P = (int)json_integer_value(json_object_get(c, "P"));
        const int V = (int)json_integer_value(json_object_get(c, "V"));
        const int M = (int)json_integer_value(json_object_get(c, "M"));
        json_t *jn = json_object_get(c, "N"); /* (the group size; absent: P) */
        const int N = jn ? (int)json_integer_value(jn) : P;
        json_t *ranks = json_object_get(c, "train");
        for (int r = 0; r < P; r++) {
            json_t *want = json_array_get(ranks, (size_t)r);
            const int n = mt_pp_interleaved_order(P, r, V, M, N, NULL);
            MT_EXPECT(n == (int)json_array_size(want),
                      "P %d V %d M %d stage %d: %d events, want %d", P, V, M, r, n,
                      (int)json_array_size(want));
            if (n != (int)json_array_size(want)) continue;
            mt_pp_event *ev = malloc((size_t)n * sizeof *ev);
            mt_pp_interleaved_order(P, r, V, M, N, ev);
            for (int k = 0; k < n; k++) {
                char got[32];
                event_str(&ev[k], got, sizeof got);
                const char *w = json_string_value(json_array_get(want, (size_t)k));
                MT_EXPECT(w && strcmp(got, w) == 0, "P %d V %d M %d stage %d event %d: %s, want %s",
                          P, V, M, r, k, got, w ? w : "?");
                if (!w || strcmp(got, w) != 0) break;
            }
            free(ev);
            checked++;
        }
    }
    MT_EXPECT(checked >= 20, "only %d stages checked", checked);
    json_decref(root);
}

/* The orders run together, each channel's k-th send meeting its k-th receive: every forward's
 * input is the previous virtual stage's output of that micro-batch, still in its slot (not
 * overwritten by a later receive), and every backward's gradient the next virtual stage's of
 * that micro-batch; the slot and buffer counts are what the run needs. */
#define NQ 4096
typedef struct chan {
    int tag[NQ], n, taken;
} chan;

static void test_interleaved_flow(int P, int V, int M, int N) {
    enum {
        MAXP = 8,
        MAXV = 4,
        MAXS = 64
    };
    mt_pp_event *ev[MAXP];
    int n[MAXP], pos[MAXP] = { 0 };
    static chan act[MAXP], grd[MAXP]; /* act[r]: r -> r+1; grd[r]: r -> r-1 */
    memset(act, 0, sizeof act), memset(grd, 0, sizeof grd);
    int rin[MAXP][MAXV], out[MAXP], gq[MAXP][MAXV][NQ], gl[MAXP][MAXV];
    int gread[MAXP][MAXV], last_bwd[MAXP], slots[MAXP][MAXV], rslots[MAXP], live_c[MAXP][MAXV];
    /* the stage's shared slots (mt_pp_interleaved_slot_map): which chunk's micro-batch (c M + mb)
     * holds each, and the input it holds */
    int *map[MAXP], pool[MAXP], owner[MAXP][MAXS], slot_in[MAXP][MAXS], in_use[MAXP] = { 0 };
    int in_use_max[MAXP] = { 0 };
    memset(live_c, 0, sizeof live_c);
    memset(rin, 0, sizeof rin), memset(gl, 0, sizeof gl), memset(gread, 0, sizeof gread);
    for (int r = 0; r < P; r++) {
        n[r] = mt_pp_interleaved_order(P, r, V, M, N, NULL);
        ev[r] = malloc((size_t)n[r] * sizeof(mt_pp_event));
        mt_pp_interleaved_order(P, r, V, M, N, ev[r]);
        rslots[r] = mt_pp_interleaved_slots(P, r, V, M, N, -1);
        int sum = 0;
        for (int c = 0; c < V; c++) {
            slots[r][c] = mt_pp_interleaved_slots(P, r, V, M, N, c);
            MT_EXPECT(slots[r][c] >= 1 && slots[r][c] <= rslots[r] && rslots[r] <= MAXS,
                      "stage %d chunk %d: %d slots (the stage %d)", r, c, slots[r][c], rslots[r]);
            sum += slots[r][c];
        }
        map[r] = malloc((size_t)(V * M) * sizeof(int));
        MT_CHECK(mt_pp_interleaved_slot_map(P, r, V, M, N, map[r], &pool[r]));
        MT_EXPECT(pool[r] >= 1 && pool[r] <= sum && pool[r] <= MAXS,
                  "stage %d: %d shared slots (the chunks' %d)", r, pool[r], sum);
        for (int k = 0; k < V * M; k++)
            MT_EXPECT(map[r][k] >= 0 && map[r][k] < pool[r], "stage %d: slot %d of %d", r,
                      map[r][k], pool[r]);
        for (int k = 0; k < MAXS; k++)
            owner[r][k] = slot_in[r][k] = -1;
        out[r] = last_bwd[r] = -1;
    }
    const int tagmul = 1000; /* tag: virtual stage * tagmul + micro-batch */
    int progress = 1, bad = 0, waiting_max[MAXP] = { 0 }, live[MAXP] = { 0 }, posted[MAXP] = { 0 };
    while (progress && !bad) {
        progress = 0;
        for (int r = 0; r < P && !bad; r++) {
            while (pos[r] < n[r] && !bad) {
                const mt_pp_event *e = &ev[r][pos[r]];
                const int nx = (r + 1) % P, pv = (r + P - 1) % P;
                if (e->op == MT_PP_EXCHANGE) { /* sends posted, then the receives wait */
                    if (!posted[r]) {
                        if (e->send_next) act[r].tag[act[r].n++] = out[r];
                        if (e->send_prev) grd[r].tag[grd[r].n++] = last_bwd[r];
                        posted[r] = progress = 1;
                    }
                    if (e->recv_prev && act[pv].taken >= act[pv].n) break;
                    if (e->recv_next && grd[nx].taken >= grd[nx].n) break;
                    posted[r] = 0;
                    if (e->recv_prev) {
                        const int c = e->recv_prev_chunk, k = rin[r][c]++;
                        const int id = c * M + k, sn = map[r][id];
                        int *sl = &slot_in[r][sn];
                        if (owner[r][sn] >= 0) bad = 1; /* overwrites an input still needed */
                        MT_EXPECT(owner[r][sn] < 0,
                                  "P %d V %d M %d: stage %d chunk %d slot %d overwritten", P, V, M,
                                  r, c, sn);
                        owner[r][sn] = id;
                        if (++in_use[r] > in_use_max[r]) in_use_max[r] = in_use[r];
                        live_c[r][c]++;
                        MT_EXPECT(live_c[r][c] <= slots[r][c], "stage %d chunk %d: %d in flight", r,
                                  c, live_c[r][c]);
                        *sl = act[pv].tag[act[pv].taken++];
                        MT_EXPECT(*sl == (c * P + r - 1) * tagmul + k,
                                  "P %d V %d M %d: stage %d chunk %d received %d, want %d", P, V, M,
                                  r, c, *sl, (c * P + r - 1) * tagmul + k);
                    }
                    if (e->recv_next) {
                        const int c = e->recv_next_chunk;
                        gq[r][c][gl[r][c]++] = grd[nx].tag[grd[nx].taken++];
                        int w = 0;
                        for (int cc = 0; cc < V; cc++)
                            w += gl[r][cc] - gread[r][cc];
                        if (w > waiting_max[r]) waiting_max[r] = w;
                    }
                } else {
                    const int vs = e->chunk * P + r, id = e->chunk * M + e->mb, sl = map[r][id];
                    if (e->op == MT_PP_FORWARD) {
                        if (vs > 0) {
                            MT_EXPECT(owner[r][sl] == id &&
                                          slot_in[r][sl] == (vs - 1) * tagmul + e->mb,
                                      "P %d V %d M %d: stage %d F%d.%d input %d", P, V, M, r,
                                      e->chunk, e->mb, slot_in[r][sl]);
                        } else { /* (no receive: its slot is taken here) */
                            MT_EXPECT(owner[r][sl] < 0, "stage %d F0.%d: slot %d taken", r, e->mb,
                                      sl);
                            owner[r][sl] = id;
                            if (++in_use[r] > in_use_max[r]) in_use_max[r] = in_use[r];
                        }
                        out[r] = vs * tagmul + e->mb;
                        live_c[r][0] += vs == 0; /* (no receive: its slot is taken here) */
                        MT_EXPECT(live_c[r][0] <= slots[r][0], "stage %d chunk 0: %d in flight", r,
                                  live_c[r][0]);
                        if (e->chunk == 0) live[r]++;
                        MT_EXPECT(live[r] <= rslots[r], "stage %d: %d in flight, %d slots", r,
                                  live[r], rslots[r]);
                    } else {
                        if (vs < P * V - 1) {
                            const int g = gq[r][e->chunk][gread[r][e->chunk]++];
                            MT_EXPECT(g == (vs + 1) * tagmul + e->mb,
                                      "P %d V %d M %d: stage %d B%d.%d gradient %d", P, V, M, r,
                                      e->chunk, e->mb, g);
                        }
                        MT_EXPECT(owner[r][sl] == id, "stage %d B%d.%d: slot %d held by %d", r,
                                  e->chunk, e->mb, sl, owner[r][sl]);
                        owner[r][sl] = slot_in[r][sl] = -1;
                        in_use[r]--;
                        live_c[r][e->chunk]--;
                        last_bwd[r] = vs * tagmul + e->mb;
                        if (e->chunk == 0) live[r]--;
                    }
                }
                pos[r]++;
                progress = 1;
            }
        }
    }
    for (int r = 0; r < P; r++) {
        MT_EXPECT(pos[r] == n[r], "P %d V %d M %d: stage %d stuck at event %d of %d", P, V, M, r,
                  pos[r], n[r]);
        MT_EXPECT(1 + waiting_max[r] <= mt_pp_interleaved_buffers(P, r, V, M, N),
                  "stage %d: %d gradients waited, buffers %d", r, waiting_max[r],
                  mt_pp_interleaved_buffers(P, r, V, M, N));
        int fw = 0, bw = 0;
        for (int k = 0; k < n[r]; k++)
            fw += ev[r][k].op == MT_PP_FORWARD, bw += ev[r][k].op == MT_PP_BACKWARD;
        MT_EXPECT(fw == M * V && bw == M * V, "stage %d: %d forwards, %d backwards", r, fw, bw);
        /* (the lowest free slot first: as few as the most in flight at once) */
        MT_EXPECT(in_use_max[r] == pool[r], "P %d V %d M %d: stage %d used %d of %d shared slots",
                  P, V, M, r, in_use_max[r], pool[r]);
        free(ev[r]), free(map[r]);
    }
}

static void test_interleaved_checks(void) {
    MT_EXPECT_STATUS(mt_pp_interleaved_check(1, 2, 4, 0), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_pp_interleaved_check(4, 2, 2, 0), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_pp_interleaved_check(4, 2, 6, 0), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_pp_interleaved_check(2, 0, 4, 0), MT_ERR_INVALID_ARG);
    MT_CHECK(mt_pp_interleaved_check(4, 2, 8, 0));
    /* groups: N in [P, M]; the last group's remainder 0 or at least P */
    MT_EXPECT_STATUS(mt_pp_interleaved_check(4, 2, 8, 3), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_pp_interleaved_check(4, 2, 8, 9), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_pp_interleaved_check(4, 2, 9, 4), MT_ERR_INVALID_ARG);
    MT_CHECK(mt_pp_interleaved_check(2, 2, 5, 3)); /* (remainder 2 = P) */
    MT_CHECK(mt_pp_interleaved_check(4, 2, 6, 6));
    MT_EXPECT(mt_pp_interleaved_order(4, 0, 2, 6, 0, NULL) == -1, "M 6 of P 4 ordered");
    MT_EXPECT(mt_pp_interleaved_order(4, 4, 2, 8, 0, NULL) == -1, "stage 4 of 4 ordered");
}

int main(int argc, char **argv) {
    test_orders();
    test_one_stage();
    test_interleaved_checks();
    if (argc > 1)
        test_interleaved_golden(argv[1]);
    else
        MT_EXPECT(0, "usage: test_pp GOLDEN_JSON");
    const int cases[][4] = { { 2, 2, 2, 0 },  { 2, 2, 4, 0 },  { 2, 3, 6, 0 },  { 3, 2, 3, 0 },
                             { 3, 3, 9, 0 },  { 4, 2, 4, 0 },  { 4, 2, 8, 0 },  { 4, 3, 12, 0 },
                             { 4, 4, 16, 0 }, { 8, 2, 16, 0 }, { 2, 1, 4, 0 },  { 4, 1, 8, 0 },
                             { 2, 2, 6, 3 },  { 2, 2, 5, 3 },  { 4, 2, 10, 5 }, { 4, 3, 12, 8 },
                             { 3, 2, 7, 4 },  { 2, 3, 8, 8 } };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        test_interleaved_flow(cases[k][0], cases[k][1], cases[k][2], cases[k][3]);
    return mt_test_result();
}
