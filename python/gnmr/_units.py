"""How gnmr.torch.Monitor turns a model into GNMR units: the modules chosen
by ``unit_filter`` (named as in ``named_modules()``), grouped by
``unit_group``, each unit's gradient being the ``.grad`` (or ``main_grad``:
gnmr/_grads.py) of its parameters (a parameter belongs to the first unit
that claims it), sharded as ``unit_shard`` says, else as its DTensor
parameters' placements say (FSDP2, HSDP; gnmr/_dtensor.py)."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import torch as _torch

from gnmr import _dtensor


class Unit:
    __slots__ = ("name", "modules", "params", "handle", "last_key", "shard", "dtensor",
                 "shard_source")

    def __init__(self, name: str):
        self.name = name
        self.modules: List[Tuple[str, _torch.nn.Module]] = []  # (module name, module)
        self.params: List[_torch.nn.Parameter] = []
        self.handle = -1
        self.last_key = None  # the gradient pointers the client holds
        self.shard = (0, 1)  # (shard_index, shard_count)
        # Any parameter a DTensor: its grads are read through their local
        # shards (checked once here, not per tensor per step).
        self.dtensor = False
        self.shard_source = ""  # "unit_shard" or "DTensor" when sharded


class UnitsMixin:
    """The Monitor's unit look-ups; needs ``_units``."""

    @property
    def unit_names(self) -> List[str]:
        return [u.name for u in self._units]

    def unit_module(self, name: str) -> _torch.nn.Module:
        """The (first) module of unit ``name``; see ``unit_modules``."""
        return self.unit_modules(name)[0]

    def unit_modules(self, name: str) -> List[_torch.nn.Module]:
        for u in self._units:
            if u.name == name:
                return [m for _, m in u.modules]
        raise KeyError(name)


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
    for u in units:
        u.dtensor = any(_dtensor.is_dtensor(p) for p in u.params)
        if unit_shard is not None:  # explicit wins over what DTensors say
            index, count = unit_shard(u.name)
            u.shard = (int(index), int(count))
            u.shard_source = "unit_shard"
        elif u.dtensor:
            u.shard = _derived_shard(u)
            u.shard_source = "DTensor"
    return units


def _derived_shard(u: Unit) -> Tuple[int, int]:
    """The unit's shard from its parameters' DTensor placements; all must
    agree, or the unit's norm could not be combined from its shards."""
    shards = {}
    for p in u.params:
        try:
            shards.setdefault(_dtensor.shard_of(p), []).append(p)
        except ValueError as e:
            raise ValueError(f"gnmr.torch.Monitor: unit '{u.name}': {e}; pass unit_shard") from e
    if len(shards) > 1:
        seen = ", ".join(f"{len(ps)} parameter(s) shard {i} of {c}"
                         for (i, c), ps in sorted(shards.items()))
        raise ValueError(
            f"gnmr.torch.Monitor: unit '{u.name}': its parameters are sharded differently on "
            f"this rank ({seen}; a plain tensor is shard 0 of 1), so its shard cannot be "
            "derived from their DTensor placements; pass unit_shard=fn(unit_name) -> "
            "(shard_index, shard_count), or group only modules sharded alike into one unit")
    return next(iter(shards))
