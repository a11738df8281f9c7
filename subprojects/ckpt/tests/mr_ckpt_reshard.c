/* multirank: 4 processes save an (8,12) weight as 4 column blocks, a bias replicated on every
 * rank and an Adam moment split 10,10,10,7 (DP=4), collectively through mt-comm; then each rank
 * loads its row block of a 2-way split and its half of the moment (DP=2) and checks every value. */
#include "ckpt_test.h"

#include <mt/comm.h>

enum {
    R = 8,
    C = 12,
    N = 37
};

int main(void) {
    mt_test_require_ranks(4);
    mt_comm *world;
    MT_CHECK(mt_comm_world_create(NULL, &world));
    int r = mt_comm_rank(world), n = mt_comm_size(world);
    if (n != 4) mt_test_skip("needs exactly 4 ranks");
    char dir[64] = "/tmp/mt-ckpt-mr-XXXXXX";
    if (r == 0 && !mkdtemp(dir)) return 1;
    mt_tensor dt = mt_tensor_1d(dir, MT_U8, sizeof dir, MT_DEVICE_CPU);
    MT_CHECK(mt_comm_broadcast(world, &dt, NULL, 0, NULL));
    mt_ckpt_group g;
    MT_CHECK(mt_ckpt_group_comm(&g, world));

    float w[R * 3], b[C], m[10];
    int64_t gw[2] = { R, C }, ow[2] = { 0, 3 * r }, lw[2] = { R, 3 }, zero[2] = { 0, 0 },
            lb[2] = { 1, C };
    ct_fill2(w, C, ow, lw, 1, 9);
    ct_fill2(b, C, zero, lb, 2, 9);
    int64_t gm = N, om = 10 * r, lm = r < 3 ? 10 : 7, om2[2] = { 0, om }, lm2[2] = { 1, lm };
    ct_fill2(m, N, om2, lm2, 3, 9);
    mt_tensor tw = mt_tensor_2d(w, MT_F32, R, 3, MT_DEVICE_CPU);
    mt_tensor tb = mt_tensor_1d(b, MT_F32, C, MT_DEVICE_CPU);
    mt_tensor tm = mt_tensor_1d(m, MT_F32, lm, MT_DEVICE_CPU);
    mt_ckpt_item items[] = { { "w", &tw, gw, ow, 0 },
                             { "b", &tb, NULL, NULL, r },
                             { "exp_avg", &tm, &gm, &om, 0 } };
    mt_ckpt_writer_config cfg = MT_CKPT_WRITER_CONFIG_INIT;
    cfg.dir = dir;
    cfg.group = &g;
    cfg.async = 1;
    cfg.chunk_bytes = 40;
    mt_ckpt_writer *wr;
    MT_CHECK(mt_ckpt_writer_create(&cfg, &wr));
    MT_CHECK(mt_ckpt_save(wr, 9, items, 3, NULL));
    MT_CHECK(mt_ckpt_wait(wr));
    mt_ckpt_writer_destroy(wr);

    mt_ckpt *c;
    MT_CHECK(mt_ckpt_open(dir, MT_CKPT_ITER_LATEST, 0, &c));
    MT_EXPECT(mt_ckpt_saved_ranks(c) == 4, "saved by 4 ranks");
    float got[R * C];
    int64_t off[2] = { 4 * (r % 2), 0 }, len[2] = { 4, C };
    mt_tensor t = mt_tensor_2d(got, MT_F32, 4, C, MT_DEVICE_CPU);
    MT_CHECK(mt_ckpt_read(c, "w", &t, off));
    ct_check2("row block of w", got, C, off, len, 1, 9);
    int64_t mo = r % 2 ? 19 : 0, ml = r % 2 ? 18 : 19, mo2[2] = { 0, mo }, ml2[2] = { 1, ml };
    mt_tensor tm2 = mt_tensor_1d(got, MT_F32, ml, MT_DEVICE_CPU);
    MT_CHECK(mt_ckpt_read(c, "exp_avg", &tm2, &mo));
    ct_check2("DP=2 half of exp_avg", got, N, mo2, ml2, 3, 9);
    mt_ckpt_close(c);
    MT_CHECK(mt_comm_barrier(world));
    if (r == 0) ct_rmdir(dir);
    int rc = mt_test_result();
    mt_comm_destroy(world);
    return rc;
}
