"""Golden process-grid rank lists from megatron-core's own RankGenerator.

Versions: megatron-core 0.16.1 (PyPI), Python 3.11. No seeds: the grid is deterministic.
Builds the two generators exactly as parallel_state.initialize_model_parallel does (the decoder one
with ep=1, the expert one with cp=1 and its own expert-tp/ep/expert-dp) and the embedding groups
with default_embedding_ranks / default_position_embedding_ranks. Writes grid.json:
{"megatron_core": version, "layouts": [{"world", "tp", "cp", "ep", "pp", "etp", "order",
"groups": {name: [[ranks], ...]}}]}.  Run: /opt/gv/bin/python gen_grid.py (from this directory).
"""
import json
import os

import megatron.core
from megatron.core.parallel_state import (RankGenerator, default_embedding_ranks,
                                          default_position_embedding_ranks)

DEFAULT = "tp-cp-ep-dp-pp"
# world, tp, cp, ep, pp, expert-tp (None: = tp), order
LAYOUTS = [
    (1, 1, 1, 1, 1, None, DEFAULT),
    (2, 2, 1, 1, 1, None, DEFAULT),
    (4, 1, 1, 1, 4, None, DEFAULT),
    (8, 2, 1, 1, 2, None, DEFAULT),
    (8, 2, 2, 1, 1, None, DEFAULT),
    (8, 1, 1, 4, 1, None, DEFAULT),
    (12, 1, 1, 3, 2, 2, DEFAULT),
    (16, 2, 2, 2, 2, None, DEFAULT),
    (16, 4, 1, 4, 1, 1, DEFAULT),
    (16, 2, 2, 2, 2, None, "tp-cp-ep-pp-dp"),
    (24, 2, 3, 1, 2, None, DEFAULT),
    (32, 2, 2, 4, 2, 1, DEFAULT),
    (64, 4, 2, 8, 2, 2, DEFAULT),
    (64, 8, 1, 1, 8, None, DEFAULT),
    (64, 2, 1, 8, 4, 1, DEFAULT),
]
DECODER = {"tp": "tp", "cp": "cp", "dp": "dp", "dp-cp": "dp-cp", "pp": "pp", "tp-pp": "tp-pp",
           "tp-cp": "tp-cp", "tp-dp": "tp-dp", "tp-dp-cp": "tp-dp-cp"}
EXPERT = {"ep": "ep", "expert-tp": "tp", "expert-tp-ep": "tp-ep", "expert-tp-ep-pp": "tp-ep-pp",
          "expert-dp": "dp"}


def layout(world, tp, cp, ep, pp, etp, order):
    etp = tp if etp is None else etp
    dp = world // (tp * cp * pp)
    edp = world // (etp * ep * pp)
    assert dp * tp * cp * pp == world and edp * etp * ep * pp == world
    dec = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=order, rank_offset=0)
    exp = RankGenerator(tp=etp, ep=ep, dp=edp, pp=pp, cp=1, order=order, rank_offset=0)
    groups = {name: dec.get_ranks(tok) for name, tok in DECODER.items()}
    groups.update({name: exp.get_ranks(tok) for name, tok in EXPERT.items()})
    groups["embd"] = [default_embedding_ranks(r) for r in groups["pp"]]
    groups["pos-embd"] = [default_position_embedding_ranks(r) for r in groups["pp"]]
    return {"world": world, "tp": tp, "cp": cp, "ep": ep, "pp": pp, "etp": etp, "order": order,
            "groups": groups}


if __name__ == "__main__":
    out = {"megatron_core": megatron.core.__version__, "layouts": [layout(*l) for l in LAYOUTS]}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grid.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(LAYOUTS)} layouts to {path}")
