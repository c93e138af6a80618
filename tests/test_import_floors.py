"""The floors of DESIGN.md, read from the source: imports point down only,
an `import` inside a function included, no two modules import each other
(through any chain), and no recipe imports another recipe.

A module's edges are the local modules its `import` and `from ... import`
statements name: `from keras_selfattn.models import presets` names the
module `keras_selfattn.models.presets`, `from keras_selfattn.models import
MusicTransformer` the package `keras_selfattn.models`. Nothing is imported.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "keras_selfattn"
# Bottom up; a module may import its own floor and those below.
FLOORS = (
    ("ops", "data", "compat", "distribute"),
    ("layers",),
    ("generation",),
    ("models",),
    ("export",),
)
RECIPES = "recipes"
RECIPE_SHARED = "recipes.common"


def module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def local_modules(top):
    return {module_name(path): path for path in sorted((ROOT / top).rglob("*.py"))}


def _example_imports(tree):
    """The import statements of the docstring examples (`>>> from ... import`),
    parsed: an example runs as the module's tests, so it counts as an edge."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            for line in (ast.get_docstring(node) or "").splitlines():
                code = line.strip().removeprefix(">>> ")
                if line.strip().startswith(">>> ") and code.startswith(("import ", "from ")):
                    yield from ast.parse(code).body


def imported_names(path, name):
    """Every dotted name the file's imports name (its docstring examples'
    too), each `from` import's names joined to its module."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in [*ast.walk(tree), *_example_imports(tree)]:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(modules):
    """`{module: {local modules it imports}}` of `modules` (`{name: path}`)."""
    graph = {}
    for name, path in modules.items():
        targets = set()
        for dotted in imported_names(path, name):
            while dotted and dotted not in modules:
                dotted = dotted.rpartition(".")[0]
            # `from package import name` names the package only when `name` is
            # not a module of it: the longest known prefix.
            if dotted and dotted != name:
                targets.add(dotted)
        graph[name] = targets
    return _without_package_of_submodule_imports(graph)


def _without_package_of_submodule_imports(graph):
    """`from a.b import c` where `a.b.c` is a module names `a.b.c`, not the
    package `a.b` as well."""
    cleaned = {}
    for name, targets in graph.items():
        cleaned[name] = {
            target for target in targets
            if not any(other.startswith(target + ".") for other in targets)
        }
    return cleaned


def floor_of(module):
    """The floor index of a `keras_selfattn` module; the package's own
    `__init__` stands on top."""
    parts = module.split(".")
    if len(parts) == 1:
        return len(FLOORS)
    for index, packages in enumerate(FLOORS):
        if parts[1] in packages:
            return index
    raise AssertionError(f"{module} is in no floor of {FLOORS}: add its folder to FLOORS and DESIGN.md")


def upward_edges(graph):
    """`"importer -> imported (floor a below floor b)"` for each edge up."""
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if floor_of(target) > floor_of(module):
                found.append(
                    f"{module} -> {target} (a {'/'.join(FLOORS[floor_of(module)])} module imports "
                    f"{'/'.join(FLOORS[floor_of(target)]) if floor_of(target) < len(FLOORS) else PACKAGE})"
                )
    return found


def cycles(graph):
    """Each cycle of the graph as `a -> b -> ... -> a` (one per strongly
    connected set of modules)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = set()
            while not component or module not in component:
                component.add(stack.pop())
            on_stack.difference_update(component)
            if len(component) > 1:
                components.append(component)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_cycle_path(graph, component) for component in components]


def _cycle_path(graph, component):
    start = min(component)
    path, seen = [start], {start}
    while True:
        following = sorted(t for t in graph[path[-1]] if t in component)
        step = next((t for t in following if t == start), None) or next(
            (t for t in following if t not in seen), following[0]
        )
        path.append(step)
        if step in seen:
            return " -> ".join(path[path.index(step):])
        seen.add(step)


def recipe_imports_of_recipes(graph):
    """`"recipe -> recipe"` for each program under `recipes/` (or its shared
    code) that imports a recipe program."""
    def is_program(module):
        return module.startswith(RECIPES + ".") and not module.startswith(RECIPE_SHARED)

    return [
        f"{module} -> {target}"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if is_program(target) and module.startswith(RECIPES)
    ]


def test_the_package_imports_point_down_its_floors():
    found = upward_edges(import_graph(local_modules(PACKAGE)))
    assert not found, "imports up a floor:\n" + "\n".join(found)


def test_no_two_modules_import_each_other():
    found = cycles(import_graph(local_modules(PACKAGE)))
    assert not found, "modules that import each other:\n" + "\n".join(found)


def test_no_recipe_imports_another():
    modules = {**local_modules(PACKAGE), **local_modules(RECIPES)}
    found = recipe_imports_of_recipes(import_graph(modules))
    assert not found, "recipes that import a recipe:\n" + "\n".join(found)


def test_the_checks_name_an_upward_edge_a_cycle_and_a_recipe_import():
    graph = {
        "keras_selfattn.generation.sequences": {"keras_selfattn.models.music_transformer"},
        "keras_selfattn.models.music_transformer": {"keras_selfattn.generation.sequences"},
        "recipes.demo": {"recipes.music", "recipes.common.harness"},
        "recipes.music": set(),
        "recipes.common.harness": set(),
    }
    package_graph = {name: targets for name, targets in graph.items() if name.startswith(PACKAGE)}
    assert upward_edges(package_graph) == [
        "keras_selfattn.generation.sequences -> keras_selfattn.models.music_transformer "
        "(a generation module imports models)"
    ]
    assert cycles(package_graph) == [
        "keras_selfattn.generation.sequences -> keras_selfattn.models.music_transformer "
        "-> keras_selfattn.generation.sequences"
    ]
    assert recipe_imports_of_recipes(graph) == ["recipes.demo -> recipes.music"]


def test_deferred_and_relative_imports_are_edges(tmp_path, monkeypatch):
    package = tmp_path / PACKAGE
    for folder in ("generation", "models"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "models" / "music.py").write_text("")
    (package / "generation" / "loops.py").write_text(
        "def generate():\n    from ..models import music\n    return music\n"
    )
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    graph = import_graph(local_modules(PACKAGE))
    assert graph["keras_selfattn.generation.loops"] == {"keras_selfattn.models.music"}
    assert len(upward_edges(graph)) == 1
