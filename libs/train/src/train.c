/* pretrain_gpt.py in C: world and device, tokenizer and datasets, model on optimizer buffers,
 * the iteration loop (gradient accumulation, data-parallel reduction, schedule, clipping),
 * evaluation, Megatron's log lines, metrics, golden values and checkpoints with resume. */
#define _POSIX_C_SOURCE 200809L
#include "train_impl.h"

#include <mt/ckpt.h>
#include <mt/comm.h>
#include <mt/data.h>
#include <mt/model.h>
#include <mt/optim.h>
#include <mt/pp.h>
#include <mt/train.h>

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct run {
    const mt_train_args *a;
    mt_comm *world;
    int rank, nranks;
    /* Megatron's grid (order tp-dp-pp), tensor-parallel fastest: rank = (pp_rank * dp_size +
     * dp_rank) * tp_size + tp_rank. tp: the tensor-parallel group (NULL for one rank); dp: the
     * data-parallel group (the world without tensor or pipeline parallelism; NULL for one rank;
     * dp_own when split off here); pp: the pipeline group (member k: stage k; NULL for one
     * stage); emb: the first and last stages (tied embeddings: their two copies' gradients are
     * summed; NULL elsewhere; pp itself for two stages); mp: tensor x pipeline (the grad norm's,
     * Megatron's model-parallel group; tp itself for one stage) */
    mt_comm *tp, *dp, *dp_own, *pp, *emb_own, *emb, *mp_own, *mp;
    int tp_size, tp_rank, dp_size, dp_rank, pp_size, pp_rank;
    /* expert parallelism (Megatron's expert grid tp-ep-dp-pp, expert TP = TP): the data- and
     * context-parallel ranks of a stage in groups of ep_size consecutive ones (ep: they hold
     * different experts),
     * edp: the ranks holding the same experts, emp: tensor x expert x pipeline (the expert grads'
     * norm); NULL when not split (one rank) */
    mt_comm *ep, *edp, *emp;
    int ep_size, ep_rank, edp_size, edp_rank;
    /* context parallelism (Megatron's order tp-cp-ep-dp-pp): cp, the ranks that share each
     * sequence; the gradients are reduced over the data- and context-parallel
     * ranks together (dp, of gdp_size ranks, this one gdp_rank; = dp without CP) */
    mt_comm *cp;
    int cp_size, cp_rank, gdp_size, gdp_rank;
    int32_t *hcp; /* context parallelism: this rank's chunks of a host batch's tokens (B, T/cp) */
    mt_device dev;
    int64_t vocab, eod;
    mt_model_config mc; /* (chunk 0's under the interleaved schedule) */
    /* this rank's model: its pipeline stage, or under the interleaved schedule (vpp > 1 chunks a
     * stage) chunk c of stage r is stage c P + r of a pipeline of P vpp; model = chunks[0] */
    mt_model *model, **chunks;
    int vpp;
    mt_arena *vbuf_arena; /* the interleaved schedule's staging buffers (vbuf[nvbuf]) */
    mt_arena *slot_arena; /* the interleaved schedule: the activation slots the chunks share */
    mt_model_slots slots;
    mt_tensor *vbuf;
    int nvbuf;
    float *slot_gs; /* the loss scale of each device slot's micro-batch (interleaved) */
    /* the TP axes of the chunk whose parameters are being listed (mt_model_param_tp_axes), in
     * the listing's order, and the next one's index */
    int *chunk_axes, chunk_nparams, chunk_next;
    mt_stream pp_stream; /* the interleaved schedule's exchanges (CUDA), or NULL */
    mt_optim_buffer *buf;
    mt_arena *buf_arena, *opt_arena, *io_arena;
    mt_optim *opt;
    mt_optim_sched sched;
    int64_t sched_steps;    /* samples the LR/WD schedule has counted: skipped steps do not count */
    mt_optim_scaler scaler; /* --fp16 (or --loss-scale with --bf16): Megatron's grad scaler */
    mt_optim_scaler *scale_p; /* &scaler when there is one, else NULL (loss scale 1) */
    mt_data_dataset *train_ds, *valid_ds, *test_ds;
    mt_data_sampler train_s;
    int64_t consumed_train, consumed_valid, iteration, gbs;
    int num_micro;
    int64_t last_eval; /* iteration of the last validation line in the JSONL metrics */
    int64_t *ids, *text;
    int32_t *htok, *htgt;  /* [0]: evaluation's batch; [1]: the next training micro-batch */
    int32_t *hpos;         /* --reset-position-ids: their position ids (else NULL) */
    int32_t *hks;          /* --reset-attention-mask: their key starts (else NULL) */
    int64_t *hsid;         /* dropout: each row's sample index (the sampler's; else NULL) */
    int64_t *dstart;       /* a row's document starts (mt_data_doc_starts) */
    int64_t hcount[2];     /* the counted targets (not ignored) of each host batch (with context
                             parallelism: of this rank's chunks) */
    int64_t hcount_all[2]; /* context parallelism: of the whole sequences */
    /* multi-token prediction under context parallelism: each host batch's rolls of the whole
     * sequences ([slot][tokens, targets][depth](B,T)), their counted targets on this rank and on
     * all ([slot][depth][this rank, all]); each device slot's rolls (D, B, T / cp) and the
     * depths' loss scales (mt_model_set_mtp_inputs) */
    int32_t *hmtp;
    int64_t *hmcount;
    mt_tensor *mtp_tok, *mtp_tgt;
    float *mtp_scale;
    /* the device's micro-batches, one a slot of the model's (a pipeline stage keeps several in
     * flight; else one): tokens, targets, --reset-position-ids' position ids,
     * --reset-attention-mask's key starts, dropout's sample ids (B) i64 (else unallocated) */
    int nslots;
    mt_tensor *tok, *tgt, *pos, *ks, *sid;
    mt_tensor red;  /* two floats for device all-reduces of scalars */
    double t_start; /* --exit-duration-in-mins counts from here */
    int exited;     /* --exit-signal-handler / --exit-duration-in-mins stopped training */
    FILE *jsonl;
    double *gv_loss, *gv_zeros, *gv_time;
    /* multi-token prediction: each depth's loss of every iteration (golden values: gv_mtp[k n +
     * i], n = train_iters + 1), of the last iteration and summed over the log interval */
    double *gv_mtp, *mtp_iter, *mtp_interval;
    mt_ckpt_writer *writer;
    mt_ckpt_group group;
    /* --overlap-grad-reduce: bucket k's reduction starts once the backward passes ready[k]
     * (with a tied embedding over pipeline stages, those of level -1 after its copies' sum) */
    int overlap, n_buckets, *bucket_level, *launched;
    mt_stream comm_stream; /* CUDA: reductions run here beside the backward */
    mt_event *bucket_ev, done_ev;
    /* --overlap-param-gather: after a step, each bucket's all-gather (order: ascending level)
     * runs on the comm stream, gather_ev[k] marking its end, which the forward waits for at the
     * bucket's level (CUDA); on the host the gather is pending until the forward reaches that
     * level and runs there */
    int pgather, *order, *pending;
    mt_event *gather_ev, step_ev;
    mt_prof *prof; /* MT_PROFILE=1: per-operation times at the end */
    /* --log-params-norm: the reduction's output and workspace */
    mt_arena *pn_arena;
    mt_tensor pn_out;
    void *pn_ws;
    size_t pn_ws_bytes;
} run;

static mt_status setup_overlap(run *r);
static mt_status setup_chunks(run *r, const mt_model_config *cc);
static mt_status grad_ready(void *ctx, int level, mt_stream s);
static mt_status start_buckets(run *r, int level, mt_stream s);
static int embedding_held(const run *r);
static mt_status param_wait(void *ctx, int level, mt_stream s);
static mt_status params_final(run *r);
static mt_status use_slot(run *r, int k);

/* ---- small helpers ---- */

/* This rank's parameters, chunk by chunk (one model without the interleaved schedule). */
static int num_params(const run *r) {
    int n = 0;
    for (int c = 0; c < r->vpp; c++)
        n += mt_model_num_params(r->chunks[c]);
    return n;
}
static mt_model_param *param_at(const run *r, int i) {
    for (int c = 0; c < r->vpp; i -= mt_model_num_params(r->chunks[c]), c++)
        if (i < mt_model_num_params(r->chunks[c])) return mt_model_param_at(r->chunks[c], i);
    return NULL;
}
static mt_model_param *param_find(const run *r, const char *name) {
    for (int c = 0; c < r->vpp; c++) {
        mt_model_param *p = mt_model_param_find(r->chunks[c], name);
        if (p) return p;
    }
    return NULL;
}

static int last_rank(const run *r) {
    return r->rank == r->nranks - 1; // why: Megatron prints the training line on the last rank
}

static void stamp(char *buf, size_t n) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t k = strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf + k, n - k, ".%06ld", ts.tv_nsec / 1000);
}

/* Sums (op MT_REDOP_SUM) or averages (MT_REDOP_AVG) x[0..n) over the ranks of `comm` (NULL: one
 * rank), n <= 2 (host MPI, or a device all-reduce), in f32. */
static mt_status allreduce_on(run *r, mt_comm *comm, double *x, int n, mt_redop op) {
    if (!comm || mt_comm_size(comm) == 1) return MT_OK;
    float v[2] = { (float)x[0], n > 1 ? (float)x[1] : 0.0f };
    if (mt_comm_has_host(comm)) {
        mt_tensor t = mt_tensor_1d(v, MT_F32, n, MT_DEVICE_CPU);
        MT_TRY(mt_comm_allreduce(comm, &t, &t, op, NULL));
    } else {
        mt_tensor d;
        MT_TRY(mt_tensor_slice(&r->red, 0, 0, n, &d));
        MT_TRY(mt_memcpy(d.data, r->dev, v, MT_DEVICE_CPU, (size_t)n * 4, NULL));
        MT_TRY(mt_comm_allreduce(comm, &d, &d, op, NULL));
        MT_TRY(mt_comm_wait(comm, NULL));
        MT_TRY(mt_memcpy(v, MT_DEVICE_CPU, d.data, r->dev, (size_t)n * 4, NULL));
    }
    for (int i = 0; i < n; i++)
        x[i] = v[i];
    return MT_OK;
}

/* allreduce_on over every rank. */
static mt_status allreduce_host(run *r, double *x, int n, mt_redop op) {
    return allreduce_on(r, r->world, x, n, op);
}

/* The mean loss over the counted tokens of every rank's micro-batches since the last call
 * (Megatron's reported 'lm loss': the sums' sum over the counts' sum; the tensor-parallel ranks
 * of a data-parallel rank hold the same losses and count), on every rank. */
static mt_status take_loss(run *r, double *loss) {
    double sc[2] = { 0, 0 };
    for (int c = 0; c < r->vpp; c++) {
        double l, n;
        MT_TRY(mt_model_take_loss_sum(r->chunks[c], &l, &n, NULL));
        sc[0] += l, sc[1] += n;
    }
    MT_TRY(allreduce_on(r, r->dp, sc, 2, MT_REDOP_SUM));
    MT_TRY(allreduce_on(r, r->pp, sc, 2, MT_REDOP_SUM)); /* (only the last stage has losses) */
    *loss = sc[0] / sc[1];                               /* no counted token: 0/0, NaN as torch */
    return MT_OK;
}

/* Mixture of experts: the iteration's router losses (without coefficients), each the mean over
 * the layers (every pipeline stage's) and micro-batches, averaged over the data- and
 * context-parallel ranks (Megatron's load_balancing_loss and z_loss); NaN for one that is off. */
static mt_status take_moe_losses(run *r, double *aux, double *z) {
    double v[2] = { 0, 0 };
    if (!r->mc.num_moe_experts) return MT_OK;
    for (int c = 0; c < r->vpp; c++) { /* (a chunk's mean over its layers, weighted by them) */
        double w[2];
        int l0, nl;
        MT_TRY(mt_model_take_moe_losses(r->chunks[c], &w[0], &w[1], NULL));
        MT_TRY(mt_model_stage_layers(&r->mc, c * r->pp_size + r->pp_rank, &l0, &nl));
        for (int i = 0; i < 2; i++)
            v[i] += w[i] * (double)nl / (double)(r->mc.num_layers * r->gdp_size);
    }
    MT_TRY(allreduce_on(r, r->dp, v, 2, MT_REDOP_SUM));
    MT_TRY(allreduce_on(r, r->pp, v, 2, MT_REDOP_SUM));
    *aux = v[0], *z = v[1];
    return MT_OK;
}

/* Multi-token prediction: the iteration's loss of each depth into r->mtp_iter, its tokens' mean over
 * the global batch (the sums and counts over the data-parallel ranks; Megatron's "mtp_<k> loss"). */
static mt_status take_mtp_losses(run *r) {
    const int D = r->mc.mtp_num_layers;
    if (!D) return MT_OK;
    double *sc = calloc((size_t)D * 2, sizeof *sc);
    MT_REQUIRE(sc, MT_ERR_OOM, "MTP losses");
    /* (pipeline parallelism: the last stage's, the last chunk's) */
    mt_status st = mt_model_take_mtp_loss_sums(r->chunks[r->vpp - 1], sc, sc + D, D, NULL);
    for (int k = 0; k < D && st == MT_OK; k++) {
        double v[2] = { sc[k], sc[D + k] };
        st = allreduce_on(r, r->dp, v, 2, MT_REDOP_SUM);
        if (st == MT_OK) st = allreduce_on(r, r->pp, v, 2, MT_REDOP_SUM);
        r->mtp_iter[k] = v[0] / v[1];
    }
    free(sc);
    return st;
}

/* The global batch size after `consumed` samples: `gbs`, or with --rampup-batch-size megatron-core's
 * RampupBatchsizeNumMicroBatchesCalculator.update (START + INCREMENT x the increments whose share
 * of the ramp-up samples has been consumed, then gbs once they all have). */
static int64_t batch_at(const mt_train_args *a, int64_t gbs, int64_t consumed) {
    const int64_t *rb = a->rampup_batch_size;
    if (!a->n_rampup || consumed > rb[2]) return gbs;
    double per_increment = (double)rb[2] / (double)((gbs - rb[0]) / rb[1]);
    return rb[0] + (int64_t)((double)consumed / per_increment) * rb[1];
}

/* The batch an iteration runs: `nominal`, or with --decrease-batch-size-if-needed rounded down to
 * a multiple of micro-batch x data-parallel size (megatron-core's current_running_global_batch_size). */
static int64_t running_batch(const mt_train_args *a, int64_t nominal, int dp) {
    const int64_t unit = (int64_t)a->micro_batch_size * dp;
    return a->decrease_batch_size_if_needed ? nominal / unit * unit : nominal;
}

/* --rampup-batch-size against the global batch: megatron-core's asserts, then every batch size of
 * the ramp a multiple of micro-batch x data-parallel size (Megatron finds a wrong one only when
 * the ramp reaches it). */
static mt_status check_rampup(const mt_train_args *a, int64_t gbs, int dp) {
    const int64_t *rb = a->rampup_batch_size, unit = (int64_t)a->micro_batch_size * dp;
    if (!a->n_rampup) return MT_OK;
    int64_t diff = gbs - rb[0];
    MT_REQUIRE(diff >= 0, MT_ERR_INVALID_ARG,
               "expected global batch size to be greater than or equal to start batch size, got "
               "%lld and %lld",
               (long long)gbs, (long long)rb[0]);
    MT_REQUIRE(diff % rb[1] == 0, MT_ERR_INVALID_ARG,
               "expected global batch size interval (%lld) to be divisible by global batch size "
               "increment (%lld)",
               (long long)diff, (long long)rb[1]);
    MT_REQUIRE(diff > 0 && rb[2] > 0, MT_ERR_INVALID_ARG,
               "--rampup-batch-size %lld %lld %lld: nothing to ramp up to global batch size %lld "
               "(megatron-core divides by zero here)",
               (long long)rb[0], (long long)rb[1], (long long)rb[2], (long long)gbs);
    MT_REQUIRE(running_batch(a, rb[0], dp) > 0, MT_ERR_INVALID_ARG,
               "start batch size %lld is below micro-batch-size (%d) times data parallel size (%d)",
               (long long)rb[0], a->micro_batch_size, dp);
    for (int64_t b = rb[0]; b <= gbs && !a->decrease_batch_size_if_needed; b += rb[1])
        MT_REQUIRE(b % unit == 0, MT_ERR_INVALID_ARG,
                   "current global batch size (%lld) is not divisible by micro-batch-size (%d) "
                   "times data parallel size (%d)",
                   (long long)b, a->micro_batch_size, dp);
    return MT_OK;
}

/* ---- setup ---- */

static mt_status setup_world(run *r) {
    const mt_train_args *a = r->a;
    mt_comm_config cc = MT_COMM_CONFIG_INIT;
    cc.timeout_s = a->distributed_timeout_minutes * 60.0;
    cc.backends = strcmp(a->device, "cpu") == 0 ? MT_COMM_HOST : MT_COMM_AUTO;
    MT_TRY(mt_comm_world_create(&cc, &r->world));
    r->rank = mt_comm_rank(r->world);
    r->nranks = mt_comm_size(r->world);
    /* megatron.core.parallel_state (order tp-dp-pp): tensor-parallel groups of consecutive
     * ranks, data-parallel groups across them, the pipeline's stages outermost */
    const int tp = a->tensor_model_parallel_size, pp = a->pipeline_model_parallel_size;
    MT_REQUIRE(r->nranks % (tp * pp) == 0, MT_ERR_INVALID_ARG,
               "world size (%d) is not divisible by tensor model parallel size (%d) times "
               "pipeline model parallel size (%d)",
               r->nranks, tp, pp);
    r->tp_size = tp, r->tp_rank = r->rank % tp;
    r->pp_size = pp, r->pp_rank = r->rank / (r->nranks / pp);
    const int cp = a->context_parallel_size;
    MT_REQUIRE(r->nranks % (tp * pp * cp) == 0, MT_ERR_INVALID_ARG,
               "world size (%d) is not divisible by tensor model parallel size (%d) times context "
               "parallel size (%d) times pipeline model parallel size (%d)",
               r->nranks, tp, cp, pp);
    r->cp_size = cp, r->cp_rank = r->rank / tp % cp;
    r->dp_size = r->nranks / (tp * pp * cp), r->dp_rank = r->rank / (tp * cp) % r->dp_size;
    r->gdp_size = r->dp_size * cp, r->gdp_rank = r->rank / tp % r->gdp_size;
    if (cp > 1)
        MT_TRY(mt_comm_split(r->world, (r->pp_rank * r->dp_size + r->dp_rank) * tp + r->tp_rank,
                             r->cp_rank, "cp", &r->cp));
    const int stage_rank = r->rank % (tp * r->gdp_size); /* this rank's place in its stage */
    if (tp > 1) MT_TRY(mt_comm_split(r->world, r->rank / tp, r->tp_rank, "tp", &r->tp));
    if (tp * pp > 1 && r->gdp_size > 1) /* (dp: the data- and context-parallel ranks) */
        MT_TRY(
            mt_comm_split(r->world, r->pp_rank * tp + r->tp_rank, r->gdp_rank, "dp", &r->dp_own));
    r->dp = tp * pp > 1 ? r->dp_own : r->world;
    if (pp > 1) {
        MT_TRY(mt_comm_split(r->world, stage_rank, r->pp_rank, "pp", &r->pp));
        const int ends = r->pp_rank == 0 || r->pp_rank == pp - 1;
        if (pp > 2) /* (every rank takes part in the split; the middle stages join none) */
            MT_TRY(
                mt_comm_split(r->world, ends ? stage_rank : -1, r->pp_rank, "embd", &r->emb_own));
        r->emb = pp > 2 ? r->emb_own : r->pp;
        if (tp > 1)
            MT_TRY(mt_comm_split(r->world, r->gdp_rank, r->pp_rank * tp + r->tp_rank, "mp",
                                 &r->mp_own));
    }
    r->mp = pp > 1 && tp > 1 ? r->mp_own : pp > 1 ? r->pp : r->tp;
    /* (the experts' grid, Megatron's tp-ep-dp-pp: a stage's data- and context-parallel ranks
     * (gdp) in groups of ep) */
    const int ep = a->expert_model_parallel_size;
    MT_REQUIRE(r->gdp_size % ep == 0, MT_ERR_INVALID_ARG,
               "world size (%d) is not divisible by tensor model parallel size (%d) times expert "
               "model parallel size (%d) times pipeline model parallel size (%d)",
               r->nranks, tp, ep, pp);
    r->ep_size = ep, r->ep_rank = r->gdp_rank % ep;
    r->edp_size = r->gdp_size / ep, r->edp_rank = r->gdp_rank / ep;
    if (ep > 1) {
        MT_TRY(mt_comm_split(r->world, (r->pp_rank * r->edp_size + r->edp_rank) * tp + r->tp_rank,
                             r->ep_rank, "ep", &r->ep));
        if (r->edp_size > 1)
            MT_TRY(mt_comm_split(r->world, (r->pp_rank * ep + r->ep_rank) * tp + r->tp_rank,
                                 r->edp_rank, "expert-dp", &r->edp));
        MT_TRY(mt_comm_split(r->world, r->edp_rank, r->rank, "expert-mp", &r->emp));
    }
    int ngpu = 0;
    MT_TRY(mt_device_count(&ngpu));
    mt_device d = mt_comm_device(r->world);
    if (strcmp(a->device, "cpu") == 0 || ngpu == 0) d = MT_DEVICE_CPU;
    if (strcmp(a->device, "cuda") == 0 && !mt_device_is_cuda(d))
        return MT_ERROR(MT_ERR_UNSUPPORTED, "--device cuda but no usable GPU (found %d)", ngpu);
    if (mt_device_is_cuda(d) && r->nranks > 1 && !mt_comm_has_device(r->world))
        return MT_ERROR(MT_ERR_UNSUPPORTED, "%d ranks on GPUs need NCCL", r->nranks);
    r->dev = d;
    return mt_device_set(d);
}

