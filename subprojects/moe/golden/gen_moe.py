"""Golden values for mt-moe from megatron-core's own MoE functions (megatron.core.transformer.moe
.moe_utils: topk_routing_with_score_function, switch_load_balancing_loss_func, z_loss_func,
permute, unpermute) with torch autograd for the backwards. CPU, float32 (losses float64).

    pip install torch numpy megatron-core   # generated with torch 2.11.0, megatron-core 0.16.1
    python gen_moe.py [CASE ...]            # writes the .npy files next to this script (all
                                            # cases, or those; group4* with torch 2.15.0)

Cases (tokens N, experts E, top-k, row width C): a 37 x 8 top-2 (Mixtral's shape of routing) and a
29 x 6 top-3, and 41 x 16 top-4 from 2 of 4 groups (group4*: --moe-router-num-groups,
--moe-router-group-topk); sigmoid scores (sig*: --moe-router-score-function sigmoid). For each:
logits, the dense routing probabilities and map, the aux loss's tokens per expert (TopKRouter's:
compute_routing_scores_for_aux_loss's plain top-k map, not the routing's; session 41, torch 2.15:
group4* were made with the routing's counts before) and the aux and z losses
without their coefficients, the logits' gradient of sum(G * probs) + aux_coeff * aux + z_coeff * z
for a random G, the permuted rows of x, the combine of random expert outputs yp and the gradients
of sum(DY * y) with respect to yp and the probabilities, and of sum(DXP * permuted) w.r.t. x.
Token dropping (drop_*: apply_router_token_dropping, --moe-expert-capacity-factor, drop policy
probs, with and without --moe-pad-expert-input-to-capacity; a capacity above the tokens): see
drop_case. Expert parallelism's plan (ep2, ep4): see ep_case."""
import math
import os

import numpy as np
import torch
from megatron.core.transformer.moe.moe_utils import (apply_router_token_dropping,
                                                     compute_routing_scores_for_aux_loss, permute,
                                                     sort_chunks_by_idxs,
                                                     switch_load_balancing_loss_func,
                                                     topk_routing_with_score_function, unpermute,
                                                     z_loss_func)

HERE = os.path.dirname(os.path.abspath(__file__))
AUX_COEFF, Z_COEFF = 0.01, 0.001


def save(name, a):
    np.save(os.path.join(HERE, name + ".npy"), np.ascontiguousarray(a))


