"""keras_selfattn.data.programs: tokens, program-graph edges, bug injection,
corpus splits and dense arrays, on small hand-written functions whose edges
are worked out by hand below."""

import ast

import numpy as np
import pytest

from keras_selfattn.data import programs

IF_ELSE = """\
def f(a, b):
    if a:
        c = b
    else:
        c = a
    return c
"""

WHILE_LOOP = """\
def g(n):
    total = 0
    while n:
        total = total + n
        n = n - 1
    return total
"""


def edges_of(graph, kind):
    return {(i, j) for i, j, k in graph.edges if k == kind}


def named_edges(graph, kind):
    """Edges of one kind as ((text, k), (text, k)): the k-th occurrence of a token text."""
    seen, label = {}, {}
    for position, text in enumerate(graph.texts):
        label[position] = (text, seen.get(text, 0))
        seen[text] = seen.get(text, 0) + 1
    return {(label[i], label[j]) for i, j in edges_of(graph, kind)}


def test_tokens_drop_comments_and_blank_lines_and_name_the_layout():
    graph = programs.function_graph("def f(a):\n    b = a  # note\n\n    return b\n")
    assert graph.texts == [
        "def", "f", "(", "a", ")", ":", "<newline>", "<indent>",
        "b", "=", "a", "<newline>", "return", "b", "<newline>", "<dedent>",
    ]


def test_next_token_edges_join_neighbours_both_ways():
    graph = programs.function_graph("def f(a):\n    return a\n")
    n = len(graph.tokens)
    assert edges_of(graph, "next_token") == {(i, i + 1) for i in range(n - 1)}
    assert edges_of(graph, "previous_token") == {(i + 1, i) for i in range(n - 1)}


def test_syntax_edges_join_the_heads_of_parents_children_and_siblings():
    # def0 f1 (2 a3 )4 :5 nl6 ind7 return8 a9 +10 1:11 nl12 ded13
    graph = programs.function_graph("def f(a):\n    return a + 1\n")
    assert graph.texts[8:12] == ["return", "a", "+", "1"]
    # FunctionDef -> arg a, Return; Return -> BinOp (head `a`); BinOp -> 1
    # (its left operand `a` shares the BinOp's head, so no edge).
    assert edges_of(graph, "ast_child") == {(0, 3), (0, 8), (8, 9), (9, 11)}
    assert edges_of(graph, "ast_parent") == {(3, 0), (8, 0), (9, 8), (11, 9)}
    assert edges_of(graph, "next_sibling") == {(3, 8), (9, 11)}
    assert edges_of(graph, "previous_sibling") == {(8, 3), (11, 9)}


def test_data_flow_merges_both_branches_of_an_if():
    graph = programs.function_graph(IF_ELSE)
    assert named_edges(graph, "last_write") == {
        (("a", 1), ("a", 0)),  # `if a` reads the parameter
        (("b", 1), ("b", 0)),
        (("a", 2), ("a", 0)),
        (("c", 2), ("c", 0)),  # `return c`: either branch's write
        (("c", 2), ("c", 1)),
    }
    assert named_edges(graph, "last_use") == {(("a", 2), ("a", 1))}
    assert named_edges(graph, "computed_from") == {(("c", 0), ("b", 1)), (("c", 1), ("a", 2))}
    assert named_edges(graph, "next_write") == {(j, i) for i, j in named_edges(graph, "last_write")}
    assert named_edges(graph, "computes") == {(j, i) for i, j in named_edges(graph, "computed_from")}


def test_data_flow_of_a_loop_reaches_back_to_its_own_writes():
    graph = programs.function_graph(WHILE_LOOP)
    # n: 0 parameter, 1 `while n`, 2 `+ n`, 3 `n =`, 4 `n - 1`;
    # total: 0 `total = 0`, 1 `total =`, 2 `total +`, 3 `return total`.
    assert named_edges(graph, "last_write") == {
        (("n", 1), ("n", 0)), (("n", 1), ("n", 3)),
        (("n", 2), ("n", 0)), (("n", 2), ("n", 3)),
        (("n", 3), ("n", 0)),
        (("n", 4), ("n", 0)), (("n", 4), ("n", 3)),  # `n - 1` is read before `n =` writes
        (("total", 2), ("total", 0)), (("total", 2), ("total", 1)),
        (("total", 1), ("total", 0)),
        (("total", 3), ("total", 0)), (("total", 3), ("total", 1)),
    }
    assert named_edges(graph, "last_use") == {
        (("n", 1), ("n", 4)),  # the test after an iteration
        (("n", 2), ("n", 1)),
        (("n", 3), ("n", 4)),
        (("n", 4), ("n", 2)),
        (("total", 1), ("total", 2)),
        (("total", 3), ("total", 2)),
    }
    assert named_edges(graph, "computed_from") == {
        (("total", 1), ("total", 2)), (("total", 1), ("n", 2)), (("n", 3), ("n", 4)),
    }


