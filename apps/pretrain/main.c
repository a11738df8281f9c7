/* mt-pretrain: Megatron-LM's pretrain_gpt.py as a native program. Launch alone, or one process per
 * rank with mpirun, torchrun --no-python or srun. */
#include <mt/train.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            mt_train_usage(argv[0]);
            return 0;
        }
    }
    mt_train_args a;
    mt_train_args_init(&a);
    mt_status st = mt_train_args_parse(&a, argc, argv);
    if (st != MT_OK) {
        const char *e = mt_last_error(), *p = strstr(e, ": MT_ERR_");
        if (p && (p = strstr(p + 2, ": "))) e = p + 2; // why: argparse-style, without file:line
        fprintf(stderr, "%s: error: %s\n", argv[0], e);
        mt_train_args_free(&a);
        return 2;
    }
    st = mt_train_run(&a);
    mt_train_args_free(&a);
    if (st != MT_OK) {
        fprintf(stderr, "%s: error: %s: %s\n", argv[0], mt_status_str(st), mt_last_error());
        return 1;
    }
    return 0;
}
