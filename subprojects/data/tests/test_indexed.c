/* unit: .bin/.idx written by megatron-core's IndexedDatasetBuilder read exactly; our writer gives
 * byte-identical files (add_document, add_item, empty documents, modes, add_index merge); corrupt
 * and truncated indices are MT_ERR_FORMAT naming the field. */
#include "data_test.h"

static char prefix_buf[4096];
static const char *golden_prefix(const char *name) {
    snprintf(prefix_buf, sizeof prefix_buf, "%s", mt_test_golden_path(name));
    return prefix_buf;
}

static void expect_format(const unsigned char *idx, size_t len, size_t bin_len, int mm,
                          const char *says) {
    static unsigned char bin[256];
    mt_data_indexed *ds = NULL;
    mt_status st = mt_data_indexed_from_memory(idx, len, bin, bin_len, mm, &ds);
    MT_EXPECT(st == MT_ERR_FORMAT && strstr(mt_last_error(), says),
              "corrupt index -> %s '%s' (want MT_ERR_FORMAT saying '%s')", mt_status_str(st),
              mt_last_error(), says);
    mt_data_indexed_close(ds);
}

static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

int main(void) {
    /* ds_multi: int32, documents [[1,2],[3,70000,5]], [], [[7,8,9],[-4]]; modes 1,2,3,0 */
    mt_data_indexed *ds;
    MT_CHECK(mt_data_indexed_open(golden_prefix("ds_multi"), 1, &ds));
    MT_EXPECT(mt_data_indexed_dtype(ds) == MT_DATA_I32, "dtype int32");
    MT_EXPECT(mt_data_indexed_sequence_count(ds) == 4, "4 sequences");
    MT_EXPECT(mt_data_indexed_document_count(ds) == 3, "3 documents");
    const int64_t lens[] = { 2, 3, 3, 1 }, docs[] = { 0, 2, 2, 4 }, modes[] = { 1, 2, 3, 0 };
    const int64_t toks[] = { 1, 2, 3, 70000, 5, 7, 8, 9, -4 };
    int64_t got[9], n, at = 0;
    for (int i = 0; i < 4; i++) {
        MT_EXPECT(mt_data_indexed_sequence_length(ds, i) == lens[i], "length %d", i);
        MT_EXPECT(mt_data_indexed_mode(ds, i) == modes[i], "mode %d", i);
        MT_EXPECT(mt_data_indexed_sequence_pointer(ds, i) == 4 * at, "pointer %d", i);
        MT_CHECK(mt_data_indexed_get_i64(ds, i, 0, -1, got + at, &n));
        at += n;
    }
    mt_test_equal_i64("ds_multi tokens", got, toks, 9);
    for (int k = 0; k < 4; k++)
        MT_EXPECT(mt_data_indexed_document_index(ds, k) == docs[k], "doc index %d", k);
    const void *p;
    MT_CHECK(mt_data_indexed_get(ds, 1, 1, 2, &p, &n));
    MT_EXPECT(n == 2 && ((const int32_t *)p)[0] == 70000 && ((const int32_t *)p)[1] == 5,
              "slice in place");
    MT_EXPECT_STATUS(mt_data_indexed_get(ds, 1, 2, 2, &p, &n), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(mt_data_indexed_get(ds, 4, 0, -1, &p, &n), MT_ERR_INVALID_ARG);
    mt_data_indexed_close(ds);
    /* the same file opened without modes: the trailing modes array is allowed and ignored */
    MT_CHECK(mt_data_indexed_open(golden_prefix("ds_multi"), 0, &ds));
    MT_EXPECT(mt_data_indexed_mode(ds, 0) == 0, "no modes");
    mt_data_indexed_close(ds);

    /* writer: byte-identical to IndexedDatasetBuilder */
    mt_data_writer *w;
    MT_CHECK(mt_data_writer_create("test_idx_multi.bin", MT_DATA_I32, &w));
    const int64_t d0[] = { 1, 2, 3, 70000, 5 }, l0[] = { 2, 3 }, i2[] = { 7, 8, 9 }, i3[] = { -4 };
    MT_CHECK(mt_data_writer_add_document(w, d0, l0, 2));
    /* modes of add_document are 0 here; megatron's were 1, 2: patch via items instead */
    mt_data_writer_destroy(w);
    MT_CHECK(mt_data_writer_create("test_idx_multi.bin", MT_DATA_I32, &w));
    MT_CHECK(mt_data_writer_add_item(w, d0, 2, 1));
    MT_CHECK(mt_data_writer_add_item(w, d0 + 2, 3, 2));
    MT_CHECK(mt_data_writer_end_document(w));
    MT_CHECK(mt_data_writer_add_document(w, NULL, NULL, 0));
    MT_CHECK(mt_data_writer_add_item(w, i2, 3, 3));
    MT_CHECK(mt_data_writer_add_item(w, i3, 1, 0));
    MT_CHECK(mt_data_writer_end_document(w));
    MT_CHECK(mt_data_writer_finalize(w, "test_idx_multi.idx", 1));
    mt_data_writer_destroy(w);
    char ref[4200];
    snprintf(ref, sizeof ref, "%s.bin", golden_prefix("ds_multi"));
    MT_EXPECT(same_file("test_idx_multi.bin", ref), "writer .bin == megatron's");
    snprintf(ref, sizeof ref, "%s.idx", golden_prefix("ds_multi"));
    MT_EXPECT(same_file("test_idx_multi.idx", ref), "writer .idx == megatron's");

    /* add_index: merge ds_a and ds_c == megatron's ds_merged */
    MT_CHECK(mt_data_writer_create("test_idx_merged.bin", MT_DATA_U16, &w));
    MT_CHECK(mt_data_writer_add_index(w, golden_prefix("ds_a")));
    MT_CHECK(mt_data_writer_add_index(w, golden_prefix("ds_c")));
    MT_EXPECT_STATUS(mt_data_writer_add_index(w, golden_prefix("ds_multi")), MT_ERR_INVALID_ARG);
    MT_CHECK(mt_data_writer_finalize(w, "test_idx_merged.idx", 0));
    mt_data_writer_destroy(w);
    snprintf(ref, sizeof ref, "%s.bin", golden_prefix("ds_merged"));
    MT_EXPECT(same_file("test_idx_merged.bin", ref), "merged .bin == megatron's");
    snprintf(ref, sizeof ref, "%s.idx", golden_prefix("ds_merged"));
    MT_EXPECT(same_file("test_idx_merged.idx", ref), "merged .idx == megatron's");
    MT_CHECK(mt_data_writer_create("test_idx_range.bin", MT_DATA_U16, &w));
    const int64_t big[] = { 65536 };
    MT_EXPECT_STATUS(mt_data_writer_add_item(w, big, 1, 0), MT_ERR_INVALID_ARG);
    mt_data_writer_destroy(w);
    MT_EXPECT(mt_data_dtype_optimal(50257) == MT_DATA_U16 &&
                  mt_data_dtype_optimal(65500) == MT_DATA_I32,
              "optimal dtype");

    /* corrupt indices: start from ds_multi's bytes (118 B, bin 36 B) */
    size_t len;
    snprintf(ref, sizeof ref, "%s.idx", golden_prefix("ds_multi"));
    unsigned char *good = slurp(ref, &len), buf[256];
    MT_ASSERT(good && len == 118);
    MT_CHECK(mt_data_indexed_from_memory(good, len, buf, 36, 1, &ds));
    mt_data_indexed_close(ds);
    expect_format(good, 20, 36, 1, "header");
    memcpy(buf, good, len);
    buf[0] = 'X';
    expect_format(buf, len, 36, 1, "magic");
    memcpy(buf, good, len);
    buf[9] = 2;
    expect_format(buf, len, 36, 1, "version");
    memcpy(buf, good, len);
    buf[17] = 9;
    expect_format(buf, len, 36, 1, "dtype code");
    memcpy(buf, good, len);
    put64(buf + 18, (uint64_t)1 << 62);
    expect_format(buf, len, 36, 1, "sequence_count");
    memcpy(buf, good, len);
    put64(buf + 26, 0);
    expect_format(buf, len, 36, 1, "document_count");
    expect_format(good, len - 1, 36, 1, "truncated");
    memcpy(buf, good, len);
    buf[len] = 0;
    expect_format(buf, len + 1, 36, 1, "trailing");
    expect_format(good, len, 32, 1, "sequence_pointers[3]");
    memcpy(buf, good, len);
    buf[34 + 4] = 0xff; /* length[1] = 255 */
    expect_format(buf, len, 36, 1, "sequence_pointers[1]");
    memcpy(buf, good, len);
    buf[34 + 3] = 0x80; /* length[0] < 0 */
    expect_format(buf, len, 36, 1, "sequence_lengths[0]");
    memcpy(buf, good, len);
    put64(buf + 34 + 48 + 8, 3); /* doc[1] = 3 > doc[2] = 2 */
    expect_format(buf, len, 36, 1, "document_indices[2]");
    memcpy(buf, good, len);
    put64(buf + 34 + 48 + 24, 3); /* doc[-1] != S */
    expect_format(buf, len, 36, 1, "document_indices[-1]");
    memcpy(buf, good, len);
    put64(buf + 34 + 48, 1);
    expect_format(buf, len, 36, 1, "document_indices[0]");
    memcpy(buf, good, len);
    put64(buf + 34 + 16 + 8, 3); /* pointer[1] odd */
    expect_format(buf, len, 36, 1, "sequence_pointers[1]");
    free(good);
    MT_EXPECT_STATUS(mt_data_indexed_open("no/such/prefix", 0, &ds), MT_ERR_IO);
    return mt_test_result();
}
