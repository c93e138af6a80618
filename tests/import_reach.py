"""Which third-party modules a piece of the repository imports, found by
reading its source (nothing is imported or run).

The unit is a module's top-level function or class, a script's
`if __name__ == "__main__":` block, or its body (the other top-level
statements, which run when the module is imported). A unit reaches what its
names refer to: another unit of its module, a definition imported from a
local module (through re-exports), or a whole local module when one is used
other than as `module.name`. Importing a local module runs its body and its
packages' bodies. An `import` anywhere in a reached unit, inside a function
too, counts as that unit's import.
"""

import ast
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Where modules are found: the repository root, and tests/ (pytest puts the
# folder of its conftest.py first). A file outside a package finds its own
# folder's modules first, as a script does.
SEARCH_PATHS = (ROOT, ROOT / "tests")
BODY = None  # the unit name of a module's body
MAIN = "<main>"  # the unit name of a script's `if __name__ == "__main__":` block


def _file_at(folder, dotted):
    path = Path(folder, *dotted.split(".")) if dotted else Path(folder)
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.lru_cache(maxsize=None)
def find_module(dotted, from_folder=None):
    """The local file of module `dotted` (a `.py` or a package's
    `__init__.py`), or None for a module from outside the repository."""
    for folder in ((from_folder,) if from_folder else ()) + SEARCH_PATHS:
        found = _file_at(folder, dotted)
        if found is not None:
            return found
    return None


class Module:
    """One parsed local file: its definitions and what its top-level names
    are bound to."""

    def __init__(self, path):
        self.path = path
        self.tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        self.definitions = {
            node.name: node
            for node in self.tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
        # A script's `if __name__ == "__main__":` block runs when it is run, not imported.
        self.definitions.update({MAIN: node for node in self.tree.body if _is_main_block(node)})
        self.body = [node for node in self.tree.body if node not in self.definitions.values()]
        self.bindings = self.import_bindings(self.body)

    def resolve_import(self, node, alias):
        """`("module", path)`, `("name", path, name)` or `("external", top-level
        module name)` for one alias of an import statement."""
        if getattr(node, "level", 0):  # relative: from the file's own package (or the level's parent)
            find = functools.partial(_file_at, self.path.parents[node.level - 1])
        else:
            script_folder = None if (self.path.parent / "__init__.py").is_file() else str(self.path.parent)
            find = functools.partial(find_module, from_folder=script_folder)
        if isinstance(node, ast.Import):
            target = find(alias.name)
            if target is None:
                return ("external", alias.name.partition(".")[0])
            if alias.asname is None and "." in alias.name:  # `import a.b` binds `a`
                return ("module", find(alias.name.partition(".")[0]) or target)
            return ("module", target)
        base = node.module or ""
        submodule = find(f"{base}.{alias.name}" if base else alias.name)
        if submodule is not None:
            return ("module", submodule)
        target = find(base)
        if target is None:
            return ("external", base.partition(".")[0])
        return ("name", target, alias.name)

    def import_bindings(self, nodes):
        """`{bound name: resolved import}` for the import statements in `nodes`
        (and nested in them)."""
        bindings = {}
        for node in _walk(nodes):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        continue
                    bound = alias.asname or alias.name.partition(".")[0]
                    bindings[bound] = self.resolve_import(node, alias)
        return bindings


def _is_main_block(node):
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        and isinstance(node.test.comparators[0], ast.Constant)
        and node.test.comparators[0].value == "__main__"
    )


def _class_on_import(node):
    """`(what a class statement runs on import, its methods' bodies)`."""
    methods = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    on_import = [*node.decorator_list, *node.bases, *node.keywords]
    on_import += [n for n in node.body if n not in methods]
    for method in methods:
        on_import += [*method.decorator_list, *method.args.defaults, *filter(None, method.args.kw_defaults)]
    return on_import, [statement for method in methods for statement in method.body]


def _walk(nodes):
    for node in nodes:
        yield from ast.walk(node)


@functools.lru_cache(maxsize=None)
def parse(path):
    return Module(Path(path))


class Reach:
    """The units reached from some starting units, and the third-party
    modules they import.

    A unit for which `stop(path, name)` is true is not entered (it is
    recorded in `stopped`), unless it runs on import: what a module body
    imports or calls is always entered.
    """

    def __init__(self, stop=lambda path, name: False):
        self.stop = stop
        self.units = set()
        self.stopped = {}  # (path, name) -> the unit that reached it
        self.external = {}  # top-level module name -> one unit that imports it
        self._from = None
        self._on_import = False  # inside a module body, or what a body calls

    def unit(self, path, name):
        key = (Path(path), name)
        if key in self.units or key in self.stopped and not self._on_import:
            return
        if not self._on_import and self.stop(*key):
            self.stopped[key] = self._from
            return
        self.stopped.pop(key, None)
        self.units.add(key)
        caller = self._from, self._on_import
        self._from, self._on_import = key, self._on_import or name is BODY
        try:
            self._enter(key)
        finally:
            self._from, self._on_import = caller

    def _enter(self, key):
        path, name = key
        module = parse(path)
        self.module_imported(path)
        if name is BODY:
            nodes = module.body
        elif name in module.definitions:
            nodes = [module.definitions[name]]
        else:  # a name assigned at module level: the body assigns it
            return
        bindings = {**module.bindings, **module.import_bindings(nodes)}
        if self._on_import and isinstance(nodes[0], ast.ClassDef):
            # A class body runs on import; its methods' bodies run when called.
            on_import, methods = _class_on_import(nodes[0])
            self._walk_nodes(module, bindings, on_import)
            caller_on_import, self._on_import = self._on_import, False
            try:
                self._walk_nodes(module, bindings, methods)
            finally:
                self._on_import = caller_on_import
            return
        self._walk_nodes(module, bindings, nodes)

    def _walk_nodes(self, module, bindings, nodes):
        qualifiers = {id(node.value) for node in _walk(nodes) if isinstance(node, ast.Attribute)}
        for node in _walk(nodes):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    self.imported(module.resolve_import(node, alias), self._from)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                self.used(module, bindings, node.value.id, node.attr)
            elif isinstance(node, ast.Name) and id(node) not in qualifiers:
                self.used(module, bindings, node.id, None)

    def module_imported(self, path):
        """Importing `path` runs its packages' bodies and its own."""
        self.unit(path, BODY)
        folder = Path(path).parent
        if Path(path).name == "__init__.py":
            folder = folder.parent
        while (folder / "__init__.py").is_file():
            self.unit(folder / "__init__.py", BODY)
            folder = folder.parent

    def imported(self, resolved, unit):
        if resolved[0] == "external":
            name = resolved[1]
            if name and name not in sys.stdlib_module_names:
                self.external.setdefault(name, unit)
        else:
            self.module_imported(resolved[1])

    def used(self, module, bindings, name, attribute):
        if name in module.definitions and name not in bindings:
            self.unit(module.path, name)
            return
        resolved = bindings.get(name)
        if resolved is None or resolved[0] == "external":
            return
        if resolved[0] == "module":
            if attribute is None:
                self.whole_module(resolved[1])
            else:
                self.name(resolved[1], attribute)
        else:
            self.name(resolved[1], resolved[2])

    def name(self, path, name, seen=()):
        """Reaches `name` as module `path` defines or re-exports it."""
        module = parse(path)
        self.module_imported(path)
        if name in module.definitions:
            self.unit(path, name)
            return
        resolved = module.bindings.get(name)
        if resolved is not None and resolved[0] != "external" and (path, name) not in seen:
            if resolved[0] == "module":
                self.whole_module(resolved[1])
            else:
                self.name(resolved[1], resolved[2], seen + ((path, name),))
            return
        submodule = path.parent / name
        for candidate in (submodule.with_suffix(".py"), submodule / "__init__.py"):
            if path.name == "__init__.py" and candidate.is_file():
                self.whole_module(candidate)
                return

    def whole_module(self, path):
        for name in [BODY, *parse(path).definitions]:
            self.unit(path, name)
