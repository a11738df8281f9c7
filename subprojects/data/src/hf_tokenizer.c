/* Megatron's HuggingFaceTokenizer as far as training on preprocessed data needs it: its
 * vocab_size (len(AutoTokenizer): the distinct tokens of the model's vocabulary and the added
 * tokens) and its eod (eos_token_id), read from tokenizer.json and tokenizer_config.json or
 * special_tokens_map.json. The encoder is hf_encode.c. */
#include <jansson.h>
#include <string.h>
#include <sys/stat.h>

#include "data_impl.h"

/* The eos token's text in a tokenizer_config.json or special_tokens_map.json: a string or an
 * {"content": ...} object; NULL when the file or the key is absent. */
static const char *eos_text(json_t *j) {
    json_t *e = j ? json_object_get(j, "eos_token") : NULL;
    if (json_is_object(e)) e = json_object_get(e, "content");
    return json_is_string(e) ? json_string_value(e) : NULL;
}

mt_status hf_tokenizer_open(const char *path, json_t **tok, char *file, size_t file_len, char *dir,
                            size_t dir_len) {
    struct stat sb;
    int is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    snprintf(dir, dir_len, "%s", path);
    if (is_dir) {
        snprintf(file, file_len, "%s/tokenizer.json", path);
    } else { /* the tokenizer.json itself: its directory holds the configs */
        snprintf(file, file_len, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(dir, dir_len, ".");
    }
    json_error_t err;
    *tok = json_load_file(file, 0, &err);
    MT_REQUIRE(*tok, MT_ERR_IO, "HuggingFaceTokenizer: cannot read %s: %s (line %d)", file,
               err.text, err.line);
    return MT_OK;
}

mt_status mt_data_hf_tokenizer_info(const char *path, int64_t *vocab_size, int64_t *eod) {
    MT_REQUIRE(path && vocab_size && eod, MT_ERR_INVALID_ARG, "NULL argument");
    char dir[4096], file[4200];
    json_t *tok;
    MT_TRY(hf_tokenizer_open(path, &tok, file, sizeof file, dir, sizeof dir));
    mt_status st = hf_tokenizer_info_of(tok, file, dir, vocab_size, eod);
    json_decref(tok);
    return st;
}

mt_status hf_tokenizer_info_of(json_t *tok, const char *file, const char *dir, int64_t *vocab_size,
                               int64_t *eod) {
    mt_status st = MT_OK;
    json_t *cfg = NULL, *map = NULL;
    json_t *vocab = json_object_get(json_object_get(tok, "model"), "vocab");
    json_t *added = json_object_get(tok, "added_tokens");
    if (!json_is_object(vocab) && !json_is_array(vocab)) {
        st = MT_ERROR(MT_ERR_FORMAT, "HuggingFaceTokenizer: %s has no model.vocab", file);
        goto done;
    }
    /* len(tokenizer): the vocabulary, plus each added token whose text it does not hold */
    int64_t n =
        json_is_object(vocab) ? (int64_t)json_object_size(vocab) : (int64_t)json_array_size(vocab);
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        const char *c = json_string_value(json_object_get(a, "content"));
        int in_vocab = 0;
        if (c && json_is_object(vocab)) in_vocab = json_object_get(vocab, c) != NULL;
        for (size_t u = 0; c && json_is_array(vocab) && u < json_array_size(vocab) && !in_vocab;
             u++) { /* Unigram: [[piece, score], ...], the id is the index */
            const char *piece = json_string_value(json_array_get(json_array_get(vocab, u), 0));
            in_vocab = piece && !strcmp(c, piece);
        }
        n += c && !in_vocab;
    }
    char p[4200];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    cfg = json_load_file(p, 0, NULL);
    snprintf(p, sizeof p, "%s/special_tokens_map.json", dir);
    map = json_load_file(p, 0, NULL);
    const char *eos = eos_text(cfg) ? eos_text(cfg) : eos_text(map);
    if (!eos) {
        st = MT_ERROR(MT_ERR_FORMAT,
                      "HuggingFaceTokenizer: no eos_token in %s/tokenizer_config.json or "
                      "special_tokens_map.json (Megatron's eod is the tokenizer's eos_token_id)",
                      dir);
        goto done;
    }
    int64_t id = -1;
    json_array_foreach(added, i, a) {
        const char *c = json_string_value(json_object_get(a, "content"));
        if (c && !strcmp(c, eos)) id = (int64_t)json_integer_value(json_object_get(a, "id"));
    }
    if (id < 0 && json_is_object(vocab) && json_object_get(vocab, eos))
        id = (int64_t)json_integer_value(json_object_get(vocab, eos));
    for (size_t u = 0; id < 0 && json_is_array(vocab) && u < json_array_size(vocab); u++) {
        const char *piece = json_string_value(json_array_get(json_array_get(vocab, u), 0));
        if (piece && !strcmp(eos, piece)) id = (int64_t)u;
    }
    if (id < 0) {
        st = MT_ERROR(MT_ERR_FORMAT, "HuggingFaceTokenizer: eos_token '%s' is not a token of %s",
                      eos, file);
        goto done;
    }
    *vocab_size = n;
    *eod = id;
done:
    json_decref(cfg);
    json_decref(map);
    return st;
}
