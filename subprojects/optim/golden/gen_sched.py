"""Golden LR and WD schedules from megatron-core's OptimizerParamScheduler (pip megatron-core
0.16.1, torch 2.15). Rerun: /opt/gv/bin/python gen_sched.py (from this directory).
Step counts follow megatron/training/training.py get_optimizer_param_scheduler (train_iters mode,
transcribed below since megatron.training is not on PyPI): steps are samples (iterations x global
batch size), the scheduler steps by the global batch size after every iteration.
The same table is in tests/test_sched.c. sched_<name>.npy: [train_iters + 11, 2] = (lr, wd) after
0, 1, ..., train_iters + 10 iterations."""
import numpy as np
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

# name, lr, min_lr, warmup_init, style, wsd_style, train_iters, decay_iters, warmup_iters,
# warmup_fraction, wsd_decay_iters, gbs, start_wd, end_wd, wd_style
CONFIGS = [
    ("linear", 6e-4, 6e-5, 0.0, "linear", None, 100, None, 10, None, None, 8, 0.1, 0.1, "constant"),
    ("cosine_frac", 3e-4, 3e-5, 1e-5, "cosine", None, 200, 150, 0, 0.05, None, 16, 0.01, 0.1,
     "cosine"),
    ("constant", 1e-3, 0.0, 0.0, "constant", None, 50, None, 5, None, None, 4, 0.0, 0.1, "linear"),
    ("isqrt", 1e-3, 1e-5, 0.0, "inverse-square-root", None, 200, None, 20, None, None, 2, 0.05,
     0.05, "constant"),
    ("linear_nowarm", 1e-3, 1e-4, 0.0, "linear", None, 60, None, 0, None, None, 1, 0.0, 0.2,
     "cosine"),
    ("wsd_exp", 2e-3, 2e-4, 0.0, "WSD", "exponential", 200, None, 10, None, 50, 8, 0.1, 0.1,
     "constant"),
    ("wsd_linear", 2e-3, 2e-4, 0.0, "WSD", "linear", 120, 100, 0, 0.1, 30, 3, 0.1, 0.1, "constant"),
    ("wsd_cosine", 2e-3, 0.0, 0.0, "WSD", "cosine", 100, None, 5, None, 40, 4, 0.0, 0.1, "linear"),
    ("wsd_minus_sqrt", 1e-3, 1e-4, 0.0, "WSD", "minus_sqrt", 100, None, 10, None, 25, 5, 0.1, 0.1,
     "constant"),
]


class Opt:  # the scheduler only writes param_groups[i]['lr'/'weight_decay']
    param_groups = [{}]


for (name, lr, min_lr, init, style, wsd_style, train_iters, decay_iters, warmup_iters, frac,
     wsd_iters, gbs, start_wd, end_wd, wd_style) in CONFIGS:
    decay_iters = decay_iters or train_iters
    lr_decay_steps = decay_iters * gbs
    wd_incr_steps = train_iters * gbs
    wsd_decay_steps = wsd_iters * gbs if wsd_iters is not None else None
    warmup_steps = frac * lr_decay_steps if frac is not None else warmup_iters * gbs
    opt = Opt()
    opt.param_groups = [{}]
    s = OptimizerParamScheduler(opt, init_lr=init, max_lr=lr, min_lr=min_lr,
                                lr_warmup_steps=warmup_steps, lr_decay_steps=lr_decay_steps,
                                lr_decay_style=style, start_wd=start_wd, end_wd=end_wd,
                                wd_incr_steps=wd_incr_steps, wd_incr_style=wd_style,
                                wsd_decay_steps=wsd_decay_steps, lr_wsd_decay_style=wsd_style)
    rows = []
    for it in range(train_iters + 11):
        rows.append((opt.param_groups[0]["lr"], opt.param_groups[0]["weight_decay"]))
        s.step(gbs)
    np.save(f"sched_{name}.npy", np.array(rows, dtype=np.float64))
