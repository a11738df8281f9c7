/* unit: any saved layout loads into any other. Simulated ranks (threads sharing a group) save
 * (a) an (8,12) weight as 4 column blocks with a bias replicated on every rank, (b) an Adam
 * moment split unevenly over DP=4; one writer saves (c) a (10,7) tensor as 3 boxes of rows (as
 * a tensor-parallel rank saves its q, k and v rows of linear_qkv). They load as 2 row blocks,
 * odd boxes, 3 -> 3 other uneven splits and DP=2, with checksum chunks smaller than a row. */
#include "ckpt_test.h"

enum {
    R = 8,
    C = 12,
    N = 37
};
static const char *dir;

static void save_rank(const mt_ckpt_group *g, void *arg) {
    (void)arg;
    int r = g->rank;
    float w[R * 3], b[C], m[10];
    int64_t gw[2] = { R, C }, ow[2] = { 0, 3 * r }, lw[2] = { R, 3 };
    ct_fill2(w, C, ow, lw, 1, 5);
    int64_t zero[2] = { 0, 0 }, lb[2] = { 1, C };
    ct_fill2(b, C, zero, lb, 2, 5);
    int64_t gm = N, om = 10 * r, lm = r < 3 ? 10 : 7; /* 10,10,10,7 */
    int64_t om2[2] = { 0, om }, lm2[2] = { 1, lm };
    ct_fill2(m, N, om2, lm2, 3, 5);
    mt_tensor tw = mt_tensor_2d(w, MT_F32, R, 3, MT_DEVICE_CPU);
    mt_tensor tb = mt_tensor_1d(b, MT_F32, C, MT_DEVICE_CPU);
    mt_tensor tm = mt_tensor_1d(m, MT_F32, lm, MT_DEVICE_CPU);
    mt_ckpt_item items[] = { { "decoder.layers.0.mlp.linear_fc1.weight", &tw, gw, ow, 0 },
                             { "decoder.layers.0.mlp.linear_fc1.bias", &tb, NULL, NULL, r },
                             { "optimizer.state.exp_avg", &tm, &gm, &om, 0 } };
    mt_ckpt_writer_config cfg = MT_CKPT_WRITER_CONFIG_INIT;
    cfg.dir = dir;
    cfg.group = g;
    cfg.layout.tp = 4;
    cfg.chunk_bytes = 40;
    cfg.async = r % 2; /* mixed: the protocol does not depend on it */
    mt_ckpt_writer *wr;
    MT_CHECK(mt_ckpt_writer_create(&cfg, &wr));
    char rng[32];
    snprintf(rng, sizeof rng, "rng of rank %d", r);
    mt_ckpt_state st = { r == 0 ? "{\"tp\": 4}" : NULL, "s", rng };
    MT_CHECK(mt_ckpt_save(wr, 5, items, 3, &st));
    MT_CHECK(mt_ckpt_wait(wr));
    mt_ckpt_writer_destroy(wr);
}

static void load_box(mt_ckpt *c, const char *name, int64_t cols, int64_t r0, int64_t c0, int64_t nr,
                     int64_t nc, int tag, int ndim) {
    float buf[R * C * 2];
    int64_t off2[2] = { r0, c0 }, len2[2] = { nr, nc };
    mt_tensor t = ndim == 2 ? mt_tensor_2d(buf, MT_F32, nr, nc, MT_DEVICE_CPU)
                            : mt_tensor_1d(buf, MT_F32, nc, MT_DEVICE_CPU);
    MT_CHECK(mt_ckpt_read(c, name, &t, ndim == 2 ? off2 : &off2[1]));
    char what[160];
    snprintf(what, sizeof what, "%s box [%lld:+%lld, %lld:+%lld]", name, (long long)r0,
             (long long)nr, (long long)c0, (long long)nc);
    ct_check2(what, buf, cols, off2, len2, tag, 5);
}

