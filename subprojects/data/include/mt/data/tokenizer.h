/* Tokenizers of tools/preprocess_data.py: GPT2BPETokenizer (byte-level BPE, identical to
 * tiktoken's gpt2, <|endoftext|> = eod as a special token), NullTokenizer (ids as text), and
 * Llama2Tokenizer / GPTSentencePieceTokenizer (SentencePiece models, as sentencepiece encodes). */
#ifndef MT_DATA_TOKENIZER_H
#define MT_DATA_TOKENIZER_H

#include <mt/core.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mt_data_tokenizer mt_data_tokenizer; /* encode is not thread-safe (it caches) */

/* GPT-2 BPE from encoder.json (`vocab_file`) and vocab.bpe (`merge_file`). */
MT_API mt_status mt_data_tokenizer_gpt2_create(const char *vocab_file, const char *merge_file,
                                               mt_data_tokenizer **out);
/* NullTokenizer: text is space-separated integers; vocab_size() = vocab_size + 1, eod = vocab_size. */
MT_API mt_status mt_data_tokenizer_null_create(int64_t vocab_size, mt_data_tokenizer **out);
/* A SentencePiece model file (unigram or BPE): encode is sentencepiece's encode(text) (its
 * normalizer, user-defined symbols, byte fallback), with the model's bos first when add_bos
 * (Megatron's Llama2Tokenizer.tokenize; GPTSentencePieceTokenizer: 0); vocab_size() is the piece
 * count, eod the eos id; decode is sentencepiece's decode of valid pieces. allow_special is
 * ignored. */
MT_API mt_status mt_data_tokenizer_sentencepiece_create(const char *model_file, int add_bos,
                                                        mt_data_tokenizer **out);
/* A Hugging Face byte-level BPE tokenizer (a directory with tokenizer.json and its configs, or
 * that file): encode is transformers' AutoTokenizer(text).input_ids (Megatron's
 * HuggingFaceTokenizer.tokenize: added tokens split out, GPT-2's or Llama-3's pre-tokenizer,
 * the merges, the post-processor's special tokens); vocab_size() and eod as
 * mt_data_hf_tokenizer_info. Normalizers and other pre-tokenizers or models are
 * MT_ERR_UNSUPPORTED, named. allow_special is ignored (added tokens always match). */
MT_API mt_status mt_data_tokenizer_hf_create(const char *path, mt_data_tokenizer **out);
/* Path of a shipped GPT-2 tokenizer file ("encoder.json", "vocab.bpe") into buf: under
 * $MT_GPT2_DIR, else the installed copy, else this library's source tree. Returns buf. */
MT_API const char *mt_data_gpt2_file(const char *name, char *buf, size_t len);
MT_API void mt_data_tokenizer_destroy(mt_data_tokenizer *t); /* NULL is a no-op */

/* Megatron's HuggingFaceTokenizer (--tokenizer-model PATH: a directory with tokenizer.json, or
 * that file) as training on preprocessed data needs it: *vocab_size = len(AutoTokenizer) (the
 * vocabulary's tokens and the added tokens it does not hold), *eod = eos_token_id (the
 * eos_token of tokenizer_config.json, else of special_tokens_map.json). Errors name the file. */
MT_API mt_status mt_data_hf_tokenizer_info(const char *path, int64_t *vocab_size, int64_t *eod);
/* Megatron's Llama2Tokenizer and GPTSentencePieceTokenizer (--tokenizer-model FILE, a
 * SentencePiece model) as training needs them: *vocab_size = its piece count (vocab_size()),
 * *eod = its eos_id (2 unless the model sets another). A truncated or corrupt file, or an eos
 * outside the pieces, is MT_ERR_FORMAT naming the file. */
MT_API mt_status mt_data_sentencepiece_info(const char *model_file, int64_t *vocab_size,
                                            int64_t *eod);

MT_API int64_t mt_data_tokenizer_vocab_size(const mt_data_tokenizer *t);
MT_API int64_t mt_data_tokenizer_eod(const mt_data_tokenizer *t);

/* Appends the ids of text[0..len) to *ids (a malloc'd buffer of *cap entries, grown with realloc;
 * *ids may start NULL) after *n entries. allow_special: "<|endoftext|>" in the text becomes eod
 * (else it is ordinary text). Invalid UTF-8 is encoded byte by byte, as tiktoken does. */
MT_API mt_status mt_data_tokenizer_encode(mt_data_tokenizer *t, const char *text, size_t len,
                                          int allow_special, int32_t **ids, size_t *n, size_t *cap);
/* Appends the bytes of ids[0..n_ids) to *text (grown like encode's buffer; not NUL-terminated).
 * An id outside the vocabulary is MT_ERR_INVALID_ARG. */
MT_API mt_status mt_data_tokenizer_decode(const mt_data_tokenizer *t, const int32_t *ids,
                                          size_t n_ids, char **text, size_t *len, size_t *cap);

#ifdef __cplusplus
}
#endif

#endif /* MT_DATA_TOKENIZER_H */
