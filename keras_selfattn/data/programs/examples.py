"""VarMisuse examples: bug injection, a token vocabulary and dense arrays.

Each function gives one example. With probability one half (decided by a
hash of the function and the seed) one read of a variable `v` is replaced by
another variable `w` of the same function; the example's graph is built from
the buggy source, as a model sees it. Labels: the bug's token position, or
-1 for no bug, and the positions that hold `v` (where a repair points).
Only functions with a possible bug are kept (two or more variables, and a
read of a variable that occurs elsewhere too), so the presence of a bug is
not given away by the function's shape.

Arrays put the no-bug slot at position 0 and token i at position i + 1.
"""

import collections
import hashlib
import random
import tokenize
from dataclasses import dataclass

import numpy as np

from keras_selfattn.data.programs.graphs import EDGE_TYPE_IDS, EDGE_TYPES, function_graph, tokenize_source

PAD_ID = 0
UNK_ID = 1
NO_BUG_ID = 2  # the token at the no-bug slot, position 0
RESERVED_TOKENS = ("<pad>", "<unk>", "<no_bug>")
NO_BUG = -1
# When several edges join one pair, the dense form keeps the first of these
# (the rarer, more specific relation); `edge_type_counts` counts both.
EDGE_PRIORITY = (
    "computed_from", "computes", "last_write", "next_write", "last_use", "next_use",
    "ast_child", "ast_parent", "next_sibling", "previous_sibling", "next_token", "previous_token",
)


@dataclass
class Example:
    """One function, buggy or not: its graph, the bug position (token index,
    `NO_BUG` = -1) and the token positions holding the right variable."""

    graph: object
    bug_position: int
    repair_positions: tuple
    original_name: str = ""
    replacement_name: str = ""

    @property
    def has_bug(self):
        return self.bug_position != NO_BUG


def bug_candidates(graph):
    """`[(position, name)]`: reads of a variable that occurs at another
    position too, in a function with two or more variables."""
    if len(graph.occurrences) < 2:
        return []
    name_at = {position: name for name, positions in graph.occurrences.items() for position in positions}
    return [
        (position, name_at[position])
        for position in sorted(graph.reads)
        if len(graph.occurrences[name_at[position]]) >= 2
    ]


def make_example(source, seed=0, bug_probability=0.5):
    """The `Example` of one function source, or None when no bug is possible.

    The choices (bug or not, where, which replacement) follow a hash of the
    source and `seed`, so an example does not depend on its neighbours.

    Raises:
        ValueError: `source` is not one function that parses.
    """
    graph = function_graph(source)
    candidates = bug_candidates(graph)
    if not candidates:
        return None
    rng = random.Random(hashlib.sha256(f"{seed}\0{source}".encode("utf-8")).digest())
    if rng.random() >= bug_probability:
        return Example(graph, NO_BUG, ())
    position, name = rng.choice(candidates)
    replacement = rng.choice(sorted(set(graph.occurrences) - {name}))
    buggy = function_graph(replace_token(source, graph.tokens[position], replacement))
    repairs = tuple(p for p in graph.occurrences[name] if p != position)
    return Example(buggy, position, repairs, name, replacement)


def replace_token(source, token, text):
    """`source` with `token` (a `graphs.Token`) spelled `text` instead."""
    lines = source.splitlines(keepends=True)
    (line, start), (end_line, end) = token.start, token.end
    if line != end_line:
        raise ValueError("`token` must sit on one line")
    lines[line - 1] = lines[line - 1][:start] + text + lines[line - 1][end:]
    return "".join(lines)


def make_examples(sources, max_tokens, seed=0):
    """Examples of the functions of at most `max_tokens` tokens with a
    possible bug; returns `(examples, counts)` where counts say how many were
    kept (`with_bug` of them), too long, without a possible bug, or failed
    (a source `symtable` refuses alone, such as a nested function's
    `nonlocal`)."""
    examples = []
    counts = collections.Counter()
    for source in sources:
        try:
            if len(tokenize_source(source)) > max_tokens:  # cheaper than the graph
                counts["too_long"] += 1
                continue
            example = make_example(source, seed)
        except (ValueError, SyntaxError, RecursionError, tokenize.TokenError):
            counts["failed"] += 1
            continue
        if example is None:
            counts["no_possible_bug"] += 1
        else:
            examples.append(example)
            counts["kept"] += 1
            counts["with_bug"] += example.has_bug
    return examples, dict(counts)


