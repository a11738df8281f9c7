/* unit: never load garbage. A flipped byte, a truncated or missing shard, an index from an
 * unknown version, a dtype or coverage that disagrees, each give a clear error naming the file
 * and tensor; MT_CKPT_OPEN_FALLBACK then finds the previous good iteration. */
#include "ckpt_test.h"

#include <jansson.h>
#include <sys/stat.h>

enum {
    R = 16,
    C = 10
};
static char dir[64];
static float a[R * C];

static void save(int64_t iter) {
    int64_t off[2] = { 0, 0 }, shape[2] = { R, C };
    ct_fill2(a, C, off, shape, 0, iter);
    mt_tensor t = mt_tensor_2d(a, MT_F32, R, C, MT_DEVICE_CPU);
    mt_ckpt_item it = { "layer.weight", &t, NULL, NULL, 0 };
    mt_ckpt_writer_config cfg = MT_CKPT_WRITER_CONFIG_INIT;
    cfg.dir = dir;
    cfg.fsync = 0;
    cfg.chunk_bytes = 256;
    mt_ckpt_writer *w;
    MT_CHECK(mt_ckpt_writer_create(&cfg, &w));
    MT_CHECK(mt_ckpt_save(w, iter, &it, 1, NULL));
    mt_ckpt_writer_destroy(w);
}

static const char *path(int64_t iter, const char *file) {
    static char p[256];
    snprintf(p, sizeof p, "%s/iter_%07lld/%s", dir, (long long)iter, file);
    return p;
}

/* Replaces the first `from` in a file by `to`. */
static void edit(const char *p, const char *from, const char *to) {
    FILE *f = fopen(p, "rb");
    static char buf[1 << 16], out[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *s = strstr(buf, from);
    if (!s) mt_die(__FILE__, __LINE__, "'%s' not in %s", from, p);
    snprintf(out, sizeof out, "%.*s%s%s", (int)(s - buf), buf, to, s + strlen(from));
    f = fopen(p, "wb");
    fwrite(out, 1, strlen(out), f);
    fclose(f);
}

/* Expects `st` with an error message containing each of the words. */
static void expect_err(mt_status st, mt_status want, const char *w1, const char *w2) {
    const char *e = mt_last_error();
    MT_EXPECT(st == want && strstr(e, w1) && (!w2 || strstr(e, w2)),
              "got %s '%s', want %s mentioning '%s' and '%s'", mt_status_str(st), e,
              mt_status_str(want), w1, w2 ? w2 : "");
}

static mt_status read_all(int64_t iter, int flags) {
    mt_ckpt *c;
    mt_status st = mt_ckpt_open(dir, iter, flags, &c);
    if (st != MT_OK) return st;
    mt_tensor t = mt_tensor_2d(a, MT_F32, R, C, MT_DEVICE_CPU);
    st = mt_ckpt_read(c, "layer.weight", &t, NULL);
    mt_ckpt_close(c);
    return st;
}

int main(void) {
    ct_tmpdir(dir);
    save(1);
    save(2);
    /* a flipped byte in the data: the read names file, chunk and tensor */
    const char *shard = path(2, "rank_00000.safetensors");
    FILE *f = fopen(shard, "r+b");
    fseek(f, -300, SEEK_END);
    int ch = fgetc(f);
    fseek(f, -300, SEEK_END);
    fputc(ch ^ 0x10, f);
    fclose(f);
    expect_err(read_all(2, 0), MT_ERR_FORMAT, "iter_0000002/rank_00000.safetensors: checksum",
               "'layer.weight'");
    expect_err(read_all(2, MT_CKPT_OPEN_VERIFY), MT_ERR_FORMAT, "checksum mismatch", NULL);
    mt_ckpt *c;
    MT_CHECK(
        mt_ckpt_open(dir, MT_CKPT_ITER_LATEST, MT_CKPT_OPEN_VERIFY | MT_CKPT_OPEN_FALLBACK, &c));
    MT_EXPECT(mt_ckpt_iteration(c) == 1, "fell back to iteration 1");
    mt_tensor t = mt_tensor_2d(a, MT_F32, R, C, MT_DEVICE_CPU);
    MT_CHECK(mt_ckpt_read(c, "layer.weight", &t, NULL));
    int64_t off[2] = { 0, 0 }, shape[2] = { R, C };
    ct_check2("fallback data", a, C, off, shape, 0, 1);
    mt_ckpt_close(c);

    /* truncated and missing shards are found at open */
    save(3);
    MT_EXPECT(truncate(path(3, "rank_00000.safetensors"), 200) == 0, "truncate");
    expect_err(read_all(3, 0), MT_ERR_FORMAT, "iter_0000003/rank_00000.safetensors", "truncated");
    save(4);
    MT_EXPECT(unlink(path(4, "rank_00000.safetensors")) == 0, "unlink");
    expect_err(read_all(4, 0), MT_ERR_IO, "rank_00000.safetensors: missing shard", NULL);
    /* index problems */
    save(5);
    edit(path(5, "index.json"), "\"version\": 1", "\"version\": 99");
    expect_err(read_all(5, 0), MT_ERR_FORMAT, "iter_0000005/index.json",
               "unknown index version 99");
    save(6);
    edit(path(6, "index.json"), "\"F32\"", "\"I32\"");
    mt_ckpt *c6;
    MT_CHECK(mt_ckpt_open(dir, 6, 0, &c6));
    mt_tensor ti = mt_tensor_2d(a, MT_I32, R, C, MT_DEVICE_CPU);
    expect_err(mt_ckpt_read(c6, "layer.weight", &ti, NULL), MT_ERR_FORMAT, "rank_00000.safetensors",
               "'layer.weight' is f32[16,10]");
    mt_ckpt_close(c6);
    save(7);
    json_t *ix = json_load_file(path(7, "index.json"), 0, NULL); /* lengths miss a row */
    json_t *len = json_object_get(
        json_array_get(
            json_object_get(json_object_get(json_object_get(ix, "tensors"), "layer.weight"),
                            "slices"),
            0),
        "lengths");
    json_array_set_new(len, 0, json_integer(R - 1));
    json_dump_file(ix, path(7, "index.json"), 0);
    json_decref(ix);
    expect_err(read_all(7, 0), MT_ERR_FORMAT, "'layer.weight'", "slices hold");
    save(8);
    edit(path(8, "index.json"), "\"format\": \"mt-ckpt\"", "\"format\": \"other\"");
    expect_err(read_all(8, 0), MT_ERR_FORMAT, "format is 'other'", NULL);
    /* fallback skips every broken one */
    MT_CHECK(
        mt_ckpt_open(dir, MT_CKPT_ITER_LATEST, MT_CKPT_OPEN_FALLBACK | MT_CKPT_OPEN_VERIFY, &c));
    MT_EXPECT(mt_ckpt_iteration(c) == 1, "fallback from 8 lands on 1 (got %lld)",
              (long long)mt_ckpt_iteration(c));
    mt_ckpt_close(c);
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, MT_CKPT_LATEST);
    unlink(p);
    expect_err(read_all(MT_CKPT_ITER_LATEST, 0), MT_ERR_IO, MT_CKPT_LATEST, NULL);
    ct_rmdir(dir);
    return mt_test_result();
}
