/* mt-generate: a checkpoint's continuation of a prompt (mt-infer's sampling over libs/model's
 * forward). Megatron's sampling names: --temperature, --top_k, --top_p, --tokens-to-generate.
 * Built a second time with MT_SERVE=1 as mt-serve: the model loaded once, prompts over HTTP
 * (Megatron's text generation server's PUT /api, and OpenAI's POST /completions as Megatron's
 * dynamic server has it), decoded with continuous batching; the flags then give the defaults. */
#include <mt/train.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MT_SERVE
#define MT_SERVE 0
#endif

static void usage(const char *prog) {
    if (MT_SERVE)
        printf("usage: %s --load DIR [--host 127.0.0.1] [--port 5000] [--max-requests N]\n"
               "       (and mt-generate's sampling, tokenizer and device flags: the defaults of "
               "a request)\n",
               prog);
    printf("usage: %s --load DIR (--prompt TEXT | --prompt-ids 1,2,3) [--tokens-to-generate 64]\n"
           "       [--temperature 1.0] [--top_k 0] [--top_p 0.0] [--greedy] [--seed 1234]\n"
           "       [--tokenizer-type GPT2BPETokenizer|HuggingFaceTokenizer|NullTokenizer]\n"
           "       [--vocab-file F] [--merge-file F] [--tokenizer-model PATH] [--eod ID]\n"
           "       [--device auto|cpu|cuda] [--print-ids]\n",
           prog);
}

int main(int argc, char **argv) {
    mt_generate_args a = { 0 };
    a.tokens_to_generate = 64;
    a.temperature = 1.0f;
    a.seed = 1234;
    a.tokenizer_type = "GPT2BPETokenizer";
    a.eod = -1;
    a.device = "auto";
    const char *host = "127.0.0.1";
    int port = 5000, max_requests = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL()                                                                               \
    do {                                                                                    \
        if (!v) {                                                                           \
            fprintf(stderr, "%s: error: argument %s: expected one argument\n", argv[0], f); \
            return 2;                                                                       \
        }                                                                                   \
        i++;                                                                                \
    } while (0)
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            usage(argv[0]);
            return 0;
        } else if (!strcmp(f, "--greedy")) {
            a.greedy = 1;
        } else if (!strcmp(f, "--print-ids")) {
            a.print_ids = 1;
        } else if (!strcmp(f, "--load")) {
            VAL();
            a.load = v;
        } else if (!strcmp(f, "--prompt")) {
            VAL();
            a.prompt = v;
        } else if (!strcmp(f, "--prompt-ids")) {
            VAL();
            a.prompt_ids = v;
        } else if (!strcmp(f, "--tokens-to-generate") || !strcmp(f, "--max-new-tokens")) {
            VAL();
            a.tokens_to_generate = atoi(v);
        } else if (!strcmp(f, "--temperature")) {
            VAL();
            a.temperature = (float)atof(v);
        } else if (!strcmp(f, "--top_k") || !strcmp(f, "--top-k")) {
            VAL();
            a.top_k = atoi(v);
        } else if (!strcmp(f, "--top_p") || !strcmp(f, "--top-p")) {
            VAL();
            a.top_p = (float)atof(v);
        } else if (!strcmp(f, "--seed")) {
            VAL();
            a.seed = strtoull(v, NULL, 10);
        } else if (!strcmp(f, "--tokenizer-type")) {
            VAL();
            a.tokenizer_type = v;
        } else if (!strcmp(f, "--vocab-file")) {
            VAL();
            a.vocab_file = v;
        } else if (!strcmp(f, "--merge-file")) {
            VAL();
            a.merge_file = v;
        } else if (!strcmp(f, "--tokenizer-model")) {
            VAL();
            a.tokenizer_model = v;
        } else if (!strcmp(f, "--eod")) {
            VAL();
            a.eod = atoi(v);
        } else if (MT_SERVE && !strcmp(f, "--host")) {
            VAL();
            host = v;
        } else if (MT_SERVE && !strcmp(f, "--port")) {
            VAL();
            port = atoi(v);
        } else if (MT_SERVE && !strcmp(f, "--max-requests")) {
            VAL();
            max_requests = atoi(v);
        } else if (!strcmp(f, "--device")) {
            VAL();
            a.device = v;
        } else {
            fprintf(stderr, "%s: error: unrecognized arguments: %s\n", argv[0], f);
            return 2;
        }
#undef VAL
    }
    if (a.tokens_to_generate < 0) {
        fprintf(stderr, "%s: error: --tokens-to-generate must be >= 0\n", argv[0]);
        return 2;
    }
    if (MT_SERVE && (a.prompt || a.prompt_ids)) {
        fprintf(stderr, "%s: error: prompts come with the requests, not as flags\n", argv[0]);
        return 2;
    }
    mt_status st = MT_SERVE ? mt_serve_run(&a, host, port, max_requests) : mt_generate_run(&a);
    if (st != MT_OK) {
        fprintf(stderr, "%s: error: %s: %s\n", argv[0], mt_status_str(st), mt_last_error());
        return st == MT_ERR_INVALID_ARG ? 2 : 1;
    }
    return 0;
}
