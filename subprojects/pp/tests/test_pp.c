/* unit: 1F1B's order (Megatron's forward_backward_pipelining_without_interleaving: the warm-up
 * forwards min(P - r - 1, M), one forward and one backward in turn, the remaining backwards)
 * against tables written from that definition; the slots it needs; without a pipeline group a
 * stage runs each micro-batch's forward then backward in slot 0; bad stages are refused. */
#include <mt/pp.h>
#include <mt/testkit.h>

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

int main(void) {
    test_orders();
    test_one_stage();
    return mt_test_result();
}
