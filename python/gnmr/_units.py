"""How gnmr.torch.Monitor turns a model into GNMR units: the modules chosen
by ``unit_filter`` (named as in ``named_modules()``), grouped by
``unit_group``, each unit's gradient being the ``.grad`` of its parameters
(a parameter belongs to the first unit that claims it), sharded as
``unit_shard`` says."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import torch as _torch


class Unit:
    __slots__ = ("name", "modules", "params", "handle", "last_key", "shard")

    def __init__(self, name: str):
        self.name = name
        self.modules: List[Tuple[str, _torch.nn.Module]] = []  # (module name, module)
        self.params: List[_torch.nn.Parameter] = []
        self.handle = -1
        self.last_key = None  # the gradient pointers the client holds
        self.shard = (0, 1)  # (shard_index, shard_count)


def collect_units(model: _torch.nn.Module,
                  unit_filter: Callable[[str, _torch.nn.Module], bool],
                  unit_group: Optional[Callable[[str], str]],
                  unit_shard: Optional[Callable[[str], Tuple[int, int]]]) -> List[Unit]:
    """The units of `model`; ValueError naming unit_filter when there are none."""
    units: List[Unit] = []
    by_name: Dict[str, Unit] = {}
    claimed = set()
    for name, module in model.named_modules():
        if not unit_filter(name, module):
            continue
        params = [p for p in module.parameters() if p.requires_grad and id(p) not in claimed]
        if not params:
            continue
        claimed.update(id(p) for p in params)
        name = name or "<root>"
        unit_name = unit_group(name) if unit_group is not None else name
        if not isinstance(unit_name, str) or not unit_name:
            raise ValueError(f"gnmr.torch.Monitor: unit_group({name!r}) must return a "
                             "non-empty str")
        u = by_name.get(unit_name)
        if u is None:
            u = by_name[unit_name] = Unit(unit_name)
            units.append(u)
        u.modules.append((name, module))
        u.params.extend(params)
    if not units:
        raise ValueError(
            "gnmr.torch.Monitor: unit_filter selected no module with trainable parameters "
            "(the default unit_filter selects torch.nn.Linear modules; for other layers "
            "pass e.g. unit_filter=lambda name, m: isinstance(m, torch.nn.Conv1d))")
    if unit_shard is not None:
        for u in units:
            index, count = unit_shard(u.name)
            u.shard = (int(index), int(count))
    return units
