/* mt-convert: Hugging Face <-> megatron-c checkpoints (GPT-2, Llama, Mixtral).
 *   mt-convert hf-to-mt HF_DIR MT_DIR [--make-vocab-size-divisible-by N]
 *   mt-convert mt-to-hf MT_DIR HF_DIR [--max-shard-size BYTES] [--experts split|fused] */
#include "convert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void) {
    fprintf(stderr, "usage: mt-convert hf-to-mt HF_DIR MT_DIR [--make-vocab-size-divisible-by N]\n"
                    "       mt-convert mt-to-hf MT_DIR HF_DIR [--max-shard-size BYTES]"
                    " [--experts split|fused]\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 4) return usage();
    if (strcmp(argv[1], "hf-to-mt") == 0) {
        int div = 128; /* Megatron's --make-vocab-size-divisible-by default */
        for (int i = 4; i < argc; i++) {
            if (strcmp(argv[i], "--make-vocab-size-divisible-by") == 0 && i + 1 < argc) {
                char *end;
                long v = strtol(argv[++i], &end, 10);
                if (*end || v <= 0 || v > (1 << 30)) return usage();
                div = (int)v;
            } else
                return usage();
        }
        MT_CHECK(cv_hf_to_mt(argv[2], argv[3], div));
        return 0;
    }
    if (strcmp(argv[1], "mt-to-hf") != 0) return usage();
    uint64_t max_shard = 5000000000ull; /* transformers' default "5GB" */
    cv_experts ex = CV_EXPERTS_AUTO;
    for (int i = 4; i < argc; i++) {
        if (strcmp(argv[i], "--max-shard-size") == 0 && i + 1 < argc)
            max_shard = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--experts") == 0 && i + 1 < argc) {
            i++;
            if (strcmp(argv[i], "split") == 0)
                ex = CV_EXPERTS_SPLIT;
            else if (strcmp(argv[i], "fused") == 0)
                ex = CV_EXPERTS_FUSED;
            else
                return usage();
        } else
            return usage();
    }
    MT_CHECK(cv_mt_to_hf(argv[2], argv[3], max_shard, ex));
    return 0;
}
