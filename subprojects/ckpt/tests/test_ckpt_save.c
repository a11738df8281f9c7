/* unit: CRC32C check value; a single-process save round-trips tensors of every dtype and the
 * state blobs; the shard is a plain safetensors file; async saves snapshot their input; a save
 * that fails leaves latest and the previous checkpoint alone; `keep` prunes old iterations. */
#include "ckpt_test.h"

#include <sys/stat.h>

static void round_trip(const char *dir) {
    float w[6] = { 1, 2, 3, 4, 5, 6 };
    uint16_t h[3] = { 0x3f80, 0xbf80, 0x4040 };
    int64_t ids[2] = { -5, (int64_t)1 << 40 };
    int32_t sc = 42;
    mt_tensor tw = mt_tensor_2d(w, MT_F32, 2, 3, MT_DEVICE_CPU);
    mt_tensor th = mt_tensor_1d(h, MT_BF16, 3, MT_DEVICE_CPU);
    mt_tensor ti = mt_tensor_1d(ids, MT_I64, 2, MT_DEVICE_CPU);
    mt_tensor ts = mt_tensor_make(&sc, MT_I32, 0, NULL, MT_DEVICE_CPU);
    mt_ckpt_item items[] = { { "w", &tw, NULL, NULL, 0 },
                             { "h", &th, NULL, NULL, 0 },
                             { "ids", &ti, NULL, NULL, 0 },
                             { "scalar", &ts, NULL, NULL, 0 } };
    mt_ckpt_writer_config cfg = MT_CKPT_WRITER_CONFIG_INIT;
    cfg.dir = dir;
    cfg.layout.tp = 2; /* recorded only */
    mt_ckpt_writer *wr;
    MT_CHECK(mt_ckpt_writer_create(&cfg, &wr));
    mt_ckpt_state state = { "{\"lr\": 0.5, \"seq_length\": 16}", "consumed=128", "philox:7" };
    MT_CHECK(mt_ckpt_save(wr, 100, items, 4, &state));
    mt_ckpt_writer_destroy(wr);

    int64_t latest = -1;
    MT_CHECK(mt_ckpt_latest(dir, &latest));
    MT_EXPECT(latest == 100, "latest = %lld", (long long)latest);
    char p[512];
    snprintf(p, sizeof p, "%s/iter_0000100/rank_00000.safetensors", dir);
    mt_safetensors *st;
    MT_CHECK(mt_safetensors_open(p, &st));
    mt_tensor t;
    MT_CHECK(mt_safetensors_get(st, "w", &t));
    MT_EXPECT(memcmp(t.data, w, sizeof w) == 0, "shard holds w as plain safetensors");
    const char *fmt = mt_safetensors_metadata(st, "format");
    MT_EXPECT(fmt && strcmp(fmt, "mt-ckpt") == 0, "shard metadata format");
    mt_safetensors_close(st);

    mt_ckpt *c;
    MT_CHECK(mt_ckpt_open(dir, MT_CKPT_ITER_LATEST, MT_CKPT_OPEN_VERIFY, &c));
    MT_EXPECT(mt_ckpt_iteration(c) == 100 && mt_ckpt_count(c) == 4, "iteration and count");
    MT_EXPECT(mt_ckpt_saved_layout(c).tp == 2 && mt_ckpt_saved_ranks(c) == 1, "layout");
    MT_EXPECT(strcmp(mt_ckpt_args(c), "{\"lr\":0.5,\"seq_length\":16}") == 0, "args: %s",
              mt_ckpt_args(c));
    MT_EXPECT(strcmp(mt_ckpt_sampler(c), "consumed=128") == 0, "sampler");
    MT_EXPECT(strcmp(mt_ckpt_rng(c, 0), "philox:7") == 0 && !mt_ckpt_rng(c, 1), "rng");
    float w2[6];
    uint16_t h2[3];
    int64_t ids2[2];
    int32_t sc2 = 0;
    mt_tensor dw = mt_tensor_2d(w2, MT_F32, 2, 3, MT_DEVICE_CPU);
    mt_tensor dh = mt_tensor_1d(h2, MT_BF16, 3, MT_DEVICE_CPU);
    mt_tensor di = mt_tensor_1d(ids2, MT_I64, 2, MT_DEVICE_CPU);
    mt_tensor ds = mt_tensor_make(&sc2, MT_I32, 0, NULL, MT_DEVICE_CPU);
    mt_ckpt_item back[] = { { "w", &dw, NULL, NULL, 0 },
                            { "h", &dh, NULL, NULL, 0 },
                            { "ids", &di, NULL, NULL, 0 },
                            { "scalar", &ds, NULL, NULL, 0 } };
    MT_CHECK(mt_ckpt_load(c, back, 4));
    MT_EXPECT(memcmp(w, w2, sizeof w) == 0 && memcmp(h, h2, sizeof h) == 0 &&
                  memcmp(ids, ids2, sizeof ids) == 0 && sc2 == 42,
              "all dtypes round-trip");
    mt_dtype dt;
    int nd;
    int64_t shape[MT_MAX_DIMS];
    MT_CHECK(mt_ckpt_info(c, "w", &dt, &nd, shape));
    MT_EXPECT(dt == MT_F32 && nd == 2 && shape[0] == 2 && shape[1] == 3, "info");
    mt_tensor wrong = mt_tensor_2d(w2, MT_I32, 2, 3, MT_DEVICE_CPU);
    MT_EXPECT_STATUS(mt_ckpt_read(c, "w", &wrong, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_ckpt_read(c, "nope", &dw, NULL), MT_ERR_INVALID_ARG);
    mt_ckpt_close(c);
}

static void async_and_failures(const char *dir) {
    enum {
        R = 64,
        C = 48
    };
    static float a[R * C];
    int64_t off[2] = { 0, 0 }, shape[2] = { R, C };
    mt_tensor ta = mt_tensor_2d(a, MT_F32, R, C, MT_DEVICE_CPU);
    mt_ckpt_item it = { "a", &ta, NULL, NULL, 0 };
    mt_ckpt_writer_config cfg = MT_CKPT_WRITER_CONFIG_INIT;
    cfg.dir = dir;
    cfg.async = 1;
    cfg.keep = 2;
    cfg.chunk_bytes = 1000; /* several chunks, not aligned to rows */
    mt_ckpt_writer *wr;
    MT_CHECK(mt_ckpt_writer_create(&cfg, &wr));
    for (int64_t iter = 1; iter <= 3; iter++) {
        ct_fill2(a, C, off, shape, 0, iter);
        MT_CHECK(mt_ckpt_save(wr, iter, &it, 1, NULL));
        memset(a, 0xff, sizeof a); /* the snapshot, not this, must reach the disk */
    }
    MT_CHECK(mt_ckpt_wait(wr));
    /* keep = 2: iteration 1 is gone */
    char p[512];
    struct stat sb;
    snprintf(p, sizeof p, "%s/iter_0000001", dir);
    MT_EXPECT(stat(p, &sb) != 0, "iteration 1 pruned by keep=2");
    for (int64_t iter = 2; iter <= 3; iter++) {
        mt_ckpt *c;
        MT_CHECK(mt_ckpt_open(dir, iter, MT_CKPT_OPEN_VERIFY, &c));
        MT_CHECK(mt_ckpt_read(c, "a", &ta, NULL));
        ct_check2("async snapshot", a, C, off, shape, 0, iter);
        mt_ckpt_close(c);
    }
    /* a save that fails (the slice leaves the tensor) changes nothing */
    int64_t gs[2] = { R, C }, bad[2] = { 1, 0 };
    mt_ckpt_item wrong = { "a", &ta, gs, bad, 0 };
    MT_EXPECT_STATUS(mt_ckpt_save(wr, 4, &wrong, 1, NULL), MT_ERR_INVALID_ARG);
    mt_ckpt_state bad_args = { "{not json", NULL, NULL };
    MT_EXPECT_STATUS(mt_ckpt_save(wr, 4, &it, 1, &bad_args), MT_ERR_INVALID_ARG);
    mt_ckpt_writer_destroy(wr);
    int64_t latest;
    MT_CHECK(mt_ckpt_latest(dir, &latest));
    MT_EXPECT(latest == 3, "latest still 3 after failed saves (got %lld)", (long long)latest);
    snprintf(p, sizeof p, "%s/iter_0000004", dir);
    MT_EXPECT(stat(p, &sb) != 0, "no iteration 4 directory");
}

int main(void) {
    MT_EXPECT(mt_crc32c(0, "123456789", 9) == 0xE3069283u, "CRC32C check value");
    MT_EXPECT(mt_crc32c(mt_crc32c(0, "1234", 4), "56789", 5) == 0xE3069283u, "CRC32C continues");
    char d1[64], d2[64];
    round_trip(ct_tmpdir(d1));
    async_and_failures(ct_tmpdir(d2));
    ct_rmdir(d1);
    ct_rmdir(d2);
    return mt_test_result();
}
