"""Switching kernels on and off in a live model: the board, and one door per way a kernel enters.

- `board.Switchboard`: what every door shares: the selection, the lock, snapshot/restore, events.
- `door.Door`: the protocol every door answers; `door_classes.DOORS` lists every door class.
- `module_door.ModuleDoor`: a class the model marks; `kernelize` replaces each instance's forward.
- `module_door.ExtensionDoor`: a class the model does not mark, named by `Explorer.extend`
  (`extension`: the marked subclass and its candidates).
- `function_door.FunctionDoor`: a function layer the model attaches to its modules (rotary), with
  `routes` giving each holder its own copy.
- `attention_door.AttentionDoor`: Transformers' attention interface, model-wide.
- `instance_door`, `probe`, `guard`, `forwards`, `code_paths`: what per-instance doors share (the
  trial on a copy judged on its values, the exact restore, the forward that falls back, a pinned
  code path); `attention_trial`: the attention row's trial (one call per kind of module, then the
  whole model).
- `isolation`: a stranger's candidate tried first in a worker process (a crash or a hang there is
  the row's reason, never the notebook's end).
- `events`, `model_state`: every explorer of one model hears of each switch and shares one state.
- `exported`: what a door says it runs now, as data for the export (`Door.export()`);
  `trial_inputs`: the capture's inputs and the longer ones a trial runs on.

A new door goes in a module here: subclass `Door` (or `InstanceDoor` for a per-instance forward),
say which rows it serves (`discover`) and what it exports (`export`), and add it to
`door_classes.DOORS`. The board needs nothing more. A trial's values are judged by
`numerics.divergence`.

May import: _backend, build, catalog, errors, inspect, numerics
"""
