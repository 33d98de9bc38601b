"""The doors a kernel enters a model by, one module each, behind one protocol (`door.Door`).

- `layers.ModuleDoor`: a class the model marks; `kernelize` replaces each instance's forward.
- `layers.ExtensionDoor`: a class the model does not mark, named by `Explorer.extend`.
- `functions.FunctionDoor`: a function layer the model attaches to its modules (rotary).
- `attention_door.AttentionDoor`: Transformers' attention interface, model-wide.

A new door goes in a module here: subclass `Door` (or `InstanceDoor` for a per-instance forward),
and say in `doors.door_class` which layer groups it serves. The switchboard needs nothing more.
"""
