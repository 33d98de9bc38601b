"""Measurements on real activations: input capture, layer and model comparison, the background runner.

Every measurement is a generator of `Record`s, one per completed sample, so the runner can stream
them into a `ResultLog` and stop between any two samples. A measurement drives a model's switches
through `switches.Switches` (the switchboard satisfies it), so this package stands beside
`switching`, not on top of it.

May import: _backend, build, catalog, errors, inspect, numerics
"""
