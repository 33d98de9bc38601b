"""The one boundary between the explorer and the internals of `kernels` and Transformers.

The explorer loads and swaps kernels only through `kernels`, and now and then needs a piece that
`kernels` or Transformers keeps private: `kernelize`'s per-layer step, the registered mapping, the
mode priority table, the attributes of repository objects, the hidden `_kernel_funcs` dict of
function layers. Every such use lives in this package and nowhere else, using the libraries' public
names wherever the supported pairs (kernels 0.17.2-0.19.x, Transformers 5.22-5.25) have them, so an
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
- `kernelized`: what kernels itself says runs (`get_kernelized_layers`, 0.18+), in the explorer's terms.
- `function_chains`, `flash_names`, `quantization_kernels`: Transformers' other doors (rows nothing
  switches): function kernels with a fallback chain, flash names that become Hub repositories,
  quantization methods that load Hub kernels.
- `internals`: the list of every internal name relied on, where each release keeps it, checked in one test.

The bottom layer: it knows the libraries, not the explorer.

May import: errors
"""
