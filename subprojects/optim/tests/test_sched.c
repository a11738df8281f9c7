/* unit: LR and WD schedules against megatron-core's OptimizerParamScheduler at every iteration of
 * nine configurations (golden/gen_sched.py holds the same table), and the parsers. */
#include <mt/optim.h>
#include <mt/testkit.h>

#include <stdlib.h>

typedef struct {
    const char *name;
    double lr, min_lr, init;
    const char *style, *wsd_style;
    int64_t train_iters, decay_iters, warmup_iters;
    double frac; /* < 0: none */
    int64_t wsd_iters, gbs;
    double start_wd, end_wd;
    const char *wd_style;
} sched_case;

static const sched_case cases[] = {
    { "linear", 6e-4, 6e-5, 0.0, "linear", NULL, 100, 0, 10, -1, 0, 8, 0.1, 0.1, "constant" },
    { "cosine_frac", 3e-4, 3e-5, 1e-5, "cosine", NULL, 200, 150, 0, 0.05, 0, 16, 0.01, 0.1,
      "cosine" },
    { "constant", 1e-3, 0.0, 0.0, "constant", NULL, 50, 0, 5, -1, 0, 4, 0.0, 0.1, "linear" },
    { "isqrt", 1e-3, 1e-5, 0.0, "inverse-square-root", NULL, 200, 0, 20, -1, 0, 2, 0.05, 0.05,
      "constant" },
    { "linear_nowarm", 1e-3, 1e-4, 0.0, "linear", NULL, 60, 0, 0, -1, 0, 1, 0.0, 0.2, "cosine" },
    { "wsd_exp", 2e-3, 2e-4, 0.0, "WSD", "exponential", 200, 0, 10, -1, 50, 8, 0.1, 0.1,
      "constant" },
    { "wsd_linear", 2e-3, 2e-4, 0.0, "WSD", "linear", 120, 100, 0, 0.1, 30, 3, 0.1, 0.1,
      "constant" },
    { "wsd_cosine", 2e-3, 0.0, 0.0, "WSD", "cosine", 100, 0, 5, -1, 40, 4, 0.0, 0.1, "linear" },
    { "wsd_minus_sqrt", 1e-3, 1e-4, 0.0, "WSD", "minus_sqrt", 100, 0, 10, -1, 25, 5, 0.1, 0.1,
      "constant" },
};

static void run(const sched_case *c) {
    mt_optim_sched s = MT_OPTIM_SCHED_INIT;
    s.max_lr = c->lr;
    s.min_lr = c->min_lr;
    s.init_lr = c->init;
    MT_CHECK(mt_lr_decay_style_parse(c->style, &s.lr_decay_style));
    if (c->wsd_style) MT_CHECK(mt_lr_wsd_style_parse(c->wsd_style, &s.lr_wsd_decay_style));
    MT_CHECK(mt_wd_incr_style_parse(c->wd_style, &s.wd_incr_style));
    s.start_wd = c->start_wd;
    s.end_wd = c->end_wd;
    MT_CHECK(mt_optim_sched_from_iters(&s, c->train_iters, c->decay_iters, c->warmup_iters, c->frac,
                                       c->wsd_iters, c->gbs));
    MT_CHECK(mt_optim_sched_check(&s));
    char file[64];
    snprintf(file, sizeof file, "sched_%s.npy", c->name);
    size_t n;
    double *ref = mt_test_golden_f64(file, &n);
    size_t iters = (size_t)c->train_iters + 11;
    MT_EXPECT(n == 2 * iters, "%s: %zu golden values, want %zu", c->name, n, 2 * iters);
    double *lr = malloc(iters * sizeof *lr), *wd = malloc(iters * sizeof *wd);
    double *rlr = malloc(iters * sizeof *rlr), *rwd = malloc(iters * sizeof *rwd);
    for (size_t it = 0; it < iters && 2 * it + 1 < n; it++) {
        double steps = (double)it * (double)c->gbs;
        lr[it] = mt_optim_sched_lr(&s, steps);
        wd[it] = mt_optim_sched_wd(&s, steps);
        rlr[it] = ref[2 * it];
        rwd[it] = ref[2 * it + 1];
    }
    char what[96];
    snprintf(what, sizeof what, "%s lr", c->name);
    mt_test_close_f64(what, lr, rlr, iters, 1e-15, 1e-12);
    snprintf(what, sizeof what, "%s wd", c->name);
    mt_test_close_f64(what, wd, rwd, iters, 1e-15, 1e-12);
    free(ref), free(lr), free(wd), free(rlr), free(rwd);
}

int main(void) {
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        run(&cases[i]);

    mt_lr_decay_style st;
    MT_EXPECT_STATUS(mt_lr_decay_style_parse("exp", &st), MT_ERR_INVALID_ARG);
    mt_optim_sched s = MT_OPTIM_SCHED_INIT;
    s.max_lr = 1e-3;
    s.lr_warmup_steps = 10;
    s.lr_decay_steps = 10; /* warmup must end before decay does */
    MT_EXPECT_STATUS(mt_optim_sched_check(&s), MT_ERR_INVALID_ARG);
    s.lr_decay_steps = 100;
    s.lr_decay_style = MT_LR_WSD; /* WSD needs its decay steps */
    MT_EXPECT_STATUS(mt_optim_sched_check(&s), MT_ERR_INVALID_ARG);
    return mt_test_result();
}
