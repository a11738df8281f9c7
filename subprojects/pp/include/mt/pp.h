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

/* ---- the interleaved schedule (Megatron's virtual pipeline stages) ----
 * Each of the P stages holds V model chunks: chunk c of stage r is virtual stage c P + r of a
 * pipeline of P V (the first's input is the tokens, the last's output the loss), so an
 * activation goes round the P ranks V times, from the last stage back to the first between
 * chunks. Megatron's forward_backward_pipelining_with_interleaving (its order; the overlap by a
 * comm stream): micro-batches in groups of N (microbatch_group_size_per_vp_stage, P by
 * default), each group through chunk 0, then chunk 1, ...; (P - r - 1) 2 + (V - 1) N warm-up
 * forwards on stage r,
 * then a forward and a backward in turn, then the remaining backwards. The exchanges with the
 * neighbours (the previous and next stage round the ring) are batched as Megatron's; in a batch
 * the activations go before the gradients, so P = 2, where both neighbours are one rank, pairs
 * them right. */
typedef struct mt_pp_chunks {
    mt_comm *comm; /* the pipeline group (member k: stage k), of 2 or more stages */
    mt_stream stream;
    void *ctx;
    int num_chunks; /* V >= 1 */
    /* chunk c's forward / backward of micro-batch mb in `slot` (mt_pp_interleaved_slot_map's:
     * slots are the stage's, shared by its chunks, and one holds one chunk's micro-batch at a
     * time; a chunk's input for the slot has arrived in input(c, slot) unless c is the first
     * virtual stage; before a backward that is not the last virtual stage's, the next virtual
     * stage's input gradient has been written into grad(c), which after a backward holds this
     * chunk's input gradient) */
    mt_status (*forward)(void *ctx, int chunk, int mb, int slot);
    mt_status (*backward)(void *ctx, int chunk, int mb, int slot);
    mt_tensor (*input)(void *ctx, int chunk, int slot);
    mt_tensor (*output)(void *ctx, int chunk); /* the chunk's last forward's output */
    mt_tensor (*grad)(void *ctx, int chunk);
    /* Staging buffer k < mt_pp_interleaved_buffers(): the activations' shape and dtype, on the
     * stream's device. Outputs wait in buffers 0 and 1 (in turn) to be sent; the others hold
     * input gradients that arrive before their backward (the first and last stages receive
     * round the ring ahead of time). */
    mt_tensor (*buffer)(void *ctx, int k);
    /* Device tensors: a stream for the exchanges (NULL: they run in `stream`'s order). The
     * compute stream then waits only where it reads a received tensor or overwrites one being
     * sent, so transfers overlap the chunks' work (Megatron's overlap_p2p_comm); it has waited
     * for every transfer when mt_pp_interleaved returns. */
    mt_stream comm_stream;
    /* Megatron's microbatch_group_size_per_vp_stage N (--microbatch-group-size-per-virtual-
     * pipeline-stage): the micro-batches go through the chunks in groups of N, P <= N <= M
     * (0: P, Megatron's default) */
    int group;
} mt_pp_chunks;

typedef enum mt_pp_op {
    MT_PP_FORWARD = 0,
    MT_PP_BACKWARD = 1,
    MT_PP_EXCHANGE = 2
} mt_pp_op;

/* One step of a stage's interleaved order: a chunk's forward or backward of a micro-batch, or
 * one batched exchange (what it sends to the next and previous stage and receives from them,
 * and for which chunk a received input or gradient is). */
typedef struct mt_pp_event {
    mt_pp_op op;
    int chunk, mb; /* forward, backward */
    int send_next, send_prev, recv_prev, recv_next;
    int recv_prev_chunk, recv_next_chunk; /* (-1 when nothing is received) */
} mt_pp_event;

/* Megatron's conditions on the interleaved schedule (its messages): P >= 2, V in [1, 64], the group
 * size N (0: P) in [P, num_micro], and num_micro % N either 0 or at least P. */
MT_API mt_status mt_pp_interleaved_check(int stages, int chunks, int num_micro, int group);
/* Stage `stage`'s events for one training iteration in groups of `group` micro-batches (0: P;
 * ev may be NULL to count); -1 for arguments that mt_pp_interleaved_check refuses. */
MT_API int mt_pp_interleaved_order(int stages, int stage, int chunks, int num_micro, int group,
                                   mt_pp_event *ev);
/* What the stage needs for num_micro micro-batches, from one walk of its order: slots (an array
 * of chunks + 1) gets the stage's slots in [0] and chunk c's in [1 + c] (as
 * mt_pp_interleaved_slots), *buffers mt_pp_interleaved_buffers' count. MT_ERR_INVALID_ARG (with
 * mt_pp_interleaved_check's message) for a shape the schedule refuses. */
MT_API mt_status mt_pp_interleaved_counts(int stages, int stage, int chunks, int num_micro,
                                          int group, int *slots, int *buffers);
/* The most of chunk `chunk`'s micro-batches in flight at once on the stage, from the receive (or
 * forward) of the input to the backward (a chunk with slots of its own needs that many, micro-batch
 * mb in slot mb % slots). chunk -1: the stage's, a micro-batch counted from its first receive or forward on
 * the stage to its last backward (chunk 0's), e.g. for the batches' own slots. */
MT_API int mt_pp_interleaved_slots(int stages, int stage, int chunks, int num_micro, int group,
                                   int chunk);
/* The activation slots of the stage's chunks, shared: map (chunks * num_micro ints) gets chunk c's
 * micro-batch mb's slot in map[c * num_micro + mb], the lowest free one from the receive (or
 * forward) of its input to its backward, and *pool the slots used: the most micro-batches of all
 * chunks in flight at once (at most the sum of the chunks' mt_pp_interleaved_slots, and less
 * when their peaks come at different times). MT_ERR_INVALID_ARG as mt_pp_interleaved_counts. */
MT_API mt_status mt_pp_interleaved_slot_map(int stages, int stage, int chunks, int num_micro,
                                            int group, int *map, int *pool);
/* The staging buffers mt_pp_interleaved needs on the stage: two for the outputs sent, and the
 * most input gradients waiting for their backward at once. */
MT_API int mt_pp_interleaved_buffers(int stages, int stage, int chunks, int num_micro, int group);
/* Runs num_micro micro-batches through the stage's chunks in the interleaved order.
 * Collective over the pipeline group (every stage the same num_micro). */
MT_API mt_status mt_pp_interleaved(const mt_pp_chunks *s, int num_micro);
/* Forwards only (evaluation): each micro-batch round the ring through every chunk in turn, in
 * slot 0 (backward, grad and buffer unused). Collective over the pipeline group. */
MT_API mt_status mt_pp_interleaved_forward_only(const mt_pp_chunks *s, int num_micro);

#ifdef __cplusplus
}
#endif

#endif /* MT_PP_H */
