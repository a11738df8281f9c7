#!/usr/bin/env python3
"""Golden layer splits of pipeline stages (uneven, interleaved), from megatron-core itself.

For each case (layers L, ranks P, chunks V, --decoder-first/last-pipeline-num-layers F, E):
megatron.core.transformer.transformer_layer.get_transformer_layer_offset and
transformer_block.get_num_layers_to_build, called with each (pp_rank, vp_stage) on a stand-in
config (the fields they read). Writes stage_layers.txt: a line "L P V F E" per case, then a line
"offset count" per chunk c of rank r in the order of virtual stage c P + r.

    pip install torch; pip install --no-deps megatron-core   (tested with 0.16.1)
    python3 gen_stage_layers.py > stage_layers.txt
"""
import types
import warnings

warnings.filterwarnings("ignore")
from megatron.core.transformer.transformer_block import get_num_layers_to_build  # noqa: E402
from megatron.core.transformer.transformer_layer import get_transformer_layer_offset  # noqa: E402

# (both ends set on 2 ranks: megatron-core divides by zero middle stages there)
CASES = [(6, 2, 2, 2, 0), (6, 2, 2, 0, 4), (12, 4, 2, 2, 2), (16, 4, 2, 4, 0),
         (18, 4, 3, 3, 3), (24, 3, 2, 4, 6), (12, 2, 3, 6, 0)]

for L, P, V, F, E in CASES:
    cfg = types.SimpleNamespace(
        num_layers=L, pipeline_model_parallel_size=P, virtual_pipeline_model_parallel_size=V,
        num_layers_in_first_pipeline_stage=F or None, num_layers_in_last_pipeline_stage=E or None,
        pipeline_model_parallel_layout=None, account_for_embedding_in_pipeline_split=False,
        account_for_loss_in_pipeline_split=False, mtp_num_layers=None)
    print(L, P, V, F, E)
    for c in range(V):
        for r in range(P):
            print(get_transformer_layer_offset(cfg, vp_stage=c, pp_rank=r),
                  get_num_layers_to_build(cfg, vp_stage=c, pp_rank=r))
