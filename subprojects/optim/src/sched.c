/* Megatron's LR/WD schedules (megatron-core OptimizerParamScheduler.get_lr/get_wd, line for line)
 * and its grad scalers (ConstantGradScaler, DynamicGradScaler). */
#include "optim_impl.h"

#include <math.h>
#include <string.h>

#define OPTIM_PI 3.14159265358979323846 /* Python's math.pi */

mt_status mt_optim_sched_from_iters(mt_optim_sched *s, int64_t train_iters, int64_t lr_decay_iters,
                                    int64_t lr_warmup_iters, double lr_warmup_fraction,
                                    int64_t lr_wsd_decay_iters, int64_t global_batch_size) {
    MT_REQUIRE(s, MT_ERR_INVALID_ARG, "schedule is NULL");
    MT_REQUIRE(train_iters > 0 && global_batch_size > 0, MT_ERR_INVALID_ARG,
               "train_iters %lld, global_batch_size %lld", (long long)train_iters,
               (long long)global_batch_size);
    double gbs = (double)global_batch_size;
    if (lr_decay_iters <= 0) lr_decay_iters = train_iters;
    s->lr_decay_steps = (double)lr_decay_iters * gbs;
    s->wd_incr_steps = (double)train_iters * gbs;
    s->wsd_decay_steps = (double)(lr_wsd_decay_iters > 0 ? lr_wsd_decay_iters : 0) * gbs;
    if (lr_warmup_fraction >= 0.0)
        s->lr_warmup_steps = lr_warmup_fraction * s->lr_decay_steps;
    else
        s->lr_warmup_steps = (double)lr_warmup_iters * gbs;
    return MT_OK;
}

mt_status mt_optim_sched_check(const mt_optim_sched *s) {
    MT_REQUIRE(s && s->size >= sizeof *s, MT_ERR_INVALID_ARG, "schedule NULL or too small");
    MT_REQUIRE(s->min_lr >= 0.0 && s->max_lr >= s->min_lr && s->init_lr <= s->max_lr,
               MT_ERR_INVALID_ARG,
               "need 0 <= min_lr (%g) <= max_lr (%g) and init_lr (%g) <= max_lr", s->min_lr,
               s->max_lr, s->init_lr);
    MT_REQUIRE(s->lr_decay_steps > 0.0 && s->lr_warmup_steps < s->lr_decay_steps,
               MT_ERR_INVALID_ARG, "need 0 < lr_decay_steps (%g) and lr_warmup_steps (%g) below it",
               s->lr_decay_steps, s->lr_warmup_steps);
    MT_REQUIRE(s->lr_decay_style != MT_LR_WSD || s->wsd_decay_steps > 0.0, MT_ERR_INVALID_ARG,
               "WSD needs wsd_decay_steps (--lr-wsd-decay-iters)");
    MT_REQUIRE(s->start_wd >= 0.0 && s->end_wd >= s->start_wd, MT_ERR_INVALID_ARG,
               "need 0 <= start_wd (%g) <= end_wd (%g)", s->start_wd, s->end_wd);
    MT_REQUIRE(s->wd_incr_style != MT_WD_CONSTANT || s->start_wd == s->end_wd, MT_ERR_INVALID_ARG,
               "constant weight decay needs start_wd == end_wd");
    MT_REQUIRE(s->wd_incr_style == MT_WD_CONSTANT || s->wd_incr_steps > 0.0, MT_ERR_INVALID_ARG,
               "wd_incr_steps %g", s->wd_incr_steps);
    return MT_OK;
}

double mt_optim_sched_wd(const mt_optim_sched *s, double num_steps) {
    if (num_steps > s->wd_incr_steps) return s->end_wd;
    if (s->wd_incr_style == MT_WD_CONSTANT) return s->end_wd;
    double incr_ratio = num_steps / s->wd_incr_steps;
    double delta_wd = s->end_wd - s->start_wd;
    double coeff = s->wd_incr_style == MT_WD_LINEAR
                       ? incr_ratio
                       : 0.5 * (cos(OPTIM_PI * (1 - incr_ratio)) + 1.0);
    return s->start_wd + coeff * delta_wd;
}