def build_vocabulary(examples, size):
    """The `size` most frequent token texts (ties by text), behind the
    reserved `<pad>`, `<unk>`, `<no_bug>`.

    Raises:
        ValueError: `size` leaves no room for a token.
    """
    if size <= len(RESERVED_TOKENS):
        raise ValueError(f"`size` must be more than {len(RESERVED_TOKENS)} (the reserved tokens), got {size!r}")
    counts = collections.Counter(text for example in examples for text in example.graph.texts)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return list(RESERVED_TOKENS) + [text for text, _ in ranked[: size - len(RESERVED_TOKENS)]]


def edge_matrix(graph, length):
    """`[length, length]` int8 edge-type ids of the graph's edges, shifted by
    the no-bug slot (0 = no edge; one type per pair, by `EDGE_PRIORITY`)."""
    matrix = np.zeros((length, length), dtype="int8")
    rank = {name: index for index, name in enumerate(EDGE_PRIORITY)}
    for i, j, kind in sorted(graph.edges, key=lambda edge: -rank[edge[2]]):
        if i + 1 < length and j + 1 < length:
            matrix[i + 1, j + 1] = EDGE_TYPE_IDS[kind]
    return matrix


def encode_examples(examples, vocabulary, length):
    """Dense arrays of `examples`, each of `length` positions (the no-bug
    slot and `length - 1` tokens, padded with `PAD_ID`).

    Returns:
        a dict: `token_ids [n, length]` int32, `edges [n, length, length]`
        int8 edge-type ids, `bug_position [n]` int32 (0 = no bug),
        `repair_targets [n, length]` float32 (1 where the right variable
        stands), `has_bug [n]` int32.

    Raises:
        ValueError: an example has more than `length - 1` tokens.
    """
    index = {text: i for i, text in enumerate(vocabulary)}
    n = len(examples)
    arrays = {
        "token_ids": np.zeros((n, length), dtype="int32"),
        "edges": np.zeros((n, length, length), dtype="int8"),
        "bug_position": np.zeros(n, dtype="int32"),
        "repair_targets": np.zeros((n, length), dtype="float32"),
        "has_bug": np.zeros(n, dtype="int32"),
    }
    for row, example in enumerate(examples):
        texts = example.graph.texts
        if len(texts) > length - 1:
            raise ValueError(f"`length` must be at least {len(texts) + 1} for an example of {len(texts)} tokens")
        arrays["token_ids"][row, 0] = NO_BUG_ID
        arrays["token_ids"][row, 1 : len(texts) + 1] = [index.get(text, UNK_ID) for text in texts]
        arrays["edges"][row] = edge_matrix(example.graph, length)
        if example.has_bug:
            arrays["bug_position"][row] = example.bug_position + 1
            arrays["repair_targets"][row, [p + 1 for p in example.repair_positions]] = 1.0
            arrays["has_bug"][row] = 1
    return arrays


def edge_type_counts(examples):
    """`{type: count}` of every edge of the examples (several types on one
    pair all counted)."""
    counts = collections.Counter(kind for example in examples for _, _, kind in example.graph.edges)
    return {kind: counts.get(kind, 0) for kind in EDGE_TYPES}


def relation_ids(edges, max_distance, use_edges=True):
    """Relation ids for relational attention: a pair's edge type where it has
    one (with `use_edges`), else its clipped distance.

    Args:
        edges: `[..., length, length]` edge-type ids (0 = none), as from
            `encode_examples`.
        max_distance: distances `j - i` are clipped to `[-max_distance,
            max_distance]`.
        use_edges: False gives distance relations only.

    Returns:
        int32 ids of the same shape: `1 .. len(EDGE_TYPES)` for edges, then
        `len(EDGE_TYPES) + 1 + clip(j - i) + max_distance` for distances; id 0
        is never used; the largest is `num_relations(max_distance)`.
    """
    if max_distance < 1:
        raise ValueError(f"`max_distance` must be >= 1, got {max_distance!r}")
    edges = np.asarray(edges)
    length = edges.shape[-1]
    offsets = np.arange(length)[None, :] - np.arange(length)[:, None]
    distances = len(EDGE_TYPES) + 1 + np.clip(offsets, -max_distance, max_distance) + max_distance
    distances = np.broadcast_to(distances, edges.shape).astype("int32")
    return np.where(edges > 0, edges.astype("int32"), distances) if use_edges else distances.copy()


