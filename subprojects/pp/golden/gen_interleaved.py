#!/usr/bin/env python3
"""Golden orders of Megatron's interleaved 1F1B schedule, from megatron-core itself.

megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_with_interleaving runs
for each pipeline rank with its forward_step and backward_step replaced by recorders and a
P2PCommunicator stand-in that records each exchange (what it sends to the next and previous
rank, what it receives from them) and hands back placeholders. No process group is formed, no
tensor computed: what comes out is the order Megatron gives each rank, without its p2p overlap
(overlap_p2p_comm off, batch_p2p_comm on: its default). Writes interleaved.json: per case
(P, V, M, N) and rank the events "F c m" (chunk c's forward of micro-batch m), "B c m" and
"X sn sp rp rn" (one batched exchange: 1 where it sends to the next / previous rank, receives
from the previous / next), and the forward-only order.

    pip install torch; pip install --no-deps megatron-core   (tested with 0.16.1)
    python3 gen_interleaved.py > interleaved.json
"""
import json
import sys
import types
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402
from megatron.core.pipeline_parallel import schedules  # noqa: E402

_zeros = torch.zeros  # (the token count is made on "cuda"; this machine may have none)
torch.zeros = lambda *a, device=None, **kw: _zeros(*a, **kw)

# (P, V, M, N): N, microbatch_group_size_per_vp_stage, is P unless given
CASES = [(2, 2, 2), (2, 2, 4), (2, 2, 6), (2, 3, 4), (4, 2, 4), (4, 2, 8), (4, 3, 8), (3, 2, 6),
         (4, 2, 12), (2, 4, 8), (2, 2, 6, 3), (2, 2, 5, 3), (4, 2, 10, 5), (4, 3, 12, 8),
         (3, 2, 7, 4), (2, 3, 8, 8)]


class Group:
    def __init__(self, size, rank):
        self._size, self._rank = size, rank

    def size(self):
        return self._size

    def rank(self):
        return self._rank


class Tag:  # a placeholder tensor: which chunk and micro-batch produced it
    def __init__(self, what):
        self.what = what


def run(P, V, M, N, rank, forward_only):
    ev = []
    pp = Group(P, rank)

    class Comm:
        pp_group = pp
        virtual_pipeline_model_parallel_size = V
        config = None

        def _x(self, send_next=None, send_prev=None, recv_prev=False, recv_next=False):
            sn, sp = send_next is not None, send_prev is not None
            if sn or sp or recv_prev or recv_next:
                ev.append("X %d %d %d %d" % (sn, sp, int(bool(recv_prev)), int(bool(recv_next))))
            return Tag("in") if recv_prev else None, Tag("grad") if recv_next else None

        def recv_forward(self, tensor_shapes, is_first_stage):
            return None if is_first_stage else self._x(recv_prev=True)[0]

        def recv_backward(self, tensor_shapes, is_last_stage):
            return None if is_last_stage else self._x(recv_next=True)[1]

        def send_forward_recv_forward(self, output_tensor, recv_prev, tensor_shape,
                                      overlap_p2p_comm=False):
            assert not overlap_p2p_comm
            return self._x(send_next=output_tensor, recv_prev=recv_prev)[0]

        def send_backward_recv_backward(self, input_tensor_grad, recv_next, tensor_shape,
                                        overlap_p2p_comm=False):
            assert not overlap_p2p_comm
            return self._x(send_prev=input_tensor_grad, recv_next=recv_next)[1]

        def send_forward_backward_recv_forward_backward(self, output_tensor, input_tensor_grad,
                                                        recv_prev, recv_next, tensor_shape):
            return self._x(output_tensor, input_tensor_grad, recv_prev, recv_next)

    def forward_step(func, data_iterator, model, num_microbatches, input_tensor, store, config,
                     *args, current_microbatch=None, vp_stage=None, **kw):
        ev.append("F %d %d" % (vp_stage, current_microbatch))
        return Tag((vp_stage, current_microbatch)), torch.tensor(0)

    def backward_step(input_tensor, output_tensor, output_tensor_grad, model_type, config):
        c, m = output_tensor.what
        ev.append("B %d %d" % (c, m))
        return Tag("dgrad")

    schedules.forward_step = forward_step
    # (megatron.core.utils.get_pg_rank answers 0 without torch.distributed: the stage tests ask
    # the group itself)
    schedules.is_pp_first_stage = lambda g: g.rank() == 0
    schedules.is_pp_last_stage = lambda g: g.rank() == g.size() - 1
    schedules.backward_step = backward_step
    config = types.SimpleNamespace(
        microbatch_group_size_per_vp_stage=N, virtual_pipeline_model_parallel_size=V,
        overlap_p2p_comm=False, batch_p2p_comm=True, overlap_p2p_comm_warmup_flush=False,
        overlap_moe_expert_parallel_comm=False, finalize_model_grads_func=None, timers=None,
        no_sync_func=None, grad_sync_func=None, param_sync_func=None,
        num_microbatches_with_partial_activation_checkpoints=None, sequence_parallel=False,
        hidden_size=8, deallocate_pipeline_outputs=False, fine_grained_activation_offloading=False,
        cuda_graph_impl="none", variable_seq_lengths=False, pipeline_dtype=torch.float32)
    schedules.get_model_config = lambda m: config
    schedules.get_model_type = lambda m: None
    Comm.config = config
    chunks = [torch.nn.Module() for _ in range(V)]
    pg = types.SimpleNamespace(tp=Group(1, 0), cp=Group(1, 0), embd=None, pos_embd=None, pp=pp,
                               dp_cp=Group(1, 0))
    schedules.forward_backward_pipelining_with_interleaving(
        forward_step_func=None, data_iterator=[None] * V, model=chunks, num_microbatches=M,
        seq_length=4, micro_batch_size=1, forward_only=forward_only, p2p_communicator=Comm(),
        pg_collection=pg)
    return ev


out = {"megatron_core": __import__("importlib.metadata").metadata.version("megatron-core"),
       "cases": []}
for case in CASES:
    P, V, M = case[:3]
    N = case[3] if len(case) > 3 else P
    out["cases"].append({"P": P, "V": V, "M": M, "N": N,
                         "train": [run(P, V, M, N, r, False) for r in range(P)],
                         "forward_only": [run(P, V, M, N, r, True) for r in range(P)]})
json.dump(out, sys.stdout, indent=None)
sys.stdout.write("\n")
