"""What the model and the machine are: layer groups, hardware, versions, kernels' code paths.

Read-only views of things that exist before anything is switched: `layer_groups` finds the model's
kernel-marked layers, `hardware` the platform and the build variants it accepts, `versions` the
library window, `variants` what a described machine would load of each candidate, `kernel_paths`
which instruction-set path a kernel reports (each bundled one, from `build.bundled`), `running` the
record of what an instance runs now (`RunningNow`, which every door answers with).

May import: _backend, build, errors
"""