static mt_status setup_tokenizer(run *r) {
    const mt_train_args *a = r->a;
    if (r->rank == 0) {
        printf("> building %s tokenizer ...\n", a->tokenizer_type);
        fflush(stdout);
    }
    if (strcmp(a->tokenizer_type, "NullTokenizer") == 0) {
        r->vocab = a->vocab_size + 1; /* megatron's _NullTokenizer: eod = vocab_size */
        r->eod = a->vocab_size;
        return MT_OK;
    }
    if (strcmp(a->tokenizer_type, "HuggingFaceTokenizer") == 0)
        return mt_data_hf_tokenizer_info(a->tokenizer_model, &r->vocab, &r->eod);
    if (strcmp(a->tokenizer_type, "Llama2Tokenizer") == 0 ||
        strcmp(a->tokenizer_type, "GPTSentencePieceTokenizer") == 0)
        return mt_data_sentencepiece_info(a->tokenizer_model, &r->vocab, &r->eod);
    char vb[1024], mb[1024];
    const char *vf =
        a->vocab_file ? a->vocab_file : mt_data_gpt2_file("encoder.json", vb, sizeof vb);
    const char *mf = a->merge_file ? a->merge_file : mt_data_gpt2_file("vocab.bpe", mb, sizeof mb);
    mt_data_tokenizer *t;
    MT_TRY(mt_data_tokenizer_gpt2_create(vf, mf, &t));
    r->vocab = mt_data_tokenizer_vocab_size(t);
    r->eod = mt_data_tokenizer_eod(t);
    mt_data_tokenizer_destroy(t);
    return MT_OK;
}

/* Builds split `split` from a --data-path style list ([w1] p1 [w2 p2 ...]; none: mock data) and
 * the --split string into *out (NULL when the split is empty). */
static mt_status build_split(run *r, char **list, int n, const char *split_str, int split,
                             int64_t samples, mt_data_dataset **out) {
    const mt_train_args *a = r->a;
    int blend = n > 1;
    const char **paths = calloc((size_t)(n ? n : 1), sizeof *paths);
    double *w = calloc((size_t)(n ? n : 1), sizeof *w);
    MT_REQUIRE(paths && w, MT_ERR_OOM, "data paths");
    int np = 0;
    for (int i = 0; i < n; i += blend ? 2 : 1) {
        if (blend) w[np] = atof(list[i]);
        paths[np++] = list[i + blend];
    }
    mt_data_config dc = MT_DATA_CONFIG_INIT;
    dc.sequence_length = a->seq_length;
    dc.seed = (uint32_t)a->seed;
    dc.split = split_str;
    dc.n_paths = a->mock_data ? 0 : np;
    dc.paths = paths;
    dc.weights = blend ? w : NULL;
    dc.cache_dir = a->data_cache_path;
    dc.vocab_size = r->vocab;
    dc.eod = r->eod;
    mt_status st = mt_data_dataset_create(&dc, (mt_data_split)split, samples, out);
    free(paths);
    free(w);
    return st;
}

static mt_status setup_data(run *r) {
    const mt_train_args *a = r->a;
    int64_t train_samples = a->train_samples > 0 ? a->train_samples : a->train_iters * r->gbs;
    int64_t evals = a->eval_interval ? a->train_iters / a->eval_interval + 1 : 0;
    int64_t valid_samples = evals * a->eval_iters * r->gbs;
    int64_t test_samples = a->eval_interval ? a->eval_iters * r->gbs : 0;
    if (a->n_split_path[0] && !a->mock_data) {
        /* megatron's blend_per_split: each split's blend is used whole (its split matrix is
         * [0, 1) for that split), and --split is ignored */
        MT_TRY(build_split(r, a->split_path[0], a->n_split_path[0], "1,0,0", MT_DATA_SPLIT_TRAIN,
                           train_samples, &r->train_ds));
        if (valid_samples && a->n_split_path[1])
            MT_TRY(build_split(r, a->split_path[1], a->n_split_path[1], "0,1,0",
                               MT_DATA_SPLIT_VALID, valid_samples, &r->valid_ds));
        if (test_samples && a->n_split_path[2])
            MT_TRY(build_split(r, a->split_path[2], a->n_split_path[2], "0,0,1", MT_DATA_SPLIT_TEST,
                               test_samples, &r->test_ds));
    } else {
        MT_TRY(build_split(r, a->data_path, a->n_data_path, a->split, MT_DATA_SPLIT_TRAIN,
                           train_samples, &r->train_ds));
        if (valid_samples)
            MT_TRY(build_split(r, a->data_path, a->n_data_path, a->split, MT_DATA_SPLIT_VALID,
                               valid_samples, &r->valid_ds));
        if (test_samples)
            MT_TRY(build_split(r, a->data_path, a->n_data_path, a->split, MT_DATA_SPLIT_TEST,
                               test_samples, &r->test_ds));
    }
    MT_REQUIRE(r->train_ds, MT_ERR_INVALID_ARG, "the train split of --split %s is empty", a->split);
    return MT_OK;
}

/* Whether parameter `name` is an expert's under expert parallelism (held by the expert-data-
 * parallel ranks, not by every data-parallel one). */
static int expert_param(const run *r, const char *name) {
    return r->ep_size > 1 && strstr(name, ".mlp.experts.") != NULL;
}

static mt_status register_param(void *ctx, const char *name, int ndim, const int64_t *shape,
                                int no_wd, mt_tensor *weight, mt_tensor *grad) {
    run *r = ctx;
    int idx;
    if (!weight) { /* listing pass; params whole on every tensor-parallel rank count once, the
                      last stage's copy of a tied embedding not at all (the first stage's does) */
        int flags = no_wd ? MT_OPTIM_PARAM_NO_DECAY : MT_OPTIM_PARAM_DECAY;
        if (r->tp_size > 1) { /* (each chunk's own axes: another's would miscount the norm) */
            MT_REQUIRE(r->chunk_next < r->chunk_nparams, MT_ERR_INTERNAL,
                       "%s: parameter %d of a chunk listed with %d", name, r->chunk_next,
                       r->chunk_nparams);
            if (r->chunk_axes[r->chunk_next++] < 0) flags |= MT_OPTIM_PARAM_TP_REPLICATED;
        }
        if (r->pp_size > 1 && r->pp_rank == r->pp_size - 1 &&
            strcmp(name, "embedding.word_embeddings.weight") == 0)
            flags |= MT_OPTIM_PARAM_SHARED;
        if (expert_param(r, name)) flags |= MT_OPTIM_PARAM_EXPERT;
        return mt_optim_buffer_add(r->buf, name, ndim, shape, flags, NULL);
    }
    MT_TRY(mt_optim_buffer_find(r->buf, name, &idx));
    MT_TRY(mt_optim_buffer_param(r->buf, idx, weight));
    return mt_optim_buffer_grad(r->buf, idx, grad);
}

static mt_status setup_model(run *r) {
    const mt_train_args *a = r->a;
    mt_model_config *c = &r->mc;
    *c = (mt_model_config)MT_MODEL_CONFIG_INIT;
    c->num_layers = a->num_layers;
    c->hidden_size = a->hidden_size;
    c->num_attention_heads = a->num_attention_heads;
    c->num_query_groups = a->num_query_groups;
    c->kv_channels = a->multi_latent_attention ? 0 : a->kv_channels; /* (MLA's: its dims') */
    c->ffn_hidden_size = a->ffn_hidden_size;
    c->multi_latent_attention = a->multi_latent_attention;
    if (c->multi_latent_attention) {
        c->q_lora_rank = a->q_lora_rank;
        c->kv_lora_rank = a->kv_lora_rank;
        c->qk_head_dim = a->qk_head_dim;
        c->qk_pos_emb_head_dim = a->qk_pos_emb_head_dim;
        c->v_head_dim = a->v_head_dim;
    }
    c->seq_length = a->seq_length;
    c->max_position_embeddings = a->max_position_embeddings;
    c->vocab_size = (int)r->vocab;
    c->make_vocab_size_divisible_by = a->make_vocab_size_divisible_by; /* (times the TP size) */
    c->tensor_model_parallel_size = r->tp_size;
    c->sequence_parallel = a->sequence_parallel;
    c->pipeline_model_parallel_size = r->pp_size * r->vpp; /* (chunk 0: stage pp_rank) */
    c->virtual_pipeline_model_parallel_size = r->vpp;
    c->pipeline_model_parallel_rank = r->pp_rank;
    c->num_layers_in_first_pipeline_stage = a->decoder_first_pipeline_num_layers;
    c->num_layers_in_last_pipeline_stage = a->decoder_last_pipeline_num_layers;
    c->normalization =
        strcmp(a->normalization, "RMSNorm") == 0 ? MT_NORM_RMSNORM : MT_NORM_LAYERNORM;
    c->norm_epsilon = (float)a->norm_epsilon;
    const int yarn = strcmp(a->position_embedding_type, "yarn") == 0;
    c->position_embedding_type =
        strcmp(a->position_embedding_type, "rope") == 0 || yarn ? MT_POS_ROPE : MT_POS_LEARNED;
    c->rotary_base = a->rotary_base;
    c->rotary_percent = a->rotary_percent;
    c->window_size = a->window_left;
    if (a->window_attn_skip_freq && c->window_size) /* (Megatron's: read with a window only) */
        MT_TRY(mt_model_window_attn_skip_freq(c, a->window_attn_skip_freq));
    c->mtp_num_layers = a->mtp_num_layers;
    c->mtp_loss_scaling_factor = (float)a->mtp_loss_scaling_factor;
    if (a->use_rope_scaling) /* (Megatron's: low/high_freq_factor 1/4, original 8192) */
        c->rope_scaling = (mt_rope_scaling){ .type = MT_ROPE_SCALING_LLAMA3,
                                             .factor = a->rope_scaling_factor,
                                             .original_max_position_embeddings = 8192 };
    else if (a->rotary_seq_len_interpolation_factor != 0.0)
        c->rope_scaling = (mt_rope_scaling){ .type = MT_ROPE_SCALING_LINEAR,
                                             .factor = a->rotary_seq_len_interpolation_factor };
    else if ((yarn || (a->multi_latent_attention &&
                       (!a->rope_type || strcmp(a->rope_type, "yarn") == 0))) &&
             a->rotary_scaling_factor != 1.0) /* (factor 1: YaRN is plain RoPE) */
        c->rope_scaling = (mt_rope_scaling){
            .type = MT_ROPE_SCALING_YARN,
            .factor = a->rotary_scaling_factor,
            .original_max_position_embeddings = a->original_max_position_embeddings,
            .beta_fast = a->beta_fast,
            .beta_slow = a->beta_slow,
            .mscale = a->mscale,
            .mscale_all_dim = a->mscale_all_dim,
        };
    c->rotary_interleaved = a->rotary_interleaved;
    c->swiglu = a->swiglu;
    c->add_bias_linear = !a->disable_bias_linear;
    c->add_qkv_bias = a->add_qkv_bias;
    c->untie_embeddings_and_output_weights = a->untie_embeddings_and_output_weights;
    c->init_method_std = (float)a->init_method_std;
    c->seed = (uint64_t)a->seed;
    c->dtype = a->bf16 ? MT_BF16 : a->fp16 ? MT_F16 : MT_F32;
    c->deterministic = a->deterministic_mode;
    c->logits_chunks = a->logits_chunks;
    c->per_token_loss = a->calculate_per_token_loss;
    c->qk_layernorm = a->qk_layernorm;
    c->hidden_dropout = (float)a->hidden_dropout;
    c->attention_dropout = (float)a->attention_dropout;
    c->num_moe_experts = a->num_experts;
    c->moe_router_topk = a->moe_router_topk;
    c->moe_ffn_hidden_size = a->moe_ffn_hidden_size;
    if (strcmp(a->moe_router_load_balancing_type, "aux_loss") == 0 ||
        strcmp(a->moe_router_load_balancing_type, "seq_aux_loss") == 0)
        c->moe_aux_loss_coeff = (float)a->moe_aux_loss_coeff;
    c->moe_router_seq_aux = strcmp(a->moe_router_load_balancing_type, "seq_aux_loss") == 0;
    c->moe_z_loss_coeff = (float)a->moe_z_loss_coeff;
    c->moe_expert_capacity_factor = (float)a->moe_expert_capacity_factor;
    c->moe_token_drop_position = strcmp(a->moe_token_drop_policy, "position") == 0;
    c->moe_pad_expert_input_to_capacity = a->moe_pad_expert_input_to_capacity;
    c->moe_router_pre_softmax = a->moe_router_pre_softmax;
    c->moe_router_topk_scaling_factor = (float)a->moe_router_topk_scaling_factor;
    c->moe_router_num_groups = a->moe_router_num_groups;
    c->moe_router_group_topk = a->moe_router_group_topk;
    c->moe_shared_expert_intermediate_size = a->moe_shared_expert_intermediate_size;
    c->moe_shared_expert_gate = a->moe_shared_expert_gate;
    c->moe_router_score_sigmoid = strcmp(a->moe_router_score_function, "sigmoid") == 0;
    c->moe_router_enable_expert_bias = a->moe_router_enable_expert_bias;
    c->moe_router_bias_update_rate = (float)a->moe_router_bias_update_rate;
    if (a->moe_layer_freq && c->num_moe_experts) /* (Megatron's: read with experts only) */
        MT_TRY(mt_model_moe_layer_freq(c, a->moe_layer_freq));
    c->expert_model_parallel_size = r->ep_size;
    c->expert_model_parallel_rank = r->ep_rank;
    c->context_parallel_size = r->cp_size; /* (this rank's share of each sequence) */
    c->context_parallel_rank = r->cp_rank;
    c->seq_length = a->seq_length / r->cp_size;
    if (a->recompute_granularity) {
        int full = strcmp(a->recompute_granularity, "full") == 0;
        c->recompute_granularity = full ? MT_RECOMPUTE_FULL : MT_RECOMPUTE_SELECTIVE;
        if (a->recompute_method)
            c->recompute_method = strcmp(a->recompute_method, "block") == 0 ? MT_RECOMPUTE_BLOCK
                                                                            : MT_RECOMPUTE_UNIFORM;
        c->recompute_num_layers = a->recompute_num_layers;
        for (int i = 0; i < a->n_recompute_modules; i++)
            if (strcmp(a->recompute_modules[i], "mlp_act") == 0 ||
                strcmp(a->recompute_modules[i], "moe_act") == 0) /* (moe_act: MoE models only) */
                c->recompute_mlp_act = 1;
            else if (strcmp(a->recompute_modules[i], "layernorm") == 0)
                c->recompute_layernorm = 1;
            else if (strcmp(a->recompute_modules[i], "mla_up_proj") == 0)
                c->recompute_mla_up_proj = 1;
    }
    const int G = a->microbatch_group_size_per_vp_stage; /* (0: P) */
    if (r->vpp > 1) MT_TRY(mt_pp_interleaved_check(r->pp_size, r->vpp, r->num_micro, G));
    MT_TRY(mt_model_config_finalize(c));
    mt_model_config *cc = calloc((size_t)r->vpp, sizeof *cc);
    int *counts = calloc((size_t)r->vpp + 1, sizeof(int)); /* (the stage's slots, each chunk's) */
    int *map = calloc((size_t)(r->vpp * r->num_micro), sizeof(int)), pool = 0;
    if (!cc || !counts || !map) free(cc), free(counts), free(map);
    MT_REQUIRE(cc && counts && map, MT_ERR_OOM, "model chunks");
    for (int v = 0; v < r->vpp; v++) /* chunk v: stage v P + r */
        cc[v] = *c, cc[v].pipeline_model_parallel_rank = v * r->pp_size + r->pp_rank;
    /* interleaved: the most micro-batches in flight of any iteration's count (one the schedule
     * refuses is never run), in activation slots the chunks share */
    for (int m = r->pp_size; r->vpp > 1 && m <= r->num_micro; m++) {
        int nb, np;
        if (mt_pp_interleaved_counts(r->pp_size, r->pp_rank, r->vpp, m, G, counts, &nb) != MT_OK ||
            mt_pp_interleaved_slot_map(r->pp_size, r->pp_rank, r->vpp, m, G, map, &np) != MT_OK) {
            mt_error_clear();
            continue;
        }
        r->nslots = counts[0] > r->nslots ? counts[0] : r->nslots;
        r->nvbuf = nb > r->nvbuf ? nb : r->nvbuf;
        pool = np > pool ? np : pool;
    }
    free(counts), free(map);
    for (int v = 0; r->vpp > 1 && v < r->vpp; v++)
        cc[v].pipeline_num_slots = pool;
    for (int v = 0; v < r->vpp; v++) {
        mt_status st = mt_model_config_finalize(&cc[v]);
        if (st != MT_OK) free(cc);
        MT_TRY(st);
    }
    mt_status st = setup_chunks(r, cc);
    free(cc);
    return st;
}

