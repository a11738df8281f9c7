/* mt-pp: pipeline-parallel schedules over a stage interface (megatron.core.pipeline_parallel).
 * The caller's stage runs a micro-batch's forward and backward (callbacks); the schedule decides
 * their order and moves the activations and their gradients between neighbouring stages through
 * mt-comm's batched point-to-point operations (host tensors over MPI, device tensors over NCCL,
 * enqueued on the stage's stream), each send posted together with the receive that follows it, as
 * Megatron's p2p_communication does. */
#ifndef MT_PP_H
#define MT_PP_H

#include <mt/comm.h>
#include <mt/core.h>
#include <mt/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A pipeline stage: member `k` of `comm` is stage k (NULL or a group of one: no pipeline, every
 * micro-batch's forward then backward). Micro-batch mb runs in activation slot
 * mb % mt_pp_num_slots(stages, stage): the stage keeps that many micro-batches' activations. */
typedef struct mt_pp_stage {
    mt_comm *comm;
    mt_stream stream; /* where the sends and receives of device tensors are enqueued */
    void *ctx;
    /* Micro-batch mb's forward in `slot` (on a stage after the first its input has arrived in
     * input(slot)); then output() is sent to the next stage. */
    mt_status (*forward)(void *ctx, int mb, int slot);
    /* Micro-batch mb's backward in `slot` (on a stage before the last, the next stage's input
     * gradient has arrived in grad()); then grad() (this stage's input gradient) is sent to the
     * previous stage. */
    mt_status (*backward)(void *ctx, int mb, int slot);
    /* Where the previous stage's output for `slot` is received (stages after the first). */
    mt_tensor (*input)(void *ctx, int slot);
    /* The last forward's output (stages before the last). */
    mt_tensor (*output)(void *ctx);
    /* The gradient buffer: received into before a backward (stages before the last), sent from
     * after it (stages after the first). */
    mt_tensor (*grad)(void *ctx);
} mt_pp_stage;

/* The activation slots 1F1B needs on `stage` of `stages`: stages - stage (its most micro-batches
 * in flight); 1 without a pipeline. */
MT_API int mt_pp_num_slots(int stages, int stage);

/* 1F1B's order on `stage` (Megatron's forward_backward_pipelining_without_interleaving):
 * min(stages - stage - 1, num_micro) warm-up forwards, then a forward and a backward in turn, then
 * the remaining backwards. ops[k] >= 0: the forward of micro-batch ops[k]; < 0: the backward of
 * micro-batch -1 - ops[k]. Returns the count (2 num_micro; ops may be NULL to count). */
MT_API int mt_pp_1f1b_order(int stages, int stage, int num_micro, int *ops);

/* Runs num_micro micro-batches through the stage in 1F1B order, exchanging the tensors with the
 * neighbours. Collective over the pipeline group (every stage the same num_micro). Blocking for
 * host tensors; device transfers are enqueued on s->stream. */
MT_API mt_status mt_pp_1f1b(const mt_pp_stage *s, int num_micro);

/* Forwards only (evaluation): each micro-batch received, run in slot 0 (backward unused), sent
 * on. Collective over the pipeline group. */
MT_API mt_status mt_pp_forward_only(const mt_pp_stage *s, int num_micro);

#ifdef __cplusplus
}
#endif

#endif /* MT_PP_H */