def test_comprehension_names_and_f_strings_are_not_the_functions_variables():
    graph = programs.function_graph("def h(xs):\n    y = [x for x in xs]\n    return f'{y}', y\n")
    assert graph.variables == ("xs", "y")
    assert set(graph.occurrences) == {"xs", "y"}
    assert named_edges(graph, "last_write") == {(("xs", 1), ("xs", 0)), (("y", 1), ("y", 0))}
    assert named_edges(graph, "computed_from") == {(("y", 0), ("xs", 1))}


def test_function_graph_refuses_what_is_not_one_function():
    with pytest.raises(ValueError, match="`source` does not parse"):
        programs.function_graph("def f(:\n")
    with pytest.raises(ValueError, match="exactly one function"):
        programs.function_graph("x = 1\n")


# ----------------------------------------------------------- bugs


def test_a_bug_replaces_one_read_by_another_variable_and_labels_the_repairs():
    buggy = [programs.make_example(IF_ELSE, seed) for seed in range(40)]
    with_bug = [e for e in buggy if e.has_bug]
    assert 8 <= len(with_bug) <= 32
    original = programs.function_graph(IF_ELSE)
    for example in with_bug:
        position = example.bug_position
        texts = example.graph.texts
        assert original.texts[position] == example.original_name
        assert texts[position] == example.replacement_name != example.original_name
        assert example.replacement_name in original.variables
        assert position in original.reads
        differences = [i for i, (x, y) in enumerate(zip(original.texts, texts)) if x != y]
        assert differences == [position]
        assert example.repair_positions
        assert all(texts[p] == example.original_name for p in example.repair_positions)
        assert sorted(example.repair_positions + (position,)) == original.occurrences[example.original_name]
        ast.parse(example.graph.source)


def test_half_the_functions_get_a_bug():
    sources = [f"def f{i}(a, b):\n    return a + b + {i}\n" for i in range(400)]
    examples, counts = programs.make_examples(sources, max_tokens=100)
    assert counts["kept"] == 400
    assert 160 <= counts["with_bug"] <= 240
    assert counts["with_bug"] == sum(e.has_bug for e in examples)


def test_functions_without_a_possible_bug_are_left_out_and_counted():
    sources = [
        "def one_variable(a):\n    return a + a\n",  # one variable: nothing to swap in
        "def unread(a, b):\n    c = 1\n    return 2\n",  # no read at all
        "def params(a, b):\n    return a + b\n",  # 16 tokens; each read's variable occurs twice
        "def local(a, b):\n    c = 1\n    return c\n",  # 18 tokens; `c` is read and written
        "def long(a, b):\n    return a + b + a + b + a + b + a\n",  # 25 tokens
        "def inner(a):\n    nonlocal b\n    b = a\n",  # symtable refuses it alone
    ]
    examples, counts = programs.make_examples(sources, max_tokens=20)
    assert counts == {
        "no_possible_bug": 2, "kept": 2, "with_bug": sum(e.has_bug for e in examples), "too_long": 1, "failed": 1
    }


# --------------------------------------------------------- corpus


@pytest.fixture
def source_folder(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "shapes.py").write_text(
        "class Square:\n"
        "    def area(self, side):\n"
        "        result = side * side\n"
        "        return result\n"
        "\n"
        "@staticmethod\n"
        "def double(a, b):\n"
        "    return a + a + b\n"
    )
    (tmp_path / "copy.py").write_text("def double(a, b):\n    return a + a + b\n")
    (tmp_path / "broken.py").write_text("def broken(:\n    return\n")
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "site-packages" / "third_party.py").write_text("def x(a):\n    return a\n")
    return tmp_path


def test_functions_are_read_standalone_without_decorators(source_folder):
    functions = programs.read_functions(source_folder / "pkg" / "shapes.py")
    assert functions == [
        "def area(self, side):\n    result = side * side\n    return result\n",
        "def double(a, b):\n    return a + a + b\n",
    ]