/* The optimizer's buffer of every chunk's parameters, the chunks, the optimizer, the schedule. */
static mt_status setup_chunks(run *r, const mt_model_config *cc) {
    const mt_train_args *a = r->a;
    const mt_model_config *c = &r->mc;
    mt_optim_buffer_config bc = MT_OPTIM_BUFFER_CONFIG_INIT;
    bc.param_dtype = c->dtype;
    bc.device = r->dev;
    bc.bucket_numel = a->ddp_bucket_size
                          ? a->ddp_bucket_size
                          : (40000000 > 1000000 * r->gdp_size ? 40000000 : 1000000 * r->gdp_size);
    bc.dp_size = r->gdp_size;
    bc.expert_dp_size = r->edp_size;
    bc.tp_rank = r->tp_rank;
    MT_TRY(mt_optim_buffer_create(&bc, &r->buf));
    for (int v = 0; v < r->vpp; v++) {
        if (r->tp_size > 1) { /* (one table a chunk, not one a parameter) */
            r->chunk_nparams = mt_model_param_tp_axes(&cc[v], NULL, 0);
            MT_REQUIRE(r->chunk_nparams >= 0, MT_ERR_INVALID_ARG, "model chunk %d: %s", v,
                       mt_last_error());
            free(r->chunk_axes);
            r->chunk_axes = calloc((size_t)r->chunk_nparams + 1, sizeof(int));
            MT_REQUIRE(r->chunk_axes, MT_ERR_OOM, "parameter axes");
            mt_model_param_tp_axes(&cc[v], r->chunk_axes, r->chunk_nparams);
            r->chunk_next = 0;
        }
        MT_TRY(mt_model_list_params(&cc[v], register_param, r));
    }
    size_t bytes;
    MT_TRY(mt_optim_buffer_finalize(r->buf, &bytes));
    MT_TRY(mt_arena_create(r->dev, bytes, &r->buf_arena));
    MT_TRY(mt_optim_buffer_bind(r->buf, r->buf_arena));
    r->chunks = calloc((size_t)r->vpp, sizeof *r->chunks);
    MT_REQUIRE(r->chunks, MT_ERR_OOM, "model chunks");
    if (r->vpp > 1) { /* the chunks' activation slots: one pool, slots of the largest chunk's */
        for (int v = 0; v < r->vpp; v++) {
            size_t one;
            MT_TRY(mt_model_slot_bytes(&cc[v], a->micro_batch_size, r->dev, &one));
            r->slots.stride = one > r->slots.stride ? one : r->slots.stride;
        }
        const size_t n = r->slots.stride * (size_t)cc[0].pipeline_num_slots;
        MT_TRY(mt_arena_create(r->dev, n + MT_ARENA_ALIGN, &r->slot_arena));
        MT_TRY(mt_arena_alloc(r->slot_arena, n, &r->slots.base));
    }
    for (int v = 0; v < r->vpp; v++) {
        mt_model **m = &r->chunks[v];
        MT_TRY(r->vpp > 1 ? mt_model_create_shared_slots(&cc[v], a->micro_batch_size, r->dev, r->tp,
                                                         register_param, r, &r->slots, m)
                          : mt_model_create_tp(&cc[v], a->micro_batch_size, r->dev, r->tp,
                                               register_param, r, m));
        if (r->ep) MT_TRY(mt_model_set_expert_group(*m, r->ep));
        if (r->cp) MT_TRY(mt_model_set_context_group(*m, r->cp));
        /* the forward and backward as one CUDA graph from the second micro-batch on
         * (MT_CUDA_GRAPHS=0: off, for comparison); the profiler runs without it */
        mt_model_set_cuda_graphs(*m, mt_env_int("MT_CUDA_GRAPHS", 1) != 0);
    }
    r->model = r->chunks[0];
    if (r->vpp == 1) {
        r->nslots = mt_model_pp_slots(r->model); /* (interleaved: the stage's, set above) */
    } else {                                     /* staging buffers of the activations' shape */
        const mt_tensor o = mt_model_pp_output(r->model);
        const size_t one = mt_tensor_nbytes(&o) + MT_ARENA_ALIGN;
        MT_TRY(mt_arena_create(r->dev, one * (size_t)r->nvbuf, &r->vbuf_arena));
        r->vbuf = calloc((size_t)r->nvbuf, sizeof *r->vbuf);
        /* the exchanges on a stream of their own, overlapping the chunks' work (Megatron's
         * overlap_p2p_comm; MT_PP_OVERLAP=0: in the compute stream's order, for comparisons) */
        if (mt_device_is_cuda(r->dev) && mt_env_int("MT_PP_OVERLAP", 1) != 0)
            MT_TRY(mt_stream_create(&r->pp_stream));
        r->slot_gs = calloc((size_t)r->nslots, sizeof *r->slot_gs);
        MT_REQUIRE(r->vbuf && r->slot_gs, MT_ERR_OOM, "pipeline buffers");
        for (int k = 0; k < r->nvbuf; k++)
            MT_TRY(mt_tensor_alloc(r->vbuf_arena, o.dtype, o.ndim, o.shape, &r->vbuf[k]));
    }

    mt_optim_config oc = MT_OPTIM_CONFIG_INIT;
    oc.kind = strcmp(a->optimizer, "sgd") == 0 ? MT_OPTIM_SGD : MT_OPTIM_ADAMW;
    oc.adam_beta1 = (float)a->adam_beta1;
    oc.adam_beta2 = (float)a->adam_beta2;
    oc.adam_eps = (float)a->adam_eps;
    oc.sgd_momentum = (float)a->sgd_momentum;
    oc.clip_grad = (float)a->clip_grad;
    oc.log_num_zeros_in_grad = a->log_num_zeros_in_grad;
    oc.use_distributed_optimizer = a->use_distributed_optimizer;
    r->pgather = a->overlap_param_gather && a->use_distributed_optimizer && r->gdp_size > 1;
    oc.overlap_param_gather = r->pgather;
    oc.grad_reduce_in_bf16 = a->grad_reduce_in_bf16;
    oc.dp = r->gdp_size > 1 ? r->dp : NULL;
    oc.mp = r->mp; /* the grad norm's split parameters (and stages) are summed over it */
    oc.expert_dp = r->edp;
    oc.expert_mp = r->emp;
    MT_TRY(mt_optim_state_bytes(&oc, r->buf, &bytes));
    MT_TRY(mt_arena_create(r->dev, bytes, &r->opt_arena));
    MT_TRY(mt_optim_create(&oc, r->buf, r->opt_arena, &r->opt));
    /* get_megatron_optimizer: a constant scaler for --loss-scale with fp16 or bf16, else a dynamic
     * one for fp16; none otherwise (loss scale 1) */
    if ((a->fp16 || a->bf16) && a->loss_scale > 0) {
        MT_TRY(mt_optim_scaler_constant(&r->scaler, (float)a->loss_scale));
        r->scale_p = &r->scaler;
    } else if (a->fp16) {
        MT_TRY(mt_optim_scaler_dynamic(&r->scaler, (float)a->initial_loss_scale,
                                       (float)a->min_loss_scale, (int)a->loss_scale_window,
                                       (int)a->hysteresis));
        r->scale_p = &r->scaler;
    }
    MT_TRY(setup_overlap(r));
    for (int v = 0; r->pgather && v < r->vpp; v++)
        mt_model_set_param_wait(r->chunks[v], param_wait, r);
    if (mt_env_int("MT_PROFILE", 0) != 0 || a->timing_log_level > 0)
        MT_TRY(mt_prof_create(&r->prof, mt_device_is_cuda(r->dev), 4096));

    mt_optim_sched *s = &r->sched;
    *s = (mt_optim_sched)MT_OPTIM_SCHED_INIT;
    s->init_lr = a->lr_warmup_init;
    s->max_lr = a->lr;
    s->min_lr = a->min_lr;
    MT_TRY(mt_lr_decay_style_parse(a->lr_decay_style, &s->lr_decay_style));
    MT_TRY(mt_lr_wsd_style_parse(a->lr_wsd_decay_style, &s->lr_wsd_decay_style));
    MT_TRY(mt_wd_incr_style_parse(a->weight_decay_incr_style, &s->wd_incr_style));
    s->start_wd = isnan(a->start_weight_decay) ? a->weight_decay : a->start_weight_decay;
    s->end_wd = isnan(a->end_weight_decay) ? a->weight_decay : a->end_weight_decay;
    if (a->train_samples > 0) { /* get_optimizer_param_scheduler's sample-based branch */
        s->lr_decay_steps =
            (double)(a->lr_decay_samples > 0 ? a->lr_decay_samples : a->train_samples);
        s->wd_incr_steps = (double)a->train_samples;
        s->wsd_decay_steps = (double)a->lr_wsd_decay_samples;
        s->lr_warmup_steps = isnan(a->lr_warmup_fraction)
                                 ? (double)a->lr_warmup_samples
                                 : a->lr_warmup_fraction * s->lr_decay_steps;
    } else {
        MT_TRY(
            mt_optim_sched_from_iters(s, a->train_iters, a->lr_decay_iters, a->lr_warmup_iters,
                                      isnan(a->lr_warmup_fraction) ? -1.0 : a->lr_warmup_fraction,
                                      a->lr_wsd_decay_iters, r->gbs));
    }
    return mt_optim_sched_check(s);
}

/* --reset-attention-mask takes effect (Megatron resets the dataloader's mask, which
 * --no-create-attention-mask-in-dataloader leaves out). */
static int doc_masks(const mt_train_args *a) {
    return a->reset_attention_mask && !a->no_create_attention_mask;
}

static mt_status setup_io(run *r) {
    const mt_train_args *a = r->a;
    int64_t B = a->micro_batch_size, T = a->seq_length;
    r->ids = calloc((size_t)B, sizeof *r->ids);
    r->text = calloc((size_t)(B * (T + 1)), sizeof *r->text);
    r->htok = calloc((size_t)(2 * B * T), sizeof *r->htok);
    r->htgt = calloc((size_t)(2 * B * T), sizeof *r->htgt);
    const int docs = doc_masks(a);
    if (a->reset_position_ids) r->hpos = calloc((size_t)(2 * B * T), sizeof *r->hpos);
    if (docs) r->hks = calloc((size_t)(2 * B * T), sizeof *r->hks);
    const int drop = a->hidden_dropout > 0.0 || a->attention_dropout > 0.0;
    if (drop) r->hsid = calloc((size_t)(2 * B), sizeof *r->hsid);
    r->dstart = calloc((size_t)T, sizeof *r->dstart);
    MT_REQUIRE(r->ids && r->text && r->htok && r->htgt && (r->hpos || !a->reset_position_ids) &&
                   (r->hks || !docs) && (r->hsid || !drop) && r->dstart,
               MT_ERR_OOM, "batch buffers");
    const int S = r->nslots;
    r->tok = calloc((size_t)S, sizeof(mt_tensor));
    r->tgt = calloc((size_t)S, sizeof(mt_tensor));
    r->pos = calloc((size_t)S, sizeof(mt_tensor));
    r->ks = calloc((size_t)S, sizeof(mt_tensor));
    r->sid = calloc((size_t)S, sizeof(mt_tensor));
    MT_REQUIRE(r->tok && r->tgt && r->pos && r->ks && r->sid, MT_ERR_OOM, "batch slots");
    const int64_t Tl = T / r->cp_size; /* (context parallelism: this rank's tokens a sequence) */
    if (r->cp_size > 1) {
        r->hcp = calloc((size_t)(B * Tl), sizeof *r->hcp);
        MT_REQUIRE(r->hcp, MT_ERR_OOM, "batch buffers");
    }
    const int D = r->mc.mtp_num_layers, mtp_cp = D > 0 && r->cp_size > 1;
    if (mtp_cp) {
        r->hmtp = calloc((size_t)(2 * 2 * D * B * T), sizeof *r->hmtp);
        r->hmcount = calloc((size_t)(2 * D * 2), sizeof *r->hmcount);
        r->mtp_tok = calloc((size_t)S, sizeof(mt_tensor));
        r->mtp_tgt = calloc((size_t)S, sizeof(mt_tensor));
        r->mtp_scale = calloc((size_t)(S * D), sizeof *r->mtp_scale);
        MT_REQUIRE(r->hmtp && r->hmcount && r->mtp_tok && r->mtp_tgt && r->mtp_scale, MT_ERR_OOM,
                   "MTP batch buffers");
    }
    MT_TRY(mt_arena_create(
        r->dev,
        (size_t)S * ((size_t)(4 * B * T * 4 + 8 * B) + 6 * MT_ARENA_ALIGN) +
            (mtp_cp ? (size_t)S * (2 * (size_t)(D * B * T) * 4 + 2 * MT_ARENA_ALIGN) : 0) +
            MT_ARENA_ALIGN + 64,
        &r->io_arena));
    for (int k = 0; k < S; k++) {
        MT_TRY(mt_tensor_alloc(r->io_arena, MT_I32, 2, (int64_t[]){ B, Tl }, &r->tok[k]));
        MT_TRY(mt_tensor_alloc(r->io_arena, MT_I32, 2, (int64_t[]){ B, Tl }, &r->tgt[k]));
        if (a->reset_position_ids || r->cp_size > 1)
            MT_TRY(mt_tensor_alloc(r->io_arena, MT_I32, 2, (int64_t[]){ B, Tl }, &r->pos[k]));
        if (r->cp_size > 1) { /* the positions of this rank's chunks, the same every batch */
            const int64_t c2 = Tl / 2;
            for (int64_t b = 0; b < B; b++)
                for (int64_t t = 0; t < Tl; t++) {
                    const int64_t g = t < c2 ? r->cp_rank : 2 * r->cp_size - 1 - r->cp_rank;
                    r->hcp[b * Tl + t] = (int32_t)(g * c2 + t % c2);
                }
            MT_TRY(mt_memcpy(r->pos[k].data, r->dev, r->hcp, MT_DEVICE_CPU, (size_t)(B * Tl) * 4,
                             NULL));
        }
        if (docs) MT_TRY(mt_tensor_alloc(r->io_arena, MT_I32, 2, (int64_t[]){ B, T }, &r->ks[k]));
        if (mtp_cp)
            for (int i = 0; i < 2; i++)
                MT_TRY(mt_tensor_alloc(r->io_arena, MT_I32, 3, (int64_t[]){ D, B, Tl },
                                       i ? &r->mtp_tgt[k] : &r->mtp_tok[k]));
        /* the dropout masks are keyed by the sample (mt_model_set_sample_ids) */
        if (drop) MT_TRY(mt_tensor_alloc(r->io_arena, MT_I64, 1, (int64_t[]){ B }, &r->sid[k]));
    }
    MT_TRY(use_slot(r, 0));
    MT_TRY(mt_tensor_alloc(r->io_arena, MT_F32, 1, (int64_t[]){ 2 }, &r->red));
    int64_t n = a->train_iters + 1;
    r->gv_loss = calloc((size_t)n, sizeof(double));
    r->gv_zeros = calloc((size_t)n, sizeof(double));
    r->gv_time = calloc((size_t)n, sizeof(double));
    r->gv_mtp = calloc((size_t)(n * D + 1), sizeof(double));
    r->mtp_iter = calloc((size_t)D + 1, sizeof(double));
    r->mtp_interval = calloc((size_t)D + 1, sizeof(double));
    MT_REQUIRE(r->gv_loss && r->gv_zeros && r->gv_time && r->gv_mtp && r->mtp_iter &&
                   r->mtp_interval,
               MT_ERR_OOM, "golden values");
    for (int64_t i = 0; i < n; i++)
        r->gv_loss[i] = NAN;
    if (a->metrics_jsonl && last_rank(r)) {
        r->jsonl = fopen(a->metrics_jsonl, r->iteration ? "a" : "w");
        MT_REQUIRE(r->jsonl, MT_ERR_IO, "cannot write --metrics-jsonl %s", a->metrics_jsonl);
    }
    return MT_OK;
}

/* ---- batches ---- */

/* The sampler's next micro-batch into the host tokens and targets of slot 0 or 1. */
static mt_status read_batch(run *r, mt_data_dataset *ds, mt_data_sampler *s, int slot) {
    const mt_train_args *a = r->a;
    int64_t B = a->micro_batch_size, T = a->seq_length;
    int32_t *tok = r->htok + slot * B * T, *tgt = r->htgt + slot * B * T;
    int64_t got = mt_data_sampler_next(s, r->ids);
    MT_REQUIRE(got == B, MT_ERR_INTERNAL, "data sampler exhausted (%lld of %lld samples)",
               (long long)got, (long long)B);
    r->hcount[slot] = r->hcount_all[slot] = 0;
    if (r->hmcount) /* (multi-token prediction under context parallelism: its depths' counts) */
        memset(r->hmcount + slot * 2 * r->mc.mtp_num_layers, 0,
               sizeof *r->hmcount * 2 * (size_t)r->mc.mtp_num_layers);
    const int64_t c2 = T / (2 * r->cp_size), cpr = r->cp_rank, last = 2 * r->cp_size - 1;
    if (r->hsid) memcpy(r->hsid + slot * B, r->ids, (size_t)B * sizeof *r->ids);
    for (int64_t b = 0; b < B; b++) {
        MT_TRY(mt_data_dataset_get(ds, r->ids[b], r->text + b * (T + 1), NULL));
        for (int64_t t = 0; t < T; t++) {
            int64_t i = b * T + t;
            tok[i] = (int32_t)r->text[b * (T + 1) + t];
            tgt[i] = (int32_t)r->text[b * (T + 1) + t + 1];
            /* --eod-mask-loss: Megatron's loss_mask is 0 where the input token is EOD */
            if (a->eod_mask_loss && tok[i] == r->eod) tgt[i] = MT_XENT_IGNORE_INDEX;
            const int64_t g = t / c2; /* (context parallelism: whose chunk) */
            r->hcount[slot] += tgt[i] != MT_XENT_IGNORE_INDEX && (g == cpr || g == last - cpr);
            r->hcount_all[slot] += tgt[i] != MT_XENT_IGNORE_INDEX;
        }
        /* multi-token prediction under context parallelism: depth k's rolls of the whole
         * sequence (megatron.core's roll_tensor across the ranks' chunks), k = 1..D */
        for (int k = 1; r->hmtp && k <= r->mc.mtp_num_layers; k++) {
            const int64_t D = r->mc.mtp_num_layers;
            int32_t *mt = r->hmtp + ((slot * 2 + 0) * D + k - 1) * B * T + b * T;
            int32_t *mg = r->hmtp + ((slot * 2 + 1) * D + k - 1) * B * T + b * T;
            int64_t *cnt = r->hmcount + (slot * D + k - 1) * 2;
            for (int64_t t = 0; t < T; t++) {
                mt[t] = t + k < T ? tok[b * T + t + k] : 0;
                mg[t] = t + k < T ? tgt[b * T + t + k] : MT_XENT_IGNORE_INDEX;
                const int64_t g = t / c2;
                cnt[0] += mg[t] != MT_XENT_IGNORE_INDEX && (g == cpr || g == last - cpr);
                cnt[1] += mg[t] != MT_XENT_IGNORE_INDEX;
            }
        }
        /* --reset-position-ids and --reset-attention-mask (megatron's
         * _get_ltor_masks_and_position_ids): positions restart at each document's first token,
         * and attention sees the tokens from there on */
        if (!r->hpos && !r->hks) continue;
        mt_data_doc_starts(r->text + b * (T + 1), T, r->eod, r->dstart);
        const int64_t W = a->window_left; /* (--window-size: at most W keys before, as the
                                             model's own key starts without documents) */
        for (int64_t t = 0; t < T; t++) {
            const int64_t ds = r->dstart[t];
            if (r->hpos) r->hpos[slot * B * T + b * T + t] = (int32_t)(t - ds);
            if (r->hks) r->hks[slot * B * T + b * T + t] = (int32_t)(W && t - W > ds ? t - W : ds);
        }
    }
    return MT_OK;
}

/* Host tokens (B,T) to device ones: all of them, or with context parallelism this rank's two
 * chunks of each sequence (Megatron's get_batch_on_this_cp_rank). The copies are queued on the
 * default stream, behind the work that reads the slot before (a blocking copy would wait for all
 * queued work, pipeline transfers included, before the host could queue more). */
static mt_status upload_ids(run *r, void *dst, const int32_t *src) {
    const int64_t B = r->a->micro_batch_size, T = r->a->seq_length, cp = r->cp_size;
    if (cp == 1)
        return mt_memcpy(dst, r->dev, src, MT_DEVICE_CPU, (size_t)(B * T) * 4, MT_STREAM_DEFAULT);
    const int64_t c2 = T / (2 * cp), Tl = T / cp;
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < 2; h++) {
            const int64_t g = h ? 2 * cp - 1 - r->cp_rank : r->cp_rank;
            memcpy(r->hcp + b * Tl + h * c2, src + b * T + g * c2, (size_t)c2 * 4);
        }
    return mt_memcpy(dst, r->dev, r->hcp, MT_DEVICE_CPU, (size_t)(B * Tl) * 4, MT_STREAM_DEFAULT);
}

