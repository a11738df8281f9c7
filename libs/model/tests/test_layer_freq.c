/* unit: mt_model_moe_layer_freq reads Megatron's --moe-layer-freq as megatron-core does (an int N:
 * layer l is MoE where l % N == 0; a string: Python's eval of a list expression). The expected
 * patterns below are Python's eval of the same expressions (1: MoE), and bad ones are refused
 * with Megatron's message for a wrong length. */
#include <mt/model.h>
#include <mt/testkit.h>

#include <string.h>

static void expect_pattern(const char *freq, int layers, const char *want) {
    mt_model_config c = MT_MODEL_CONFIG_INIT;
    c.num_layers = layers;
    memset(c.moe_dense_layer, 7, sizeof c.moe_dense_layer); /* (stale values: all reset) */
    MT_CHECK(mt_model_moe_layer_freq(&c, freq));
    char got[MT_MODEL_MAX_LAYERS + 1];
    int extra = 0;
    for (int l = 0; l < layers; l++)
        got[l] = c.moe_dense_layer[l] ? '0' : '1';
    got[layers] = '\0';
    for (int l = layers; l < MT_MODEL_MAX_LAYERS; l++)
        extra |= c.moe_dense_layer[l];
    MT_EXPECT(strcmp(got, want) == 0 && !extra, "%s over %d layers: %s, want %s", freq, layers, got,
              want);
}

static void expect_refused(const char *freq, int layers, const char *msg) {
    mt_model_config c = MT_MODEL_CONFIG_INIT;
    c.num_layers = layers;
    MT_EXPECT(mt_model_moe_layer_freq(&c, freq) == MT_ERR_INVALID_ARG, "%s accepted", freq);
    MT_EXPECT(strstr(mt_last_error(), msg) != NULL, "%s: '%s', want '%s'", freq, mt_last_error(),
              msg);
    mt_error_clear();
}

int main(void) {
    expect_pattern("([1]*3+[0]*1)*3", 12, "111011101110"); /* (Megatron's help example) */
    expect_pattern("([0]*1+[1]*3)*2", 8, "01110111");
    expect_pattern("[0]*3+[1]*5", 8, "00011111"); /* (DeepSeek's first dense layers) */
    expect_pattern("[1, 0]*2+([0]+[1]*2)*0+[1]", 5, "10101");
    expect_pattern("2", 5, "10101");
    expect_pattern("3", 7, "1001001");
    expect_pattern("1", 4, "1111");
    expect_refused("[1]*3", 4, "Invalid length of moe_layer_pattern: 3, expected 4");
    expect_refused("[1,2]", 2, "not a list expression of 0s and 1s");
    expect_refused("[1,0", 2, "not a list expression of 0s and 1s");
    expect_refused("[1]+", 1, "not a list expression of 0s and 1s");
    expect_refused("0", 4, "an int of at least 1");
    expect_refused("two", 4, "an int of at least 1");
    /* a model config with a dense layer but no experts is refused */
    mt_model_config c = MT_MODEL_CONFIG_INIT;
    c.num_layers = 2, c.hidden_size = 64, c.num_attention_heads = 4, c.seq_length = 16;
    c.max_position_embeddings = 16, c.vocab_size = 100;
    MT_CHECK(mt_model_moe_layer_freq(&c, "2"));
    MT_EXPECT(mt_model_config_finalize(&c) == MT_ERR_INVALID_ARG, "a pattern without experts");
    mt_error_clear();
    return mt_test_result();
}
