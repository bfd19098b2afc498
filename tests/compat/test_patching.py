"""rlexp.compat.patching: patches install in a fixed order, uninstall back to the library's own objects, and a
replaced function whose source changed fails with one line naming the patch and how to run without it."""

from __future__ import annotations

import types

import pytest

from rlexp.compat import patching


def _library() -> types.ModuleType:
    """A stand-in library module with one function, defined in this file so that it has a source."""
    lib = types.ModuleType("fake_lib")

    def scale(x):
        return 2 * x

    lib.scale = scale
    return lib


def _plus(n: int):
    def layer(fn):
        return lambda x: fn(x) + n

    return layer


def _times(n: int):
    def layer(fn):
        return lambda x: fn(x) * n

    return layer


def test_layers_compose_by_rank_whatever_the_order_and_uninstall_to_the_original() -> None:
    lib = _library()
    own = lib.scale
    target = patching.Target(lib, "scale", patching.fingerprint(own))
    patching.install("outer", [(target, 50, _plus(1))], "off")
    patching.install("inner", [(target, 10, _times(10))], "off")
    assert lib.scale(1) == 21  # (2 * 1 * 10) + 1: the rank-10 layer sits next to the library's function
    assert lib.scale.rlexp_patch == "outer" and patching.original(lib, "scale") is own
    patching.install("inner", [(target, 10, _times(10))], "off")  # again: nothing changes
    assert lib.scale(1) == 21
    patching.uninstall("inner")
    assert lib.scale(1) == 3 and {"outer"} <= patching.installed()
    patching.uninstall("outer")
    assert lib.scale is own and not {"outer", "inner"} & patching.installed()


def test_a_changed_source_fails_in_one_line_naming_the_patch_and_the_key() -> None:
    lib = _library()
    target = patching.Target(lib, "scale", "0123456789abcdef")  # written against other code
    with pytest.raises(patching.PatchGuardError) as err:
        patching.install("token_rows", [(target, 10, _plus(1))], "run without it: perf.patches=[]", "perf.patches")
    text = str(err.value)
    assert "\n" not in text and err.value.exit_code == 1
    assert text.startswith("perf.patches=token_rows: fake_lib.scale is not the code the patch was written against")
    assert "expected 0123456789abcdef" in text and text.endswith("run without it: perf.patches=[]")
    assert not hasattr(lib.scale, "rlexp_patch")  # nothing installed


def test_a_function_without_source_never_matches() -> None:
    namespace: dict = {}
    exec("def f(x):\n    return x\n", namespace)  # noqa: S102 - a function Python keeps no source for
    assert patching.fingerprint(namespace["f"]) == "no source"