def num_relations(max_distance):
    """The largest id `relation_ids` gives: relations are `1 ..
    num_relations(max_distance)`, 0 meaning none (RelationalAttention's
    `num_relations`)."""
    return len(EDGE_TYPES) + 2 * max_distance + 1


def varmisuse_splits(source_dir=None, *, held_out_fraction=0.1, max_tokens=255, seed=0, max_files=0, log=print):
    """Training and held-out VarMisuse examples from a folder of `.py` files.

    Args:
        source_dir: the folder (default: the running interpreter's standard
            library, `corpus.default_source_dir()`).
        held_out_fraction: the share of files held out (whole files).
        max_tokens: longer functions are left out.
        seed: the split and the bugs follow it.
        max_files: read at most this many files of each part (evenly spread
            over the sorted list); 0 reads all.
        log: called with progress lines and the names of skipped files.

    Returns:
        `(train_examples, held_out_examples, report)`; the report counts
        files, skipped files (named), functions, duplicates and examples.

    Raises:
        ValueError: no `.py` file, or a part without any example.
    """
    from keras_selfattn.data.programs import corpus

    source_dir = corpus.default_source_dir() if source_dir is None else source_dir
    files = corpus.find_python_files(source_dir)
    train_files, held_out_files = corpus.split_files(files, held_out_fraction, seed, root=source_dir)
    if max_files:
        train_files, held_out_files = _spread(train_files, max_files), _spread(held_out_files, max_files)
    log(f"{len(files)} .py files in {source_dir}: reading {len(train_files)} training and "
        f"{len(held_out_files)} held-out files ...")
    train_sources, held_out_sources, report = corpus.collect_functions(train_files, held_out_files, log=log)
    report["source_dir"] = str(source_dir)
    parts = {}
    for name, sources in (("train", train_sources), ("held_out", held_out_sources)):
        log(f"{name}: building the graphs of {len(sources)} functions ...")
        parts[name], counts = make_examples(sources, max_tokens, seed)
        report[name]["examples"] = counts
        if not parts[name]:
            raise ValueError(f"the {name} part of {str(source_dir)!r} gives no example ({counts})")
    return parts["train"], parts["held_out"], report


def varmisuse_parts(source_dir=None, *, held_out_fraction=0.1, validation_files=None, max_tokens=255, seed=0,
                    max_files=0, log=print):
    """Training, validation and test VarMisuse examples, split by whole file.

    As `varmisuse_splits`, with the held-out files split again
    (`corpus.split_validation_files`): `validation_files` of them (by a hash
    of the path and `seed`; default half, rounded down) are the validation
    part, the others the test part. No file and no identical function is in
    two parts; validation and test functions that are training functions
    renamed are dropped.

    Returns:
        `(examples, report, files)`: `{"train" | "validation" | "test":
        examples}`, the report (counts per part, as `varmisuse_splits`), and
        `{part: [file paths]}`. The validation part may be empty (no
        validation file, or none gives an example); the others may not.

    Raises:
        ValueError: no `.py` file, a training or test part without any
            example, or `validation_files` that leaves no test file.
    """
    from keras_selfattn.data.programs import corpus

    source_dir = corpus.default_source_dir() if source_dir is None else source_dir
    files = corpus.find_python_files(source_dir)
    train_files, held_out_files = corpus.split_files(files, held_out_fraction, seed, root=source_dir)
    if max_files:
        train_files, held_out_files = _spread(train_files, max_files), _spread(held_out_files, max_files)
    validation_files, test_files = corpus.split_validation_files(held_out_files, validation_files, seed, root=source_dir)
    part_files = {"train": train_files, "validation": validation_files, "test": test_files}
    log(f"{len(files)} .py files in {source_dir}: reading {len(train_files)} training, "
        f"{len(validation_files)} validation and {len(test_files)} test files ...")
    sources, report = corpus.collect_parts(part_files, log=log)
    report["source_dir"] = str(source_dir)
    parts = {}
    for name, part in sources.items():
        log(f"{name}: building the graphs of {len(part)} functions ...")
        parts[name], counts = make_examples(part, max_tokens, seed)
        report[name]["examples"] = counts
        if not parts[name] and name != "validation":
            raise ValueError(f"the {name} part of {str(source_dir)!r} gives no example ({counts})")
    return parts, report, {name: [str(path) for path in paths] for name, paths in part_files.items()}


def _spread(items, count):
    if len(items) <= count:
        return list(items)
    return [items[i] for i in np.linspace(0, len(items) - 1, count).round().astype(int)]
