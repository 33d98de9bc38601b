"""A kernel-builder repository's CPU backend built without Nix, and the cache it lands in.

`repo_format` reads `build.toml`, `compile_steps` compiles and links, `builder` lays the result out
as `build/<variant>/` exactly as kernel-builder does, so the real `kernels` loader loads it; `cache`
is the one root for everything the toolkit builds or converts; `bundled` is the one registry of
the bundled repositories (which layers each serves, where its build lies, their `kernels`
mapping), beside what builds them. The variant this machine takes is kernels' own answer
(`_backend.platform.accepted_variants`).

May import: _backend, errors
"""
