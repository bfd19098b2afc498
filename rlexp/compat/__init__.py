"""Adapters around the private APIs of pinned libraries, one module per library (Hydra, JAX, orbax, Tunix).

Everything rlexp needs from a library's internals goes through here, named for what it does, with the
pinned version it was written against and why no public API serves. Upgrading a library means
re-checking exactly these modules, and the guarded patches: `patching` is the one mechanism that replaces a
library function (with a fingerprint of the source it replaces), used by the correctness fixes in
`rlexp.fixes` and the speed work in `rlexp.perf`.
"""
