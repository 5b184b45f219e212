"""Watches torch.compile for the one way promotions can slow a compiled
model down (docs/integrations.md, "torch.compile").

A promote callback changes Python state that a compiled forward reads
(``module.gnmr_promoted``), so Dynamo guards on it. Compiled per unit (or
with forward tensors, whose hooks split the graph at every unit), each
frame sees its own unit's flag: at most two graphs each. A whole model
compiled as one frame sees every unit's flag: each distinct set of promoted
units is a recompile, and past ``torch._dynamo.config.recompile_limit`` (8)
Dynamo runs that frame eagerly from then on, silently but for one log line.
The Monitor checks Dynamo's counters whenever its promotions change and
warns once when that limit was hit, with the fix.
"""
from __future__ import annotations

import sys
import warnings


def _limit_hits() -> int:
    dynamo_utils = sys.modules.get("torch._dynamo.utils")  # never imported for this
    counters = getattr(dynamo_utils, "counters", None)
    if counters is None:
        return 0
    hits = 0
    for kind in ("unimplemented", "graph_break"):
        for reason, n in counters.get(kind, {}).items():
            text = str(reason).lower()
            if "recompile limit" in text or "recompile_limit" in text or "cache_size_limit" in text:
                hits += n
    return hits


class CompileWatch:
    def __init__(self) -> None:
        self._warned = False
        self._baseline = _limit_hits()  # hits of other models before this Monitor

    def check(self) -> None:
        """Called when the set of promoted units changed."""
        if self._warned or _limit_hits() <= self._baseline:
            return
        self._warned = True
        warnings.warn(
            "gnmr.torch: torch.compile hit its recompile limit after promotions: a model "
            "compiled as one graph is recompiled for every distinct set of promoted units, "
            "and past torch._dynamo.config.recompile_limit Dynamo runs it eagerly (slower). "
            "Compile per unit or per block instead (e.g. module.compile() on each unit's "
            "module; docs/integrations.md, \"torch.compile\")", RuntimeWarning, stacklevel=4)
