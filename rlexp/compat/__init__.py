"""Adapters around the private APIs of pinned libraries, one module per library.

Everything rlexp needs from a library's internals goes through here, named for what it does, with the
pinned version it was written against and why no public API serves. Upgrading a library means
re-checking exactly these modules.
"""
