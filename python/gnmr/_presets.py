"""Named configs and the safe default of ``gnmr.torch.Monitor``.

Presets (``Monitor(..., preset=NAME)``): a preset is a dict of config keys
(docs/controller.md, "Config keys"); the user's ``config`` keys override
the preset's. The evidence behind each is in python/README.md ("Presets and
the safe default") and docs/evaluation.md.

The safe default: a unit has no high-precision path when a promotion
cannot change what its forward computes. ``high_precision="auto"`` decides
that from the model's structure only: the Monitor's promote_callback is
``default_promote_callback`` (it sets ``module.gnmr_promoted``) and every
module of the unit runs PyTorch's own forward (``torch.nn.Linear``, a
``Conv1d``, an FSDP2-wrapped Linear ...: classes whose ``forward`` is
defined in ``torch``), which never reads that attribute. Those units get
action ``clip`` (a rule per unit name, or one ``*`` rule when every unit
is such) unless the config names ``actions`` itself, ``max_o`` is 0
(nothing is ever admitted), or the job's config is gnmrd's (no ``config``
and no ``preset`` with a daemon target: the Monitor sends none, so it only
warns). The derived config depends on the unit names, the modules'
classes and the arguments, never on timing, so it is the same on every
rank that holds the same units.

A promotion that changes nothing is warned about once per Monitor, at the
first one: with the default callback, a module that runs PyTorch's forward,
or whose classes (outside ``torch``) never mention ``gnmr_promoted``
(e.g. torchao's Float8Linear without ``gnmr.integrations.torchao.promote``).
"""
from __future__ import annotations

import ast
import copy
import functools
import inspect
import logging
import textwrap
import types
import warnings
from typing import Any, Callable, Dict, List, Optional, Union

import torch as _torch

from gnmr import _gnmr

log = logging.getLogger("gnmr")

# At most this many rules in a config's `actions` (docs/controller.md).
MAX_RULES = 256

# The evaluated configuration: docs/evaluation.md, "Follow-up 8" (the arm
# "headline + forward + denied clip + lock 10 + upstream" of
# experiments/forward_eval.py: HEADLINE lag 0, max_o 2 of
# experiments/gnmr_eval/plan.py, warmup 50, clip_min_scale 0.01, tau 6 /
# tau_delta 4). Every key it depends on is pinned, so a later change of a
# built-in default does not change what "recommended" means.
_PRESETS: Dict[str, Dict[str, Any]] = {
    "default": {},
    "recommended": {
        "lag": 0, "max_o": 2, "lock_steps": 10, "entry": "clip", "denied": "clip",
        "attribution": "upstream", "tau": 6.0, "tau_delta": 4.0, "warmup": 50,
        "clip_min_scale": 0.01,
    },
    "monitor_only": {"max_o": 0},
}

PRESETS = types.MappingProxyType({k: types.MappingProxyType(v) for k, v in _PRESETS.items()})

HIGH_PRECISION_MODES = ("auto", True, False)


class NoHighPrecisionWarning(UserWarning):
    """Units whose promotion changes nothing (see gnmr/_presets.py)."""


def presets() -> Dict[str, Dict[str, Any]]:
    """The named presets, as fresh dicts of config keys."""
    return copy.deepcopy(_PRESETS)


