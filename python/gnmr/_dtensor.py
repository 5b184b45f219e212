"""DTensor parameters and gradients (FSDP2's ``fully_shard``, HSDP, tensor
parallel with DTensor) for ``gnmr.torch.Monitor`` (docs/integrations.md,
"FSDP2").

Design notes
- A DTensor is a wrapper: its ``data_ptr()`` is 0 and its ``numel()`` is
  the global one, so everything the client reads goes through the local
  shard (``_local_tensor``), never ``full_tensor()`` (an all-gather per
  step would cost what sharding saves).
- A unit's (shard_index, shard_count) comes from the placements: each
  ``Shard`` mesh dimension splits the tensor further (mixed radix over
  those dimensions, so every distinct local shard gets its own index);
  ``Replicate`` dimensions hold data-parallel replicas (HSDP), which gnmrd
  averages. gnmrd sums the shards' sumsq (docs/statistics.md), which is
  the full gradient's sumsq whatever the split, uneven or empty shards
  included (an empty shard adds 0).
- PyTorch 1.13 has no DTensor: every tensor is then plain.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch as _torch


def _dtensor_type() -> Optional[type]:
    for where in ("torch.distributed.tensor", "torch.distributed._tensor"):
        try:
            module = __import__(where, fromlist=["DTensor"])
            return getattr(module, "DTensor")
        except Exception:  # noqa: BLE001  (1.13 on Python 3.11: its dataclasses raise
            continue       # ValueError at import; gnmr.torch must still import)
    return None


DTensor = _dtensor_type()


def is_dtensor(t: Optional[_torch.Tensor]) -> bool:
    return DTensor is not None and isinstance(t, DTensor)


def local(t: _torch.Tensor) -> _torch.Tensor:
    """This rank's shard of a DTensor (no copy, no communication); any
    other tensor as it is."""
    if is_dtensor(t):
        inner = getattr(t, "_local_tensor", None)
        return inner if inner is not None else t.to_local()
    return t


def shard_of(t: _torch.Tensor) -> Tuple[int, int]:
    """(shard_index, shard_count) of this rank's part of `t`: (0, 1) for a
    plain tensor. ValueError for a rank outside the mesh or a placement
    that is neither Shard nor Replicate (a pending Partial sum is not a
    parameter's layout)."""
    if not is_dtensor(t):
        return (0, 1)
    mesh = t.device_mesh
    coord = mesh.get_coordinate()
    if coord is None:
        raise ValueError("this rank is not in the DTensor's device mesh")
    index, count = 0, 1
    for dim, placement in enumerate(t.placements):
        if placement.is_shard():
            size = mesh.size(dim)
            index = index * size + int(coord[dim])
            count *= size
        elif not placement.is_replicate():
            raise ValueError(f"placement {placement} on mesh dimension {dim} is neither Shard "
                             "nor Replicate")
    return (index, count)
