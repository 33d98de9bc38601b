"""Switching kernels on and off in a live model: the board, and one door per way a kernel enters.

- `board.Switchboard`: what every door shares: the selection, the lock, snapshot/restore, events.
- `door.Door`: the protocol every door answers; `door_classes.door_class` says which door serves a group.
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

A new door goes in a module here: subclass `Door` (or `InstanceDoor` for a per-instance forward),
and say in `door_classes.door_class` which layer groups it serves. The board needs nothing more.

May import `_backend`, `build`, `catalog`, `inspect` and `errors`, and `measure.divergence` (the pure
numbers a trial's values are judged by: it imports nothing of the package); never the rest of
`measure`, nor `views`.
"""
