"""A Python function as tokens and typed, directed edges between them.

Nodes are the function's tokens from the standard `tokenize` module
(comments and blank-line `NL` tokens dropped; `NEWLINE`, `INDENT` and
`DEDENT` kept as `<newline>`, `<indent>`, `<dedent>`). Edges run from
token i to token j, each with one of `EDGE_TYPES`:

- `next_token` / `previous_token`: j = i + 1 / i - 1.
- `ast_child` / `ast_parent`: the syntax tree of the standard `ast` module
  projected onto tokens: a node stands at the token where it starts (its
  head), an edge joins a node's head to each child's head where the two
  differ. Nodes without a position (`arguments`, `comprehension`,
  `withitem`, contexts, ...) are see-through: their children hang from the
  nearest positioned ancestor.
- `next_sibling` / `previous_sibling`: consecutive children of one node, in
  source order.
- `last_use` / `next_use`: from an occurrence of a variable to each
  occurrence that may have read it last before (a read is a use), following
  the control flow of `if`, loops (run twice, so a loop's reads reach back
  to its own later writes), `try` and `match`; `next_use` is the reverse.
- `last_write` / `next_write`: the same for the writes that may have set
  the variable last (parameters are written on entry).
- `computed_from` / `computes`: from each variable written by an
  assignment (`=`, `+=`, `:=`, annotated) to each variable read in its
  value.

Variables are the names the function's own scope binds (locals and
parameters, from the standard `symtable` module). Not modelled: `break`,
`continue`, `return` and exceptions inside expressions cut no flow; nested
functions, lambdas and classes are opaque (their bodies run later);
names bound by a comprehension are its own, not the function's.
"""

import ast
import bisect
import io
import symtable
import tokenize
from dataclasses import dataclass, field

EDGE_TYPES = (
    "next_token",
    "previous_token",
    "ast_child",
    "ast_parent",
    "next_sibling",
    "previous_sibling",
    "last_use",
    "next_use",
    "last_write",
    "next_write",
    "computed_from",
    "computes",
)
EDGE_TYPE_IDS = {name: index + 1 for index, name in enumerate(EDGE_TYPES)}  # 0 = no edge
REVERSE_EDGE = {
    **{EDGE_TYPES[i]: EDGE_TYPES[i + 1] for i in range(0, len(EDGE_TYPES), 2)},
    **{EDGE_TYPES[i + 1]: EDGE_TYPES[i] for i in range(0, len(EDGE_TYPES), 2)},
}
_DROPPED_TOKENS = {tokenize.ENCODING, tokenize.ENDMARKER, tokenize.NL, tokenize.COMMENT}
_LAYOUT_TEXT = {tokenize.NEWLINE: "<newline>", tokenize.INDENT: "<indent>", tokenize.DEDENT: "<dedent>"}


@dataclass
class Token:
    """One token: its text, `tokenize` type, and where it starts (line from
    1, column in UTF-8 bytes, as `ast` counts) and ends (characters)."""

    text: str
    kind: int
    line: int
    byte_column: int
    start: tuple
    end: tuple


@dataclass
class ProgramGraph:
    """A function's tokens, edges `{(i, j, type_name)}` and variables.

    `occurrences` maps each variable to its token positions; `reads` holds the
    positions where a variable is read (the places a misuse bug can be).
    """

    source: str
    tokens: list
    edges: set = field(default_factory=set)
    variables: tuple = ()
    occurrences: dict = field(default_factory=dict)
    reads: list = field(default_factory=list)

    @property
    def texts(self):
        return [token.text for token in self.tokens]


def tokenize_source(source):
    """The kept tokens of `source` (see the module docstring)."""
    lines = source.splitlines(keepends=True)
    tokens = []
    for item in tokenize.generate_tokens(io.StringIO(source).readline):
        if item.type in _DROPPED_TOKENS:
            continue
        line, column = item.start
        prefix = lines[line - 1][:column] if line <= len(lines) else ""
        text = _LAYOUT_TEXT.get(item.type, item.string)
        tokens.append(Token(text, item.type, line, len(prefix.encode("utf-8")), item.start, item.end))
    return tokens


