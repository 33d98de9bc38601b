"""What the model and the machine are: layer groups, hardware, versions, kernels' code paths.

Read-only views of things that exist before anything is switched: `layer_groups` finds the model's
kernel-marked layers, `hardware` the platform and the build variants it accepts, `versions` the
library window, `kernel_paths` which instruction-set path each bundled kernel chose.

May import `_backend` and `errors` (and `catalog.bundled` for the bundled repositories' names).
"""
