"""rlexp.discover finds a package's spec modules by their top-level `SPEC = register(`, without importing the rest."""

from __future__ import annotations

import sys
from pathlib import Path

from rlexp.discover import spec_modules


def test_spec_modules_are_found_by_what_they_declare(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    pkg = tmp_path / "fampkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "registry.py").write_text("def register(spec):\n    return spec\n")
    (pkg / "zeta.py").write_text("from fampkg.registry import register\n\nSPEC = register('zeta')\n")
    (pkg / "alpha.py").write_text("from fampkg.registry import register\nSPEC = register(\n    'alpha'\n)\n")
    (pkg / "loader.py").write_text("raise RuntimeError('a support module is never imported by the search')\n")
    (pkg / "helper.py").write_text("def f():\n    SPEC = register('not top level')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert spec_modules("fampkg") == ["fampkg.alpha", "fampkg.zeta"]
        assert spec_modules("fampkg", first=("zeta",)) == ["fampkg.zeta", "fampkg.alpha"]
        assert "fampkg.loader" not in sys.modules
    finally:
        for name in [n for n in sys.modules if n == "fampkg" or n.startswith("fampkg.")]:
            del sys.modules[name]


def test_the_builtin_families_and_algorithms_are_their_packages_spec_modules() -> None:
    from rlexp.algorithms.registry import algorithms
    from rlexp.families.registry import families

    assert list(families())[:4] == ["qwen3", "llama3", "gemma4", "gpt_oss"]
    assert list(algorithms())[:6] == ["grpo", "dapo", "drgrpo", "gspo", "ppo", "opd"]
