"""A scan of rlexp's source for Tunix's private names: which names it reaches (attributes, `getattr` strings,
imports) or overrides (methods of subclasses of Tunix classes), module by module, without importing rlexp.

Tunix's private names are every `_name` (not dunder) its source defines: functions, classes, assigned names and
attributes. A name rlexp's module defines itself is that module's own, unless a subclass of a Tunix class defines it and
the Tunix class has it too (an override; a class built on a parameter, `class X(base)`, may subclass any).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

TUNIX = Path(importlib.util.find_spec("tunix").submodule_search_locations[0])


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_"


def defined(tree: ast.AST, skip: set[ast.ClassDef] = frozenset()) -> set[str]:
    """Private names `tree` defines (functions, classes, assigned names, `self.x =`), outside `skip`'s classes."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        for c in ast.iter_child_nodes(node):
            if c in skip:
                continue
            if isinstance(c, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(c.name)
            elif isinstance(c, ast.Attribute) and isinstance(c.ctx, ast.Store):
                if isinstance(c.value, ast.Name) and c.value.id in ("self", "cls"):
                    names.add(c.attr)
            elif isinstance(c, ast.Name) and isinstance(c.ctx, ast.Store):
                names.add(c.id)
            elif isinstance(c, ast.arg):
                names.add(c.arg)
            visit(c)

    visit(tree)
    return {n for n in names if _private(n)}


def tunix_privates() -> set[str]:
    out: set[str] = set()
    for path in TUNIX.rglob("*.py"):
        try:
            out |= defined(ast.parse(path.read_text()))
        except SyntaxError:
            continue
    return out


def _root(expr: ast.expr) -> str | None:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _class_privates(module: str, name: str, seen: int = 0) -> set[str] | None:
    """Private names Tunix's class `module.name` and its bases in Tunix define; None where it is not found."""
    file = TUNIX.parent.joinpath(*module.split(".")).with_suffix(".py")
    if seen > 8 or not file.exists():
        return None
    tree = ast.parse(file.read_text())
    imported = {a.asname or a.name: f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                for a in n.names if (n.module or "").startswith("tunix")}  # fmt: skip
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name):
        out = defined(cls)
        for b in cls.bases:
            if isinstance(b, ast.Name) and b.id in {c.name for c in tree.body if isinstance(c, ast.ClassDef)}:
                out |= _class_privates(module, b.id, seen + 1) or set()
            elif isinstance(b, ast.Attribute) and isinstance(b.value, ast.Name) and b.value.id in imported:
                out |= _class_privates(imported[b.value.id], b.attr, seen + 1) or set()
        return out
    return None


def reached(path: Path, privates: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every Tunix private `path` names."""
    tree = ast.parse(path.read_text())
    from_tunix: set[str] = set()  # local names bound by an import from tunix
    modules: dict[str, str] = {}  # such a name -> what it names (tunix.x.y, or tunix.x.Class)
    params: set[str] = set()  # a class built on a parameter (`class X(base)`) may subclass anything
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "tunix":
            from_tunix |= {a.asname or a.name for a in n.names}
            modules.update({a.asname or a.name: f"{n.module}.{a.name}" for a in n.names})
        elif isinstance(n, ast.Import):
            from_tunix |= {(a.asname or a.name).split(".")[0] for a in n.names if a.name.split(".")[0] == "tunix"}
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            params |= {a.arg for a in n.args.args + n.args.kwonlyargs}
    subclasses = {
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.ClassDef) and any(_root(b) in from_tunix | params for b in n.bases)
    }
    overridable: dict[int, set[str]] = {}  # id(def in a subclass) -> the privates its Tunix bases define
    for c in subclasses:
        base_names: set[str] = set()
        for b in c.bases:
            target = modules.get(_root(b) or "")
            found = None
            if target is not None:
                dotted = target + ("." + b.attr if isinstance(b, ast.Attribute) else "")
                found = _class_privates(*dotted.rsplit(".", 1))
            base_names |= privates if found is None else found
        overridable.update({id(x): base_names for x in ast.walk(c)})
    own = defined(tree, subclasses) | {
        n.name for c in subclasses for n in ast.walk(c) if isinstance(n, ast.FunctionDef)
        if n.name not in overridable[id(n)]
    }  # fmt: skip
    foreign = privates - own
    hits: list[tuple[int, str]] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "tunix":
            hits += [(n.lineno, a.name) for a in n.names if _private(a.name)]
        elif isinstance(n, ast.Attribute) and _private(n.attr):
            if n.attr in foreign or (isinstance(n.value, ast.Name) and n.value.id in from_tunix):
                hits.append((n.lineno, n.attr))
        elif isinstance(n, ast.FunctionDef) and n.name in overridable.get(id(n), ()):
            hits.append((n.lineno, n.name))  # an override
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in foreign:
            hits.append((n.lineno, n.value))  # getattr(obj, "_name"), Target(cls, "_name", ...)
    return sorted(set(hits))


def scan(root: Path) -> dict[str, list[tuple[int, str]]]:
    """rlexp module path (relative to `root`'s parent) -> the Tunix privates it names."""
    privates = tunix_privates()
    out = {}
    for path in sorted(root.rglob("*.py")):
        hits = reached(path, privates)
        if hits:
            out[str(path.relative_to(root.parent))] = hits
    return out
