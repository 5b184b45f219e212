"""PyTorch adapter: ``gnmr.torch.Monitor`` (docs/architecture.md, "The client library").

A Monitor attaches to an ``nn.Module``: every module chosen by ``unit_filter``
(default: every ``nn.Linear``) is one GNMR unit, named as in
``named_modules()``. A unit's gradient is the ``.grad`` of its parameters
(weight and bias of a Linear: several tensors of one unit; with a custom
filter, a module's parameters recursively, except those an earlier unit in
``named_modules()`` order already owns), or their ``main_grad`` where a
framework accumulates there (Megatron, Transformer Engine; ``grad_attr``).
Per step::

    loss.backward()
    monitor.after_backward(step)          # refresh gradient pointers, observe
    monitor.apply(step, optimizer)        # plan in force, then optimizer.step()
    optimizer.zero_grad()

``apply`` carries out the plan in force at ``step``:

- ``promote``: the unit switches to its high-fidelity path through
  ``promote_callback(name, module, promoted)`` (default: sets
  ``module.gnmr_promoted``); called when a unit enters and when it leaves
  recovery, and in force from the next forward pass. Call
  ``before_forward(step)`` at the start of a step to switch before that
  step's forward pass (useful with lag >= 1; a no-op with lag 0). With lag 0
  the promoted step's own gradient gets the entry treatment (clip or skip).
- ``clip``: the unit's gradient tensors are multiplied by the plan's scale,
  clamp(mu / norm, clip_min_scale, 1), on every step in force.
- ``skip``: the unit's ``.grad`` tensors are set to ``None`` on the first step
  in force, so the optimizer leaves its parameters (and moments) untouched;
  a ``main_grad`` is zeroed in place instead (it is a view into the
  framework's bucket; gnmr/_grads.py).
- ``reset_state``: the unit's parameters' optimizer state is cleared on the
  first step in force (Adam & co. re-initialise it at the next step).
- a non-finite gradient: ``optimizer.step()`` is not called. The same-step
  guard does this at once, at every lag and with no daemon, as GradScaler
  does with ``found_inf``: ``after_backward(step)`` computes every unit's
  NaN/Inf count, and ``apply(step)`` skips the step when any is non-zero
  (with sharded units, after all-reducing one flag over ``guard_group`` so
  every rank agrees). The daemon's ``global_skip`` covers the same at lag 0.

Then the plan is acknowledged (also a plan without decision: the daemon
compares the ranks' plans step by step). A plan has no decision when none
covers the step on this rank (``AppliedPlan.miss_reason`` says why); it is
then empty on every rank (docs/safety.md, "Plan validity"). Gradients that are ``None`` at
``after_backward`` contribute nothing: they are observed as zeros (a shared
zero buffer, no allocation per step). A unit whose gradients are all
``None`` (a MoE expert whose forward did not run) is left out of the step's
report (``Client.mark_inactive``): inactive for the controller at that step
(no history update, no warmup progress) at no cost to the daemon
(docs/statistics.md).

Forward channel: ``forward_tensors=fn`` registers a forward hook on every
unit's modules; ``fn(name, module, inputs, output)`` returns the tensors to
observe (best the quantized input of the low-precision path, fp8 codes with
scale_inv, as ``ForwardTensor`` items; ``output_activation`` observes the
output), and their statistics travel with the step's gradient report
(docs/controller.md, "Forward channel"; gnmr/_forward.py). Default: none.

Backward channel: ``observe_backward(unit, tensors)``, called from a
backend's backward quantizer, hands over the gradient as quantized for the
unit's dgrad / wgrad GEMMs (host tensors for now; docs/controller.md,
"Backward channel"; gnmr/_backward.py).

CUDA: units whose parameters live on a CUDA device are observed by the
client's GPU kernels on the current stream (no host synchronisation; one
device per Monitor); ``counters()`` then reports ``stats_gpu_seconds``.
Without a usable GPU the Monitor refuses CUDA units at construction.

Overlap with backward: ``observe_during_backward=True`` computes each host
unit's statistics from its gradient hooks while backward still runs for the
earlier layers; ``after_backward`` then observes only the rest (bit-identical
results; ``with monitor.accumulating():`` around non-final micro-batches;
single-rank, unsharded; CUDA units keep one launch in after_backward;
gnmr/_overlap.py, docs/integrations.md "Overlap with backward").

Fail-open: without a daemon, plans are empty and training runs unchanged
(the same-step guard still works). Errors of the client during a step are
warned about and counted (``monitor.errors``) instead of raised, unless
``strict=True``. A client set up wrong is loud: a wrong token, a target
that does not exist, a refused registration (another model under the same
job id) or a config that differs from the job's are ``warnings`` (once per
kind) and records of the ``gnmr`` logger; ``strict=True`` raises them (at
construction: the Monitor waits for its first connection attempt).

Data parallelism (``torch.distributed``): every rank builds a Monitor on the
same model (rank and world size default to the process group's); gradients
are identical after the all-reduce, so every rank observes the same
statistics and applies the identical plan (compare ``AppliedPlan.digest``):
a decision covers exactly the steps it is made for, and the default
``decision_wait_ms`` (2 s) is long enough that a connected rank never
misses one. Tensor/pipeline-parallel shards: ``unit_shard`` gives each
unit's (shard_index, shard_count).

FSDP2 (``torch.distributed.fsdp.fully_shard``, also HSDP and DTensor tensor
parallelism): build the Monitor after ``fully_shard`` on the sharded model,
on every rank, with gnmrd as target; no ``unit_shard`` is needed. A unit
whose parameters are DTensors is sharded as their placements say: each
``Shard`` mesh dimension splits it (index = this rank's coordinates over
those dimensions, count = the product of their sizes), ``Replicate``
dimensions hold replicas (HSDP); parameters of one unit that disagree are
a ValueError naming the unit (pass ``unit_shard``, which always wins). Each
rank observes its local shard (no all-gather), uneven and empty shards
included, and gnmrd adds the shards' sums of squares into the full
gradient's norm. A clip scales every shard by the full norm's factor (the
guard's one all-reduce per step also sums the clipped units' local sums of
squares), and a NaN in one rank's shard skips the step on every rank
(docs/integrations.md, "FSDP2").

Local mode: ``target="local"`` runs the controller inside this process (one
per rank) instead of in gnmrd: the same code, so the same plans (digests)
for the same statistics, the same events (``local_events_path``) and
``state_dict()``/``load_state_dict()`` on the in-process controller. Data
parallel ranks observe identical statistics after the all-reduce, so their
controllers decide identically; sharded units (``unit_shard``, FSDP2's
DTensor parameters) need gnmrd and are refused with a ValueError. gnmrd
stays the deployment for multi-rank jobs that want one view, dashboards and
operators (docs/local_mode.md).

Logging: ``last_step_info()`` is the last applied step as a ``StepInfo``
(every unit's gradient norm, the units in recovery with their action and
clip scale, skips, plan digest, miss reason); ``add_step_callback(fn)``
calls ``fn(info)`` after every ``apply``, and ``metrics_logger(log)`` makes
such a callback that hands ``info.flat()`` (numbers only) to wandb,
TensorBoard or any tracker. A callback's exception is warned about and
counted, never raised into the step (unless ``strict``).

Checkpoints: ``state_dict()`` holds the daemon's controller state of the job
(Admin ExportState) as bytes, or ``None`` with a warning when the daemon
cannot be reached (fail-open). ``load_state_dict()`` imports it (Admin
ImportState; needs admin rights: allowed over a Unix socket when the daemon
has no admin token, else pass ``admin_token``; docs/checkpoint.md); only rank 0 imports, which
starts a new generation of the job (decisions of the killed run are never
applied), then all ranks meet at a barrier and wait (bounded) for the
restored decision, so the first resumed step already has its plan. Call it
before training resumes; resuming under the same job id gives the plans of
an uninterrupted run.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch as _torch

from gnmr import _gnmr
from gnmr import tensor_ref as _tensor_ref
from gnmr._forward import ForwardHooks, ForwardTensor, output_activation
from gnmr._compile_watch import CompileWatch
from gnmr._dtensor import local as _local
from gnmr._checkpoint import STATE_FORMAT, CheckpointMixin  # noqa: F401  (re-export)
from gnmr._problems import ProblemReporter
from gnmr._apply import ApplyMixin
from gnmr._backward import BackwardMixin
from gnmr._lifecycle import LifecycleMixin
from gnmr._observe import ObserveMixin
from gnmr import _grads, _overlap, _presets
from gnmr._presets import PRESETS, NoHighPrecisionWarning, presets  # noqa: F401
from gnmr._overlap import OverlapMixin
from gnmr._step_info import (AppliedPlan, StepInfo, StepLogMixin, UnitInfo,  # noqa: F401
                             metrics_logger)
from gnmr._units import UnitsMixin, collect_units

__all__ = ["Monitor", "AppliedPlan", "StepInfo", "UnitInfo", "default_promote_callback",
           "linear_filter", "metrics_logger", "ForwardTensor", "output_activation", "PRESETS",
           "presets", "NoHighPrecisionWarning"]


# The client's own defaults (gnmr::ClientOptions), written once in C++.
_CLIENT_DEFAULTS = _gnmr.ClientOptions(target="", job_id="")


def linear_filter(name: str, module: _torch.nn.Module) -> bool:
    """The default unit filter: every nn.Linear."""
    return isinstance(module, _torch.nn.Linear)


def default_promote_callback(name: str, module: _torch.nn.Module, promoted: bool) -> None:
    """Sets ``module.gnmr_promoted``; a low-precision module reads it in forward."""
    module.gnmr_promoted = promoted


class Monitor(LifecycleMixin, CheckpointMixin, StepLogMixin, ObserveMixin, ApplyMixin,
              OverlapMixin, UnitsMixin, BackwardMixin):
    """GNMR for one rank of a PyTorch training job; see the module docstring.

    Args:
      model: the module to watch (pass the inner module of a DDP wrapper so
        unit names carry no ``module.`` prefix).
      target: gnmrd address, ``unix:/path/gnmrd.sock`` or ``host:port``; or
        ``"local"``: the controller runs in this process, one per rank (a
        single process, a notebook, a CI test; docs/local_mode.md). Same
        plans as gnmrd for the same statistics; sharded units are refused.
      job_id: the job (the same on every rank).
      rank, world_size: default to torch.distributed's when initialised, else 0/1.
      config: controller config for a job the daemon does not know yet, a dict
        of config keys (docs/controller.md; see ``gnmr.validate_config``); ValueError if invalid.
      preset: ``"recommended"``, ``"monitor_only"`` or ``"default"``: config keys
        that ``config`` overrides (``presets()``; python/README.md, "Presets").
      high_precision: ``"auto"``, True or False: whether a promotion switches a
        unit to a high-precision path; units without one clip unless the config
        sets ``actions`` (gnmr/_presets.py).
      unit_filter: ``(name, module) -> bool``; default every nn.Linear.
      unit_group: ``(name) -> str``, optional: the unit a selected module
        belongs to; modules mapped to the same name form one unit (their
        gradients are one norm, they are promoted together), e.g. q, k and v
        of an attention block, whose gradients move together. Default: each
        selected module is its own unit, named as in ``named_modules()``.
      unit_shard: ``(unit_name) -> (shard_index, shard_count)``, optional:
        the unit's shard on this rank (tensor/pipeline parallel); ranks
        holding the same shard are data-parallel replicas. Default: what
        the unit's DTensor parameters say (FSDP2), else whole on every rank.
      guard_group: the process group the same-step guard all-reduces its
        flag over when any unit is sharded (default: the world). Given
        explicitly, the flag is agreed over it even without sharded units:
        pass it on every rank with pipeline parallelism (stages hold
        different units, and a NaN in one stage must skip the step on all),
        e.g. ``torch.distributed.group.WORLD``.
      promote_callback: ``(name, module, promoted) -> None``, called for every
        module of the unit (with the module's own name).
      decision_wait_ms: how long ``apply`` may wait for a decision that is
        coming (default 2000 ms; at lag >= 1 it is normally there already).
      connect_timeout_s: how long the constructor (with ``start=True``) waits
        for the first connection attempt (it returns as soon as it ends).
      strict: raise client errors and set-up problems instead of warning.
      local_events_path: with ``target="local"``, append the job's events
        (admissions, releases, denials, skips) to this file as JSON Lines,
        the lines of gnmrd's event log.
      forward_tensors: ``(name, module, inputs, output) -> [Tensor |
        ForwardTensor] or None``, optional: the forward tensors of each unit's
        modules for the forward channel (host tensors, or CUDA tensors on the
        Monitor's device; see the module docstring). Default: none.
      pipeline_stage: this rank's pipeline stage (0, 1, ...) when the
        model's layers are split over stages: ``attribution: upstream``
        then ranks a root in an earlier stage first (docs/controller.md,
        "Attribution"). Default 0 (no pipeline parallelism). Pass
        ``guard_group`` too.
      observe_during_backward: observe each host unit from its parameters'
        gradient hooks as soon as backward has produced its gradient
        (PyTorch >= 2.1; older: a warning, after_backward observes all),
        so ``after_backward`` only finishes the step. Bit-identical
        statistics and plans; wrap non-final micro-batches' backward in
        ``accumulating()``; not with world_size > 1 or sharded units
        (ValueError). Default False (docs/integrations.md, "Overlap with
        backward").
      grad_attr: where a parameter's gradient is: ``"auto"`` (default)
        ``param.main_grad`` where it is a tensor (Megatron, Transformer
        Engine's ``fuse_wgrad_accumulation``; it wins over ``.grad``), else
        ``.grad``, per parameter at every step; ``"grad"`` only ``.grad``;
        ``"main_grad"`` only ``main_grad`` (a unit parameter without one is
        a ValueError naming it). Clip and skip act on that tensor (a
        ``main_grad`` is zeroed in place, never set to None). Not with
        ``observe_during_backward`` (ValueError) (docs/integrations.md,
        "Megatron and Transformer Engine: main_grad").
    """

    def __init__(self, model: _torch.nn.Module, *, target: str, job_id: str,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 token: str = "", admin_token: str = "",
                 config: Optional[Dict[str, Any]] = None,
                 unit_filter: Callable[[str, _torch.nn.Module], bool] = linear_filter,
                 unit_group: Optional[Callable[[str], str]] = None,
                 unit_shard: Optional[Callable[[str], Tuple[int, int]]] = None,
                 guard_group: Any = None,
                 promote_callback: Callable[[str, _torch.nn.Module, bool], None] =
                 default_promote_callback,
                 decision_wait_ms: float = _CLIENT_DEFAULTS.decision_wait_ms,
                 max_queued_reports: int = _CLIENT_DEFAULTS.max_queued_reports,
                 state_timeout_ms: float = 5000.0,
                 connect_timeout_s: float = 5.0,
                 strict: bool = False,
                 start: bool = True,
                 local_events_path: str = "",
                 forward_tensors: Optional[Callable[..., Any]] = None,
                 pipeline_stage: int = 0,
                 observe_during_backward: bool = False,
                 grad_attr: str = "auto", preset: Optional[str] = None,
                 high_precision: Union[str, bool] = "auto"):
        dist = _torch.distributed
        dist_on = dist.is_available() and dist.is_initialized()
        if rank is None:
            rank = dist.get_rank() if dist_on else 0
        if world_size is None:
            world_size = dist.get_world_size() if dist_on else 1
        config = _presets.resolve(preset, config)  # ValueError naming the presets
        self._connect_timeout_s = float(connect_timeout_s)
        self._guard_group = guard_group
        self.last_connect_error = ""
        self._strict = strict
        self._state_timeout_ms = float(state_timeout_ms)
        self.errors = 0
        self._last_warning = ""

        self._grad_attr = _grads.check_mode(grad_attr)
        self._units = collect_units(model, unit_filter, unit_group, unit_shard)
        self._config, self._promote_callback = _presets.monitor_config(
            self._units, config, promote_callback, promote_callback is default_promote_callback,
            high_precision, local=target == "local")
        self._lag = int((self._config or _gnmr.default_config())["lag"])
        _grads.check_declared(self._units, grad_attr)
        self._sharded = any(u.shard[1] > 1 for u in self._units)
        self._shard_slots = None  # gnmr/_apply.py: set at the first apply

        self.options = _gnmr.ClientOptions(
            target=target, job_id=job_id, rank=rank, world_size=world_size, token=token,
            decision_wait_ms=float(decision_wait_ms), max_queued_reports=max_queued_reports,
            admin_token=admin_token, local_events_path=local_events_path or "",
            pipeline_stage=int(pipeline_stage))
        self.local = target == "local"
        if self.local and self._sharded:
            u = next(u for u in self._units if u.shard[1] > 1)
            how = ("its DTensor parameters are sharded (FSDP2 fully_shard, HSDP or tensor "
                   "parallel)" if u.shard_source == "DTensor" else "unit_shard says so")
            raise ValueError(
                f"gnmr.torch: unit '{u.name}' is shard {u.shard[0]} of {u.shard[1]} ({how}): "
                "target='local' runs one controller per rank on that rank's own statistics "
                "and cannot combine a sharded unit's shards into its norm; run gnmrd and set "
                "target to its address (docs/local_mode.md; FSDP2: docs/integrations.md)")
        self.client = _gnmr.Client(self.options, self._config)
        self._problems = ProblemReporter(self.client, strict)
        for u in self._units:
            # DTensor parameters: the local shard's memory and numel (a
            # DTensor's own data_ptr() is 0 and its numel the global one).
            refs = [_tensor_ref(_local(p).detach()) for p in u.params]
            u.handle = self.client.add_unit(u.name, refs, u.shard[0], u.shard[1])
        self._zeros: Dict[_torch.device, _torch.Tensor] = {}  # per device, for None grads
        devices = {p.device for u in self._units for p in u.params}
        cuda = sorted({d for d in devices if d.type == "cuda"}, key=str)
        # Device units are observed on the current CUDA stream (the one
        # backward ran on), without a host synchronisation.
        self._cuda_device = cuda[0] if cuda else None
        self._forward = (ForwardHooks(self.client, self._units, forward_tensors, self._fail,
                                      strict, self._cuda_device)
                         if forward_tensors is not None else None)
        self._backward_hooks = (_overlap.setup(self._units, world_size, self._observe_unit_now,
                                               self._fail, grad_attr)
                                if observe_during_backward else None)
        self._promoted = set()  # unit indices currently promoted
        self._compile_watch = CompileWatch()
        self._last_observed: Optional[int] = None
        self._started = False
        if start:
            self.start()