/* Host batch `slot` to device slot `k`'s tokens, targets, positions, key starts, sample ids. */
static mt_status upload_batch(run *r, int slot, int k) {
    size_t n = (size_t)(r->a->micro_batch_size * r->a->seq_length);
    const int D = r->hmtp ? r->mc.mtp_num_layers : 0;
    for (int j = 0; j < D; j++) { /* (MTP's rolls, this rank's chunks of them, and scales) */
        const size_t per = n / (size_t)r->cp_size;
        MT_TRY(upload_ids(r, (int32_t *)r->mtp_tok[k].data + j * per,
                          r->hmtp + ((size_t)(slot * 2 + 0) * D + j) * n));
        MT_TRY(upload_ids(r, (int32_t *)r->mtp_tgt[k].data + j * per,
                          r->hmtp + ((size_t)(slot * 2 + 1) * D + j) * n));
        /* a depth's gradient as a mean over every rank's counted tokens, given the loss scale
         * of the decoder's (micro_scale: its mean over every rank's) */
        const int64_t *cnt = r->hmcount + (slot * D + j) * 2;
        const double nl = (double)r->hcount[slot], na = (double)r->hcount_all[slot];
        r->mtp_scale[k * D + j] = r->a->calculate_per_token_loss ? 1.0f
                                  : cnt[1] > 0 && nl > 0
                                      ? (float)((double)cnt[0] * na / ((double)cnt[1] * nl))
                                      : 0.0f;
    }
    MT_TRY(upload_ids(r, r->tok[k].data, r->htok + slot * n));
    if (r->hpos) MT_TRY(upload_ids(r, r->pos[k].data, r->hpos + slot * n));
    if (r->hks)
        MT_TRY(mt_memcpy(r->ks[k].data, r->dev, r->hks + slot * n, MT_DEVICE_CPU, n * 4,
                         MT_STREAM_DEFAULT));
    if (r->hsid) {
        const size_t B = (size_t)r->a->micro_batch_size;
        MT_TRY(mt_memcpy(r->sid[k].data, r->dev, r->hsid + slot * B, MT_DEVICE_CPU, B * 8,
                         MT_STREAM_DEFAULT));
    }
    return upload_ids(r, r->tgt[k].data, r->htgt + slot * n);
}

/* The model reads device slot k's positions, key starts and sample ids from now on (those that
 * the run has). */
static mt_status use_slot_on(run *r, mt_model *m, int k) {
    if (r->hpos || r->cp_size > 1) MT_TRY(mt_model_set_positions(m, &r->pos[k]));
    if (r->hmtp)
        MT_TRY(mt_model_set_mtp_inputs(m, &r->mtp_tok[k], &r->mtp_tgt[k],
                                       r->mtp_scale + (size_t)k * r->mc.mtp_num_layers));
    if (r->hks) MT_TRY(mt_model_set_key_starts(m, &r->ks[k]));
    if (r->hsid) MT_TRY(mt_model_set_sample_ids(m, &r->sid[k]));
    return MT_OK;
}
static mt_status use_slot(run *r, int k) {
    return use_slot_on(r, r->model, k);
}

static mt_status load_batch(run *r, mt_data_dataset *ds, mt_data_sampler *s) {
    MT_TRY(read_batch(r, ds, s, 0));
    return upload_batch(r, 0, 0);
}

/* ---- checkpoints ---- */

static mt_status ckpt_gather(void *ctx, const char *mine, char **all) {
    run *r = ctx;
    if (r->nranks == 1) {
        all[0] = strdup(mine);
        return MT_OK;
    }
    /* all-gather the lengths, then every rank's string in a slot of the longest length */
    int64_t len = (int64_t)strlen(mine) + 1, *lens = calloc((size_t)r->nranks, sizeof *lens);
    MT_REQUIRE(lens, MT_ERR_OOM, "gather");
    mt_tensor tl = mt_tensor_1d(&len, MT_I64, 1, MT_DEVICE_CPU);
    mt_tensor tls = mt_tensor_1d(lens, MT_I64, r->nranks, MT_DEVICE_CPU);
    mt_status st = mt_comm_allgather(r->world, &tls, &tl, NULL);
    int64_t slot = 1;
    for (int i = 0; st == MT_OK && i < r->nranks; i++)
        slot = lens[i] > slot ? lens[i] : slot;
    char *send = calloc((size_t)slot, 1), *recv = calloc((size_t)(slot * r->nranks), 1);
    if (st == MT_OK && (!send || !recv))
        st = MT_ERROR(MT_ERR_OOM, "gather of %lld bytes", (long long)slot);
    if (st == MT_OK) {
        memcpy(send, mine, (size_t)len);
        mt_tensor ts = mt_tensor_1d(send, MT_U8, slot, MT_DEVICE_CPU);
        mt_tensor tr = mt_tensor_1d(recv, MT_U8, slot * r->nranks, MT_DEVICE_CPU);
        st = mt_comm_allgather(r->world, &tr, &ts, NULL);
    }
    if (st == MT_OK && r->rank == 0)
        for (int i = 0; i < r->nranks; i++)
            all[i] = strdup(recv + (size_t)i * (size_t)slot);
    free(lens);
    free(send);
    free(recv);
    return st;
}

static mt_status ckpt_bcast(void *ctx, int64_t *value) {
    run *r = ctx;
    if (r->nranks == 1) return MT_OK;
    mt_tensor t = mt_tensor_1d(value, MT_I64, 1, MT_DEVICE_CPU);
    return mt_comm_broadcast(r->world, &t, &t, 0, NULL);
}

/* The model's rotary frequencies in Hugging Face's config h: rope_theta (transformers 4's) and
 * rope_parameters (5's: rope_type, rope_theta, the scaling's own), and for a scaled one also
 * rope_scaling (4's; 5 reads it first), YaRN's with its attention_factor (cos and sin times
 * m(factor, mscale) / m(factor, mscale_all_dim)) given, which transformers would otherwise infer
 * other than Megatron where one mscale is 0. */
static void hf_rope(json_t *h, const mt_model_config *c) {
    const mt_rope_scaling *s = &c->rope_scaling;
    json_t *p = json_object();
    static const char *const types[] = { "default", "linear", "llama3", "yarn", "longrope" };
    json_object_set_new(p, "rope_type", json_string(types[s->type]));
    if (s->type != MT_ROPE_SCALING_NONE) json_object_set_new(p, "factor", json_real(s->factor));
    const double n = s->original_max_position_embeddings;
    if (s->type == MT_ROPE_SCALING_LLAMA3) {
        json_object_set_new(p, "low_freq_factor",
                            json_real(s->low_freq_factor != 0.0 ? s->low_freq_factor : 1.0));
        json_object_set_new(p, "high_freq_factor",
                            json_real(s->high_freq_factor != 0.0 ? s->high_freq_factor : 4.0));
        json_object_set_new(p, "original_max_position_embeddings",
                            json_integer((json_int_t)(n != 0.0 ? n : 8192)));
    } else if (s->type == MT_ROPE_SCALING_YARN) {
        json_object_set_new(p, "original_max_position_embeddings",
                            json_integer((json_int_t)(n != 0.0 ? n : 4096)));
        json_object_set_new(p, "beta_fast", json_real(s->beta_fast != 0.0 ? s->beta_fast : 32));
        json_object_set_new(p, "beta_slow", json_real(s->beta_slow != 0.0 ? s->beta_slow : 1));
        json_object_set_new(p, "mscale", json_real(s->mscale));
        json_object_set_new(p, "mscale_all_dim", json_real(s->mscale_all_dim));
        json_object_set_new(p, "attention_factor",
                            json_real(mt_rope_yarn_mscale(s->factor, s->mscale) /
                                      mt_rope_yarn_mscale(s->factor, s->mscale_all_dim)));
        if (s->no_truncate) json_object_set_new(p, "truncate", json_false());
    } else if (s->type == MT_ROPE_SCALING_LONGROPE) { /* (imported: no flags make one) */
        double inv[MT_ROPE_MAX_PAIRS], af;
        const int half = (int)(c->kv_channels * c->rotary_percent) / 2;
        json_t *sf = json_array(), *lf = json_array();
        for (int i = 0; i < half; i++) {
            json_array_append_new(sf, json_real(s->ext_factors[i]));
            json_array_append_new(lf, json_real(c->rope_long_factors[i]));
        }
        json_object_set_new(p, "short_factor", sf);
        json_object_set_new(p, "long_factor", lf);
        json_object_set_new(p, "original_max_position_embeddings", json_integer((json_int_t)n));
        if (mt_rope_inv_freq(inv, &af, 2 * half, c->rotary_base, s) == MT_OK)
            json_object_set_new(p, "attention_factor", json_real(af));
    }
    if (s->type != MT_ROPE_SCALING_NONE) json_object_set_new(h, "rope_scaling", json_deep_copy(p));
    json_object_set_new(p, "rope_theta", json_real(c->rotary_base));
    if (c->rotary_percent != 1.0) { /* (StableLM's: transformers 5's place, and 4's) */
        json_object_set_new(p, "partial_rotary_factor", json_real(c->rotary_percent));
        json_object_set_new(h, "partial_rotary_factor", json_real(c->rotary_percent));
    }
    json_object_set_new(h, "rope_parameters", p);
    json_object_set_new(h, "rope_theta", json_real(c->rotary_base));
}

/* DeepSeek-V3's config (transformers' DeepseekV3ForCausalLM) for an MLA model of its shape, else
 * NULL: RMSNorm, RoPE, SwiGLU, no biases; MoE layers (if any) after the first k dense ones, with
 * sigmoid scores, the expert bias, groups ranked as HF's (the top 2 of each: Megatron's top k /
 * group_topk) or none, and an ungated shared expert of a multiple of the experts' width. (HF's
 * latent norms take RMSNorm's eps 1e-6, ours --norm-epsilon: the same at DeepSeek-V3's 1e-6.) */
static json_t *deepseek_hf_config(const run *r) {
    const mt_model_config *c = &r->mc;
    const int moe = c->num_moe_experts > 0, F = c->moe_ffn_hidden_size;
    if (c->normalization != MT_NORM_RMSNORM || c->position_embedding_type != MT_POS_ROPE ||
        !c->swiglu || c->add_bias_linear || c->add_qkv_bias || c->rotary_interleaved ||
        c->qk_layernorm || c->num_query_groups != c->num_attention_heads)
        return NULL;
    int k = 0; /* (the dense layers: exactly the first k) */
    while (k < c->num_layers && (!moe || c->moe_dense_layer[k]))
        k++;
    for (int l = k; l < c->num_layers; l++)
        if (c->moe_dense_layer[l]) return NULL;
    const int topk = c->moe_router_topk, G = c->moe_router_num_groups;
    const int g = c->moe_router_group_topk;
    if (moe &&
        (!c->moe_router_score_sigmoid || !c->moe_router_enable_expert_bias ||
         c->moe_shared_expert_gate || c->moe_shared_expert_intermediate_size <= 0 ||
         c->moe_shared_expert_intermediate_size % F != 0 || (G > 1 && g < G && topk / g != 2)))
        return NULL;
    json_t *h = json_pack(
        "{s:s,s:[s],s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:f,s:b,s:b,s:b,s:i,s:i,s:i,s:i,s:i,s:i}",
        "model_type", "deepseek_v3", "architectures", "DeepseekV3ForCausalLM", "num_hidden_layers",
        c->num_layers, "hidden_size", c->hidden_size, "num_attention_heads", c->num_attention_heads,
        "num_key_value_heads", c->num_attention_heads, "intermediate_size", c->ffn_hidden_size,
        "vocab_size", c->vocab_size, "max_position_embeddings", c->max_position_embeddings,
        "hidden_act", "silu", "rms_norm_eps", r->a->norm_epsilon, "rope_interleave", 1,
        "attention_bias", 0, "tie_word_embeddings", !c->untie_embeddings_and_output_weights,
        "kv_lora_rank", c->kv_lora_rank, "qk_nope_head_dim", c->qk_head_dim, "qk_rope_head_dim",
        c->qk_pos_emb_head_dim, "v_head_dim", c->v_head_dim, "first_k_dense_replace", k,
        "num_nextn_predict_layers", c->mtp_num_layers); /* (the hub's model.layers.L + k) */
    if (!h) return NULL;
    json_object_set_new(h, "q_lora_rank",
                        c->q_lora_rank ? json_integer(c->q_lora_rank) : json_null());
    hf_rope(h, c);
    if (!moe) return h; /* (every layer dense: transformers builds no router) */
    const float sf = c->moe_router_topk_scaling_factor;
    json_object_set_new(h, "n_routed_experts", json_integer(c->num_moe_experts));
    json_object_set_new(h, "num_experts_per_tok", json_integer(topk));
    json_object_set_new(h, "moe_intermediate_size", json_integer(F));
    json_object_set_new(h, "n_shared_experts",
                        json_integer(c->moe_shared_expert_intermediate_size / F));
    json_object_set_new(h, "n_group", json_integer(G > 1 ? G : 1));
    json_object_set_new(h, "topk_group", json_integer(G > 1 ? g : 1));
    /* (Megatron renormalises sigmoid scores over the k chosen when k > 1) */
    json_object_set_new(h, "norm_topk_prob", json_boolean(topk > 1));
    json_object_set_new(h, "routed_scaling_factor", json_real(sf != 0.0f ? sf : 1.0));
    return h;
}

/* The Hugging Face config.json of GPT-2-, Llama-, StableLM-, Qwen3-, Mixtral- and
 * DeepSeek-V3-shaped models (else NULL), kept in the checkpoint's args as hf.config so that `mt-convert mt-to-hf` can export
 * it. */
static json_t *hf_config(const run *r) {
    const mt_model_config *c = &r->mc;
    const int win = c->window_size; /* (a sliding window: Mistral's, Mixtral's, Qwen's) */
    if (c->multi_latent_attention) return win ? NULL : deepseek_hf_config(r);
    int ln = c->normalization == MT_NORM_LAYERNORM,
        rope = c->position_embedding_type == MT_POS_ROPE;
    if (ln && !rope && !c->swiglu && c->add_bias_linear && !win &&
        !c->untie_embeddings_and_output_weights && c->num_query_groups == c->num_attention_heads)
        return json_pack("{s:s,s:[s],s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:f,s:b}", "model_type", "gpt2",
                         "architectures", "GPT2LMHeadModel", "n_layer", c->num_layers, "n_embd",
                         c->hidden_size, "n_head", c->num_attention_heads, "n_inner",
                         c->ffn_hidden_size, "vocab_size", c->vocab_size, "n_positions",
                         c->max_position_embeddings, "activation_function", "gelu_new",
                         "layer_norm_epsilon", r->a->norm_epsilon, "tie_word_embeddings", 1);
    /* Llama's family: Mixtral (MoE MLPs of moe_ffn_hidden_size), Qwen3 (per-head q and k
     * norms), Qwen2 (qkv biases), Qwen2-MoE (qkv biases, MoE MLPs with a gated shared expert),
     * Llama; none has two of their marks otherwise */
    const int moe = c->num_moe_experts > 0, qwen3 = c->qk_layernorm, qwen2 = c->add_qkv_bias;
    const int qmoe = moe && qwen2 && c->moe_shared_expert_gate;
    /* (Qwen3-MoE: Qwen3's attention, experts as Qwen2-MoE's, no shared expert) */
    const int q3moe = moe && qwen3 && !qwen2 && !c->moe_shared_expert_intermediate_size;
    int ndense = 0; /* (--moe-layer-freq's dense layers: Qwen2-MoE's mlp_only_layers; Mixtral's
                       layers are all MoE) */
    for (int l = 0; moe && l < c->num_layers; l++)
        ndense += c->moe_dense_layer[l] != 0;
    if (ln && rope && c->swiglu && !c->add_bias_linear && !c->rotary_interleaved && !moe &&
        !qwen3 && !win && c->kv_channels * c->num_attention_heads == c->hidden_size) {
        /* StableLM: Llama's with LayerNorms, partial rotary embeddings, q/k/v biases or not */
        json_t *h = json_pack(
            "{s:s,s:[s],s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:f,s:b,s:b,s:b,s:b,s:f,s:f}", "model_type",
            "stablelm", "architectures", "StableLmForCausalLM", "num_hidden_layers", c->num_layers,
            "hidden_size", c->hidden_size, "num_attention_heads", c->num_attention_heads,
            "num_key_value_heads", c->num_query_groups, "intermediate_size", c->ffn_hidden_size,
            "vocab_size", c->vocab_size, "max_position_embeddings", c->max_position_embeddings,
            "hidden_act", "silu", "layer_norm_eps", r->a->norm_epsilon, "use_qkv_bias", qwen2,
            "qk_layernorm", 0, "use_parallel_residual", 0, "tie_word_embeddings",
            !c->untie_embeddings_and_output_weights, "hidden_dropout", 0.0, "attention_dropout",
            0.0);
        if (h) hf_rope(h, c);
        return h;
    }
    /* (a window on some layers only: Qwen's, from max_window_layers on) */
    int nfull = 0, prefix = 0;
    for (int l = 0; win && l < c->num_layers; l++) {
        nfull += c->full_attention_layer[l] != 0;
        prefix += c->full_attention_layer[l] != 0 && prefix == l;
    }
    if (ln || !rope || !c->swiglu || c->add_bias_linear || c->rotary_interleaved ||
        c->rotary_percent != 1.0 || moe + qwen3 + qwen2 > 1 + qmoe + q3moe ||
        (ndense && !qmoe && !q3moe) || (nfull && (!(qwen3 || qwen2) || nfull != prefix)))
        return NULL;
    /* (Mixtral's router: the softmax over the k, unscaled, any experts, no shared experts;
     * Qwen2-MoE's: the softmax over the k (norm_topk_prob) or over all (--moe-router-pre-softmax),
     * unscaled, no groups; another router has no such config, so that nothing routes its tokens
     * otherwise) */
    const float sf = c->moe_router_topk_scaling_factor;
    if (moe && ((c->moe_router_pre_softmax && !qmoe && !q3moe) || (sf != 0.0f && sf != 1.0f) ||
                c->moe_router_num_groups || (c->moe_shared_expert_intermediate_size && !qmoe) ||
                c->moe_router_score_sigmoid))
        return NULL;
    if ((qmoe || q3moe) && win) return NULL;
    if (qmoe || q3moe) {
        json_t *dense = json_array();
        for (int l = 0; dense && l < c->num_layers; l++)
            if (c->moe_dense_layer[l]) json_array_append_new(dense, json_integer(l));
        if (!dense) return NULL;
        if (q3moe) {
            json_t *q = json_pack(
                "{s:s,s:[s],s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:b,s:i,s:o,s:b,s:s,s:f,s:b,"
                "s:b,s:f,s:b,s:i}",
                "model_type", "qwen3_moe", "architectures", "Qwen3MoeForCausalLM",
                "num_hidden_layers", c->num_layers, "hidden_size", c->hidden_size,
                "num_attention_heads", c->num_attention_heads, "num_key_value_heads",
                c->num_query_groups, "head_dim", c->kv_channels, "intermediate_size",
                c->ffn_hidden_size, "moe_intermediate_size", c->moe_ffn_hidden_size, "num_experts",
                c->num_moe_experts, "num_experts_per_tok", c->moe_router_topk, "vocab_size",
                c->vocab_size, "norm_topk_prob", !c->moe_router_pre_softmax, "decoder_sparse_step",
                1, "mlp_only_layers", dense, "attention_bias", 0, "hidden_act", "silu",
                "rms_norm_eps", r->a->norm_epsilon, "tie_word_embeddings",
                !c->untie_embeddings_and_output_weights, "use_sliding_window", 0,
                "router_aux_loss_coef", c->moe_aux_loss_coeff, "output_router_logits", 0,
                "max_position_embeddings", c->max_position_embeddings);
            if (q) hf_rope(q, c);
            return q; /* (s:o took dense: freed with q, or by json_pack on failure) */
        }
        json_t *q = json_pack(
            "{s:s,s:[s],s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:b,s:i,s:o,s:b,s:s,s:f,"
            "s:f,s:b,s:b,s:f,s:b}",
            "model_type", "qwen2_moe", "architectures", "Qwen2MoeForCausalLM", "num_hidden_layers",
            c->num_layers, "hidden_size", c->hidden_size, "num_attention_heads",
            c->num_attention_heads, "num_key_value_heads", c->num_query_groups, "head_dim",
            c->kv_channels, "intermediate_size", c->ffn_hidden_size, "moe_intermediate_size",
            c->moe_ffn_hidden_size, "shared_expert_intermediate_size",
            c->moe_shared_expert_intermediate_size, "num_experts", c->num_moe_experts,
            "num_experts_per_tok", c->moe_router_topk, "vocab_size", c->vocab_size,
            "norm_topk_prob", !c->moe_router_pre_softmax, "decoder_sparse_step", 1,
            "mlp_only_layers", dense, "qkv_bias", 1, "hidden_act", "silu", "rms_norm_eps",
            r->a->norm_epsilon, "rope_theta", c->rotary_base, "tie_word_embeddings",
            !c->untie_embeddings_and_output_weights, "use_sliding_window", 0,
            "router_aux_loss_coef", c->moe_aux_loss_coeff, "output_router_logits", 0);
        if (q) {
            json_object_set_new(q, "max_position_embeddings",
                                json_integer(c->max_position_embeddings));
            hf_rope(q, c);
        }
        return q; /* (s:o took dense: freed with q, or by json_pack on failure) */
    }
    json_t *h = json_pack(
        "{s:s,s:[s],s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:f,s:f,s:b}", "model_type",
        moe     ? "mixtral"
        : qwen3 ? "qwen3"
        : qwen2 ? "qwen2"
        : win   ? "mistral"
                : "llama",
        "architectures",
        moe     ? "MixtralForCausalLM"
        : qwen3 ? "Qwen3ForCausalLM"
        : qwen2 ? "Qwen2ForCausalLM"
        : win   ? "MistralForCausalLM"
                : "LlamaForCausalLM",
        "num_hidden_layers", c->num_layers, "hidden_size", c->hidden_size, "num_attention_heads",
        c->num_attention_heads, "num_key_value_heads", c->num_query_groups, "head_dim",
        c->kv_channels, "intermediate_size", moe ? c->moe_ffn_hidden_size : c->ffn_hidden_size,
        "vocab_size", c->vocab_size, "max_position_embeddings", c->max_position_embeddings,
        "hidden_act", "silu", "rms_norm_eps", r->a->norm_epsilon, "rope_theta", c->rotary_base,
        "tie_word_embeddings", !c->untie_embeddings_and_output_weights);
    if (!h) return NULL;
    hf_rope(h, c);
    if (win) /* (Hugging Face's window counts the token itself) */
        json_object_set_new(h, "sliding_window", json_integer(win + 1));
    if (win && (qwen3 || qwen2)) { /* (transformers 5's layer_types, 4's max_window_layers) */
        json_t *lt = json_array();
        for (int l = 0; lt && l < c->num_layers; l++)
            json_array_append_new(
                lt,
                json_string(c->full_attention_layer[l] ? "full_attention" : "sliding_attention"));
        json_object_set_new(h, "layer_types", lt);
        json_object_set_new(h, "max_window_layers", json_integer(prefix));
    }
    if (moe) {
        json_object_set_new(h, "num_local_experts", json_integer(c->num_moe_experts));
        json_object_set_new(h, "num_experts_per_tok", json_integer(c->moe_router_topk));
        json_object_set_new(h, "router_aux_loss_coef", json_real(c->moe_aux_loss_coeff));
        json_object_set_new(h, "output_router_logits", json_false());
    } else {
        if (!qwen2) json_object_set_new(h, "attention_bias", json_false());
        json_object_set_new(h, qwen3 || qwen2 ? "use_sliding_window" : "mlp_bias",
                            json_boolean((qwen3 || qwen2) && win));
    }
    return h;
}