def case(tag, N, E, k, C, seed, pre_softmax=False, scaling=None, groups=None, group_topk=None,
         score="softmax", bias=False):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(N, E, generator=g) * 2).requires_grad_(True)
    expert_bias = torch.randn(E, generator=g) * 0.3 if bias else None  # (drawn after the logits)
    probs, rmap = topk_routing_with_score_function(logits, k, use_pre_softmax=pre_softmax,
                                                   num_groups=groups, group_topk=group_topk,
                                                   scaling_factor=scaling,
                                                   score_function=score, expert_bias=expert_bias)
    save(f"{tag}_router", np.array([float(pre_softmax), scaling or 0.0, groups or 0,
                                    group_topk or 0, float(score == "sigmoid"), float(bias)],
                                   np.float32))
    if bias:
        save(f"{tag}_bias", expert_bias.numpy())
    counts = rmap.sum(0)
    # (the router's aux loss, as TopKRouter.routing: its own scores and plain top-k map)
    aux_map, scores = compute_routing_scores_for_aux_loss(logits, k, score)
    save(f"{tag}_aux_counts", aux_map.sum(0).numpy().astype(np.int32))
    aux = switch_load_balancing_loss_func(scores, aux_map.sum(0), N, k, E, AUX_COEFF)
    z = z_loss_func(logits, Z_COEFF)
    G = torch.randn(N, E, generator=g)
    (G * probs).sum().add(aux).add(z).backward()
    save(f"{tag}_logits", logits.detach().numpy())
    save(f"{tag}_probs", probs.detach().numpy())  # dense (N,E): 0 off the chosen experts
    save(f"{tag}_counts", counts.numpy().astype(np.int32))
    save(f"{tag}_G", G.numpy())
    save(f"{tag}_losses", np.array([aux.item() / AUX_COEFF, z.item() / Z_COEFF], np.float64))
    save(f"{tag}_dlogits", logits.grad.numpy())
    save(f"{tag}_meta", np.array([N, E, k, C], np.int32))
    save(f"{tag}_coeffs", np.array([AUX_COEFF, Z_COEFF], np.float32))

    x = torch.randn(N, C, generator=g).requires_grad_(True)
    permuted, _, sorted_indices = permute(x, rmap)
    DXP = torch.randn(permuted.shape, generator=g)
    (DXP * permuted).sum().backward()
    yp = torch.randn(permuted.shape, generator=g).requires_grad_(True)
    p = probs.detach().clone().requires_grad_(True)
    y = unpermute(yp, sorted_indices, x.shape, probs=p, routing_map=rmap)
    DY = torch.randn(y.shape, generator=g)
    (DY * y).sum().backward()
    save(f"{tag}_x", x.detach().numpy())
    save(f"{tag}_xp", permuted.detach().numpy())
    save(f"{tag}_rows", sorted_indices.numpy().astype(np.int32))
    save(f"{tag}_DXP", DXP.numpy())
    save(f"{tag}_dx", x.grad.numpy())
    save(f"{tag}_yp", yp.detach().numpy())
    save(f"{tag}_y", y.detach().numpy())
    save(f"{tag}_DY", DY.numpy())
    save(f"{tag}_dyp", yp.grad.numpy())
    save(f"{tag}_dprobs", p.grad.numpy())  # dense (N,E)


def seq_case(tag, B, T, E, k, seed, score="softmax"):
    """--moe-router-load-balancing-type seq_aux_loss (TopKRouter._apply_seq_aux_loss) on B
    sequences of T tokens, in our token order (row b T + t; Megatron's is s-major, so its loss
    is taken over the transposed view): the routing, each sequence's aux counts (B, E), the seq
    aux and z losses without coefficients, and the logits' gradient of sum(G * probs) + aux_coeff
    * seq_aux + z_coeff * z."""
    g = torch.Generator().manual_seed(seed)
    N = B * T
    logits = (torch.randn(N, E, generator=g) * 2).requires_grad_(True)
    probs, rmap = topk_routing_with_score_function(logits, k, score_function=score)
    aux_map, scores = compute_routing_scores_for_aux_loss(logits, k, score)
    sc = scores.view(B, T, E).transpose(0, 1).reshape(T, B * E)
    mp = aux_map.view(B, T, E).transpose(0, 1).reshape(T, B * E)
    aux = switch_load_balancing_loss_func(sc, mp.sum(0), T, k, E, AUX_COEFF) / B
    z = z_loss_func(logits, Z_COEFF)
    G = torch.randn(N, E, generator=g)
    (G * probs).sum().add(aux).add(z).backward()
    save(f"{tag}_logits", logits.detach().numpy())
    save(f"{tag}_probs", probs.detach().numpy())
    save(f"{tag}_seq_counts", aux_map.view(B, T, E).sum(1).numpy().astype(np.int32))
    save(f"{tag}_G", G.numpy())
    save(f"{tag}_losses", np.array([aux.item() / AUX_COEFF, z.item() / Z_COEFF], np.float64))
    save(f"{tag}_dlogits", logits.grad.numpy())
    save(f"{tag}_meta", np.array([B, T, E, k, float(score == "sigmoid")], np.float32))
    save(f"{tag}_coeffs", np.array([AUX_COEFF, Z_COEFF], np.float32))


