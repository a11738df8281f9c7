/* unit: buffer layout (reverse registration order, 64-element padding, buckets padded for DP),
 * Megatron's no-weight-decay rule, norm exclusion of shared and TP-replicated params, views and
 * argument checks. Expected offsets are worked out by hand in the comments. */
#include <mt/optim.h>
#include <mt/testkit.h>

#include <string.h>

int main(void) {
    mt_optim_buffer_config cfg = MT_OPTIM_BUFFER_CONFIG_INIT;
    cfg.bucket_numel = 100;
    cfg.dp_size = 2; /* buckets padded to multiples of 2*2*64 = 256 */
    cfg.tp_rank = 1;
    mt_optim_buffer *b;
    MT_CHECK(mt_optim_buffer_create(&cfg, &b));
    const int64_t emb[2] = { 10, 4 }, fc[2] = { 4, 8 }, v4[1] = { 4 }, v8[1] = { 8 };
    MT_CHECK(mt_optim_buffer_add(b, "embedding.weight", 2, emb, 0, NULL));
    MT_CHECK(
        mt_optim_buffer_add(b, "layers.0.norm.weight", 1, v4, MT_OPTIM_PARAM_TP_REPLICATED, NULL));
    MT_CHECK(mt_optim_buffer_add(b, "layers.0.fc.weight", 2, fc, 0, NULL));
    MT_CHECK(mt_optim_buffer_add(b, "layers.0.fc.bias", 1, v8, 0, NULL));
    int out_idx;
    MT_CHECK(mt_optim_buffer_add(b, "output.weight", 2, emb, MT_OPTIM_PARAM_SHARED, &out_idx));
    MT_EXPECT(out_idx == 4, "index %d", out_idx);
    MT_EXPECT_STATUS(mt_optim_buffer_add(b, "output.weight", 2, emb, 0, NULL), MT_ERR_INVALID_ARG);
    MT_EXPECT_STATUS(
        mt_optim_buffer_add(b, "x", 2, emb, MT_OPTIM_PARAM_DECAY | MT_OPTIM_PARAM_NO_DECAY, NULL),
        MT_ERR_INVALID_ARG);
    size_t bytes;
    MT_CHECK(mt_optim_buffer_finalize(b, &bytes));
    MT_EXPECT_STATUS(mt_optim_buffer_add(b, "late", 1, v4, 0, NULL), MT_ERR_INVALID_ARG);

    /* reverse order: output@0 (->64), fc.bias@64 (->128 >= 100: bucket [0,256)), fc.weight@256,
     * norm@320 (->384: bucket [256,512)), embedding@512 (last: bucket [512,768)) */
    const int64_t want_off[5] = { 512, 320, 256, 64, 0 };
    const int want_bucket[5] = { 2, 1, 1, 0, 0 }, want_decay[5] = { 1, 0, 1, 0, 1 };
    const int want_norm[5] = { 1, 0, 1, 1, 0 };
    for (int i = 0; i < 5; i++) {
        mt_optim_param_info in;
        MT_CHECK(mt_optim_buffer_info(b, i, &in));
        MT_EXPECT(in.offset == want_off[i] && in.bucket == want_bucket[i], "%s at %lld bucket %d",
                  in.name, (long long)in.offset, in.bucket);
        MT_EXPECT(in.decay == want_decay[i] && in.in_norm == want_norm[i], "%s decay %d norm %d",
                  in.name, in.decay, in.in_norm);
    }
    MT_EXPECT(mt_optim_buffer_num_buckets(b) == 3 && mt_optim_buffer_numel(b) == 768,
              "%d buckets, %lld elements", mt_optim_buffer_num_buckets(b),
              (long long)mt_optim_buffer_numel(b));
    /* params 768*4, grads 768*4, two one-word masks, each rounded to 256 bytes */
    MT_EXPECT(bytes == 3072 + 3072 + 256 + 256, "bytes %zu", bytes);

    mt_arena *ar;
    MT_CHECK(mt_arena_create(MT_DEVICE_CPU, bytes, &ar));
    MT_CHECK(mt_optim_buffer_bind(b, ar));
    mt_tensor all, p, g;
    MT_CHECK(mt_optim_buffer_params(b, &all));
    int idx;
    MT_CHECK(mt_optim_buffer_find(b, "layers.0.fc.weight", &idx));
    MT_EXPECT_STATUS(mt_optim_buffer_find(b, "nope", &idx), MT_ERR_INVALID_ARG);
    MT_CHECK(mt_optim_buffer_find(b, "layers.0.fc.weight", &idx));
    MT_CHECK(mt_optim_buffer_param(b, idx, &p));
    MT_CHECK(mt_optim_buffer_grad(b, idx, &g));
    MT_EXPECT(p.data == (float *)all.data + 256 && p.ndim == 2 && p.shape[1] == 8,
              "param view of fc.weight");
    ((float *)g.data)[3] = 5.0f;
    mt_optim_bucket bk;
    MT_CHECK(mt_optim_buffer_bucket(b, 1, &bk));
    MT_EXPECT(bk.offset == 256 && bk.numel == 256 && ((float *)bk.grads.data)[3] == 5.0f,
              "bucket 1 view");
    MT_CHECK(mt_optim_buffer_zero_grad(b, NULL));
    MT_EXPECT(((float *)g.data)[3] == 0.0f, "zero_grad");
    MT_EXPECT_STATUS(mt_optim_buffer_bucket(b, 3, &bk), MT_ERR_INVALID_ARG);
    mt_optim_buffer_destroy(b);
    mt_arena_destroy(ar);

    /* no bucket size: one bucket; bf16 params */
    cfg = (mt_optim_buffer_config)MT_OPTIM_BUFFER_CONFIG_INIT;
    cfg.param_dtype = MT_BF16;
    MT_CHECK(mt_optim_buffer_create(&cfg, &b));
    for (int i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof name, "w%d", i);
        MT_CHECK(mt_optim_buffer_add(b, name, 2, emb, 0, NULL));
    }
    MT_CHECK(mt_optim_buffer_finalize(b, &bytes));
    MT_EXPECT(mt_optim_buffer_num_buckets(b) == 1 && mt_optim_buffer_numel(b) == 256,
              "one bucket of 256");
    mt_optim_buffer_destroy(b);
    cfg.param_dtype = MT_I32;
    MT_EXPECT_STATUS(mt_optim_buffer_create(&cfg, &b), MT_ERR_UNSUPPORTED);
    return mt_test_result();
}
