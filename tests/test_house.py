"""The house rules of src/nadpipe, checked on every run of the suite so that a new feature cannot
break them silently: no circle of imports (those inside functions counted too), every import
inside a function says why at its line, no function over 80 lines, no module over 800."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
MAX_FUNCTION, MAX_MODULE = 80, 800


def _modules() -> dict[str, Path]:
    out = {}
    for f in (SRC / "nadpipe").rglob("*.py"):
        parts = list(f.relative_to(SRC).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _targets(module: str, node: ast.ImportFrom | ast.Import, modules: dict) -> set[str]:
    """The nadpipe modules an import statement of `module` loads (the module named, or the
    package whose name it takes)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        package = module.split(".")
        if not modules[module].name == "__init__.py":
            package = package[:-1]
        base = package[: len(package) - node.level + 1] if node.level else []
        stem = ".".join([*base, node.module] if node.module else base)
        names = [f"{stem}.{a.name}" for a in node.names] + [stem]
    out = set()
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)
    return out


def _graph(modules: dict) -> dict[str, set[str]]:
    graph = {}
    for module, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                found |= _targets(module, node, modules)
        graph[module] = found
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_circle_of_imports():
    modules = _modules()
    assert _circles(_graph(modules)) == []


def test_the_circle_check_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]


def test_every_import_inside_a_function_says_why():
    # at the top of the module unless a comment at the line, or just above the imports it
    # opens, says why (it loads torch where the module does not, a start-up measured, ...)
    silent = []
    for path in _modules().values():
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in fn.body:
                if not isinstance(node, ast.Import | ast.ImportFrom):
                    continue
                above = node.lineno - 2
                while above >= 0 and (
                    lines[above].strip().startswith(("from ", "import "))
                    or not lines[above].strip()
                ):
                    above -= 1
                if "#" not in lines[node.lineno - 1] and not lines[above].strip().startswith("#"):
                    silent.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert sorted(set(silent)) == []


def test_rooms_of_a_size_a_person_reads():
    long_functions, long_modules = [], []
    for path in _modules().values():
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE:
            long_modules.append(str(path.relative_to(SRC)))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if node.end_lineno - node.lineno + 1 > MAX_FUNCTION:
                    long_functions.append(f"{path.relative_to(SRC)}:{node.name}")
    assert (long_functions, long_modules) == ([], [])