static char *args_json(const run *r) {
    const mt_train_args *a = r->a;
    json_t *j =
        json_pack("{s:i,s:i,s:I,s:I,s:f,s:i,s:b,s:b,s:i}", "micro_batch_size", a->micro_batch_size,
                  "global_batch_size", (int)r->gbs, "train_iters", (json_int_t)a->train_iters,
                  "padded_vocab_size", (json_int_t)r->mc.padded_vocab_size, "lr", a->lr, "seed",
                  a->seed, "bf16", a->bf16, "fp16", a->fp16, "world_size", r->nranks);
    json_object_set_new(j, "tensor_model_parallel_size", json_integer(r->tp_size));
    json_object_set_new(j, "pipeline_model_parallel_size", json_integer(r->pp_size));
    /* the model's shape (num_layers, hidden_size, ...) for --use-checkpoint-args */
    if (train_args_model_json(a, j) != MT_OK) mt_error_clear(); /* (out of memory: without) */
    json_t *hf = hf_config(r);
    if (hf)
        json_object_set_new(j, "hf",
                            json_pack("{s:o,s:s,s:s,s:i,s:I}", "config", hf, "experts", "split",
                                      "prefix", "transformer.", "make_vocab_size_divisible_by",
                                      r->mc.make_vocab_size_divisible_by, "padded_vocab_size",
                                      (json_int_t)r->mc.padded_vocab_size));
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

/* Parameters and their optimizer state ("optimizer.exp_avg.<param>") are checkpointed in the
 * parameter's unsharded shape, whatever the layout: each rank writes the boxes of each tensor
 * that it holds (its tensor-parallel pieces; of the optimizer state, its part of the data-parallel
 * shard with the distributed optimizer), once per set of copies, so a save with any TP and DP
 * sizes (distributed optimizer or not) loads into any other. */
typedef struct state_piece {
    char name[160];
    mt_tensor view;           /* this rank's elements (contiguous) */
    int64_t shape[2], off[2]; /* the unsharded tensor's shape, the box's first element in it */
    int replica;              /* 0 for the copy that is written */
} state_piece;

typedef struct piece_list {
    state_piece *p;
    int n, cap;
} piece_list;

static const char *state_kinds[3] = { "master", "exp_avg", "exp_avg_sq" };

/* Which copy of a tensor this rank holds: one per data-parallel rank (an expert's: per
 * expert-data-parallel rank) unless `sharded` (the distributed optimizer's state), one per
 * tensor-parallel rank if the parameter is not split. */
static int replica_of(const run *r, const mt_model_param *p, int sharded) {
    const int whole = p->tp_axis < 0;
    const int dpr = expert_param(r, p->name) ? r->edp_rank : r->gdp_rank;
    if (p->pp_shared) return 1; /* (the first stage writes the tied embedding) */
    return (sharded ? 0 : dpr) * (whole ? r->tp_size : 1) + (whole ? r->tp_rank : 0);
}

/* Appends the boxes of parameter p's local elements [s, e) (row-major in this rank's shard), held
 * by `flat` (e - s elements), under `name`: each run of whole rows or part of one row, cut at
 * the tensor-parallel pieces (qkv's q, k and v rows go to three places). */
static mt_status add_boxes(piece_list *l, const char *name, const mt_model_param *p,
                           const mt_tensor *flat, int64_t s, int64_t e, int replica) {
    const int two = p->weight.ndim == 2, axis = p->tp_axis == 1 ? 1 : 0;
    const int64_t cols = two ? p->weight.shape[1] : 1;
    for (int64_t pos = s; pos < e;) {
        const int64_t row = pos / cols, c0 = pos % cols;
        int64_t nrows = 1, ncols = cols - c0 < e - pos ? cols - c0 : e - pos;
        if (c0 == 0 && e - pos >= cols) nrows = (e - pos) / cols, ncols = cols;
        for (int k = 0; k < p->tp_npieces; k++) {
            int64_t lo = row, hi = row + nrows, grow = row, gcol = c0;
            const int64_t pl = p->tp_piece[k].local, pg = p->tp_piece[k].global;
            if (axis == 0) {
                lo = lo > pl ? lo : pl;
                hi = hi < pl + p->tp_piece[k].len ? hi : pl + p->tp_piece[k].len;
                if (lo >= hi) continue;
                grow = pg + (lo - pl);
            } else {
                gcol = c0 + pg - pl;
            }
            if (l->n == l->cap) {
                l->cap = l->cap ? 2 * l->cap : 64;
                state_piece *q = realloc(l->p, sizeof *q * (size_t)l->cap);
                MT_REQUIRE(q, MT_ERR_OOM, "checkpoint pieces");
                l->p = q;
            }
            state_piece *x = &l->p[l->n++];
            snprintf(x->name, sizeof x->name, "%s", name);
            mt_tensor v;
            MT_TRY(mt_tensor_slice(flat, 0, (pos - s) + (lo - row) * ncols, (hi - lo) * ncols, &v));
            MT_TRY(mt_tensor_reshape(&v, two ? 2 : 1, (int64_t[]){ hi - lo, ncols }, &x->view));
            x->shape[0] = p->full_shape[0], x->shape[1] = p->full_shape[1];
            x->off[0] = grow, x->off[1] = gcol;
            x->replica = replica;
        }
        pos += nrows * ncols;
    }
    return MT_OK;
}

/* The boxes of every parameter's weight (model) or optimizer state (this rank's shard) into l. */
static mt_status state_pieces(run *r, piece_list *l, int model) {
    if (model) {
        for (int i = 0; i < num_params(r); i++) {
            mt_model_param *p = param_at(r, i);
            const int64_t n = mt_tensor_numel(&p->weight);
            mt_tensor flat = mt_tensor_1d(p->weight.data, p->weight.dtype, n, p->weight.device);
            MT_TRY(add_boxes(l, p->name, p, &flat, 0, n, replica_of(r, p, 0)));
        }
        for (int c = 0; c < r->vpp; c++) /* the buffers (the expert biases): whole, f32 */
            for (int i = 0; i < mt_model_num_buffers(r->chunks[c]); i++) {
                const char *name;
                mt_model_param b = { 0 };
                MT_TRY(mt_model_buffer_at(r->chunks[c], i, &name, &b.weight));
                b.name = name, b.tp_axis = -1, b.tp_npieces = 1;
                b.full_shape[0] = b.tp_piece[0].len = b.weight.shape[0];
                MT_TRY(
                    add_boxes(l, name, &b, &b.weight, 0, b.weight.shape[0], replica_of(r, &b, 0)));
            }
        return MT_OK;
    }
    mt_tensor st[3];
    MT_TRY(mt_optim_state(r->opt, &st[0], &st[1], &st[2]));
    int dist = r->a->use_distributed_optimizer && r->gdp_size > 1;
    int np = mt_optim_buffer_num_params(r->buf), nb = mt_optim_buffer_num_buckets(r->buf);
    int64_t local = 0; /* where bucket k's shard starts in the state views */
    for (int k = 0; k < nb; k++) {
        mt_optim_bucket b;
        MT_TRY(mt_optim_buffer_bucket(r->buf, k, &b));
        /* (an expert bucket is sharded over the expert-data-parallel group) */
        const int shards = !dist ? 1 : b.expert ? r->edp_size : r->gdp_size;
        const int me = !dist ? 0 : b.expert ? r->edp_rank : r->gdp_rank;
        int64_t shard = b.numel / shards, lo = b.offset + me * shard, hi = lo + shard;
        for (int i = 0; i < np; i++) {
            mt_optim_param_info info;
            MT_TRY(mt_optim_buffer_info(r->buf, i, &info));
            int64_t s = info.offset > lo ? info.offset : lo;
            int64_t e = info.offset + info.numel < hi ? info.offset + info.numel : hi;
            if (info.bucket != k || s >= e) continue;
            const mt_model_param *p = param_find(r, info.name);
            MT_REQUIRE(p, MT_ERR_INTERNAL, "no parameter %s", info.name);
            for (int kind = 0; kind < 3; kind++) {
                if (mt_tensor_numel(&st[kind]) == 0) continue;
                char name[160];
                mt_tensor v;
                snprintf(name, sizeof name, "optimizer.%s.%s", state_kinds[kind], info.name);
                MT_TRY(mt_tensor_slice(&st[kind], 0, local + (s - lo), e - s, &v));
                MT_TRY(add_boxes(l, name, p, &v, s - info.offset, e - info.offset,
                                 replica_of(r, p, dist)));
            }
        }
        local += shard;
    }
    return MT_OK;
}

static mt_status save_checkpoint(run *r) {
    const mt_train_args *a = r->a;
    MT_TRY(params_final(r));
    if (!r->writer) {
        mt_ckpt_writer_config wc = MT_CKPT_WRITER_CONFIG_INIT;
        wc.dir = a->save;
        wc.layout.dp = r->gdp_size;
        wc.layout.tp = r->tp_size;
        wc.layout.pp = r->pp_size;
        wc.async = a->async_save;
        r->group = (mt_ckpt_group){ r->rank, r->nranks, r, ckpt_gather, ckpt_bcast };
        wc.group = r->nranks > 1 ? &r->group : NULL;
        MT_TRY(mt_ckpt_writer_create(&wc, &r->writer));
    }
    piece_list l = { NULL, 0, 0 };
    mt_status ps = state_pieces(r, &l, 1);
    if (ps == MT_OK && !a->no_save_optim) ps = state_pieces(r, &l, 0);
    mt_ckpt_item *items = ps == MT_OK ? calloc((size_t)l.n + 1, sizeof *items) : NULL;
    if (!items) {
        free(l.p);
        return ps != MT_OK ? ps : MT_ERROR(MT_ERR_OOM, "checkpoint items");
    }
    int n = 0;
    for (int i = 0; i < l.n; i++) {
        state_piece *x = &l.p[i];
        items[n++] = (mt_ckpt_item){ x->name, &x->view, x->shape, x->off, x->replica };
    }
    char *args = args_json(r), sampler[1024], scaler[160] = "", sched[512], rng[64];
    const mt_optim_scaler *sc = &r->scaler;
    if (sc->dynamic) /* DynamicGradScaler.state_dict (a constant scaler has no state) */
        snprintf(scaler, sizeof scaler,
                 ",\"grad_scaler\":{\"scale\":%.17g,\"growth_tracker\":%d,"
                 "\"hysteresis_tracker\":%d}",
                 (double)sc->scale, sc->growth_tracker, sc->hysteresis_tracker);
    const mt_optim_sched *q = &r->sched; /* OptimizerParamScheduler.state_dict's settings */
    snprintf(sched, sizeof sched,
             ",\"opt_param_scheduler\":{\"max_lr\":%.17g,\"min_lr\":%.17g,"
             "\"lr_warmup_steps\":%.17g,\"lr_decay_steps\":%.17g,\"lr_decay_style\":\"%s\","
             "\"start_wd\":%.17g,\"end_wd\":%.17g,\"wd_incr_steps\":%.17g,"
             "\"wd_incr_style\":\"%s\"}",
             q->max_lr, q->min_lr, q->lr_warmup_steps, q->lr_decay_steps, a->lr_decay_style,
             q->start_wd, q->end_wd, q->wd_incr_steps, a->weight_decay_incr_style);
    snprintf(sampler, sizeof sampler,
             "{\"consumed_train_samples\":%lld,\"consumed_valid_samples\":%lld,"
             "\"optimizer_steps\":%lld,\"scheduler_steps\":%lld%s%s}",
             (long long)r->consumed_train, (long long)r->consumed_valid,
             (long long)mt_optim_num_steps(r->opt), (long long)r->sched_steps, scaler, sched);
    snprintf(rng, sizeof rng, "{\"seed\":%d}", a->seed);
    mt_ckpt_state cs = { args, sampler, rng };
    double t0 = mt_time_now();
    mt_status s = mt_ckpt_save(r->writer, r->iteration, items, n, &cs);
    if (last_rank(r) && s == MT_OK)
        printf("  successfully saved checkpoint from iteration %7lld to %s [ t %.1f ms ]\n",
               (long long)r->iteration, a->save, (mt_time_now() - t0) * 1e3);
    free(args);
    free(items);
    free(l.p);
    return s;
}

static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    int k = snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k > 0 && (size_t)k < n; d++)
        k += snprintf(buf + k, n - (size_t)k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (k > 0 && (size_t)k < n) snprintf(buf + k, n - (size_t)k, "]");
}

/* Reads every box of l from checkpoint c into its view. Each tensor's saved shape must be the
 * unsharded one (else torch's load_state_dict message); optimizer state saved flat (1-D over the
 * parameter's elements, before it took the parameters' shapes) reads as such without tensor
 * parallelism (each box is then one run of those elements). */
static mt_status load_boxes(run *r, mt_ckpt *c, const piece_list *l) {
    for (int i = 0; i < l->n; i++) {
        const state_piece *x = &l->p[i];
        mt_tensor *v = (mt_tensor *)&x->view;
        mt_dtype dt;
        int nd = 0;
        int64_t shape[MT_MAX_DIMS];
        if (mt_ckpt_info(c, x->name, &dt, &nd, shape) != MT_OK) {
            mt_error_clear();
            return MT_ERROR(MT_ERR_FORMAT,
                            "Missing key(s) in state_dict: \"%s\" (not in the checkpoint of "
                            "iteration %lld: a different model?)",
                            x->name, (long long)mt_ckpt_iteration(c));
        }
        const int64_t cols = v->ndim == 2 ? x->shape[1] : 1, numel = x->shape[0] * cols;
        const int flat = nd == 1 && v->ndim == 2 && shape[0] == numel && r->tp_size == 1 &&
                         strncmp(x->name, "optimizer.", 10) == 0;
        int same = nd == v->ndim;
        for (int d = 0; same && d < nd; d++)
            same = shape[d] == x->shape[d];
        if (!same && nd == 1 && shape[0] == numel && strncmp(x->name, "optimizer.", 10) == 0)
            return MT_ERROR(MT_ERR_FORMAT,
                            "%s is flat in the checkpoint (saved before optimizer state kept the "
                            "parameters' shapes): load it with --tensor-model-parallel-size 1 "
                            "(a save from there loads under any size)",
                            x->name);
        if (!same && !flat) { /* torch's load_state_dict message */
            char saved[96], want[96];
            shape_str(saved, sizeof saved, nd, shape);
            shape_str(want, sizeof want, v->ndim, x->shape);
            return MT_ERROR(MT_ERR_FORMAT,
                            "size mismatch for %s: copying a param with shape %s from "
                            "checkpoint, the shape in current model is %s",
                            x->name, saved, want);
        }
        void *h = malloc(mt_tensor_nbytes(v) + 1);
        MT_REQUIRE(h, MT_ERR_OOM, "load buffer for %s", x->name);
        const int64_t off1 = x->off[0] * cols + x->off[1];
        mt_tensor ht = mt_tensor_make(h, v->dtype, v->ndim, v->shape, MT_DEVICE_CPU);
        mt_tensor hf = mt_tensor_1d(h, v->dtype, mt_tensor_numel(v), MT_DEVICE_CPU);
        mt_status st = mt_ckpt_read(c, x->name, flat ? &hf : &ht, flat ? &off1 : x->off);
        if (st == MT_OK) st = mt_tensor_copy(v, &ht, NULL);
        free(h);
        MT_TRY(st);
    }
    return MT_OK;
}

/* torch's strict load_state_dict: a checkpoint tensor that is neither a parameter of this model
 * (of any of its pipeline stages) nor optimizer state ("optimizer." names) is an error that names
 * them. */
typedef struct name_list {
    char **name;
    int n, cap;
} name_list;