int main(void) {
    char d1[64], d2[64];
    dir = ct_tmpdir(d1);
    tg_run(4, save_rank, NULL);
    mt_ckpt *c;
    MT_CHECK(mt_ckpt_open(dir, MT_CKPT_ITER_LATEST, MT_CKPT_OPEN_VERIFY, &c));
    MT_EXPECT(mt_ckpt_saved_ranks(c) == 4 && mt_ckpt_saved_layout(c).tp == 4, "4 writers");
    MT_EXPECT(strcmp(mt_ckpt_rng(c, 3), "rng of rank 3") == 0, "per-rank rng");
    MT_EXPECT(strcmp(mt_ckpt_args(c), "{\"tp\":4}") == 0, "rank 0's args");
    const char *w = "decoder.layers.0.mlp.linear_fc1.weight";
    for (int k = 0; k < 2; k++)
        load_box(c, w, C, 4 * k, 0, 4, C, 1, 2); /* 4 cols -> 2 rows */
    load_box(c, w, C, 3, 2, 4, 9, 1, 2);         /* odd box */
    load_box(c, w, C, 7, 11, 1, 1, 1, 2);        /* one element */
    load_box(c, w, C, 0, 0, R, C, 1, 2);         /* whole */
    load_box(c, "decoder.layers.0.mlp.linear_fc1.bias", C, 0, 0, 1, C, 2, 1);
    load_box(c, "optimizer.state.exp_avg", N, 0, 0, 1, 19, 3, 1); /* DP=4 -> DP=2 */
    load_box(c, "optimizer.state.exp_avg", N, 0, 19, 1, 18, 3, 1);
    mt_ckpt_close(c);
    /* the replicated bias was written once, by rank 0 */
    char p[256];
    snprintf(p, sizeof p, "%s/iter_0000005/rank_00001.safetensors", dir);
    mt_safetensors *st;
    MT_CHECK(mt_safetensors_open(p, &st));
    mt_tensor t;
    MT_EXPECT(mt_safetensors_get(st, "decoder.layers.0.mlp.linear_fc1.bias", &t) != MT_OK,
              "rank 1 did not write its replica of the bias");
    mt_safetensors_close(st);

    /* one writer, 3 boxes of rows (saved in reverse order), read back as 3 other uneven row
     * blocks and 3 uneven column blocks */
    enum {
        R2 = 10,
        C2 = 7
    };
    float v[R2 * C2];
    int64_t zero[2] = { 0, 0 }, full[2] = { R2, C2 };
    ct_fill2(v, C2, zero, full, 4, 5);
    int64_t saved[] = { 0, 2, 3, 10 }, off[3][2];
    mt_tensor tv[3];
    mt_ckpt_item it[3];
    for (int k = 0; k < 3; k++) {
        off[k][0] = saved[2 - k], off[k][1] = 0;
        tv[k] = mt_tensor_2d(v + saved[2 - k] * C2, MT_F32, saved[3 - k] - saved[2 - k], C2,
                             MT_DEVICE_CPU);
        it[k] = (mt_ckpt_item){ "embedding.word_embeddings.weight", &tv[k], full, off[k], 0 };
    }
    mt_ckpt_writer_config cfg = MT_CKPT_WRITER_CONFIG_INIT;
    cfg.dir = ct_tmpdir(d2);
    cfg.chunk_bytes = 24;
    mt_ckpt_writer *wr;
    MT_CHECK(mt_ckpt_writer_create(&cfg, &wr));
    MT_CHECK(mt_ckpt_save(wr, 5, it, 3, NULL));
    mt_ckpt_writer_destroy(wr);
    MT_CHECK(mt_ckpt_open(d2, 5, MT_CKPT_OPEN_VERIFY, &c));
    int64_t rows[] = { 0, 4, 7, 10 }, cols[] = { 0, 3, 5, 7 };
    for (int k = 0; k < 3; k++) {
        load_box(c, it[0].name, C2, rows[k], 0, rows[k + 1] - rows[k], C2, 4, 2);
        load_box(c, it[0].name, C2, 0, cols[k], R2, cols[k + 1] - cols[k], 4, 2);
    }
    load_box(c, it[0].name, C2, 0, 0, R2, C2, 4, 2); /* whole */
    mt_ckpt_close(c);
    if (getenv("MT_CKPT_KEEP")) /* golden/check_shards.py reads it with Python */
        printf("kept %s %s\n", d1, d2);
    else {
        ct_rmdir(d1);
        ct_rmdir(d2);
    }
    return mt_test_result();
}