def bias_update_case(tag, L, E, seed, rate):
    """The expert bias's update (get_updated_expert_bias, over a one-rank gloo group): L routers'
    tokens per expert (ties with the mean included) and biases, and the updated biases."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.transformer.moe.moe_utils import get_updated_expert_bias
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29531")
        dist.init_process_group("gloo", rank=0, world_size=1)
        parallel_state.initialize_model_parallel(1, 1)
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 9, (L, E), generator=g).float()
    tokens[1] = 4.0  # (every expert at the mean: no move)
    tokens[2, :2] = torch.tensor([3.0, 5.0])
    bias = torch.randn(L, E, generator=g) * 0.01
    out = get_updated_expert_bias(tokens.clone(), bias.clone(), rate)
    save(f"{tag}_tokens", tokens.numpy())
    save(f"{tag}_bias", bias.numpy())
    save(f"{tag}_rate", np.array([rate], np.float32))
    save(f"{tag}_out", out.numpy())


def drop_case(tag, N, E, k, C, seed, factor, policy, pad):
    """Token dropping (apply_router_token_dropping): the routing of case(), capacity
    ceil(N k / E factor); the kept choices (dense mask), the logits' gradient of
    sum(G * final_probs), the combine of random expert outputs over the kept choices (unpermute
    with the final map; with pad, permute's drop_and_pad rows) and its gradients."""
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(N, E, generator=g) * 2).requires_grad_(True)
    probs, rmap = topk_routing_with_score_function(logits, k, score_function="softmax")
    fprobs, fmap = apply_router_token_dropping(probs, rmap, k, factor, policy, pad)
    G = torch.randn(N, E, generator=g)
    (G * fprobs).sum().backward()
    cap = math.ceil(N * k / E * factor)
    save(f"{tag}_logits", logits.detach().numpy())
    save(f"{tag}_G", G.numpy())
    save(f"{tag}_dlogits", logits.grad.numpy())
    save(f"{tag}_kept", (fmap & rmap).numpy().astype(np.int32))  # the routed choices kept
    save(f"{tag}_meta", np.array([N, E, k, C, cap, policy == "position", int(pad)], np.int32))
    x = torch.randn(N, C, generator=g)
    n_out = E * min(cap, N) if pad else None
    permuted, _, sorted_indices = permute(x, fmap, num_out_tokens=n_out, drop_and_pad=pad)
    yp = torch.randn(permuted.shape, generator=g).requires_grad_(True)
    p = fprobs.detach().clone().requires_grad_(True)
    y = unpermute(yp, sorted_indices, x.shape, probs=p, routing_map=fmap, drop_and_pad=pad)
    DY = torch.randn(y.shape, generator=g)
    (DY * y).sum().backward()
    save(f"{tag}_x", x.numpy())
    save(f"{tag}_rows", sorted_indices.numpy().astype(np.int32))
    save(f"{tag}_yp", yp.detach().numpy())
    save(f"{tag}_y", y.detach().numpy())
    save(f"{tag}_DY", DY.numpy())
    save(f"{tag}_dyp", yp.grad.numpy())
    save(f"{tag}_dprobs", p.grad.numpy())


