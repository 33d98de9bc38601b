"""The one boundary between the explorer and the internals of `kernels` and Transformers.

The explorer loads and swaps kernels only through `kernels`, and now and then needs a piece that
`kernels` or Transformers keeps private: `kernelize`'s per-layer step, the registered mapping, the
mode priority table, the attributes of repository objects, the hidden `_kernel_funcs` dict of
function layers. Every such use lives in this package and nowhere else, using the libraries' public
names wherever the pinned versions (kernels 0.17.x, Transformers 5.18-5.22) have them, so an
upgrade breaks one small package, and `internals.missing_internals()` names what moved.

Modules:
- `modes`: kernels' `Mode` from and to the names users type; the fallback priority.
- `mappings`: mapping entries from a user dict, from kernels' registry, from Transformers' defaults.
- `layer_forwards`: `kernelize`'s per-layer step, the kernel a forward belongs to, the model's device;
  marking a class with a kernel layer name and checking a repository's layer fits it.
- `repositories`: what a `LayerRepository`-like object points at; building one to load.
- `hub`: the Hub API, the cache, variant resolution, offline mode and the user-agent workaround.
- `function_layers`: the function layers a module holds (`use_kernelized_func`) and what they wrap.
- `verification`: a build's files against its digest and its sigstore signature, as kernels checks them.
- `platform`: the backend and variant strings `kernels` accepts on this machine.
- `transformers_window`: the kernels version window the installed Transformers accepts.
- `attention_interface`: Transformers' attention interface, its names, loading a local repository into it.
- `experts`: Transformers' experts interface (MoE): the experts modules, what each runs, switching.
- `internals`: the list of every internal name relied on, checked in one test.
"""
