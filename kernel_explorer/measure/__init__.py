"""Measurements on real activations: input capture, layer and model comparison, the background runner.

Every measurement is a generator of `Record`s, one per completed sample, so the runner can stream
them into a `ResultLog` and stop between any two samples.
"""
