/* unit: safetensors written by the reference library load exactly; our files round-trip and
 * follow the reference layout; malformed files are rejected with MT_ERR_FORMAT naming the fault. */
#include <mt/tensor.h>
#include <mt/testkit.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mt_status parse_str(const char *json, const void *data, size_t dlen) {
    size_t hl = strlen(json);
    unsigned char *buf = malloc(8 + hl + dlen + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, json, hl);
    if (dlen) memcpy(buf + 8 + hl, data, dlen);
    mt_safetensors *f = NULL;
    mt_status st = mt_safetensors_parse(buf, 8 + hl + dlen, &f);
    mt_safetensors_close(f);
    free(buf);
    return st;
}

static void expect_format(const char *json, size_t dlen, const char *says) {
    static const unsigned char zeros[64];
    mt_status st = parse_str(json, zeros, dlen);
    MT_EXPECT(st == MT_ERR_FORMAT && strstr(mt_last_error(), says),
              "%s -> %s '%s' (want MT_ERR_FORMAT saying '%s')", json, mt_status_str(st),
              mt_last_error(), says);
}

int main(void) {
    mt_safetensors *f;
    MT_CHECK(mt_safetensors_open(mt_test_golden_path("ref.safetensors"), &f));
    MT_EXPECT(mt_safetensors_count(f) == 7, "7 tensors");
    mt_tensor t;
    MT_CHECK(mt_safetensors_get(f, "a.weight", &t));
    MT_EXPECT(t.dtype == MT_F32 && t.ndim == 2 && t.shape[0] == 3 && t.shape[1] == 4, "a shape");
    for (int i = 0; i < 12; i++)
        MT_EXPECT(((float *)t.data)[i] == i * 0.25f, "a[%d]", i);
    MT_CHECK(mt_safetensors_get(f, "b.bias", &t));
    MT_EXPECT(t.dtype == MT_BF16 && mt_bf16_to_f32(((uint16_t *)t.data)[2]) == 3.25f, "bf16");
    MT_CHECK(mt_safetensors_get(f, "c.ids", &t));
    MT_EXPECT(((int64_t *)t.data)[3] == (int64_t)1 << 40, "i64 value");
    MT_CHECK(mt_safetensors_get(f, "d.half", &t));
    MT_EXPECT(mt_f16_to_f32(((uint16_t *)t.data)[1]) == -1.0f, "f16 value");
    MT_CHECK(mt_safetensors_get(f, "e.empty", &t));
    MT_EXPECT(t.ndim == 2 && mt_tensor_numel(&t) == 0, "empty tensor");
    MT_CHECK(mt_safetensors_get(f, "f.scalar", &t));
    MT_EXPECT(t.ndim == 0 && ((int32_t *)t.data)[0] == 7, "scalar");
    MT_EXPECT_STATUS(mt_safetensors_get(f, "g.double", &t), MT_ERR_UNSUPPORTED);
    MT_EXPECT_STATUS(mt_safetensors_get(f, "nope", &t), MT_ERR_INVALID_ARG);
    const char *fmt = mt_safetensors_metadata(f, "format");
    MT_EXPECT(fmt && strcmp(fmt, "pt") == 0, "metadata format");
    MT_EXPECT(mt_safetensors_metadata(f, "missing") == NULL, "missing metadata");
    uint64_t off, nb;
    MT_CHECK(mt_safetensors_extent(f, "a.weight", &off, &nb));
    MT_EXPECT(nb == 48 && off % 8 == 0, "extent of a.weight");

    /* round trip: save everything we can read, reload, compare bytes */
    const char *names[] = { "a.weight", "b.bias", "c.ids", "d.half", "e.empty", "f.scalar" };
    mt_tensor ts[6];
    mt_safetensors_item items[6];
    for (int i = 0; i < 6; i++) {
        MT_CHECK(mt_safetensors_get(f, names[i], &ts[i]));
        items[i].name = names[i];
        items[i].tensor = &ts[i];
    }
    const char *meta[] = { "format", "pt", "iteration", "100" };
    MT_CHECK(mt_safetensors_save("test_st_roundtrip.safetensors", items, 6, meta, 2));
    mt_safetensors *g;
    MT_CHECK(mt_safetensors_open("test_st_roundtrip.safetensors", &g));
    for (int i = 0; i < 6; i++) {
        mt_tensor u;
        MT_CHECK(mt_safetensors_get(g, names[i], &u));
        MT_EXPECT(u.dtype == ts[i].dtype && mt_tensor_same_shape(&u, &ts[i]) &&
                      memcmp(u.data, ts[i].data, mt_tensor_nbytes(&u)) == 0,
                  "round trip of %s", names[i]);
        MT_CHECK(mt_safetensors_extent(g, names[i], &off, &nb));
        MT_EXPECT(off % mt_dtype_size(u.dtype) == 0, "%s aligned to its element size", names[i]);
    }
    MT_EXPECT(strcmp(mt_safetensors_metadata(g, "iteration"), "100") == 0, "metadata kept");
    MT_EXPECT(strcmp(mt_safetensors_name(g, 0), "c.ids") == 0, "largest dtype first: %s",
              mt_safetensors_name(g, 0));
    mt_safetensors_close(g);
    mt_safetensors_close(f);
    remove("test_st_roundtrip.safetensors");

    /* malformed */
    MT_EXPECT_STATUS(mt_safetensors_parse("\x02\0\0\0", 4, &g), MT_ERR_FORMAT);
    expect_format("[1,2]", 0, "does not start with '{'");
    expect_format("{\"a\":", 0, "bad header JSON");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                  16, "duplicate");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                  12, "overlap");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
                  20, "gap");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
                  "needs 12");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
                  "truncated");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
                  "trailing bytes");
    expect_format("{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                  "unknown dtype");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
                  "non-negative");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
                  "begin <= end");
    expect_format("{\"__metadata__\":{\"k\":1}}", 0, "not a string");
    /* header length larger than the file */
    unsigned char big[16] = { 0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}' };
    MT_EXPECT_STATUS(mt_safetensors_parse(big, 10, &g), MT_ERR_FORMAT);
    MT_EXPECT(strstr(mt_last_error(), "truncated") != NULL, "%s", mt_last_error());
    MT_EXPECT(parse_str("{}", NULL, 0) == MT_OK, "empty file with {} header is valid");
    MT_EXPECT_STATUS(mt_safetensors_open("/nonexistent.safetensors", &g), MT_ERR_IO);
    return mt_test_result();
}