def resolve(preset: Optional[str], config: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The preset's keys, overridden by ``config``'s; None when neither is
    given (the job's config is then gnmrd's, or the built-in defaults)."""
    if preset is None:
        return None if config is None else dict(config)
    if not isinstance(preset, str) or preset not in _PRESETS:
        raise ValueError(f"gnmr.torch.Monitor: unknown preset {preset!r} (known: "
                         f"{', '.join(sorted(_PRESETS))}; gnmr.torch.presets() lists their keys)")
    if config is not None and not isinstance(config, dict):
        raise ValueError("gnmr.torch.Monitor: config must be a dict or None")
    return {**copy.deepcopy(_PRESETS[preset]), **(config or {})}


def stock_forward(module: _torch.nn.Module) -> bool:
    """Whether ``module`` runs PyTorch's own forward (which never reads
    ``gnmr_promoted``): its class's forward is defined in ``torch`` and the
    instance has no forward of its own."""
    if "forward" in vars(module):
        return False
    fn = getattr(type(module), "forward", None)
    where = getattr(fn, "__module__", None) or ""
    return where == "torch" or where.startswith("torch.")


@functools.lru_cache(maxsize=None)
def _mentions_flag(cls: type) -> Optional[bool]:
    """Whether a class outside ``torch`` in ``cls``'s MRO reads or writes
    ``gnmr_promoted`` in its code; None when a source cannot be read."""
    for c in cls.__mro__:
        where = c.__module__ or ""
        if c is object or where == "torch" or where.startswith("torch."):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(c)))
        except (OSError, TypeError, SyntaxError):
            return None
        # self.gnmr_promoted, or getattr(self, "gnmr_promoted", ...); not a docstring
        if any((isinstance(n, ast.Attribute) and n.attr == "gnmr_promoted") or
               (isinstance(n, ast.Constant) and n.value == "gnmr_promoted")
               for n in ast.walk(tree)):
            return True
    return False


def inert_promotion(module: _torch.nn.Module) -> bool:
    """With the default callback: whether setting ``gnmr_promoted`` on
    ``module`` surely or most likely changes nothing (for the warning only)."""
    if stock_forward(module):
        return True
    if "forward" in vars(module):
        return False  # switched by someone (e.g. a path-swapping callback): unknown
    return _mentions_flag(type(module)) is False


def _escape(name: str) -> str:
    """A glob pattern matching exactly ``name`` (common/glob.h syntax)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _rules(units: List[Any], without: List[int]) -> Optional[List[Dict[str, str]]]:
    """The shortest rule list giving the units at indices ``without`` clip
    and the others promote; None when it needs more than MAX_RULES."""
    if len(without) == len(units):
        return [{"pattern": "*", "action": "clip"}]
    skip = set(without)
    others = [i for i in range(len(units)) if i not in skip]
    a = [{"pattern": _escape(units[i].name), "action": "clip"} for i in without]
    b = [{"pattern": _escape(units[i].name), "action": "promote"} for i in others]
    b.append({"pattern": "*", "action": "clip"})
    best = min(a, b, key=len)
    return best if len(best) <= MAX_RULES else None