def test_broken_files_are_skipped_and_named_and_duplicates_kept_once(source_folder):
    files = programs.find_python_files(source_folder)
    assert [p.relative_to(source_folder).as_posix() for p in files] == ["broken.py", "copy.py", "pkg/shapes.py"]
    logged = []
    train, held_out, report = programs.collect_functions(files[2:], files[:2], log=logged.append)
    assert len(train) == 2 and held_out == []  # copy.py's function is shapes.py's `double`
    assert report["held_out"] == {"files": 2, "functions": 0, "duplicates": 1, "near_duplicates": 0}
    assert [path for path, _ in report["skipped_files"]] == [str(source_folder / "broken.py")]
    assert any("broken.py" in line for line in logged)


def test_normalised_form_renames_identifiers_in_order_and_replaces_literals():
    source = (
        "def area(self, side):\n"
        "    label = f'{side} cm'  # a comment\n"
        "\n"
        "    return self.scale * side ** 2, label, 'cm', None\n"
    )
    assert programs.normalised_form(source) == (
        "def", "v0", "(", "v1", ",", "v2", ")", ":", "NEWLINE", "INDENT",
        "v3", "=", "<str>", "NEWLINE",
        "return", "v1", ".", "v4", "*", "v2", "**", "<num>", ",", "v3", ",", "<str>", ",", "None", "NEWLINE",
        "DEDENT",
    )


TRAINING_FUNCTION = "def area(self, side):\n    result = self.scale * side\n    return result + 1\n"
HELD_OUT_FUNCTIONS = {
    "identical": TRAINING_FUNCTION,
    "renamed": "def size(this, length):\n    out = this.factor * length\n    return out + 1\n",
    "other constants": "def area(self, side):\n    result = self.scale * side  # cm\n    return result + 2.5\n",
    "two names made one": "def area(self, side):\n    result = self.scale * self\n    return result + 1\n",
    "parameters swapped": "def area(side, self):\n    result = self.scale * side\n    return result + 1\n",
    "another operator": "def area(self, side):\n    result = self.scale - side\n    return result + 1\n",
}


def test_held_out_near_duplicates_of_training_functions_are_removed(tmp_path):
    (tmp_path / "train.py").write_text(TRAINING_FUNCTION)
    (tmp_path / "held_out.py").write_text("\n\n".join(HELD_OUT_FUNCTIONS.values()))
    logged = []
    train, held_out, report = programs.collect_functions(
        [tmp_path / "train.py"], [tmp_path / "held_out.py"], log=logged.append
    )
    assert train == [TRAINING_FUNCTION]
    kept = ("two names made one", "parameters swapped", "another operator")
    assert held_out == [HELD_OUT_FUNCTIONS[name] for name in kept]
    assert report["held_out"] == {"files": 1, "functions": 3, "duplicates": 1, "near_duplicates": 2}
    assert any(line.startswith("removed 2 of 5 held-out functions") for line in logged)


def test_split_by_whole_file_is_disjoint_deterministic_and_near_the_fraction():
    files = [f"lib/module_{i}.py" for i in range(1000)]
    train, held_out = programs.split_files(files, 0.2, seed=3)
    assert sorted(train + held_out) == sorted(files) and not set(train) & set(held_out)
    assert 150 <= len(held_out) <= 250
    assert set(held_out) == set(programs.split_files(list(reversed(files)), 0.2, seed=3)[1])
    assert programs.split_files(files, 0.2, seed=3) == (train, held_out)
    assert programs.split_files(files, 0.2, seed=4) != (train, held_out)
    assert programs.split_files(files[:2], 0.01)[1]  # at least one held-out file
    moved = programs.split_files(["/a/" + f for f in files], 0.2, seed=3, root="/a")
    assert moved == (["/a/" + f for f in train], ["/a/" + f for f in held_out])
    with pytest.raises(ValueError, match="held_out_fraction"):
        programs.split_files(files, 1.5)


def test_find_python_files_refuses_a_folder_without_python(tmp_path):
    with pytest.raises(ValueError, match="source_dir"):
        programs.find_python_files(tmp_path / "missing")
    with pytest.raises(ValueError, match="holds no .py file"):
        programs.find_python_files(tmp_path)