static mt_status add_name(void *ctx, const char *name, int ndim, const int64_t *shape, int no_wd,
                          mt_tensor *weight, mt_tensor *grad) {
    name_list *l = ctx;
    (void)ndim, (void)shape, (void)no_wd, (void)weight, (void)grad;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        char **q = realloc(l->name, sizeof *q * (size_t)l->cap);
        MT_REQUIRE(q, MT_ERR_OOM, "parameter names");
        l->name = q;
    }
    l->name[l->n] = strdup(name);
    MT_REQUIRE(l->name[l->n], MT_ERR_OOM, "parameter names");
    l->n++;
    return MT_OK;
}

static int listed(const name_list *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->name[i], name) == 0) return 1;
    return 0;
}

static mt_status unexpected_keys(run *r, mt_ckpt *c) {
    char list[512] = "";
    int n = 0;
    size_t k = 0;
    /* every stage's names (the whole model's, every expert's), listed once */
    mt_model_config whole = r->mc;
    whole.pipeline_model_parallel_size = 1, whole.pipeline_model_parallel_rank = 0;
    whole.expert_model_parallel_size = 1, whole.expert_model_parallel_rank = 0;
    whole.num_layers_in_first_pipeline_stage = whole.num_layers_in_last_pipeline_stage = 0;
    whole.virtual_pipeline_model_parallel_size = 0;
    name_list names = { NULL, 0, 0 };
    mt_status st = mt_model_list_params(&whole, add_name, &names);
    if (st == MT_OK) st = mt_model_list_buffers(&whole, add_name, &names);
    for (int i = 0; st == MT_OK && i < mt_ckpt_count(c); i++) {
        const char *name = mt_ckpt_name(c, i);
        if (strncmp(name, "optimizer.", 10) == 0 || listed(&names, name)) continue;
        if (n++ < 4 && k < sizeof list)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s\"%s\"", n > 1 ? ", " : "", name);
    }
    for (int i = 0; i < names.n; i++)
        free(names.name[i]);
    free(names.name);
    if (st != MT_OK || n == 0) return st;
    const int mtp = !strncmp(list, "\"mtp.", 5); /* (a hint for multi-token prediction's) */
    return MT_ERROR(MT_ERR_FORMAT,
                    "Unexpected key(s) in state_dict: %s%s (%d tensor(s) of the checkpoint of "
                    "iteration %lld that this model does not have: %s)",
                    list, n > 4 ? ", ..." : "", n, (long long)mt_ckpt_iteration(c),
                    mtp ? "multi-token prediction layers: --mtp-num-layers, or "
                          "--use-checkpoint-args"
                        : "a different model?");
}

