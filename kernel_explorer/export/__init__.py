"""From the notebook to production: what is switched on now, written out for code without the explorer.

- `plan.py`: the switch state read as plain data (which candidate, mode, code path, instances), and
  in words what a `kernels` mapping cannot express;
- `script.py`: that plan as one Python module using only Transformers' and `kernels`' public API
  (`apply(model)` and a `__main__`);
- `pins.py`: the Hub kernels as `[tool.kernels.dependencies]` for `kernels lock`.

Each door says its own part of the plan (`Door.export()`, `switching/exported.py`); the plan only
gathers them. `Explorer.export` and `Explorer.export_pins` are the doors users take.

May import: _backend, catalog, errors, inspect, switching
"""