def test_varmisuse_splits_on_a_folder_with_a_broken_file(source_folder):
    for index, operator in enumerate("+-*/%&"):  # six functions, none another renamed
        (source_folder / f"extra_{index}.py").write_text(
            f"def extra_{index}(first, second):\n    total = first {operator} second\n    return total * first\n"
        )
    logged = []
    train, held_out, report = programs.varmisuse_splits(
        source_folder, held_out_fraction=0.3, max_tokens=60, log=logged.append
    )
    assert train and held_out
    assert report["skipped_files"][0][0].endswith("broken.py")
    assert any("broken.py" in line for line in logged)
    train_sources = {e.graph.source for e in train}
    assert not train_sources & {e.graph.source for e in held_out}


# ----------------------------------------------------------- arrays


def test_encoded_arrays_shift_by_the_no_bug_slot_and_keep_the_specific_edge():
    graph = programs.function_graph(IF_ELSE)
    clean = programs.Example(graph, programs.NO_BUG, ())
    bug = programs.Example(graph, 17, (5,), "b", "a")  # as if `c = b` were a bug at `b`
    vocabulary = programs.build_vocabulary([clean], size=10)
    assert vocabulary[:3] == ["<pad>", "<unk>", "<no_bug>"]
    assert vocabulary[3] == "<newline>"  # the most frequent token (6 times)
    arrays = programs.encode_examples([clean, bug], vocabulary, length=40)
    n = len(graph.tokens)
    assert arrays["token_ids"].shape == (2, 40)
    assert arrays["token_ids"][0, 0] == programs.NO_BUG_ID
    assert (arrays["token_ids"][0, n + 1:] == programs.PAD_ID).all()
    assert arrays["token_ids"][0, 1] == vocabulary.index("def") if "def" in vocabulary else programs.UNK_ID
    assert list(arrays["bug_position"]) == [0, 18] and list(arrays["has_bug"]) == [0, 1]
    assert np.flatnonzero(arrays["repair_targets"][1]).tolist() == [6]
    assert not arrays["repair_targets"][0].any()
    edges = arrays["edges"][0]
    # `c = b`: tokens 15 -> 17 are parent/child, siblings and computed-from.
    assert {"ast_child", "next_sibling", "computed_from"} <= {k for i, j, k in graph.edges if (i, j) == (15, 17)}
    assert edges[16, 18] == programs.EDGE_TYPE_IDS["computed_from"]
    assert edges[1, 2] == programs.EDGE_TYPE_IDS["next_token"]
    assert (edges[0] == 0).all() and (edges[:, 0] == 0).all()
    assert np.count_nonzero(edges) == len({(i, j) for i, j, _ in graph.edges})
    with pytest.raises(ValueError, match="`length` must be at least"):
        programs.encode_examples([clean], vocabulary, length=10)


def test_relation_ids_are_edges_else_clipped_distances():
    edges = np.zeros((4, 4), dtype="int8")
    edges[0, 3] = 5
    base = len(programs.EDGE_TYPES) + 1 + 2  # distance 0 with max_distance 2
    expected_distances = base + np.array(
        [[0, 1, 2, 2], [-1, 0, 1, 2], [-2, -1, 0, 1], [-2, -2, -1, 0]]
    )
    np.testing.assert_array_equal(programs.relation_ids(edges, 2, use_edges=False), expected_distances)
    with_edges = expected_distances.copy()
    with_edges[0, 3] = 5
    np.testing.assert_array_equal(programs.relation_ids(edges, 2), with_edges)
    assert programs.relation_ids(np.zeros((6, 6)), 2, use_edges=False).max() == programs.num_relations(2)
    with pytest.raises(ValueError, match="max_distance"):
        programs.relation_ids(edges, 0)


def test_edge_type_counts_count_every_type():
    graph = programs.function_graph(IF_ELSE)
    counts = programs.edge_type_counts([programs.Example(graph, programs.NO_BUG, ())] * 2)
    assert counts["computed_from"] == 4 and counts["computes"] == 4
    assert counts["next_token"] == 2 * (len(graph.tokens) - 1)
    assert list(counts) == list(programs.EDGE_TYPES)


def test_default_corpus_is_this_interpreters_standard_library():
    assert (programs.default_source_dir() / "ast.py").is_file()
    train, held_out, report = programs.varmisuse_splits(max_files=6, max_tokens=120, log=lambda line: None)
    assert report["train"]["files"] == 6 and report["held_out"]["files"] == 6
    assert len(train) > 20 and held_out
    assert all(len(e.graph.tokens) <= 120 for e in train + held_out)