def ep_case(tag, ep, E, seed):
    """Expert parallelism as MoEAlltoAllTokenDispatcher plans it (TP 1): every rank's tokens per
    expert (ep, E) (zeros included), and for each rank its input_splits (rows sent to each rank),
    output_splits (received), the rows of each local expert, and the chunk sort of the received
    rows (sort_chunks_by_idxs with sort_input_by_local_experts) and its restore
    (restore_output_by_local_experts), applied to row numbers."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 6, (ep, E), generator=g)
    counts[0, 1] = 0
    El = E // ep
    chunk = torch.arange(E)
    sort_idx = chunk.reshape(-1, El).T.ravel()
    restore_idx = chunk.reshape(El, -1).T.ravel()
    save(f"{tag}_counts", counts.numpy().astype(np.int32))
    for r in range(ep):
        per_local = counts[:, r * El:(r + 1) * El]  # num_global_tokens_per_local_expert
        send = counts[r].reshape(ep, El).sum(1)
        recv = per_local.sum(1)
        n = int(recv.sum())
        rows = torch.arange(n)
        srt, _ = sort_chunks_by_idxs(rows, per_local.ravel(), sort_idx)
        back, _ = sort_chunks_by_idxs(torch.arange(n), per_local.T.ravel(), restore_idx)
        assert torch.equal(back[srt], torch.arange(n))
        save(f"{tag}_r{r}_send", send.numpy().astype(np.int32))
        save(f"{tag}_r{r}_recv", recv.numpy().astype(np.int32))
        save(f"{tag}_r{r}_local", per_local.sum(0).numpy().astype(np.int32))
        save(f"{tag}_r{r}_sort", srt.numpy().astype(np.int32))
        save(f"{tag}_r{r}_unsort", back.numpy().astype(np.int32))


CASES = {
    "top2": lambda: case("top2", 37, 8, 2, 24, 1),
    "top3": lambda: case("top3", 29, 6, 3, 40, 2),
    # --moe-router-pre-softmax (softmax over all experts, not renormalised over the k) and
    # --moe-router-topk-scaling-factor
    "top2pre": lambda: case("top2pre", 37, 8, 2, 24, 5, pre_softmax=True, scaling=2.5),
    "top3scaled": lambda: case("top3scaled", 29, 6, 3, 40, 6, scaling=2.0),
    # --moe-router-num-groups / --moe-router-group-topk (group_limited_topk): 16 experts in 4
    # groups, a token's top 4 from its best 2 groups (by their top 2 scores' sums)
    "group4": lambda: case("group4", 41, 16, 4, 24, 9, groups=4, group_topk=2),
    "group4pre": lambda: case("group4pre", 41, 16, 4, 24, 10, pre_softmax=True, groups=4,
                              group_topk=2),
    # --moe-router-score-function sigmoid: the chosen sigmoids over their sum, scaled; top-1 (the
    # score itself); from 2 of 4 groups (ranked by their top sigmoids' sums)
    "sig3": lambda: case("sig3", 29, 6, 3, 40, 11, scaling=2.5, score="sigmoid"),
    "sig1": lambda: case("sig1", 23, 8, 1, 16, 12, score="sigmoid"),
    "sig4group": lambda: case("sig4group", 41, 16, 4, 24, 13, groups=4, group_topk=2,
                              score="sigmoid"),
    # --moe-router-enable-expert-bias: the bias in the choice (and the groups' ranks), not in the
    # probabilities; its update from the tokens per expert
    "sig4bias": lambda: case("sig4bias", 41, 16, 4, 24, 14, groups=4, group_topk=2,
                             score="sigmoid", bias=True),
    "sig2bias": lambda: case("sig2bias", 37, 8, 2, 24, 15, scaling=2.0, score="sigmoid",
                             bias=True),
    "bias_update": lambda: bias_update_case("bias_update", 3, 8, 16, 1e-3),
    # --moe-router-load-balancing-type seq_aux_loss: 3 sequences of 13 tokens, softmax top-2 and
    # sigmoid top-3
    "seq2": lambda: seq_case("seq2", 3, 13, 8, 2, 17),
    "seqsig3": lambda: seq_case("seqsig3", 3, 13, 6, 3, 18, score="sigmoid"),
    "drop_probs": lambda: drop_case("drop_probs", 37, 8, 2, 24, 3, 0.5, "probs", False),
    "drop_probs_pad": lambda: drop_case("drop_probs_pad", 37, 8, 2, 24, 3, 0.5, "probs", True),
    # (capacity 14 > N: none dropped)
    "drop_big": lambda: drop_case("drop_big", 11, 4, 2, 16, 4, 2.5, "probs", False),
    "ep2": lambda: ep_case("ep2", 2, 6, 7),
    "ep4": lambda: ep_case("ep4", 4, 8, 8),
}

if __name__ == "__main__":
    import sys  # python gen_moe.py [case ...]: only those (all by default)
    for name in sys.argv[1:] or CASES:
        CASES[name]()