def function_graph(source):
    """The `ProgramGraph` of `source`, a module holding one function definition.

    Raises:
        ValueError: `source` does not parse, or is not exactly one function.
    """
    try:
        module = ast.parse(source)
    except SyntaxError as error:
        raise ValueError(f"`source` does not parse: {error.msg} (line {error.lineno})") from None
    if len(module.body) != 1 or not isinstance(module.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise ValueError("`source` must hold exactly one function definition")
    tokens = tokenize_source(source)
    locate = _TokenLocator(tokens)
    graph = ProgramGraph(source=source, tokens=tokens, variables=function_variables(source))
    for i in range(len(tokens) - 1):
        graph.edges.add((i, i + 1, "next_token"))
    _add_syntax_edges(module.body[0], locate, graph.edges)
    _DataFlow(graph, locate).run(module.body[0])
    graph.edges |= {(j, i, REVERSE_EDGE[kind]) for i, j, kind in graph.edges}
    return graph


def function_variables(source):
    """Sorted names that the one function in `source` binds in its own scope
    (locals and parameters, per `symtable`)."""
    table = symtable.symtable(source, "<function>", "exec")
    function = table.get_children()[0]
    return tuple(sorted(s.get_name() for s in function.get_symbols() if s.is_local() or s.is_parameter()))


class _TokenLocator:
    """Finds the token holding an `ast` position (line, byte column)."""

    def __init__(self, tokens):
        self.tokens = tokens
        self.starts = [(t.line, t.byte_column) for t in tokens]

    def __call__(self, node):
        index = bisect.bisect_right(self.starts, (node.lineno, node.col_offset)) - 1
        return max(index, 0)

    def variable_token(self, node, name):
        """The token of a `Name`/`arg` node if it spells `name` (names inside
        an f-string sit in a string token and have none)."""
        index = self(node)
        return index if self.tokens[index].text == name else None


def _positioned(node):
    return hasattr(node, "lineno") and hasattr(node, "col_offset")


def _positioned_children(node):
    """Children with a position, looking through those without one."""
    for child in ast.iter_child_nodes(node):
        if _positioned(child):
            yield child
        else:
            yield from _positioned_children(child)


def _add_syntax_edges(root, locate, edges):
    stack = [root]
    while stack:
        node = stack.pop()
        head = locate(node)
        children = sorted(_positioned_children(node), key=lambda c: (c.lineno, c.col_offset))
        heads = [locate(child) for child in children]
        for child_head in heads:
            if child_head != head:
                edges.add((head, child_head, "ast_child"))
        for left, right in zip(heads, heads[1:]):
            if left != right:
                edges.add((left, right, "next_sibling"))
        stack.extend(children)


class _State:
    """Per variable, the positions that may have read / written it last."""

    def __init__(self, reads=None, writes=None):
        self.reads = dict(reads or {})
        self.writes = dict(writes or {})

    def copy(self):
        return _State(self.reads, self.writes)

    def merged(self, *others):
        state = self.copy()
        for other in others:
            for mine, theirs in ((state.reads, other.reads), (state.writes, other.writes)):
                for name, positions in theirs.items():
                    mine[name] = mine.get(name, frozenset()) | positions
        return state


class _DataFlow:
    """Walks a function in evaluation order and adds last-use, last-write and
    computed-from edges (see the module docstring for what is modelled)."""

    def __init__(self, graph, locate):
        self.graph = graph
        self.locate = locate
        self.variables = set(graph.variables)
        self.state = _State()
        self.hidden = frozenset()  # names a comprehension binds for itself

    def run(self, function):
        arguments = function.args
        for arg in [*arguments.posonlyargs, *arguments.args, arguments.vararg, *arguments.kwonlyargs, arguments.kwarg]:
            if arg is not None:
                self.occur(arg, arg.arg, write=True)
        self.block(function.body)

    # -- occurrences

    def occur(self, node, name, write):
        if name not in self.variables or name in self.hidden:
            return None
        position = self.locate.variable_token(node, name)
        if position is None:
            return None
        for kind, earlier_positions in (("last_use", self.state.reads), ("last_write", self.state.writes)):
            for earlier in earlier_positions.get(name, ()):
                if earlier != position:  # a loop's own occurrence: the diagonal is no edge
                    self.graph.edges.add((position, earlier, kind))
        (self.state.writes if write else self.state.reads)[name] = frozenset([position])
        occurrences = self.graph.occurrences.setdefault(name, [])
        if position not in occurrences:
            occurrences.append(position)
        if not write and position not in self.graph.reads:
            self.graph.reads.append(position)
        return position

    def read_positions(self, node):
        """Positions of the variables read in expression `node` (no walk of state)."""
        found = []
        for child in ast.walk(node):
            if isinstance(child, ast.Name) and child.id in self.variables and child.id not in self.hidden:
                position = self.locate.variable_token(child, child.id)
                if position is not None:
                    found.append(position)
        return found

    def written_positions(self, target):
        return [
            self.locate.variable_token(n, n.id)
            for n in ast.walk(target)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id in self.variables
        ]

    def computed_from(self, targets, value):
        sources = self.read_positions(value) if value is not None else []
        for target in targets:
            for written in self.written_positions(target):
                for source in sources:
                    if written is not None and written != source:
                        self.graph.edges.add((written, source, "computed_from"))

    # -- statements

    def block(self, statements):
        for statement in statements:
            self.statement(statement)

    def statement(self, node):
        handler = getattr(self, f"stmt_{type(node).__name__}", None)
        if handler is not None:
            handler(node)
        else:
            self.expression(node)

    def stmt_Assign(self, node):
        self.expression(node.value)
        for target in node.targets:
            self.expression(target)
        self.computed_from(node.targets, node.value)

    def stmt_AugAssign(self, node):
        if isinstance(node.target, ast.Name):
            self.occur(node.target, node.target.id, write=False)
            self.expression(node.value)
            self.occur(node.target, node.target.id, write=True)
        else:
            self.expression(node.value)
            self.expression(node.target)
        self.computed_from([node.target], node.value)

    def stmt_AnnAssign(self, node):
        if node.value is not None:
            self.expression(node.value)
            self.expression(node.target)
            self.computed_from([node.target], node.value)

    def stmt_If(self, node):
        self.expression(node.test)
        self.branches([lambda: self.block(node.body), lambda: self.block(node.orelse)])

    def stmt_For(self, node):
        self.expression(node.iter)
        self.loop(head=lambda: None, body=lambda: (self.expression(node.target), self.block(node.body)))
        self.block(node.orelse)

    stmt_AsyncFor = stmt_For

    def stmt_While(self, node):
        self.loop(head=lambda: self.expression(node.test), body=lambda: self.block(node.body))
        self.block(node.orelse)

    def stmt_Try(self, node):
        entry = self.state.copy()
        self.block(node.body)
        after_body = self.state
        handler_exits = []
        for handler in node.handlers:
            self.state = entry.merged(after_body)
            if handler.type is not None:
                self.expression(handler.type)
            self.block(handler.body)
            handler_exits.append(self.state)
        self.state = after_body
        self.block(node.orelse)
        self.state = self.state.merged(*handler_exits)
        self.block(node.finalbody)

    stmt_TryStar = stmt_Try

    def stmt_With(self, node):
        for item in node.items:
            self.expression(item.context_expr)
            if item.optional_vars is not None:
                self.expression(item.optional_vars)
        self.block(node.body)

    stmt_AsyncWith = stmt_With

    def stmt_Match(self, node):
        self.expression(node.subject)
        cases = [lambda case=case: self.match_case(case) for case in node.cases]
        self.branches(cases + [lambda: None])

    def match_case(self, case):
        if case.guard is not None:
            self.expression(case.guard)
        self.block(case.body)

    def stmt_FunctionDef(self, node):
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.expression(default)
        for decorator in node.decorator_list:
            self.expression(decorator)

    stmt_AsyncFunctionDef = stmt_FunctionDef

    def stmt_ClassDef(self, node):
        for part in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.expression(part)

    # -- control flow

    def branches(self, paths):
        entry = self.state.copy()
        exits = []
        for path in paths:
            self.state = entry.copy()
            path()
            exits.append(self.state)
        self.state = exits[0].merged(*exits[1:])

    def loop(self, head, body):
        entry = self.state
        after_body = None
        for _ in range(2):
            self.state = entry.copy() if after_body is None else entry.merged(after_body)
            head()
            exit_state = self.state.copy()
            body()
            after_body = self.state
        self.state = exit_state

    # -- expressions

    def expression(self, node):
        if node is None:
            return
        if isinstance(node, ast.Name):
            self.occur(node, node.id, write=not isinstance(node.ctx, ast.Load))
        elif isinstance(node, ast.NamedExpr):
            self.expression(node.value)
            self.expression(node.target)
            self.computed_from([node.target], node.value)
        elif isinstance(node, ast.IfExp):
            self.expression(node.test)
            self.branches([lambda: self.expression(node.body), lambda: self.expression(node.orelse)])
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            self.comprehension(node)
        elif isinstance(node, ast.Lambda):
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                self.expression(default)
        else:
            for child in ast.iter_child_nodes(node):
                self.expression(child)

    def comprehension(self, node):
        generators = node.generators
        self.expression(generators[0].iter)  # evaluated in the function's scope
        hidden = self.hidden
        self.hidden = hidden | {
            n.id for g in generators for n in ast.walk(g.target) if isinstance(n, ast.Name)
        }
        for index, generator in enumerate(generators):
            if index:
                self.expression(generator.iter)
            for condition in generator.ifs:
                self.expression(condition)
        for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
            self.expression(part)
        self.hidden = hidden
