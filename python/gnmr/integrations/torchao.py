"""GNMR with torchao low-precision training (torchao 0.18; docs/integrations.md,
"torchao"): float8 (``torchao.float8.convert_to_float8_training``, which swaps
``nn.Linear`` for ``Float8Linear``) and MXFP8 (``torchao.quantization.quantize_``
with ``torchao.prototype.moe_training.config.MXFP8TrainingOpConfig``, which
keeps ``nn.Linear`` and wraps its parameters in
``MXFP8TrainingWeightWrapperTensor``)::

    from gnmr.integrations import torchao as gnmr_ao
    convert_to_float8_training(model)
    monitor = gnmr.torch.Monitor(model, target="local", job_id="run",
                                 **gnmr_ao.monitor_kwargs())

- ``unit_filter``: every low-precision linear (``is_low_precision``).
- ``promote``: a promoted module runs ``F.linear`` on its high-precision
  weight (no cast), the fidelity path the module already holds; demoted,
  its own float8/MX forward again, bit for bit (the instance's ``forward``
  attribute is set and removed, nothing else changes).
- ``forward_tensors``: the quantized input of each module's matmul, made
  by torchao's own cast with the module's own config (the call torchao
  makes inside its matmul, on the same input: deterministic, so the same
  codes; one extra cast per forward). Float8 with tensorwise scaling: the
  fp8 codes (``Float8TrainingTensor._data``) with ``scale_inv = 1/_scale``,
  saturation counted at the format's maximum. Rowwise float8 and MX
  (a scale per row / per 32-element block, which one ``scale_inv`` cannot
  carry): torchao's dequantized values (sum of squares, amax and the zeros
  of underflow are exact; saturation is not counted).
  Promoted modules report nothing (their matmul casts nothing).
"""
from __future__ import annotations

import types
from typing import Any, Dict, List, Optional

import torch as _torch
import torch.nn.functional as _F

from gnmr.torch import ForwardTensor

try:  # float8 training: in torchao >= 0.6
    from torchao.float8.float8_linear import Float8Linear
    from torchao.float8.float8_scaling_utils import (get_maybe_axiswise_dim,
                                                     hp_tensor_to_float8_dynamic)
    from torchao.float8.float8_training_tensor import GemmInputRole
except ImportError as e:  # pragma: no cover - depends on the installed torchao
    raise ImportError(f"gnmr.integrations.torchao needs torchao with float8 training: {e}") from e

try:  # MXFP8 training: a prototype, absent or moved in other versions
    from torchao.prototype.moe_training.tensor import MXFP8TrainingWeightWrapperTensor
    from torchao.prototype.mx_formats.mx_tensor import MXTensor
except ImportError:  # pragma: no cover
    MXFP8TrainingWeightWrapperTensor = None
    MXTensor = None

__all__ = ["is_float8", "is_mx", "is_low_precision", "promote", "forward_tensors",
           "monitor_kwargs", "Float8Linear"]


def is_float8(module: _torch.nn.Module) -> bool:
    return isinstance(module, Float8Linear)


def is_mx(module: _torch.nn.Module) -> bool:
    return (MXFP8TrainingWeightWrapperTensor is not None
            and isinstance(module, _torch.nn.Linear)
            and isinstance(module.weight, MXFP8TrainingWeightWrapperTensor))


def is_low_precision(name: str, module: _torch.nn.Module) -> bool:
    """A ``unit_filter``: the float8 and MX linears."""
    return is_float8(module) or is_mx(module)


def _hp_forward(self: _torch.nn.Linear, x: _torch.Tensor) -> _torch.Tensor:
    """The promoted path: a plain matmul on the high-precision weight."""
    if is_mx(self):
        # The MX wrapper sends F.linear to its MXFP8 matmul through
        # __torch_function__; without it, its __torch_dispatch__ runs the
        # plain aten ops on the wrapped high-precision tensors (autograd
        # still reaches the parameter).
        with _torch._C.DisableTorchFunctionSubclass():
            return _F.linear(x, self.weight, self.bias)
    return _F.linear(x, self.weight, self.bias)


def promote(name: str, module: _torch.nn.Module, promoted: bool) -> None:
    """A ``promote_callback``: the high-precision path while promoted."""
    if not (is_float8(module) or is_mx(module)):
        return
    if promoted:
        module.forward = types.MethodType(_hp_forward, module)
    else:
        module.__dict__.pop("forward", None)  # the class's forward: float8 / MX again
    module.gnmr_promoted = promoted


def _float8_input(module: Any, x: _torch.Tensor) -> Optional[ForwardTensor]:
    c = module.config
    if torch_autocast_dtype() is not None:
        x = x.to(torch_autocast_dtype())  # as Float8Linear.forward does
    cast = c.cast_config_input
    if str(cast.scaling_type).endswith("DISABLED"):
        return None  # this module's input is not cast
    t = hp_tensor_to_float8_dynamic(
        x, cast.target_dtype, module.linear_mm_config, gemm_input_role=GemmInputRole.INPUT,
        scaling_granularity=cast.scaling_granularity,
        axiswise_dim=get_maybe_axiswise_dim(-1, cast.scaling_granularity),
        round_scales_to_power_of_2=c.round_scales_to_power_of_2)
    if t._scale.numel() == 1:
        return ForwardTensor(t._data.contiguous(), saturation_magnitude=float("inf"),
                             scale_inv=float(t._scale.reciprocal()))
    return ForwardTensor(t.to_original_precision().float().contiguous())


def _mx_input(module: Any, x: _torch.Tensor) -> ForwardTensor:
    cfg = module.weight.config
    x2 = x.reshape(-1, x.shape[-1])
    mx = MXTensor.to_mx(x2, _torch.float8_e4m3fn, 32, cfg.scale_calculation_mode,
                        cfg.kernel_preference)  # mx_mm's forward cast of its input
    return ForwardTensor(mx.dequantize(_torch.float32).contiguous())


def torch_autocast_dtype() -> Optional[_torch.dtype]:
    """The autocast dtype Float8Linear uses (the GPU one), None without autocast."""
    return _torch.get_autocast_gpu_dtype() if _torch.is_autocast_enabled() else None


def forward_tensors(name: str, module: _torch.nn.Module, inputs: tuple,
                    output: Any) -> Optional[List[ForwardTensor]]:
    """A ``forward_tensors``: the quantized input of the module's matmul."""
    if getattr(module, "gnmr_promoted", False) or not inputs:
        return None
    x = inputs[0]
    with _torch.no_grad():
        if is_float8(module):
            item = _float8_input(module, x.detach())
        elif is_mx(module):
            item = _mx_input(module, x.detach())
        else:
            return None
    return None if item is None else [item]


def monitor_kwargs(observe_forward: bool = True) -> Dict[str, Any]:
    """The ``gnmr.torch.Monitor`` arguments for a torchao model: units,
    promotion and (``observe_forward``) the forward channel."""
    kw: Dict[str, Any] = {"unit_filter": is_low_precision, "promote_callback": promote}
    if observe_forward:
        kw["forward_tensors"] = forward_tensors
    return kw
