"""The package's layout (ARCHITECTURE.md): the import graph of `src/hf_laser` has no cycle, the library never imports
the command line, and the remote-code files written into model directories stand on their own.

The graph is built with `ast` from every module's import statements (relative ones resolved; `from . import x`
counts as an import of the submodule `x` when there is one, else of the package). What counts:

* module-level imports, including those inside a module-level `try` / `if`, are the graph whose cycles would break
  import order: it must be acyclic;
* function-local imports (deferred to keep `import hf_laser` and `hf-laser --help` fast, or to import optional
  dependencies) cannot break import order, but a cycle through them would still tie two modules together, so the
  graph with them must be acyclic too;
* `if TYPE_CHECKING:` blocks are not imports at run time and are left out;
* entry points are not library code: `__main__.py` files and `if __name__ == "__main__":` blocks (what
  `python -m hf_laser.checkpoints.convert` runs) may import the command line, and are left out of both graphs.

The command line is `hf_laser.cli` and the `hf_laser.commands` package; no other module may import it, at any level.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "hf_laser"
COMMAND_LINE = ("hf_laser.cli", "hf_laser.commands")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _skipped(node: ast.If) -> bool:
    test = node.test
    if isinstance(test, (ast.Name, ast.Attribute)) and getattr(test, "id", getattr(test, "attr", None)) == \
            "TYPE_CHECKING":
        return True
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators))


def _resolve(module: str, is_package: bool, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The hf_laser modules an import statement names (submodules when `from X import submodule`)."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            origin = ".".join(base + ([node.module] if node.module else []))
        else:
            origin = node.module or ""
        targets = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in MODULES else origin
                   for alias in node.names]
    resolved = []
    for target in targets:
        while target and target not in MODULES:
            target = target.rpartition(".")[0]
        if target and target != module:
            resolved.append(target)
    return resolved


def imports(module: str) -> dict[str, bool]:
    """`{imported hf_laser module: True when only function-local}` for one module (entry-point code left out)."""
    path = MODULES[module]
    found: dict[str, bool] = {}

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _skipped(child):
                visit_orelse = ast.Module(body=child.orelse, type_ignores=[])
                visit(visit_orelse, local)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in _resolve(module, path.name == "__init__.py", child):
                    found[target] = found.get(target, True) and local
                continue
            visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def guarded_imports(path: Path) -> set[str]:
    """The absolute `hf_laser...` modules imported inside `try:` blocks that catch ImportError: optional where
    hf_laser is not installed (transformers' `get_imports` leaves try blocks out the same way)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        catches = {h.type.id for h in getattr(node, "handlers", []) if isinstance(h.type, ast.Name)}
        if not isinstance(node, ast.Try) or not catches & {"ImportError", "ModuleNotFoundError"}:
            continue
        for child in node.body:
            if isinstance(child, ast.ImportFrom) and child.level == 0 and (child.module or "").startswith("hf_laser"):
                out.add(child.module)
    return out


def is_entry_point(module: str) -> bool:
    return module.endswith(".__main__")


GRAPH = {m: imports(m) for m in MODULES if not is_entry_point(m)}


def find_cycle(edges: dict[str, list[str]]) -> list[str] | None:
    """A cycle of `edges` as `[a, b, ..., a]`, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in edges.get(node, ()):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := dfs(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := dfs(node)):
            return cycle
    return None


def test_the_package_is_parsed():
    assert {"hf_laser", "hf_laser.encoder", "hf_laser.outputs", "hf_laser.errors", "hf_laser.mining",
            "hf_laser.mining.search", "hf_laser.commands.embed", "hf_laser.cli"} <= set(GRAPH)
    assert "hf_laser.outputs" in GRAPH["hf_laser.encoder"] and "hf_laser.mining.index" in GRAPH["hf_laser.mining.search"]


def test_module_level_imports_have_no_cycle():
    edges = {m: sorted(t for t, local in found.items() if not local) for m, found in GRAPH.items()}
    assert find_cycle(edges) is None, " -> ".join(find_cycle(edges))


def test_imports_including_function_local_ones_have_no_cycle():
    edges = {m: sorted(found) for m, found in GRAPH.items()}
    assert find_cycle(edges) is None, " -> ".join(find_cycle(edges))


def test_library_never_imports_the_command_line():
    library = [m for m in GRAPH if not m.startswith(COMMAND_LINE)]
    offenders = {m: sorted(t for t in GRAPH[m] if t.startswith(COMMAND_LINE)) for m in library}
    assert not {m: t for m, t in offenders.items() if t}


def test_cycle_finder_finds_cycles():
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": ["b", "c"], "b": ["c"], "c": []}) is None


@pytest.fixture(scope="module")
def remote_code() -> list[str]:
    pytest.importorskip("transformers")
    from hf_laser.checkpoints.integration_files import code_files

    return code_files(["modeling_laser", "tokenization_laser", "pipeline_laser", "sentence_transformers_laser"])


def test_remote_code_files_stand_on_their_own(remote_code):
    """The files written into a model directory for `trust_remote_code` import each other only (a flat set once
    written: `write_code_files` rewrites `from ..text.bpe import` to `from .bpe import`) and nothing that needs hf_laser
    installed: transformers checks every import it finds in them (`get_imports`) before running them."""
    from transformers.dynamic_module_utils import get_imports, get_relative_imports

    from hf_laser.checkpoints.integration_files import flat_source, source_file

    assert "modeling_laser.py" in remote_code and "tokenization_laser.py" in remote_code
    for name in remote_code:
        path = source_file(name)
        assert path is not None and path.is_file(), name
        assert "hf_laser" not in get_imports(path), name
        found = set(imports(module_name(path))) - guarded_imports(path)
        assert {t.rpartition(".")[2] + ".py" for t in found} <= set(remote_code), (name, found)
        flat = path.parent / f".flat-{name}"
        try:  # the written form: every relative import names a sibling of the set
            flat.write_text(flat_source(path), encoding="utf-8")
            assert {f"{m}.py" for m in get_relative_imports(flat)} <= set(remote_code), name
            assert not [n for n in ast.walk(ast.parse(flat.read_text(encoding="utf-8")))
                        if isinstance(n, ast.ImportFrom) and n.level > 1], name
        finally:
            flat.unlink()


def test_remote_code_file_names_are_unique_across_subpackages():
    """A directory holds the remote code side by side: two files of one name in the code subpackages would collide."""
    from hf_laser.checkpoints.integration_files import CODE_PACKAGES

    names = [p.name for package in CODE_PACKAGES for p in (PACKAGE / package).glob("*.py") if p.name != "__init__.py"]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


# what a user imports stands at the top; every other concept is a subpackage (ARCHITECTURE.md)
TOP_LEVEL = {"__init__.py", "cli.py", "encoder.py", "decoder.py", "model_set.py", "outputs.py", "errors.py", "defaults.py"}
SUBPACKAGES = {"text", "modeling", "checkpoints", "integrations", "speed", "mining", "serving", "commands", "models"}


def test_the_top_level_holds_only_the_faces_and_the_subpackages():
    assert {p.name for p in PACKAGE.glob("*.py")} == TOP_LEVEL
    assert {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()} == SUBPACKAGES


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in SUBPACKAGES) else ""


def test_no_private_name_is_imported_across_packages():
    """Packages talk through public names: `from ..mining.search import _merge_into` in another package is a
    private detail leaking (tests may, the library may not)."""
    offenders = []
    for module, path in MODULES.items():
        if is_entry_point(module):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            for target in _resolve(module, path.name == "__init__.py", node):
                if _package_of(target) == _package_of(module):
                    continue
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private:
                    offenders.append(f"{module} <- {target}: {', '.join(private)}")
    assert not offenders, offenders


def test_module_level_imports_of_the_library_are_at_the_top():
    """Imports at the top of a module: a function-local import is allowed only with its reason on its line or the
    two above (`# lazy: ...`): a heavy or optional dependency (torch where the NumPy engine avoids it, faiss, Ray,
    transformers on the command line's fast path), or a module that imports this one."""
    offenders = []
    for module, path in MODULES.items():
        lines = path.read_text(encoding="utf-8").split("\n")
        tree = ast.parse("\n".join(lines))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for child in ast.walk(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    first = child.lineno - 1  # the reason may stand above a block of imports
                    while first > 0 and (lines[first - 1].strip().startswith(("from ", "import ", "#", ")"))
                                         or lines[first - 1].rstrip().endswith((",", "("))):
                        first -= 1
                    context = " ".join(lines[max(first - 2, 0):child.end_lineno])
                    if "lazy:" not in context:
                        offenders.append(f"{path.relative_to(PACKAGE)}:{child.lineno}")
    assert not offenders, f"{len(offenders)} function-local imports without a '# lazy: reason': {offenders[:20]}"


def test_old_module_paths_still_import(recwarn):
    """Code written against the flat layout (`from hf_laser.modeling_laser import ...`, a `modules.json` naming
    `hf_laser.sentence_transformers_laser...`) keeps working, with a DeprecationWarning naming the new path."""
    import importlib

    old = importlib.import_module("hf_laser.preprocessing")
    new = importlib.import_module("hf_laser.text.preprocessing")
    assert old is new
    assert any("hf_laser.text.preprocessing" in str(w.message) for w in recwarn.list)
    from hf_laser.sentence_transformers_laser import LaserSentenceTransformerModule  # noqa: F401
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("hf_laser.no_such_module")