class SafeDefault:
    """Which units have no high-precision path, what config they get, and
    the once-per-Monitor warnings (see the module docstring)."""

    def __init__(self, units: List[Any], default_callback: bool,
                 high_precision: Union[str, bool]):
        if isinstance(high_precision, str):
            ok = high_precision == "auto"
        else:
            ok = isinstance(high_precision, bool)
        if not ok:
            raise ValueError("gnmr.torch.Monitor: high_precision must be 'auto', True or "
                             f"False, got {high_precision!r}")
        self.declared = isinstance(high_precision, bool)  # said, not detected
        if high_precision is False:
            self.without = list(range(len(units)))
        elif high_precision is True or not default_callback:
            self.without = []
        else:
            self.without = [i for i, u in enumerate(units)
                            if all(stock_forward(m) for _, m in u.modules)]
        self._units = units
        self._watch = default_callback and high_precision is not True
        self._warned_promotion = False

    def config(self, config: Optional[Dict[str, Any]], local: bool,
               stacklevel: int = 4) -> Optional[Dict[str, Any]]:
        """``config`` with the clip rules added where the safe default
        applies (a new dict); warns once when units have no
        high-precision path."""
        if not self.without:
            return config
        base = {} if config is None and local else config
        if base is not None and "actions" in base:
            return config  # the user's rules stand (a promotion is warned about at run time)
        full = _gnmr.validate_config(base if base is not None else {})
        if int(full["max_o"]) == 0:
            return config  # monitor only: nothing is admitted
        what = self._describe()
        if base is None:
            self._notice(
                f"{what}; the job's config is gnmrd's (no config or preset given), so its "
                "actions decide and a promotion changes nothing for them. Pass "
                "preset='default' (or a config) to have them clipped instead, a promote_callback "
                "that switches their path, or high_precision=True", warn=True,
                stacklevel=stacklevel)
            return config
        rules = _rules(self._units, self.without)
        if rules is None:
            self._notice(f"{what}; their clip rules would need more than {MAX_RULES} config "
                         "actions, so the config is left as it is: set config['actions']",
                         warn=True, stacklevel=stacklevel)
            return config
        out = dict(base, actions=rules)
        self._notice(
            f"{what}; they get action 'clip' instead of 'promote' (config actions "
            f"{_short(rules)}). At lag {int(full['lag'])} "
            + ("the spike's own step is clipped" if int(full["lag"]) == 0 else
               "a clip acts from the step after the admission; lag 0 (preset='recommended') "
               "also clips the spike's own step")
            + ". Set config['actions'], a promote_callback that switches their path, or "
            "high_precision=True/False to decide (False: no warning)", warn=not self.declared,
            stacklevel=stacklevel)
        return out

    def _describe(self) -> str:
        n = len(self.without)
        first = self._units[self.without[0]]
        cls = type(first.modules[0][1])
        why = ("high_precision=False" if self.declared else
               f"PyTorch's own forward ({cls.__module__}.{cls.__qualname__}) with the default "
               "promote_callback, which only sets module.gnmr_promoted and nothing reads it")
        return (f"gnmr.torch: {n} of {len(self._units)} unit(s) have no high-precision path "
                f"({why}; e.g. '{first.name}')")

    def _notice(self, msg: str, *, warn: bool, stacklevel: int = 4) -> None:
        if warn:
            log.warning("%s", msg)
            warnings.warn(msg, NoHighPrecisionWarning, stacklevel=stacklevel)
        else:
            log.info("%s", msg)

    def watch(self, callback: Callable[[str, _torch.nn.Module, bool], None]
              ) -> Callable[[str, _torch.nn.Module, bool], None]:
        """``callback`` (the default one), warning once at the first
        promotion that changes nothing."""
        if not self._watch:
            return callback

        def promote(name: str, module: _torch.nn.Module, promoted: bool) -> None:
            callback(name, module, promoted)
            if promoted and not self._warned_promotion and inert_promotion(module):
                self._warned_promotion = True
                cls = type(module)
                self._notice(
                    f"gnmr.torch: module '{name}' ({cls.__module__}.{cls.__qualname__}) was "
                    "promoted, but the default promote_callback only sets gnmr_promoted and "
                    "its forward does not read it: the promotion changes nothing (warned once). "
                    "Give the unit a high-precision path (a promote_callback, e.g. "
                    "gnmr.integrations.torchao.promote, or a forward that reads "
                    "gnmr_promoted), or make it clip: config actions [{'pattern': '*', "
                    "'action': 'clip'}] or leave 'actions' out (python/README.md, \"Presets "
                    "and the safe default\")",
                    warn=True, stacklevel=5)
        promote.__wrapped__ = callback  # type: ignore[attr-defined]
        return promote


def monitor_config(units: List[Any], config: Optional[Dict[str, Any]],
                   callback: Callable[[str, _torch.nn.Module, bool], None],
                   default_callback: bool, high_precision: Union[str, bool], *, local: bool):
    """The Monitor's validated config (None: the job's config is gnmrd's)
    and its promote callback, with the safe default applied."""
    if config is not None:
        _gnmr.validate_config(config)  # an error names the user's key first
    safe = SafeDefault(units, default_callback, high_precision)
    config = safe.config(config, local=local, stacklevel=5)
    return (_gnmr.validate_config(config) if config is not None else None), safe.watch(callback)


def _short(rules: List[Dict[str, str]]) -> str:
    shown = ", ".join(f"{r['pattern']}: {r['action']}" for r in rules[:3])
    return "[" + shown + (f", ... {len(rules)} rules" if len(rules) > 3 else "") + "]"