double mt_optim_sched_lr(const mt_optim_sched *s, double num_steps) {
    double max_lr = s->max_lr, min_lr = s->min_lr;
    if (s->lr_warmup_steps > 0 && num_steps <= s->lr_warmup_steps)
        return s->init_lr + ((max_lr - s->init_lr) * num_steps / s->lr_warmup_steps);
    if (s->lr_decay_style == MT_LR_CONSTANT) return max_lr;
    if (num_steps > s->lr_decay_steps) return min_lr;
    if (s->lr_decay_style == MT_LR_INVERSE_SQRT) {
        double warmup = s->lr_warmup_steps > 1 ? s->lr_warmup_steps : 1;
        double steps = num_steps > 1 ? num_steps : 1;
        double lr = max_lr * pow(warmup, 0.5) / pow(steps, 0.5);
        return lr > min_lr ? lr : min_lr;
    }
    double decay_ratio =
        (num_steps - s->lr_warmup_steps) / (s->lr_decay_steps - s->lr_warmup_steps);
    double delta_lr = max_lr - min_lr, coeff = 0.0;
    switch (s->lr_decay_style) {
    case MT_LR_LINEAR:
        coeff = 1.0 - decay_ratio;
        break;
    case MT_LR_COSINE:
        coeff = 0.5 * (cos(OPTIM_PI * decay_ratio) + 1.0);
        break;
    default: { /* WSD: stable, then anneal over the last wsd_decay_steps */
        double anneal_start = s->lr_decay_steps - s->wsd_decay_steps;
        if (num_steps <= anneal_start) {
            coeff = 1.0;
            break;
        }
        double r = (num_steps - anneal_start) / s->wsd_decay_steps;
        switch (s->lr_wsd_decay_style) {
        case MT_WSD_LINEAR:
            coeff = 1.0 - r;
            break;
        case MT_WSD_COSINE:
            coeff = 0.5 * (cos(OPTIM_PI * r) + 1.0);
            break;
        case MT_WSD_MINUS_SQRT:
            coeff = 1.0 - sqrt(r);
            break;
        default:
            coeff = 2.0 * pow(0.5, r) - 1.0;
        }
    }
    }
    return min_lr + coeff * delta_lr;
}

static mt_status parse(const char *s, const char *const *names, int n, int *out, const char *what) {
    MT_REQUIRE(s && out, MT_ERR_INVALID_ARG, "NULL argument");
    for (int i = 0; i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return MT_OK;
        }
    }
    return MT_ERROR(MT_ERR_INVALID_ARG, "unknown %s '%s'", what, s);
}

mt_status mt_lr_decay_style_parse(const char *s, mt_lr_decay_style *out) {
    static const char *const names[] = { "constant", "linear", "cosine", "inverse-square-root",
                                         "WSD" };
    int v = 0;
    MT_TRY(parse(s, names, 5, &v, "--lr-decay-style"));
    *out = (mt_lr_decay_style)v;
    return MT_OK;
}

mt_status mt_lr_wsd_style_parse(const char *s, mt_lr_wsd_style *out) {
    static const char *const names[] = { "exponential", "linear", "cosine", "minus_sqrt" };
    int v = 0;
    MT_TRY(parse(s, names, 4, &v, "--lr-wsd-decay-style"));
    *out = (mt_lr_wsd_style)v;
    return MT_OK;
}

mt_status mt_wd_incr_style_parse(const char *s, mt_wd_incr_style *out) {
    static const char *const names[] = { "constant", "linear", "cosine" };
    int v = 0;
    MT_TRY(parse(s, names, 3, &v, "--weight-decay-incr-style"));
    *out = (mt_wd_incr_style)v;
    return MT_OK;
}

mt_status mt_optim_scaler_constant(mt_optim_scaler *s, float scale) {
    MT_REQUIRE(s && scale > 0.0f, MT_ERR_INVALID_ARG, "scaler NULL or scale %g", scale);
    memset(s, 0, sizeof *s);
    s->scale = scale;
    return MT_OK;
}

mt_status mt_optim_scaler_dynamic(mt_optim_scaler *s, float initial, float min_scale, int window,
                                  int hysteresis) {
    MT_REQUIRE(s, MT_ERR_INVALID_ARG, "scaler is NULL");
    MT_REQUIRE(min_scale > 0.0f && min_scale <= initial && window > 0 && hysteresis > 0,
               MT_ERR_INVALID_ARG,
               "need 0 < min scale (%g) <= initial (%g), window (%d) > 0, hysteresis (%d) > 0",
               min_scale, initial, window, hysteresis);
    s->scale = initial;
    s->dynamic = 1;
    s->min_scale = min_scale;
    s->window = window;
    s->hysteresis = hysteresis;
    s->growth_tracker = 0;
    s->hysteresis_tracker = hysteresis;
    return MT_OK;
}

void mt_optim_scaler_update(mt_optim_scaler *s, int found_inf) {
    if (!s || !s->dynamic) return;
    if (found_inf) {
        s->growth_tracker = 0;
        s->hysteresis_tracker -= 1;
        if (s->hysteresis_tracker <= 0) {
            float v = s->scale * 0.5f;
            s->scale = v > s->min_scale ? v : s->min_scale;
        }
    } else {
        s->growth_tracker += 1;
        if (s->growth_tracker == s->window) {
            s->growth_tracker = 0;
            s->hysteresis_tracker = s->hysteresis;
            s->scale = s->scale * 2.0f;
        }
    }
}