/* The shortest %g that reads back as v (Python's repr of a float). */
static const char *num_str(char *buf, size_t n, double v) {
    for (int p = 6; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

/* OptimizerParamScheduler._check_and_set for one setting: the value given here (with
 * --override-opt_param-scheduler), the checkpoint's (--use-checkpoint-opt_param-scheduler), or by
 * default both, which must agree. Numbers in *cls, or the style names cls_s/sd_s. */
static mt_status sched_setting(const mt_train_args *a, const char *name, double *cls, double sd,
                               const char *cls_s, const char *sd_s, int *use_sd) {
    *use_sd = 0;
    int same = cls_s ? !strcmp(cls_s, sd_s) : *cls == sd;
    if (same || a->override_opt_param_scheduler) return MT_OK;
    *use_sd = 1;
    if (a->use_checkpoint_opt_param_scheduler) {
        if (cls) *cls = sd;
        return MT_OK;
    }
    char c[32], k[32];
    return MT_ERROR(MT_ERR_INVALID_ARG,
                    "OptimizerParamScheduler: class input value %s and checkpoint value %s for %s "
                    "do not match (--override-opt_param-scheduler keeps this run's, "
                    "--use-checkpoint-opt_param-scheduler the checkpoint's)",
                    cls_s ? cls_s : num_str(c, sizeof c, *cls),
                    cls_s ? sd_s : num_str(k, sizeof k, sd), name);
}

/* The schedule's settings saved with the checkpoint against this run's (sched_setting). */
static mt_status check_sched(run *r, json_t *ps) {
    const mt_train_args *a = r->a;
    mt_optim_sched *q = &r->sched;
    struct {
        const char *key, *name;
        double *v;
    } num[] = { { "max_lr", "learning rate", &q->max_lr },
                { "min_lr", "minimum learning rate", &q->min_lr },
                { "lr_warmup_steps", "warmup iterations", &q->lr_warmup_steps },
                { "lr_decay_steps", "total number of iterations", &q->lr_decay_steps },
                { "start_wd", "start weight decay", &q->start_wd },
                { "end_wd", "end weight decay", &q->end_wd },
                { "wd_incr_steps", "total number of weight decay iterations", &q->wd_incr_steps } };
    int use;
    for (size_t i = 0; i < sizeof num / sizeof *num; i++) {
        json_t *v = json_object_get(ps, num[i].key);
        if (!json_is_number(v)) continue;
        MT_TRY(sched_setting(a, num[i].name, num[i].v, json_number_value(v), NULL, NULL, &use));
    }
    const char *ds = json_string_value(json_object_get(ps, "lr_decay_style"));
    if (ds) {
        MT_TRY(sched_setting(a, "learning rate decay style", NULL, 0, a->lr_decay_style, ds, &use));
        if (use) MT_TRY(mt_lr_decay_style_parse(ds, &q->lr_decay_style));
    }
    const char *ws = json_string_value(json_object_get(ps, "wd_incr_style"));
    if (ws) {
        MT_TRY(sched_setting(a, "weight decay incr style", NULL, 0, a->weight_decay_incr_style, ws,
                             &use));
        if (use) MT_TRY(mt_wd_incr_style_parse(ws, &q->wd_incr_style));
    }
    return mt_optim_sched_check(q);
}

static mt_status load_checkpoint(run *r) {
    const mt_train_args *a = r->a;
    int64_t it;
    if (mt_ckpt_latest(a->load, &it) != MT_OK) {
        if (last_rank(r))
            printf("WARNING: could not find the metadata file %s/latest_checkpointed_iteration.txt"
                   "\n    will not load any checkpoints and will start from random\n",
                   a->load);
        mt_error_clear();
        if (a->exit_on_missing_checkpoint)
            return MT_ERROR(MT_ERR_IO,
                            ">> '--exit-on-missing-checkpoint' set ... exiting. << (no "
                            "checkpoint in %s)",
                            a->load);
        return MT_OK;
    }
    mt_ckpt *c;
    MT_TRY(mt_ckpt_open(a->load, it, 0, &c));
    piece_list l = { NULL, 0, 0 };
    mt_status st = state_pieces(r, &l, 1);
    if (st == MT_OK) st = load_boxes(r, c, &l);
    free(l.p);
    if (st == MT_OK) st = unexpected_keys(r, c);
    const char *sampler = mt_ckpt_sampler(c);
    json_t *sj = sampler ? json_loads(sampler, 0, NULL) : NULL;
    if (st == MT_OK && !a->finetune) {
        r->iteration = it;
        r->sched_steps = it * r->gbs;
        r->consumed_train = json_integer_value(json_object_get(sj, "consumed_train_samples"));
        r->consumed_valid = json_integer_value(json_object_get(sj, "consumed_valid_samples"));
    }
    if (st == MT_OK && !a->finetune && !a->no_load_optim) {
        piece_list o = { NULL, 0, 0 };
        st = state_pieces(r, &o, 0);
        if (st == MT_OK) st = load_boxes(r, c, &o);
        free(o.p);
        if (st == MT_OK)
            st = mt_optim_set_num_steps(r->opt,
                                        json_integer_value(json_object_get(sj, "optimizer_steps")));
        /* the schedule and the grad scaler, as Megatron's opt_param_scheduler and optimizer state
         * (absent: the schedule at the iteration, the scaler as configured, as Megatron does) */
        json_t *ss = json_object_get(sj, "scheduler_steps"),
               *gs = json_object_get(sj, "grad_scaler");
        if (json_is_integer(ss)) r->sched_steps = json_integer_value(ss);
        json_t *ps = json_object_get(sj, "opt_param_scheduler");
        if (st == MT_OK && json_is_object(ps)) st = check_sched(r, ps);
        if (r->scaler.dynamic && json_is_object(gs)) {
            r->scaler.scale = (float)json_number_value(json_object_get(gs, "scale"));
            r->scaler.growth_tracker =
                (int)json_integer_value(json_object_get(gs, "growth_tracker"));
            r->scaler.hysteresis_tracker =
                (int)json_integer_value(json_object_get(gs, "hysteresis_tracker"));
        }
    }
    json_decref(sj);
    mt_ckpt_close(c);
    if (st == MT_OK && last_rank(r))
        printf("  successfully loaded checkpoint from %s [ t %d/%d, p %d/%d ] at iteration %lld\n",
               a->load, r->tp_rank, r->tp_size, r->pp_rank, r->pp_size, (long long)r->iteration);
    return st;
}

/* ---- logging ---- */

/* One series of the golden-values JSON: vals[i] of the logged iterations i >= start (a skipped
 * one, whose lm loss is NaN, left out), rounded to 5 decimals, as Megatron's. */
static void golden_series(json_t *root, const run *r, const char *name, const double *vals,
                          int64_t start) {
    json_t *v = json_object();
    int64_t first = 0;
    for (int64_t i = start; i <= r->iteration; i++) {
        if (isnan(r->gv_loss[i])) continue;
        if (!first) first = i;
        char key[32];
        snprintf(key, sizeof key, "%lld", (long long)i);
        json_object_set_new(v, key, json_real(round(vals[i] * 1e5) / 1e5));
    }
    json_object_set_new(root, name,
                        json_pack("{s:I,s:I,s:i,s:o}", "start_step", (json_int_t)first, "end_step",
                                  (json_int_t)r->iteration, "step_interval", 1, "values", v));
}

static void write_golden(const run *r) {
    const mt_train_args *a = r->a;
    json_t *root = json_object();
    const char *keys[3] = { "lm loss", "num-zeros", "iteration-time" };
    const double *vals[3] = { r->gv_loss, r->gv_zeros, r->gv_time };
    for (int k = 0; k < 3; k++)
        if (k != 1 || a->log_num_zeros_in_grad)
            golden_series(root, r, keys[k], vals[k], k == 2 ? 2 : 1);
    for (int k = 0; k < r->mc.mtp_num_layers; k++) { /* ("mtp_<k> loss", as Megatron's) */
        char name[32];
        snprintf(name, sizeof name, "mtp_%d loss", k + 1);
        golden_series(root, r, name, r->gv_mtp + (int64_t)k * (a->train_iters + 1), 1);
    }
    if (json_dump_file(root, a->golden_values_out, JSON_INDENT(4)) != 0)
        MT_LOG_WARN("cannot write --golden-values-out %s", a->golden_values_out);
    json_decref(root);
}

/* ---- pipeline parallelism: this rank's model as an mt-pp stage (1F1B, forward-only) ---- */

/* The loss scale of the staged training micro-batch (host slot 1) on this rank. With context
 * parallelism the model averages over this rank's counted tokens and the micro-batch's mean is
 * over every rank's (Megatron's loss_func sums both over the group): cp times this rank's share
 * of the counted tokens, exactly 1 unless the chunks' masks differ. Per-token loss needs none. */
static float micro_scale(const run *r, float gs) {
    if (r->cp_size == 1 || r->a->calculate_per_token_loss || !r->hcount_all[1]) return gs;
    return (float)(gs * r->cp_size * (double)r->hcount[1] / (double)r->hcount_all[1]);
}

/* The state of a training iteration's micro-batches on this rank. */
typedef struct micro_run {
    run *r;
    int num_micro, fwd; /* micro-batches; forwards done */
    float grad_scale;
    int more;        /* a training micro-batch follows the iteration's last (read ahead) */
    int64_t counted; /* counted targets of the forwards so far */
} micro_run;

/* A training micro-batch's forward in its slot: the staged host batch to the device slot, the
 * next read while the device runs this one (as the one-stage loop). */
/* A training micro-batch's first forward on this rank: the staged host batch (host slot 1) to
 * device slot k, and its loss scale. */
static mt_status take_batch(micro_run *mr, int k, float *gs) {
    run *r = mr->r;
    mr->counted += r->hcount[1];
    *gs = micro_scale(r, mr->grad_scale);
    return upload_batch(r, 1, k);
}

/* The next training micro-batch read into host slot 1 while the device runs this one. */
static mt_status read_next(micro_run *mr) {
    run *r = mr->r;
    return ++mr->fwd < mr->num_micro || mr->more ? read_batch(r, r->train_ds, &r->train_s, 1)
                                                 : MT_OK;
}

static mt_status stage_forward(void *ctx, int mb, int slot) {
    micro_run *mr = ctx;
    run *r = mr->r;
    float gs;
    (void)mb;
    MT_TRY(take_batch(mr, slot, &gs));
    MT_TRY(use_slot(r, slot));
    MT_TRY(mt_model_pp_forward(r->model, slot, &r->tok[slot], &r->tgt[slot], 1, gs, NULL));
    return read_next(mr);
}

static mt_status stage_backward(void *ctx, int mb, int slot) {
    micro_run *mr = ctx;
    run *r = mr->r;
    MT_TRY(use_slot(r, slot));
    /* the last micro-batch's backward starts the buckets' reductions (the embedding's wait) */
    mt_model_set_grad_ready(r->model, r->overlap && mb == mr->num_micro - 1 ? grad_ready : NULL, r);
    return mt_model_pp_backward(r->model, slot, NULL);
}

/* Evaluation: the micro-batch load_batch put in device slot 0. */
static mt_status stage_eval(void *ctx, int mb, int slot) {
    run *r = ((micro_run *)ctx)->r;
    (void)mb;
    MT_TRY(use_slot(r, slot));
    return mt_model_pp_forward(r->model, slot, &r->tok[slot], &r->tgt[slot], 0, 0.0f, NULL);
}

static mt_tensor stage_input(void *ctx, int slot) {
    return mt_model_pp_input(((micro_run *)ctx)->r->model, slot);
}
static mt_tensor stage_output(void *ctx) {
    return mt_model_pp_output(((micro_run *)ctx)->r->model);
}
static mt_tensor stage_grad(void *ctx) {
    return mt_model_pp_grad(((micro_run *)ctx)->r->model);
}

static mt_pp_stage stage_of(run *r, micro_run *mr) {
    return (mt_pp_stage){ r->pp,          NULL,        mr,           stage_forward,
                          stage_backward, stage_input, stage_output, stage_grad };
}

/* ---- the interleaved schedule: the rank's chunks as mt-pp's ---- */

/* Chunk c's training forward of micro-batch mb: chunk 0's (its first on this rank) takes the
 * staged host batch, its loss scale kept for the last chunk, and reads the next. */
static mt_status chunk_forward(void *ctx, int c, int mb, int slot) {
    micro_run *mr = ctx;
    run *r = mr->r;
    const int k = mb % r->nslots; /* (the batch's device slot; `slot`: the chunk's activations) */
    if (c == 0) MT_TRY(take_batch(mr, k, &r->slot_gs[k]));
    MT_TRY(use_slot_on(r, r->chunks[c], k));
    MT_TRY(mt_model_pp_forward(r->chunks[c], slot, &r->tok[k], &r->tgt[k], 1, r->slot_gs[k], NULL));
    return c == 0 ? read_next(mr) : MT_OK;
}

/* A chunk's end of the backward (level -1) is not the rank's: only chunk 0's, the last to
 * finish, starts what is left. */
static mt_status chunk_grad_ready(void *ctx, int level, mt_stream s) {
    return level == -1 ? MT_OK : grad_ready(ctx, level, s);
}

static mt_status chunk_backward(void *ctx, int c, int mb, int slot) {
    micro_run *mr = ctx;
    run *r = mr->r;
    MT_TRY(use_slot_on(r, r->chunks[c], mb % r->nslots));
    mt_model_grad_ready_fn fn = c == 0 ? grad_ready : chunk_grad_ready;
    mt_model_set_grad_ready(r->chunks[c], r->overlap && mb == mr->num_micro - 1 ? fn : NULL, r);
    return mt_model_pp_backward(r->chunks[c], slot, NULL);
}

static mt_status chunk_eval(void *ctx, int c, int mb, int slot) {
    run *r = ((micro_run *)ctx)->r;
    (void)mb;
    MT_TRY(use_slot_on(r, r->chunks[c], slot));
    return mt_model_pp_forward(r->chunks[c], slot, &r->tok[slot], &r->tgt[slot], 0, 0.0f, NULL);
}

static mt_tensor chunk_input(void *ctx, int c, int slot) {
    return mt_model_pp_input(((micro_run *)ctx)->r->chunks[c], slot);
}
static mt_tensor chunk_output(void *ctx, int c) {
    return mt_model_pp_output(((micro_run *)ctx)->r->chunks[c]);
}
static mt_tensor chunk_grad(void *ctx, int c) {
    return mt_model_pp_grad(((micro_run *)ctx)->r->chunks[c]);
}
static mt_tensor chunk_buffer(void *ctx, int k) {
    return ((micro_run *)ctx)->r->vbuf[k];
}

static mt_pp_chunks chunks_of(run *r, micro_run *mr) {
    return (mt_pp_chunks){ r->pp,        NULL,          mr,
                           r->vpp,       chunk_forward, chunk_backward,
                           chunk_input,  chunk_output,  chunk_grad,
                           chunk_buffer, r->pp_stream,  r->a->microbatch_group_size_per_vp_stage };
}

/* An evaluation micro-batch (device slot 0) through the stages. */
static mt_status pp_eval_step(run *r) {
    micro_run mr = { r, 1, 0, 0.0f, 0, 0 };
    if (r->vpp > 1) {
        mt_pp_chunks ch = chunks_of(r, &mr);
        ch.forward = chunk_eval;
        return mt_pp_interleaved_forward_only(&ch, 1);
    }
    mt_pp_stage st = stage_of(r, &mr);
    st.forward = stage_eval;
    return mt_pp_forward_only(&st, 1);
}

/* Tied embeddings under pipeline parallelism: the first stage's embedding and the last stage's
 * copy get their gradients' sum (Megatron's _allreduce_word_embedding_grads), before the
 * data-parallel reduction of their buckets (which may leave each rank only its shard): with
 * --overlap-grad-reduce those buckets were held back (hold_embedding) and start here. */
static mt_status pp_embedding_grads(run *r) {
    if (!embedding_held(r)) return MT_OK;
    mt_model_param *p = param_find(r, "embedding.word_embeddings.weight");
    MT_REQUIRE(p, MT_ERR_INTERNAL, "no embedding on pipeline stage %d", r->pp_rank);
    MT_TRY(mt_comm_allreduce(r->emb, &p->grad, &p->grad, MT_REDOP_SUM, NULL));
    return r->overlap ? start_buckets(r, -1, NULL) : MT_OK;
}

/* --eval-iters global batches of `ds` from sample *consumed on, then Megatron's validation line
 * (the test split: from its start, once, at the end). */
static mt_status evaluate_on(run *r, mt_data_dataset *ds, int64_t *consumed, const char *where,
                             int test) {
    const mt_train_args *a = r->a;
    mt_data_sampler s;
    int64_t total = mt_data_dataset_len(ds);
    for (int64_t k = 0; k < a->eval_iters; k++) {
        if (*consumed + r->gbs > total) break;
        MT_TRY(mt_data_sampler_init(&s, total, *consumed, a->micro_batch_size, r->dp_rank,
                                    r->dp_size, 1));
        for (int m = 0; m < r->num_micro; m++) {
            MT_TRY(load_batch(r, ds, &s));
            MT_TRY(r->pp ? pp_eval_step(r)
                         : mt_model_forward(r->model, &r->tok[0], &r->tgt[0], NULL));
        }
        *consumed += r->gbs;
    }
    double loss;
    MT_TRY(take_loss(r, &loss));
    if (last_rank(r)) {
        char line[256];
        int n = snprintf(line, sizeof line,
                         " validation loss at %s | lm loss value: %.6E | lm loss PPL: %.6E | ",
                         where, loss, exp(fmin(20.0, loss)));
        printf("%.*s\n%s\n%.*s\n", n,
               "-----------------------------------------------------------"
               "-----------------------------------------------------------"
               "------------------------------------------------------",
               line, n,
               "------------------------------------------------------------------------"
               "------------------------------------------------------------------------"
               "------------------------");
        if (test && r->jsonl)
            fprintf(r->jsonl, "{\"iteration\":%lld,\"test lm loss\":%.6f}\n",
                    (long long)r->iteration, loss);
        if (!test && r->jsonl && r->last_eval != r->iteration) // why: the end-of-training pass
            fprintf(r->jsonl, "{\"iteration\":%lld,\"validation lm loss\":%.6f}\n",
                    (long long)r->iteration, loss);
        if (!test) r->last_eval = r->iteration;
    }
    return MT_OK;
}

static mt_status evaluate(run *r, const char *where) {
    return evaluate_on(r, r->valid_ds, &r->consumed_valid, where, 0);
}

/* ---- gradient reduction overlapped with the backward ---- */

/* n events (NULL entries until created: events_free frees what exists). */
static mt_status events_new(mt_event **ev, int n) {
    *ev = calloc((size_t)n, sizeof(mt_event));
    MT_REQUIRE(*ev, MT_ERR_OOM, "%d events", n);
    for (int k = 0; k < n; k++)
        MT_TRY(mt_event_create(&(*ev)[k], 0));
    return MT_OK;
}

static void events_free(mt_event *ev, int n) {
    for (int k = 0; ev && k < n; k++)
        mt_event_destroy(ev[k]);
    free(ev);
}

/* Each bucket's level: the lowest grad-ready level of its parameters (mt_model_grad_ready_fn). */
static mt_status setup_overlap(run *r) {
    r->overlap = r->a->overlap_grad_reduce && r->gdp_size > 1;
    if (!r->overlap) return MT_OK;
    int nb = r->n_buckets = mt_optim_buffer_num_buckets(r->buf);
    r->bucket_level = malloc((size_t)nb * sizeof(int));
    r->launched = calloc((size_t)nb, sizeof(int));
    MT_REQUIRE(r->bucket_level && r->launched, MT_ERR_OOM, "bucket table");
    for (int k = 0; k < nb; k++)
        r->bucket_level[k] = INT32_MAX;
    for (int i = 0; i < mt_optim_buffer_num_params(r->buf); i++) {
        mt_optim_param_info info;
        int level;
        MT_TRY(mt_optim_buffer_info(r->buf, i, &info));
        MT_TRY(mt_model_param_ready_level(&r->mc, info.name, &level));
        if (level < r->bucket_level[info.bucket]) r->bucket_level[info.bucket] = level;
    }
    if (mt_device_is_cuda(r->dev)) {
        MT_TRY(mt_stream_create(&r->comm_stream));
        MT_TRY(events_new(&r->bucket_ev, nb));
        MT_TRY(mt_event_create(&r->done_ev, 0));
    }
    if (!r->pgather) return MT_OK;
    r->order = malloc((size_t)nb * sizeof(int));
    r->pending = calloc((size_t)nb, sizeof(int));
    MT_REQUIRE(r->order && r->pending, MT_ERR_OOM, "bucket table");
    for (int k = 0; k < nb; k++) { /* insertion sort by level: the forward's order */
        int j = k;
        for (; j > 0 && r->bucket_level[r->order[j - 1]] > r->bucket_level[k]; j--)
            r->order[j] = r->order[j - 1];
        r->order[j] = k;
    }
    if (mt_device_is_cuda(r->dev)) {
        MT_TRY(events_new(&r->gather_ev, nb));
        MT_TRY(mt_event_create(&r->step_ev, 0));
    }
    return MT_OK;
}

/* The grad-ready callback of the last micro-batch: starts the reduction of every bucket whose
 * gradients are final once `level` is reached, on the comm stream after an event of the
 * backward's stream (CUDA), or at once (host collectives); at the last level (-1) the backward's
 * stream waits for the comm stream. Under a CUDA graph the capture records this work and replays
 * stand in for the calls (mt_model_set_cuda_graphs). */
static mt_status start_buckets(run *r, int level, mt_stream s) {
    for (int k = 0; k < r->n_buckets; k++) {
        if (r->launched[k] || r->bucket_level[k] < level) continue;
        r->launched[k] = 1;
        if (!r->comm_stream) {
            MT_TRY(mt_optim_reduce_bucket(r->opt, k, s));
            continue;
        }
        MT_TRY(mt_event_record(r->bucket_ev[k], s));
        MT_TRY(mt_stream_wait_event(r->comm_stream, r->bucket_ev[k]));
        MT_TRY(mt_optim_reduce_bucket(r->opt, k, r->comm_stream));
    }
    if (level > -1) return MT_OK;
    for (int k = 0; k < r->n_buckets; k++) /* (every level is >= -1: all were started) */
        MT_ASSERT(r->launched[k]);
    memset(r->launched, 0, (size_t)r->n_buckets * sizeof(int));
    if (!r->comm_stream) return MT_OK;
    MT_TRY(mt_event_record(r->done_ev, r->comm_stream));
    return mt_stream_wait_event(s, r->done_ev);
}

/* The tied embedding of the first and last pipeline stages: its buckets (level -1) wait for its
 * two copies' sum (pp_embedding_grads starts them). */
static int embedding_held(const run *r) {
    /* (multi-token prediction: the last stage's copy, which its depths read) */
    return r->emb && (!r->mc.untie_embeddings_and_output_weights || r->mc.mtp_num_layers > 0);
}

static mt_status grad_ready(void *ctx, int level, mt_stream s) {
    run *r = ctx;
    return level == -1 && embedding_held(r) ? MT_OK : start_buckets(r, level, s);
}

/* --overlap-param-gather, after a step that updated the params: every bucket's all-gather, in the
 * forward's order, on the comm stream after the step (CUDA); on the host they wait for the
 * forward to reach their level. */
static mt_status launch_param_gather(run *r) {
    if (r->comm_stream) {
        MT_TRY(mt_event_record(r->step_ev, NULL));
        MT_TRY(mt_stream_wait_event(r->comm_stream, r->step_ev));
    }
    for (int i = 0; i < r->n_buckets; i++) {
        int k = r->order[i];
        if (!r->comm_stream) {
            r->pending[k] = 1;
            continue;
        }
        MT_TRY(mt_optim_gather_bucket(r->opt, k, r->comm_stream));
        MT_TRY(mt_event_record(r->gather_ev[k], r->comm_stream));
    }
    return MT_OK;
}

/* The forward is about to read `level`'s params (mt_model_param_wait_fn): stream s waits for
 * the all-gathers of the buckets up to that level (host: runs them). INT32_MAX: all of them,
 * before anything else reads the params (checkpoint, params norm, the next step). On CUDA the
 * stream waits for the buckets of that level whether or not their gather is new (the events of
 * gathers done complete at once): the same work at every call, which a CUDA graph of the
 * forward keeps as waits for the events' latest records (mt_stream_wait_event_external). */
static mt_status param_wait(void *ctx, int level, mt_stream s) {
    run *r = ctx;
    if (r->comm_stream) {
        for (int k = 0; k < r->n_buckets; k++) {
            if (level != INT32_MAX && r->bucket_level[k] != level) continue;
            MT_TRY(mt_stream_wait_event_external(s, r->gather_ev[k]));
        }
        return MT_OK;
    }
    for (int i = 0; i < r->n_buckets; i++) {
        int k = r->order[i];
        if (r->bucket_level[k] > level) break;
        if (!r->pending[k]) continue;
        r->pending[k] = 0;
        MT_TRY(mt_optim_gather_bucket(r->opt, k, s));
    }
    return MT_OK;
}

/* A step without loss scaling (bf16, fp32) with Inf/NaN gradients: a bug or a diverged run, never
 * routine as fp16's overflows are. Megatron stops (--check-for-nan-in-loss-and-grad, its
 * default); --no-check-for-nan-in-loss-and-grad skips the step instead, reported once. Either
 * way the message names the parameters whose gradients hold them (this rank's copies, read
 * back). */
static mt_status nonfinite_step(run *r, int64_t iteration, double loss, int *reported) {
    const int stop = !r->a->no_check_for_nan_in_loss_and_grad;
    if (!stop && (*reported)++) return MT_OK;
    char names[400] = "";
    int found = 0, off = 0;
    for (int i = 0; i < num_params(r); i++) {
        const mt_model_param *p = param_at(r, i);
        const int64_t n = mt_tensor_numel(&p->grad); /* f32: the model's grads always are */
        float *h = malloc(mt_tensor_nbytes(&p->grad));
        if (!h || mt_memcpy(h, MT_DEVICE_CPU, p->grad.data, p->grad.device,
                            mt_tensor_nbytes(&p->grad), NULL)) {
            free(h);
            mt_error_clear();
            snprintf(names, sizeof names, " (not read back)");
            found = -1;
            break;
        }
        int64_t bad = 0;
        for (int64_t j = 0; j < n; j++)
            bad += !isfinite(h[j]);
        free(h);
        if (bad && found++ < 4 && off < (int)sizeof names)
            off += snprintf(names + off, sizeof names - (size_t)off, " %s (%lld of %lld)", p->name,
                            (long long)bad, (long long)n);
    }
    char what[600];
    snprintf(what, sizeof what,
             "iteration %lld: Inf/NaN in the gradients without loss scaling (lm loss %g); %s%s%s",
             (long long)iteration, loss,
             found > 0    ? "parameters holding them:"
             : found == 0 ? "none in this rank's"
                          : "",
             found == 0 ? " parameters (so in a reduction)" : names, found > 4 ? " and more" : "");
    if (stop)
        return MT_ERROR(MT_ERR_NUMERIC,
                        "%s. Stopping, as Megatron's --check-for-nan-in-loss-and-grad does "
                        "(--no-check-for-nan-in-loss-and-grad skips such steps instead)",
                        what);
    MT_LOG_WARN("%s; the step is skipped (--no-check-for-nan-in-loss-and-grad)", what);
    return MT_OK;
}

static mt_status params_final(run *r) {
    return r->pgather ? param_wait(r, INT32_MAX, NULL) : MT_OK;
}

/* The L2 norm of every parameter (Megatron's params norm), from the parameter buffer (padding is
 * zero; a tied weight counts once); under tensor parallelism parameter by parameter, the split
 * ones' squares summed over the group and the whole ones' counted once. Blocking. */
static mt_status params_norm(run *r, double *norm) {
    MT_TRY(params_final(r));
    mt_tensor p;
    MT_TRY(mt_optim_buffer_params(r->buf, &p));
    if (!r->pn_arena) {
        MT_TRY(mt_reduce_workspace(&p, &r->pn_ws_bytes));
        MT_TRY(mt_arena_create(r->dev, r->pn_ws_bytes + 3 * MT_ARENA_ALIGN, &r->pn_arena));
        MT_TRY(mt_tensor_alloc(r->pn_arena, MT_F32, 1, (int64_t[]){ 1 }, &r->pn_out));
        if (r->pn_ws_bytes) MT_TRY(mt_arena_alloc(r->pn_arena, r->pn_ws_bytes, &r->pn_ws));
    }
    float v;
    if (r->mp) {
        double sq = 0;
        for (int i = 0; i < num_params(r); i++) {
            const mt_model_param *q = param_at(r, i);
            if ((q->tp_axis < 0 && r->tp_rank != 0) || q->pp_shared) continue;
            mt_tensor w = mt_tensor_1d(q->weight.data, q->weight.dtype, mt_tensor_numel(&q->weight),
                                       q->weight.device);
            MT_TRY(mt_reduce(&r->pn_out, &w, MT_REDUCE_NORM2, r->pn_ws, r->pn_ws_bytes, NULL));
            MT_TRY(mt_memcpy(&v, MT_DEVICE_CPU, r->pn_out.data, r->dev, sizeof v, NULL));
            sq += (double)v * v;
        }
        MT_TRY(allreduce_on(r, r->mp, &sq, 1, MT_REDOP_SUM));
        *norm = sqrt(sq);
        return MT_OK;
    }
    MT_TRY(mt_reduce(&r->pn_out, &p, MT_REDUCE_NORM2, r->pn_ws, r->pn_ws_bytes, NULL));
    MT_TRY(mt_memcpy(&v, MT_DEVICE_CPU, r->pn_out.data, r->dev, sizeof v, NULL));
    *norm = v;
    return MT_OK;
}

/* ---- --exit-signal-handler and --exit-duration-in-mins ---- */

static volatile sig_atomic_t got_sigterm;

static void on_sigterm(int sig) {
    (void)sig;
    got_sigterm = 1;
}

/* After an iteration: whether any rank got SIGTERM (with --exit-signal-handler) or training has
 * run longer than --exit-duration-in-mins; then Megatron's message on the first rank. */
static mt_status check_exit(run *r, int *stop) {
    const mt_train_args *a = r->a;
    *stop = 0;
    if (!a->exit_signal_handler && !(a->exit_duration_in_mins > 0)) return MT_OK;
    double mins = (mt_time_now() - r->t_start) / 60.0;
    double sig = got_sigterm ? 1.0 : 0.0;
    double dur = a->exit_duration_in_mins > 0 && mins > a->exit_duration_in_mins ? 1.0 : 0.0;
    MT_TRY(allreduce_host(r, &sig, 1, MT_REDOP_AVG));
    MT_TRY(allreduce_host(r, &dur, 1, MT_REDOP_AVG));
    *stop = sig > 0 || dur > 0;
    if (*stop && r->rank == 0) {
        if (sig > 0)
            printf("exiting program after receiving SIGTERM.\n");
        else
            printf("exiting program after %f minutes\n", mins);
        fflush(stdout);
    }
    return MT_OK;
}

/* ---- the loop ---- */

static mt_status train(run *r) {
    const mt_train_args *a = r->a;
    MT_TRY(mt_data_sampler_init(&r->train_s, mt_data_dataset_len(r->train_ds), r->consumed_train,
                                a->micro_batch_size, r->dp_rank, r->dp_size, 1));
    double interval_t = 0, interval_loss = 0, total_t = 0, total_samples = 0, total_flops = 0;
    double interval_moe[2] = { 0, 0 }; /* MoE: the router losses (load_balancing_loss, z_loss) */
    int64_t interval_n = 0, advanced = 0, timed = 0, skipped = 0, nan_iters = 0, profiled = 0;
    int skip_reported = 0;
    int64_t first_iter = r->iteration;
    int64_t end = a->exit_interval ? a->exit_interval : a->train_iters;
    if (end > a->train_iters) end = a->train_iters;
    if (a->exit_signal_handler) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigterm;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
    }
    /* slot 1 holds the next training micro-batch, read while the GPU runs the one before */
    if (r->iteration < end) MT_TRY(read_batch(r, r->train_ds, &r->train_s, 1));
    int prev_micro = 0;
    while (r->iteration < end) {
        /* this iteration's global batch (--rampup-batch-size: from the consumed samples) */
        const int64_t gbs = running_batch(a, batch_at(a, r->gbs, r->consumed_train), r->dp_size);
        const int num_micro = (int)(gbs / ((int64_t)a->micro_batch_size * r->dp_size));
        /* megatron's train(): a checkpoint when the number of micro-batches changes (unless the
         * save interval has just written this iteration's) */
        if (prev_micro && num_micro != prev_micro && a->save &&
            !(a->save_interval && r->iteration % a->save_interval == 0))
            MT_TRY(save_checkpoint(r));
        prev_micro = num_micro;
        mt_model_config whole = r->mc; /* (context parallelism: the whole sequence's FLOPs) */
        whole.seq_length = a->seq_length;
        const double flops_iter = mt_model_flops_per_iteration(&whole, gbs);
        double t0 = mt_time_now();
        if (r->prof && r->iteration - first_iter == 2) /* after warm-up */
            for (int c = 0; c < r->vpp; c++)
                mt_model_set_profiler(r->chunks[c], r->prof);
        mt_prof *pr = r->iteration - first_iter >= 2 ? r->prof : NULL;
        MT_TRY(mt_prof_begin(pr, "zero_grad", NULL));
        /* the first micro-batch's backward writes the grads: no pass over all of them */
        for (int c = 0; c < r->vpp; c++)
            MT_TRY(mt_model_discard_grads(r->chunks[c], NULL));
        MT_TRY(mt_prof_end(pr, NULL));
        /* the loss (averaged over the micro-batches) times the loss scale: the grads come scaled.
         * --calculate-per-token-loss: each token's loss times loss scale / this rank's tokens of
         * the iteration, a constant (a CUDA graph replays it), whose sum the step rescales by
         * (every rank's tokens / the counted ones): Megatron's sum over the global batch's counted
         * tokens (its all-reduce sums where ours averages: the ranks' factor is in the first) */
        const int64_t rank_tokens =
            (int64_t)num_micro * a->micro_batch_size * (a->seq_length / r->cp_size);
        float grad_scale = (r->scale_p ? r->scale_p->scale : 1.0f) /
                           (a->calculate_per_token_loss ? (float)rank_tokens : (float)num_micro);
        micro_run mr = { r, num_micro, 0, grad_scale, r->iteration + 1 < end, 0 };
        mt_pp_stage st = stage_of(r, &mr);
        mt_pp_chunks ch = chunks_of(r, &mr);
        if (r->pp)
            MT_TRY(r->vpp > 1 ? mt_pp_interleaved(&ch, num_micro) : mt_pp_1f1b(&st, num_micro));
        for (int m = 0; !r->pp && m < num_micro; m++) {
            float gs;
            MT_TRY(take_batch(&mr, 0, &gs));
            mt_model_set_grad_ready(r->model, r->overlap && m == num_micro - 1 ? grad_ready : NULL,
                                    r);
            MT_TRY(mt_model_forward_backward(r->model, &r->tok[0], &r->tgt[0], gs, NULL));
            /* (the checkpoint keeps consumed samples, not the sampler, so a staged batch is read
             * again on resume) */
            MT_TRY(read_next(&mr));
        }
        /* sequence parallelism: the norms' and row-parallel biases' shares summed over the
         * tensor-parallel group (linear, so before or after the data-parallel reduction) */
        for (int c = 0; c < r->vpp; c++)
            MT_TRY(mt_model_finalize_grads(r->chunks[c], NULL));
        MT_TRY(pp_embedding_grads(r));
        /* the expert bias (Megatron's _update_router_expert_bias): each router's tokens per
         * expert summed over the data- and context-parallel ranks, then the update */
        for (int c = 0; c < r->vpp; c++) {
            mt_tensor t;
            MT_TRY(mt_model_expert_bias_tokens(r->chunks[c], &t));
            if (!mt_tensor_numel(&t)) continue;
            if (r->dp) MT_TRY(mt_comm_allreduce(r->dp, &t, &t, MT_REDOP_SUM, NULL));
            MT_TRY(mt_model_expert_bias_update(r->chunks[c], NULL));
        }
        if (!r->overlap) { /* (else inside the backward, which its profile regions time) */
            MT_TRY(mt_prof_begin(pr, "grad_reduce", NULL));
            MT_TRY(mt_optim_reduce_grads(r->opt, NULL));
            MT_TRY(mt_prof_end(pr, NULL));
        }
        if (a->calculate_per_token_loss) {
            double c = (double)mr.counted;
            MT_TRY(allreduce_on(r, r->dp, &c, 1, MT_REDOP_SUM));
            mt_optim_set_grad_multiplier(r->opt, (double)rank_tokens * r->gdp_size / c);
        }
        double lr = mt_optim_sched_lr(&r->sched, (double)r->sched_steps);
        double wd = mt_optim_sched_wd(&r->sched, (double)r->sched_steps);
        mt_optim_step_info info;
        MT_TRY(mt_prof_begin(pr, "optimizer_step", NULL));
        /* unscales, skips on Inf/NaN (found across the data-parallel ranks: the grads are reduced),
         * updates the scaler */
        MT_TRY(params_final(r)); /* the update writes this rank's shards */
        MT_TRY(mt_optim_step(r->opt, lr, wd, r->scale_p, &info, NULL));
        if (r->pgather && !info.skipped) MT_TRY(launch_param_gather(r));
        MT_TRY(mt_prof_end(pr, NULL));
        if (!info.skipped) r->sched_steps += gbs; /* train_step: the scheduler steps on success */
        double loss, moe[2] = { NAN, NAN };
        MT_TRY(take_loss(r, &loss));
        MT_TRY(take_moe_losses(r, &moe[0], &moe[1]));
        MT_TRY(take_mtp_losses(r));
        if (info.skipped && !r->scale_p)
            MT_TRY(nonfinite_step(r, r->iteration + 1, loss, &skip_reported));
        MT_TRY(mt_prof_collect(pr));
        if (pr) profiled++;
        r->iteration++;
        r->consumed_train += gbs;
        double dt = mt_time_now() - t0;
        if (r->iteration > 1 || a->train_iters == 1) { /* iteration 1 includes warm-up */
            total_t += dt;
            total_samples += (double)gbs;
            total_flops += flops_iter;
            timed++;
        }
        /* training_log: a skipped iteration's loss is left out of the average; it counts as a nan
         * iteration when the loss itself is not finite */
        skipped += info.skipped;
        nan_iters += info.skipped && !isfinite(loss);
        r->gv_loss[r->iteration] = loss;
        r->gv_zeros[r->iteration] = (double)info.num_zeros;
        r->gv_time[r->iteration] = dt;
        for (int k = 0; k < r->mc.mtp_num_layers; k++)
            r->gv_mtp[(int64_t)k * (a->train_iters + 1) + r->iteration] = r->mtp_iter[k];
        interval_t += dt;
        if (!info.skipped) {
            interval_loss += loss;
            interval_moe[0] += moe[0], interval_moe[1] += moe[1];
            for (int k = 0; k < r->mc.mtp_num_layers; k++)
                r->mtp_interval[k] += r->mtp_iter[k];
            advanced++;
        }
        interval_n++;
        double lr_after = mt_optim_sched_lr(&r->sched, (double)r->sched_steps);
        double loss_scale = r->scale_p ? r->scale_p->scale : 1.0;
        double tflops = flops_iter / (dt * 1e12 * r->nranks);
        if (r->jsonl) {
            char gn[32] = "null"; /* a skipped step has no grad norm */
            if (!info.skipped) snprintf(gn, sizeof gn, "%.6f", info.grad_norm);
            fprintf(
                r->jsonl,
                "{\"iteration\":%lld,\"lm loss\":%.6f,\"learning rate\":%.6e,\"loss scale\":%.1f,"
                "\"grad norm\":%s,\"num zeros\":%lld,\"elapsed ms\":%.3f,\"tokens per s\":%.1f,"
                "\"TFLOP/s/GPU\":%.6g,\"skipped\":%d",
                (long long)r->iteration, loss, lr_after, loss_scale, gn, (long long)info.num_zeros,
                dt * 1e3, (double)gbs * a->seq_length / dt, tflops, info.skipped);
            if (isfinite(moe[0])) /* (Megatron's key for each load-balancing type) */
                fprintf(r->jsonl, ",\"%sload_balancing_loss\":%.6f",
                        r->mc.moe_router_seq_aux ? "seq_" : "", moe[0]);
            if (isfinite(moe[1])) fprintf(r->jsonl, ",\"z_loss\":%.6f", moe[1]);
            for (int k = 0; k < r->mc.mtp_num_layers; k++)
                fprintf(r->jsonl, ",\"mtp_%d loss\":%.6f", k + 1, r->mtp_iter[k]);
            fprintf(r->jsonl, "}\n");
        }
        if (r->iteration % a->log_interval == 0 || r->iteration == 1) {
            double pn = 0; /* (collective under tensor parallelism: on every rank) */
            if (a->log_params_norm) MT_TRY(params_norm(r, &pn));
            if (last_rank(r)) {
                char ts[64], tp[96] = "", gn[64] = "", nz[128] = "", ml[1024] = "";
                stamp(ts, sizeof ts);
                double per = interval_t / (double)interval_n;
                if (a->log_throughput)
                    snprintf(tp, sizeof tp, " throughput per GPU (TFLOP/s/GPU): %.1f |",
                             flops_iter / (per * 1e12 * r->nranks));
                /* a skipped step returns no grad norm and no zero count: left out of the line */
                if (!info.skipped) snprintf(gn, sizeof gn, " grad norm: %.3f |", info.grad_norm);
                if (a->log_num_zeros_in_grad && !info.skipped)
                    snprintf(nz, sizeof nz, " num zeros: %lld |", (long long)info.num_zeros);
                if (a->log_params_norm) {
                    size_t k = strlen(nz);
                    snprintf(nz + k, sizeof nz - k, " params norm: %.3f |", pn);
                }
                const double nadv = (double)(advanced > 1 ? advanced : 1);
                if (r->mc.moe_aux_loss_coeff > 0) /* (Megatron's loss keys after lm loss) */
                    snprintf(ml, sizeof ml, " %sload_balancing_loss: %.6E |",
                             r->mc.moe_router_seq_aux ? "seq_" : "", interval_moe[0] / nadv);
                if (r->mc.moe_z_loss_coeff > 0) {
                    size_t k = strlen(ml);
                    snprintf(ml + k, sizeof ml - k, " z_loss: %.6E |", interval_moe[1] / nadv);
                }
                for (int k = 0; k < r->mc.mtp_num_layers && k < 32; k++) {
                    size_t n = strlen(ml); /* (Megatron's track_mtp_metrics keys) */
                    snprintf(ml + n, sizeof ml - n, " mtp_%d loss: %.6E |", k + 1,
                             r->mtp_interval[k] / nadv);
                }
                printf(" [%s] iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per "
                       "iteration (ms): %.1f |%s learning rate: %.6E | global batch size: %5lld | "
                       "lm loss: %.6E |%s loss scale: %.1f |%s%s number of skipped iterations: "
                       "%3lld | number of nan iterations: %3lld |\n",
                       ts, (long long)r->iteration, (long long)a->train_iters,
                       (long long)r->consumed_train, per * 1e3, tp, lr_after, (long long)gbs,
                       interval_loss / nadv, ml, loss_scale, gn, nz, (long long)skipped,
                       (long long)nan_iters);
                fflush(stdout);
            }
            interval_t = interval_loss = interval_moe[0] = interval_moe[1] = 0;
            for (int k = 0; k < r->mc.mtp_num_layers; k++)
                r->mtp_interval[k] = 0;
            interval_n = advanced = 0;
            skipped = nan_iters = 0;
        }
        if (a->eval_interval && r->valid_ds && r->iteration % a->eval_interval == 0) {
            char where[64];
            snprintf(where, sizeof where, "iteration %lld on validation set",
                     (long long)r->iteration);
            MT_TRY(evaluate(r, where));
        }
        if (a->save && a->save_interval && r->iteration % a->save_interval == 0)
            MT_TRY(save_checkpoint(r));
        int stop;
        MT_TRY(check_exit(r, &stop));
        if (stop) {
            r->exited = 1;
            break;
        }
    }
    MT_TRY(params_final(r));
    if (a->save && (!a->save_interval || r->iteration % a->save_interval != 0))
        MT_TRY(save_checkpoint(r));
    if (r->writer) MT_TRY(mt_ckpt_wait(r->writer));
    if (last_rank(r) && timed > 0) {
        double per = total_t / (double)timed;
        double tokens = total_samples * a->seq_length / total_t;
        double tflops = total_flops / (total_t * 1e12 * r->nranks);
        char name[128] = "cpu";
        if (mt_device_is_cuda(r->dev)) mt_device_name(r->dev.index, name, sizeof name);
        double peak = 989.0; /* dense bf16 peak of an H100/H200 (Megatron's MFU convention) */
        size_t bytes = mt_arena_capacity(r->buf_arena) + mt_arena_capacity(r->opt_arena) +
                       (r->vbuf_arena ? mt_arena_capacity(r->vbuf_arena) : 0) +
                       (r->slot_arena ? mt_arena_capacity(r->slot_arena) : 0);
        for (int c = 0; c < r->vpp; c++)
            bytes += mt_model_bytes(r->chunks[c]);
        printf(
            "[summary] device %s | ranks %d | %.1f ms/iteration | %.0f tokens/s | %.0f tokens/s/GPU"
            " | %.2f TFLOP/s/GPU | MFU %.1f%% (of %.0f) | memory (MB): %.1f\n",
            name, r->nranks, per * 1e3, tokens, tokens / r->nranks, tflops,
            mt_device_is_cuda(r->dev) ? 100.0 * tflops / peak : 0.0, peak,
            (double)bytes / (1 << 20));
    }
    if (r->prof && last_rank(r) && profiled > 0) {
        for (int c = 0; c < r->vpp; c++)
            mt_model_set_profiler(r->chunks[c], NULL);
        fprintf(stderr, "[profile] per iteration, mean of %lld iterations after 2 of warm-up:\n",
                (long long)profiled);
        mt_prof_print(r->prof, stderr, (double)profiled);
    }
    return MT_OK;
}

static void teardown(run *r) {
    if (r->writer) mt_ckpt_writer_destroy(r->writer);
    if (r->jsonl) fclose(r->jsonl);
    mt_optim_destroy(r->opt);
    for (int c = 0; r->chunks && c < r->vpp; c++)
        mt_model_destroy(r->chunks[c]);
    free(r->chunks);
    mt_arena_destroy(r->slot_arena);
    mt_arena_destroy(r->vbuf_arena);
    free(r->vbuf), free(r->slot_gs), free(r->chunk_axes);
    mt_optim_buffer_destroy(r->buf);
    mt_arena_destroy(r->buf_arena);
    mt_arena_destroy(r->opt_arena);
    mt_arena_destroy(r->io_arena);
    mt_arena_destroy(r->pn_arena);
    mt_data_dataset_destroy(r->train_ds);
    mt_data_dataset_destroy(r->valid_ds);
    mt_data_dataset_destroy(r->test_ds);
    free(r->ids);
    free(r->text);
    free(r->htok);
    free(r->htgt);
    free(r->hpos);
    free(r->hsid);
    free(r->hks);
    free(r->dstart);
    free(r->tok);
    free(r->tgt);
    free(r->pos);
    free(r->ks);
    free(r->sid);
    free(r->gv_loss);
    free(r->gv_zeros);
    free(r->gv_time);
    free(r->gv_mtp);
    free(r->hmtp);
    free(r->hmcount);
    free(r->mtp_tok);
    free(r->mtp_tgt);
    free(r->mtp_scale);
    free(r->mtp_iter);
    free(r->mtp_interval);
    events_free(r->bucket_ev, r->n_buckets);
    events_free(r->gather_ev, r->n_buckets);
    mt_event_destroy(r->done_ev);
    mt_event_destroy(r->step_ev);
    free(r->order);
    free(r->pending);
    mt_stream_destroy(r->comm_stream);
    free(r->bucket_level);
    free(r->launched);
    mt_prof_destroy(r->prof);
    mt_comm_destroy(r->tp);
    mt_comm_destroy(r->cp);
    free(r->hcp);
    mt_comm_destroy(r->ep);
    mt_comm_destroy(r->edp);
    mt_comm_destroy(r->emp);
    mt_comm_destroy(r->dp_own);
    mt_comm_destroy(r->mp_own);
    mt_comm_destroy(r->emb_own);
    mt_comm_destroy(r->pp);
    if (r->pp_stream) mt_stream_destroy(r->pp_stream);
    mt_comm_destroy(r->world);
}

mt_status mt_train_run(const mt_train_args *a) {
    run r;
    memset(&r, 0, sizeof r);
    r.a = a;
    r.vpp =
        a->virtual_pipeline_model_parallel_size > 1 ? a->virtual_pipeline_model_parallel_size : 1;
    r.t_start = mt_time_now();
    mt_status st = setup_world(&r);
    if (st == MT_OK) {
        int dp = r.dp_size;
        r.gbs = a->global_batch_size ? a->global_batch_size : (int64_t)a->micro_batch_size * dp;
        const int64_t unit = (int64_t)a->micro_batch_size * dp;
        const int64_t running = running_batch(a, r.gbs, dp);
        if (r.gbs % unit != 0 && !a->decrease_batch_size_if_needed)
            st = MT_ERROR(MT_ERR_INVALID_ARG,
                          "global batch size (%lld) is not divisible by micro batch size (%d) "
                          "times data parallel size (%d)",
                          (long long)r.gbs, a->micro_batch_size, dp);
        else if (running == 0)
            st = MT_ERROR(MT_ERR_INVALID_ARG,
                          "global batch size (%lld) is below micro batch size (%d) times data "
                          "parallel size (%d): --decrease-batch-size-if-needed leaves nothing",
                          (long long)r.gbs, a->micro_batch_size, dp);
        else if (running != r.gbs && r.rank == 0 && !a->n_rampup)
            printf("decreasing batch size from %lld to %lld to keep divisiblity by "
                   "micro_batch_size=%d * data_parallel_size=%d\n",
                   (long long)r.gbs, (long long)running, a->micro_batch_size, dp);
        r.num_micro = (int)(r.gbs / ((int64_t)a->micro_batch_size * dp));
    }
    mt_train_args sample_based; /* --train-samples: megatron's update_train_iters */
    if (st == MT_OK && a->train_samples > 0) {
        sample_based = *a;
        st = check_rampup(a, r.gbs, r.dp_size);
        /* megatron's update_train_iters: the ramp's iterations, then whole global batches */
        int64_t it = 0, c = 0;
        while (a->n_rampup && c <= a->rampup_batch_size[2] && c <= a->train_samples) {
            c += batch_at(a, r.gbs, c);
            it++;
        }
        if (a->train_samples > c) it += (a->train_samples - c) / r.gbs;
        sample_based.train_iters = it;
        if (st == MT_OK && sample_based.train_iters <= 0)
            st = MT_ERROR(MT_ERR_INVALID_ARG,
                          "--train-samples (%lld) is smaller than the global batch size (%lld)",
                          (long long)a->train_samples, (long long)r.gbs);
        r.a = a = &sample_based;
    }
    if (st == MT_OK) st = setup_tokenizer(&r);
    if (st == MT_OK) st = setup_model(&r);
    if (st == MT_OK && a->load) st = load_checkpoint(&r);
    if (st == MT_OK) st = setup_data(&r);
    if (st == MT_OK) st = setup_io(&r);
    if (st == MT_OK && last_rank(&r) && (a->tensorboard_dir || a->wandb_project))
        fprintf(stderr, "WARNING: --tensorboard-dir/--wandb-project are accepted but nothing is "
                        "written there; use --metrics-jsonl FILE\n");
    if (st == MT_OK && last_rank(&r) && a->reset_attention_mask && !doc_masks(a))
        fprintf(stderr, "WARNING: --reset-attention-mask does nothing with "
                        "--no-create-attention-mask-in-dataloader (as Megatron's: there is no "
                        "mask to reset); documents attend across their boundaries\n");
    if (st == MT_OK && last_rank(&r) && a->ckpt_format && a->save)
        fprintf(stderr,
                "WARNING: --ckpt-format %s is accepted, but checkpoints are written in this "
                "project's format (sharded safetensors and an index.json; mt-convert exports "
                "Hugging Face)\n",
                a->ckpt_format);
    if (st == MT_OK && r.rank == 0) { /* megatron's _vocab_size_with_padding */
        printf(" > padded vocab (size: %lld) with %lld dummy tokens (new size: %d)\n",
               (long long)r.vocab, (long long)(r.mc.padded_vocab_size - r.vocab),
               r.mc.padded_vocab_size);
        fflush(stdout);
    }
    if (st == MT_OK && last_rank(&r)) {
        int64_t params = 0;
        for (int i = 0; i < num_params(&r); i++)
            params += mt_tensor_numel(&param_at(&r, i)->weight);
        char pp[48] = ""; /* (Megatron's grid order: tp, dp, pp) */
        if (r.pp_size > 1) snprintf(pp, sizeof pp, " x pipeline parallel %d", r.pp_size);
        if (r.cp_size > 1) /* (each sequence over context-parallel ranks) */
            snprintf(pp + strlen(pp), sizeof pp - strlen(pp), " x context parallel %d", r.cp_size);
        if (r.ep_size > 1) /* (the experts over expert-parallel ranks of the data-parallel ones) */
            snprintf(pp + strlen(pp), sizeof pp - strlen(pp), ", expert parallel %d", r.ep_size);
        char kind[64]; /* (MoE: Mixtral-style with the Llama choices) */
        snprintf(kind, sizeof kind, "%s",
                 r.mc.normalization == MT_NORM_RMSNORM ? "Llama-style" : "GPT");
        if (r.mc.num_moe_experts)
            snprintf(kind, sizeof kind, "%s MoE (%d experts, top-%d)",
                     r.mc.normalization == MT_NORM_RMSNORM ? "Mixtral-style" : "GPT",
                     r.mc.num_moe_experts, r.mc.moe_router_topk);
        if (r.mc.multi_latent_attention) /* (DeepSeek's attention) */
            snprintf(kind + strlen(kind), sizeof kind - strlen(kind), " with MLA");
        printf("> building %s model: %lld parameters%s, padded vocab %d, %d rank(s) on %s, %s, "
               "%d micro-batch(es) per iteration (tensor parallel %d x data parallel %d%s)\n",
               kind, (long long)params,
               r.pp_size > 1                    ? " on this rank (the last pipeline stage's)"
               : r.tp_size > 1 || r.ep_size > 1 ? " on this rank"
                                                : "",
               r.mc.padded_vocab_size, r.nranks, mt_device_is_cuda(r.dev) ? "cuda" : "cpu",
               a->bf16   ? "bf16"
               : a->fp16 ? "fp16"
                         : "fp32",
               r.num_micro, r.tp_size, r.dp_size, pp);
        fflush(stdout);
    }
    if (st == MT_OK && r.rank == 0 && a->n_rampup) {
        printf("will use batch size rampup starting from global batch size %lld to global batch "
               "size %lld with batch size increments %lld over %lld samples.\n"
               "setting training iterations to %lld\n",
               (long long)a->rampup_batch_size[0], (long long)r.gbs,
               (long long)a->rampup_batch_size[1], (long long)a->rampup_batch_size[2],
               (long long)a->train_iters);
        fflush(stdout);
    }
    r.last_eval = -1;
    if (st == MT_OK && !a->skip_train) st = train(&r);
    if (st == MT_OK && a->skip_train && r.rank == 0) {
        printf("skipping training (--skip-train is on) ...\n");
        fflush(stdout);
    }
    char where[96];
    if (st == MT_OK && a->eval_interval && r.valid_ds && !r.exited) {
        snprintf(where, sizeof where, "iteration %lld on validation set", (long long)r.iteration);
        st = evaluate(&r, where);
    }
    if (st == MT_OK && r.test_ds && !r.exited) {
        int64_t consumed = 0;
        snprintf(where, sizeof where, "iteration %lld on test set", (long long)r.iteration);
        st = evaluate_on(&r, r.test_ds, &consumed, where, 1);
    }
    if (st == MT_OK && a->golden_values_out && last_rank(&r)) write_golden(&r);
    if (st != MT_OK && r.nranks > 1) {
        /* a failure of this rank alone would leave the others in a collective until the timeout */
        fprintf(stderr, "mt-pretrain: error on rank %d of %d: %s: %s\n", r.rank, r.nranks,
                mt_status_str(st), mt_last_error());
        mt_comm_abort_job(r.world, 1);
    }
    teardown(&r);
    return st;
}
