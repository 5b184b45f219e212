"""GNMR client library for Python (docs/architecture.md, "The client library").

The C++ client (``gnmr::Client``) as ``gnmr.Client``; the PyTorch adapter is
``gnmr.torch.Monitor``. Quick use without torch::

    import gnmr
    opts = gnmr.ClientOptions(target="unix:/run/gnmr/gnmrd.sock", job_id="run3",
                              rank=0, world_size=1)
    client = gnmr.Client(opts, config={"lag": 1, "max_o": 4})
    u = client.add_unit("fc1", [gnmr.TensorRef(ptr, numel, "fp32")])
    client.start()
    client.observe(step)                 # statistics + enqueue; no network
    plan = client.plan_for(step)         # actions in force at `step`
    client.ack(plan)

Errors: a bad argument raises ``ValueError``; other failures ``gnmr.Error``
(a ``RuntimeError``; ``gnmr.UnavailableError`` when the daemon cannot be
reached by ``export_state``/``import_state``). The background thread never
raises: its problems show in ``client.counters()`` (fail-open: without a
daemon, plans are empty).
"""
from __future__ import annotations

from gnmr._gnmr import (  # noqa: F401  (re-exports)
    Action,
    BlockTensor,
    Client,
    ClientOptions,
    Counters,
    EntryTreatment,
    Error,
    MissReason,
    Plan,
    PlanEntry,
    TensorRef,
    UnavailableError,
    __version__,
    clip_scale,
    default_config,
    validate_config,
)

__all__ = [
    "Action",
    "BlockTensor",
    "Client",
    "ClientOptions",
    "Counters",
    "EntryTreatment",
    "Error",
    "MissReason",
    "Plan",
    "PlanEntry",
    "TensorRef",
    "UnavailableError",
    "block_stats",
    "clip_scale",
    "default_config",
    "tensor_ref",
    "validate_config",
]

_TORCH_DTYPES = {
    "torch.float32": "fp32",
    "torch.bfloat16": "bf16",
    "torch.float16": "fp16",
    "torch.float8_e4m3fn": "fp8_e4m3fn",
    "torch.float8_e5m2": "fp8_e5m2",
}


# gnmr's dtype name by torch.dtype object, filled on first sight of each:
# tensor_ref and the forward hooks look one up per tensor per step, and
# str(dtype) would cost more than the rest of the lookup.
_DTYPE_BY_OBJECT: dict = {}


def _dtype_name(dtype):
    """gnmr's name of a torch dtype ("fp32", ...), or None if unsupported."""
    name = _DTYPE_BY_OBJECT.get(dtype)
    if name is None:
        name = _TORCH_DTYPES.get(str(dtype))
        if name is not None:
            _DTYPE_BY_OBJECT[dtype] = name
    return name


def _dtype_error(dtype) -> ValueError:
    """The error for a tensor dtype the statistics do not read."""
    return ValueError(f"unsupported tensor dtype {dtype} (supported: float32, bfloat16, "
                      "float16, float8_e4m3fn, float8_e5m2)")


def _wrapped(tensor):
    """The tensor a wrapper subclass without storage of its own holds
    (``__tensor_flatten__`` naming one inner tensor of the same shape and
    dtype, e.g. torchao's MXFP8 training weight wrapper): the memory that
    holds its values. Anything else as it is (TensorRef then refuses a
    null pointer)."""
    flatten = getattr(tensor, "__tensor_flatten__", None)
    if flatten is None:
        return tensor
    try:
        names = flatten()[0]
    except Exception:  # noqa: BLE001  (a subclass's own protocol: nothing to unwrap)
        return tensor
    if len(names) != 1:
        return tensor
    inner = getattr(tensor, names[0], None)
    if (inner is None or inner.shape != tensor.shape or inner.dtype != tensor.dtype
            or inner.data_ptr() == 0):
        return tensor
    return inner


def tensor_ref(tensor, scale_inv: float = 1.0, scale_inv_tensor=None,
               saturation_magnitude: float = 0.0) -> TensorRef:
    """A TensorRef viewing a torch tensor's memory (no copy).

    The tensor must be contiguous, of a supported dtype (fp32, bf16, fp16,
    fp8), and stay alive while the client may read it (until the next
    ``set_tensors`` of its unit). CUDA tensors carry their device ordinal: the
    client computes their statistics with its GPU kernels (one device per
    client; observe with ``client.observe(step, stream)``); without a GPU,
    driver or CUDA build, ``add_unit`` refuses them with ``gnmr.Error`` and
    host units keep working.

    A wrapper subclass without storage of its own (``data_ptr()`` 0, e.g.
    torchao's MXFP8 training weight) is read through the one inner tensor
    its ``__tensor_flatten__`` names, when that has the same shape and dtype.

    fp8 tensors: ``scale_inv`` is fixed; FP8 recipes that rescale every step
    pass ``scale_inv_tensor`` instead, a float32 tensor on the same device
    whose first element is read at every observe (on the GPU: by the kernel,
    on the stream). It must stay alive while the unit is registered.

    ``saturation_magnitude`` (forward tensors, ``Client.observe_forward``):
    0 counts nothing; ``math.inf`` counts elements at the format's largest
    finite magnitude (fp8 codes); a finite m > 0 counts |x| >= m
    (fake-quantized codes in a wider dtype).
    """
    if tensor.numel() > 0 and tensor.data_ptr() == 0:
        tensor = _wrapped(tensor)
    dtype = _dtype_name(tensor.dtype)
    if dtype is None:
        raise _dtype_error(tensor.dtype)
    if not tensor.is_contiguous():
        raise ValueError("tensor must be contiguous (its memory is read as one flat array)")
    if tensor.is_cpu:
        ordinal = -1
    else:
        index = tensor.device.index
        ordinal = index if index is not None else 0
    scale_ptr = 0
    if scale_inv_tensor is not None:
        if not dtype.startswith("fp8"):
            raise ValueError("scale_inv_tensor applies to fp8 tensors only")
        if str(scale_inv_tensor.dtype) != "torch.float32" or scale_inv_tensor.numel() < 1:
            raise ValueError("scale_inv_tensor must be a float32 tensor with at least one element")
        if scale_inv_tensor.device != tensor.device:
            raise ValueError(
                f"scale_inv_tensor is on {scale_inv_tensor.device}, the tensor on {tensor.device}")
        scale_ptr = scale_inv_tensor.data_ptr()
    return TensorRef(tensor.data_ptr(), tensor.numel(), dtype, ordinal, scale_inv, scale_ptr,
                     float(saturation_magnitude))


# Block-scaled tensors (torchao MX / NVFP4, TE MXFP8 / NVFP4 / FP8 block):
# gnmr.blocks, which imports no torch itself.
from gnmr.blocks import block_stats  # noqa: E402
