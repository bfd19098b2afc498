"""The package's layers: every import (lazy ones inside functions included) points down, never up or sideways.

Bottom to top (ARCHITECTURE.md): redact, children, discover -> log_setup -> errors -> compat -> fixes -> perf -> config
-> storage -> tunix -> data, rewards, models -> families -> algorithms -> estimates -> tools -> envs -> checks ->
tracking -> train -> sweep -> report -> launch -> the launcher plugin -> entry points. A room may import
its own modules and any room below it. Peers on one level (data, rewards, models) do not import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS: list[set[str]] = [
    {"redact", "children", "discover"},  # the one redaction pass, children die with their parent, spec modules found
    {"log_setup"},  # the status lines' logging set-up, which errors' ArgumentParser applies
    {"errors"},
    {"compat"},
    {"fixes"},
    {"perf"},
    {"config"},
    {"storage"},
    {"tunix"},  # the one seam to Tunix's privates: models use its checkpoint mappings, train the rest
    {"data", "rewards", "models"},
    {"families"},  # model families as registered specs: builders (models), rules, size terms, export names
    {"algorithms"},  # RL algorithms as registered specs: config node, learner, models, estimate terms, rules
    {"estimates"},  # memory, cost and FLOPs, composed from the family's terms
    {"tools"},  # tool registry, call formats (the python tool runs in rewards' sandbox)
    {"envs"},  # environments: rows, scorer, turns and tools in one choice (data, rewards, tools below)
    {"checks"},
    {"tracking"},
    {"train"},
    {"sweep"},
    {"report"},
    {"launch"},
    {"launchers"},
    {"entry"},
]
LEVEL = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}
# the commands users type, and the modules only they use
ENTRY_MODULES = {
    "rlexp.__main__",
    "rlexp.console",
    "rlexp.main",
    "rlexp.cli",
    "rlexp.cli_help",
    "rlexp.validate",
    "rlexp.export",
    "rlexp.eval",
    "rlexp.jobs",
    "rlexp.serve_reward",
    "rlexp.report.__main__",
}


def module_files() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "rlexp").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in sorted((ROOT / "launchers").rglob("*.py")):
        parts = path.relative_to(ROOT / "launchers").with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = module_files()


def room(module: str) -> str | None:
    if module.startswith("hydra_plugins."):
        return "launchers"
    if module in ENTRY_MODULES:
        return "entry"
    parts = module.split(".")
    if parts[0] != "rlexp" or len(parts) < 2:
        return None  # `rlexp` itself only holds __version__
    return parts[1]


def imports(module: str, path: Path) -> set[str]:
    """Every rlexp module `module` imports, at the top or inside functions."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:  # `import rlexp.x.y` of a function's module
                name = name.rpartition(".")[0]
            if name:
                out.add(name)
    return out


def test_every_room_has_a_layer() -> None:
    rooms = {room(m) for m in MODULES} - {None}
    assert rooms <= set(LEVEL), f"rooms without a layer: {sorted(rooms - set(LEVEL))}"


def test_imports_point_down() -> None:
    bad = []
    for module, path in MODULES.items():
        src = room(module)
        if src is None:
            continue
        for target in imports(module, path):
            dst = room(target)
            if dst is None or dst == src:
                continue
            if LEVEL[dst] >= LEVEL[src]:
                bad.append(f"{module} ({src}) imports {target} ({dst})")
    assert not bad, "upward or sideways imports:\n" + "\n".join(bad)


def test_no_import_circles_between_modules() -> None:
    graph = {m: imports(m, p) - {m} for m, p in MODULES.items()}
    # package __init__ modules are imported implicitly by their children; only explicit edges count here
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                raise AssertionError("import circle: " + " -> ".join([*stack[stack.index(n) :], n]))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("module", sorted(ENTRY_MODULES))
def test_no_module_imports_an_entry_module(module: str) -> None:
    importers = [m for m, p in MODULES.items() if room(m) != "entry" and module in imports(m, p)]
    assert not importers, f"{module} is an entry module, imported by {importers}"
