"""Where kernel candidates come from, and what the machine can do with each.

Sources: the Hub (`hub_access`), the bundled repositories (`build.bundled`), peers a user points
at (`peers`), a Transformers `KernelConfig` (`kernel_config`), and the attention row's candidates
(`attention_candidates`). `candidates.Catalog` merges them per layer, device and mode; `availability`
says in one word and one line what a candidate can do here; `words` reads how a user names one.

May import: _backend, build, errors, inspect
"""
