/* mt-infer: text generation around a model's forward (a callback): Hugging Face's and Megatron's
 * sampling (temperature, top-k, top-p, greedy) and the generation loops, for one sequence, a
 * batch, and continuous batching (rows joining and leaving a batch between steps). The KV cache is
 * the callback's (libs/model's mt_model_kv_cache in mt-generate and mt-serve). */
#ifndef MT_INFER_H
#define MT_INFER_H

#include <mt/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How the next token is chosen from a row of logits: greedy (argmax; the first of equal maxima)
 * when temperature is 0 or top_k is 1; else the logits divided by temperature, the top_k largest
 * kept (0: all; values equal to the k-th largest too), then the smallest set of the most likely
 * whose probability reaches top_p (0 or 1: all), as transformers' TemperatureLogitsWarper,
 * TopKLogitsWarper and TopPLogitsWarper in that order, and one draw from the renormalised
 * distribution: Philox uniform number `step` of stream `seed`. Tokens tied with the last one
 * top-p keeps are all kept (transformers keeps some of them, in its sort's order). */
typedef struct mt_infer_sampling {
    float temperature;
    int top_k;
    float top_p;
    uint64_t seed;
} mt_infer_sampling;
#define MT_INFER_SAMPLING_INIT \
    { 1.0f, 0, 0.0f, 1234 }

/* The distribution the next token is drawn from: probs[V] (zero for the filtered tokens; greedy:
 * 1 at the argmax). `logits` are V floats (the real vocabulary, not its padding). */
MT_API mt_status mt_infer_probs(const float *logits, int64_t V, const mt_infer_sampling *s,
                                float *probs);
/* The token drawn for generation step `step`: the first token whose cumulative probability (in
 * vocabulary order) reaches the step's uniform draw. scratch: V floats. */
MT_API mt_status mt_infer_sample(const float *logits, int64_t V, const mt_infer_sampling *s,
                                 uint64_t step, float *scratch, int32_t *token);

/* The model: the logits (V floats) of the position after tokens[0..n) given those tokens
 * (n <= max_len). The generation loop passes the whole sequence each step, one token longer; a
 * callback with a KV cache runs only the tokens past what it cached. */
typedef struct mt_infer_model {
    void *ctx;
    mt_status (*next_logits)(void *ctx, const int32_t *tokens, int n, float *logits);
    int64_t vocab; /* V */
    int max_len;   /* the longest sequence the model takes */
    int32_t eod;   /* stops the generation (< 0: none) */
} mt_infer_model;

/* Appends up to max_new tokens to tokens[0..n_prompt) (tokens has room for n_prompt + max_new),
 * stopping after an eod or at the model's max_len; *n_out: the sequence's length then. */
MT_API mt_status mt_infer_generate(const mt_infer_model *m, int32_t *tokens, int n_prompt,
                                   int max_new, const mt_infer_sampling *s, int *n_out);

/* Several sequences decoded together: row b's next-token logits (V floats at logits + b V) after
 * tokens[b][0..n[b]), for the rows with live[b] != 0 (the others' are not read). */
typedef struct mt_infer_batch_model {
    void *ctx;
    mt_status (*next_logits)(void *ctx, int32_t *const *tokens, const int *n, const int *live,
                             int B, float *logits);
    int64_t vocab;
    int max_len;
    int32_t eod;
} mt_infer_batch_model;

/* mt_infer_generate for B prompts at once (tokens[b] has room for n_prompt[b] + max_new): row b's
 * draws are the ones mt_infer_generate makes for it alone (draw k for its k-th new token), so each
 * row gets its own continuation; a row stops after an eod or at max_len while the others go on.
 * n_out[b]: row b's length then. */
MT_API mt_status mt_infer_generate_batch(const mt_infer_batch_model *m, int32_t *const *tokens,
                                         const int *n_prompt, int B, int max_new,
                                         const mt_infer_sampling *s, int *n_out);

/* One step of continuous batching over B slots (rows join and leave between steps): for every
 * row with live[b] != 0, the logits after tokens[b][0..n[b]) (one m->next_logits call for all),
 * then its token drawn with its own s[b] as draw k[b] (its k[b]-th new token: the draw
 * mt_infer_generate makes for it alone), appended at tokens[b][n[b]]; n[b] and k[b] go up, and
 * live[b] goes to 0 after an eod, at m->max_len or at k[b] = max_new[b]. A row joins a free slot
 * with its prompt in tokens[b] (room for max_new[b] more), n[b] its length, k[b] = 0 and live[b]
 * = 1 (a row with nothing to generate, max_new[b] = 0 or n[b] = max_len, must not be live).
 * logits: B * m->vocab floats; scratch: m->vocab. */
MT_API mt_status mt_infer_batch_step(const mt_infer_batch_model *m, int32_t *const *tokens, int *n,
                                     int *k, const int *max_new, const mt_infer_sampling *s,
                                     int *live, int B, float *logits, float *scratch);

#ifdef __cplusplus
}
#endif

#endif /* MT_INFER_H */
