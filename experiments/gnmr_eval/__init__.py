"""The low-precision stress evaluation of GNMR (docs/evaluation.md).

Entry point: ``experiments/run_eval.py`` (see experiments/README.md). Modules:

- ``data``: the byte-level corpus (Debian's ``fortunes`` cookie files) and its
  train / validation split.
- ``fp8``: FP8 E4M3 fake quantization with per-tensor scaling, the
  ``LowPrecisionLinear`` unit with a low-cost and a high-fidelity path, and the
  quantizer faults.
- ``model``: the small decoder-only transformer.
- ``faults``: the seeded fault schedules.
- ``arms``: what each arm does around backward and the optimizer step.
- ``train``: one run (arm, seed) -> a result dict.
- ``metrics``, ``report``: aggregation, tables and plots.
"""
