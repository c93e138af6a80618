"""Python functions as program graphs for the VarMisuse task (Allamanis et al.
2018; GREAT, Hellendoorn et al. 2020).

- `graphs.function_graph(source)`: a function's tokens (standard `tokenize`)
  and typed, directed edges between them: next token, syntax parent/child
  and sibling (standard `ast`, projected onto tokens), last use and last
  write of the same variable (flow through `if`, loops, `try`, `match`),
  computed-from; every type with its reverse (`EDGE_TYPES`). The module
  docstring says what each edge means and what is not modelled.
- `corpus`: the default data, offline: the running interpreter's own
  standard library; any folder of `.py` files; files that do not parse
  are skipped and named; a split by whole file; identical functions kept
  once (never in both parts), and held-out functions that are a training
  function up to names and constants (`normalised_form`) removed.
- `examples`: bug injection (in half the functions one read of a variable
  is replaced by another variable of the same function), a vocabulary, and
  dense arrays: token ids with the no-bug slot at position 0, `[nodes,
  nodes]` edge-type ids (0 = none), the bug position and the repair
  targets; `relation_ids` adds clipped distances for relational attention.

Why the standard modules: `ast`, `tokenize` and `symtable` always parse
the grammar of the interpreter that runs them. python-graphs 1.2.3 (its
last release, 2021) fails on Python 3.10+ syntax (`match`: its unparser has
no `_Match`); libcst gives a concrete tree but no scopes' data flow;
tree-sitter needs a grammar package pinned apart from the interpreter.

Outline:

    train, held_out, report = varmisuse_splits(max_tokens=255)
    vocabulary = build_vocabulary(train, 8000)
    arrays = encode_examples(train, vocabulary, length=256)
    relations = relation_ids(arrays["edges"], max_distance=8)

Example:

>>> graph = function_graph("def f(a):\\n    b = a\\n    return b\\n")
>>> graph.texts[8:11]
['b', '=', 'a']
>>> sorted(e for e in graph.edges if e[2] == "computed_from")
[(8, 10, 'computed_from')]
"""

from keras_selfattn.data.programs.corpus import (
    collect_functions,
    collect_parts,
    default_source_dir,
    find_python_files,
    normalised_form,
    read_functions,
    split_files,
    split_validation_files,
)
from keras_selfattn.data.programs.examples import (
    EDGE_PRIORITY,
    NO_BUG,
    NO_BUG_ID,
    PAD_ID,
    RESERVED_TOKENS,
    UNK_ID,
    Example,
    bug_candidates,
    build_vocabulary,
    edge_matrix,
    edge_type_counts,
    encode_examples,
    make_example,
    make_examples,
    num_relations,
    relation_ids,
    replace_token,
    varmisuse_parts,
    varmisuse_splits,
)
from keras_selfattn.data.programs.graphs import (
    EDGE_TYPE_IDS,
    EDGE_TYPES,
    REVERSE_EDGE,
    ProgramGraph,
    Token,
    function_graph,
    function_variables,
    tokenize_source,
)

__all__ = [
    "EDGE_PRIORITY",
    "EDGE_TYPES",
    "EDGE_TYPE_IDS",
    "NO_BUG",
    "NO_BUG_ID",
    "PAD_ID",
    "RESERVED_TOKENS",
    "REVERSE_EDGE",
    "UNK_ID",
    "Example",
    "ProgramGraph",
    "Token",
    "bug_candidates",
    "build_vocabulary",
    "collect_functions",
    "collect_parts",
    "default_source_dir",
    "edge_matrix",
    "edge_type_counts",
    "encode_examples",
    "find_python_files",
    "function_graph",
    "function_variables",
    "make_example",
    "make_examples",
    "normalised_form",
    "num_relations",
    "read_functions",
    "relation_ids",
    "replace_token",
    "split_files",
    "split_validation_files",
    "tokenize_source",
    "varmisuse_parts",
    "varmisuse_splits",
]
