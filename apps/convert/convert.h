/* mt-convert: Hugging Face (config.json + safetensors, sharded or not) <-> mt-ckpt checkpoints
 * for GPT-2, Llama and Mixtral. The name table and row layouts are in convert.c's header. */
#ifndef MT_CONVERT_H
#define MT_CONVERT_H

#include <mt/ckpt.h>

/* Mixtral experts in HF files: one tensor per expert and projection (the hub and
 * save_pretrained), or fused per layer as transformers 5 holds them in memory. */
typedef enum cv_experts {
    CV_EXPERTS_AUTO = 0,
    CV_EXPERTS_SPLIT,
    CV_EXPERTS_FUSED
} cv_experts;

/* Reads HF model directory `hf_dir` and writes it to `mt_dir` as iteration 0 (one shard); the HF
 * config and layout go into the checkpoint's args under "hf". The word embeddings (and an untied
 * output layer) get zero rows up to the vocabulary rounded up to `make_vocab_size_divisible_by`
 * (Megatron's padded vocab; 128 by default in mt-convert). Unknown HF tensors are an error
 * (GPT-2's attn.bias/masked_bias mask buffers are skipped). */
mt_status cv_hf_to_mt(const char *hf_dir, const char *mt_dir, int make_vocab_size_divisible_by);

/* Reads the latest iteration of `mt_dir` (any saved layout) and writes `hf_dir` (the vocabulary
 * padding rows, however many the embedding has, are dropped): config.json,
 * model.safetensors or model-0000K-of-0000N.safetensors shards of at most `max_shard_bytes`
 * with model.safetensors.index.json. `experts` AUTO: the layout the import came from. */
mt_status cv_mt_to_hf(const char *mt_dir, const char *hf_dir, uint64_t max_shard_bytes,
                      cv_experts experts);

#endif /* MT_CONVERT_H */
