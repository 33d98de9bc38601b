"""A kernel-builder repository's CPU backend built without Nix, and the cache it lands in.

`repo_format` reads `build.toml`, `compile_steps` compiles and links, `builder` lays the result out
as `build/<variant>/` exactly as kernel-builder does, so the real `kernels` loader loads it; `cache`
is the one root for everything the toolkit builds or converts.

May import `_backend`, `inspect.hardware` and `errors` only.
"""
