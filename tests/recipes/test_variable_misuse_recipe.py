"""recipes/variable_misuse.py end to end on folders of Python files made
here: every output, train, validation and test apart by whole file (fit
validates on the validation functions), the test accuracies (overall and
without `self` swaps) against the saved model's own pointers scored in numpy, the majority
baselines against counts of the examples, a three-file folder on the
default data and batch flags (a single held-out file: the test, no
validation; a test part without a bug: null figures), `--evaluate_only` and the rerun command a failed evaluation
prints, the serving export against the saved model, the model against the
recipe's earlier inline encoder, and the flags' checks."""

import argparse
import contextlib
import io
import json
import shlex
import shutil
from pathlib import Path

import keras
import numpy as np
import pytest

import recipe_checks
from keras_selfattn.data import programs
from keras_selfattn.models import VARIABLE_MISUSE_PRESETS, VariableMisuseModel
from recipes import variable_misuse
from recipes.common import harness
from recipes.common.run import Run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.backends("tensorflow", reason="tf.data pipeline and tf.distribute"),
]

SHORT_RUN_VALIDATION_DATA = []  # what `fit` validated on in the short run
MAX_TOKENS = 55
TINY_MODEL = ["--num_layers", "1", "--hidden_dim", "16", "--num_heads", "2", "--feedforward_dim", "16"]
TINY = [
    "--max_tokens", str(MAX_TOKENS), "--held_out_fraction", "0.3", "--epochs", "2",
    "--steps_per_epoch", "3", "--batch_size", "8", *TINY_MODEL, "--max_distance", "4", "--verbose", "0",
    "--seed", "1",
]
# Every function a different statement pair and roles of its variables, so
# no held-out function is a training one renamed; odd ones are methods.
STATEMENTS = (
    "{x} = {y} + {z}",
    "{x} = max({y}, {z}) - 1",
    "{x} = [{y}, {z}, {x}]",
    "if {y} > {z}: {x} = {y}",
    "for {x} in range({y}): {z} = {z} * 2",
    "{x} = {y} if {z} else {x}",
)
ROLES = (("total", "first", "second"), ("first", "second", "total"), ("second", "total", "first"))


def distinct_function(index):
    x, y, z = ROLES[index // 36 % 3]
    body = "".join(f"    {STATEMENTS[k].format(x=x, y=y, z=z)}\n" for k in (index % 6, index // 6 % 6))
    if index % 2:
        return f"def method_{index}(self, first, second):\n    total = self.start + first\n{body}    return total\n"
    return f"def function_{index}(first, second):\n    total = first\n{body}    return total\n"


@pytest.fixture(scope="module")
def source_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sources")
    for index in range(16):
        functions = [distinct_function(3 * index + k) for k in range(3)]
        (folder / f"module_{index:02d}.py").write_text("\n\n".join(functions))
    (folder / "broken.py").write_text("def broken(:\n    return 1\n")
    return folder


def _main(argv):
    return recipe_checks.run_recipe(variable_misuse.main, argv)


@pytest.fixture(scope="module")
def short_run(source_dir, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("run")
    export_dir = model_dir / "exports"
    fit = Run.fit

    def recording_fit(self, model, train_data, *, validation_data=None, callbacks=()):
        SHORT_RUN_VALIDATION_DATA.append(validation_data)
        return fit(self, model, train_data, validation_data=validation_data, callbacks=callbacks)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Run, "fit", recording_fit)
        report, printed = _main(
            ["--model_dir", str(model_dir), "--source_dir", str(source_dir), "--export_dir", str(export_dir), *TINY]
        )
    return model_dir, report, printed


def _splits(source_dir):
    """`(train, test, (parts, report, files))` as the short run splits them."""
    parts, report, files = programs.varmisuse_parts(
        source_dir, held_out_fraction=0.3, max_tokens=MAX_TOKENS, seed=1, log=lambda line: None
    )
    return parts["train"], parts["test"], (parts, report, files)


def test_validation_and_test_are_apart_by_file_and_fit_validates_on_validation(short_run, source_dir):
    model_dir, _, _ = short_run
    train, test, (parts, _, files) = _splits(source_dir)
    saved = json.loads((model_dir / "report.json").read_text())
    facts = saved["splits"]
    assert (facts["train"], facts["validation"], facts["test"]) == (len(train), len(parts["validation"]), len(test))
    assert facts["validation"] > 0 and facts["test"] > 0 and facts["overlap_validation_test"] == 0
    assert facts["files"] == {part: len(paths) for part, paths in files.items()} and facts["files"]["validation"] >= 1
    assert "whole .py files" in facts["how"]
    # The identities are the real files: no file in two parts, and every function
    # of a validation file is read from that file alone.
    identities = json.loads((model_dir / "splits.json").read_text())
    assert identities["validation"] == files["validation"] and identities["test"] == files["test"]
    assert not set(identities["validation"]) & set(identities["test"])
    assert not set(files["train"]) & (set(identities["validation"]) | set(identities["test"]))
    validation_sources = "".join(Path(path).read_text() for path in identities["validation"])
    test_sources = "".join(Path(path).read_text() for path in identities["test"])
    for example in parts["validation"]:
        name = example.graph.texts[1]  # def NAME(...)
        assert f"def {name}(" in validation_sources and f"def {name}(" not in test_sources
    # fit validated on exactly the validation functions.
    [(inputs, targets)] = SHORT_RUN_VALIDATION_DATA
    expected = programs.encode_examples(parts["validation"], programs.build_vocabulary(train, 8000), MAX_TOKENS + 1)
    np.testing.assert_array_equal(inputs["token_ids"], expected["token_ids"])
    np.testing.assert_array_equal(targets["bug"], expected["bug_position"])
    assert saved["validation"]["functions"] == len(parts["validation"]) and len(saved["training"]["val_loss"]) == 2
    assert set(saved["validation"]["accuracy"]) == {"classification", "localisation", "repair", "localisation_and_repair"}


def test_split_validation_files_is_by_hash_and_leaves_test_files():
    files = [f"/src/module_{index}.py" for index in range(7)]
    validation, test = programs.split_validation_files(files, None, seed=1, root="/src")
    assert len(validation) == 3 and len(test) == 4 and sorted(validation + test) == sorted(files)
    assert programs.split_validation_files(files, None, seed=1, root="/src") == (validation, test)
    assert programs.split_validation_files(["/src/one.py"], None, seed=1) == ([], ["/src/one.py"])
    with pytest.raises(ValueError, match="`validation_files` 7 must leave test files"):
        programs.split_validation_files(files, 7, seed=1)


def test_the_run_names_the_broken_file_and_writes_every_output(short_run, source_dir):
    model_dir, report, printed = short_run
    assert f"skipped {source_dir / 'broken.py'}: it does not parse" in printed
    assert report["data"]["skipped_files"][0][0] == str(source_dir / "broken.py")
    assert report["data"]["skipped_file_count"] == 1
    written = printed.split("written:")[1]
    for name in (
        "variable_misuse.keras", "variable_misuse_history.json", "attention.png", "report.json", "latest.keras",
        "exports/variable_misuse/1",
    ):
        assert name in written
    saved = json.loads((model_dir / "report.json").read_text())
    assert saved["test"] == report["test"] and saved["splits"] == report["splits"]
    assert saved["model"]["class"] == "VariableMisuseModel" and saved["model"]["preset"] == "small"
    assert saved["model"]["parameters"] == keras.models.load_model(model_dir / "variable_misuse.keras").count_params()
    assert saved["training"] == json.loads((model_dir / "variable_misuse_history.json").read_text())
    assert len(saved["training"]["loss"]) == 2
    assert (model_dir / "attention.png").stat().st_size > 10_000
    assert report["data"]["edge_types_train"]["computed_from"] > 0
    assert printed.index("saved ") < printed.index("evaluating on")  # the model is safe before evaluation


def test_held_out_functions_are_not_training_functions_renamed(short_run):
    _, report, printed = short_run
    for part in ("validation", "test"):
        held_out = report["data"][part]
        assert held_out["near_duplicates"] == 0 and held_out["examples"]["kept"] >= 3
        assert f"removed 0 of {held_out['functions']} {part} functions" in printed
    assert report["data"]["validation"]["examples"]["kept"] + report["data"]["test"]["examples"]["kept"] >= 10


def _scores(examples, bug_guess, repair_guess):
    """Accuracies of the guesses (positions with the no-bug slot at 0),
    counted example by example."""
    buggy = [i for i, example in enumerate(examples) if example.has_bug]
    located = np.array([bug_guess[i] == examples[i].bug_position + 1 for i in buggy])
    repaired = np.array([repair_guess[i] - 1 in examples[i].repair_positions for i in buggy])
    return {
        "classification": np.mean([(bug_guess[i] != 0) == e.has_bug for i, e in enumerate(examples)]),
        "localisation": located.mean(),
        "repair": repaired.mean(),
        "localisation_and_repair": (located & repaired).mean(),
    }


def _majority_baseline(train, held_out):
    """The baselines from the examples: the more frequent training class, and
    the most frequent training bug and repair positions (np.unique sorts:
    argmax takes the first of the most frequent)."""
    buggy = [example for example in train if example.has_bug]
    positions, counts = np.unique([e.bug_position + 1 for e in buggy], return_counts=True)
    repairs, repair_counts = np.unique([p + 1 for e in buggy for p in e.repair_positions], return_counts=True)
    majority_is_bug = np.mean([example.has_bug for example in train]) > 0.5
    count = len(held_out)
    scores = _scores(
        held_out, np.full(count, positions[counts.argmax()]), np.full(count, repairs[repair_counts.argmax()])
    )
    scores["classification"] = np.mean([example.has_bug == majority_is_bug for example in held_out])
    return scores


def _is_self_swap(example):
    return example.has_bug and "self" in (example.original_name, example.replacement_name)


def test_test_accuracies_are_the_saved_models_pointers_scored_here(short_run, source_dir):
    model_dir, report, _ = short_run
    train, held_out, _ = _splits(source_dir)
    swaps = [_is_self_swap(example) for example in held_out]
    assert 0 < sum(swaps) < sum(example.has_bug for example in held_out)  # both kinds of bug in the test
    assert report["data"]["test_self_swaps"] == sum(swaps)
    vocabulary = programs.build_vocabulary(train, 8000)
    arrays = programs.encode_examples(held_out, vocabulary, MAX_TOKENS + 1)
    model = keras.models.load_model(model_dir / "variable_misuse.keras")
    outputs = model.predict(
        {"token_ids": arrays["token_ids"], "relations": programs.relation_ids(arrays["edges"], 4)}, verbose=0
    )
    bug_guess, repair_guess = outputs["bug"].argmax(-1), outputs["repair"].argmax(-1)
    keep = ~np.array(swaps)
    without = [example for example, swap in zip(held_out, swaps) if not swap]
    expected = {
        "accuracy": _scores(held_out, bug_guess, repair_guess),
        "accuracy_without_self_swaps": _scores(without, bug_guess[keep], repair_guess[keep]),
        "majority_baseline": _majority_baseline(train, held_out),
        "majority_baseline_without_self_swaps": _majority_baseline(train, without),
    }
    for section, scores in expected.items():
        assert report["test"][section] == pytest.approx(scores), section
    assert 0 < report["test"]["majority_baseline"]["repair"] < 1


def test_majority_baselines_are_the_training_sets_most_frequent_answers():
    """Hand-made arrays with a tie in the repair position and a majority of
    functions without a bug: the positions still score the buggy ones."""
    train = {
        "has_bug": np.array([1, 1, 1, 0, 0, 0, 0]),
        "bug_position": np.array([3, 5, 3, 0, 0, 0, 0]),
        "repair_targets": np.array([[0, 1, 0, 0, 0, 0]] * 2 + [[0, 0, 1, 0, 0, 0]] * 2 + [[0] * 6] * 3),
    }
    held_out = {
        "has_bug": np.array([1, 1, 0]),
        "bug_position": np.array([3, 4, 0]),
        "repair_targets": np.array([[0, 1, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0], [0] * 6]),
    }
    # No bug for all: 1 of 3 right; position 3 locates 1 of 2 bugs; repair
    # position 1 (the first of the tie with 2) repairs 1 of 2, the same one.
    assert variable_misuse.majority_baseline(train, held_out) == pytest.approx(
        {"classification": 1 / 3, "localisation": 0.5, "repair": 0.5, "localisation_and_repair": 0.5}
    )


def test_figures_without_anything_to_count_are_none():
    no_bug = {
        "has_bug": np.array([0, 0]), "bug_position": np.array([0, 0]), "repair_targets": np.zeros((2, 4)),
    }
    # Training without a bug: no position to learn, where it used to raise IndexError.
    assert variable_misuse.majority_baseline(no_bug, no_bug) == {
        "classification": 1.0, "localisation": None, "repair": None, "localisation_and_repair": None
    }
    empty = variable_misuse.rows_of(no_bug, np.zeros(2, dtype=bool))
    assert variable_misuse.accuracies(empty, np.zeros(0, int), np.zeros(0, int)) == dict.fromkeys(
        ("classification", "localisation", "repair", "localisation_and_repair")
    )


def test_batches_larger_than_the_data_repeat_each_function_as_often():
    batches = variable_misuse.training_rows(count=3, batch_size=8, seed=0)
    drawn = np.concatenate([next(batches) for _ in range(3)])  # 24 rows: 8 whole passes over 3
    assert np.bincount(drawn).tolist() == [8, 8, 8]
    first = next(variable_misuse.training_rows(count=10, batch_size=4, seed=0))
    assert len(set(first)) == 4  # a batch within one pass holds each row once
    with pytest.raises(ValueError, match="`count` must be at least 1"):
        variable_misuse.training_rows(0, 8, 0)


# A folder as small as a user's first try: six functions in three files, one
# held out (text.py) whose only example has no bug.
SMALL_FOLDER = {
    "geometry.py": "def area(width, height):\n    result = width * height\n    return result\n\n\n"
    "def perimeter(width, height):\n    total = width + height\n    return total * 2\n",
    "text.py": "def shout(message):\n    return message.upper() + '!'\n\n\n"
    "def join_all(parts, separator):\n    text = separator.join(parts)\n    return text.strip() + '.'\n",
    "numbers.py": "def clamp(value, low, high):\n    if value < low:\n        value = low\n"
    "    return min(value, high)\n\n\ndef mean(values, start):\n    total = start\n"
    "    for value in values:\n        total = total + value\n    return total / len(values)\n",
}


@pytest.fixture(scope="module")
def small_folder_run(tmp_path_factory):
    """The recipe's default data, batch and evaluation flags (a batch of 32,
    512 validation functions, 127 tokens) on six functions; a tiny model and
    two steps keep it fast."""
    folder = tmp_path_factory.mktemp("small")
    for name, text in SMALL_FOLDER.items():
        (folder / name).write_text(text)
    model_dir = tmp_path_factory.mktemp("small_run")
    report, printed = _main(
        ["--model_dir", str(model_dir), "--source_dir", str(folder), "--epochs", "1", "--steps_per_epoch", "2",
         "--verbose", "0", "--preset", "tiny"]
    )
    return model_dir, report, printed


def test_a_three_file_folder_trains_on_the_default_flags_and_says_what_it_chose(small_folder_run):
    model_dir, report, printed = small_folder_run
    config = report["model"]["config"]
    assert report["model"]["preset"] == "tiny"
    assert {name: config[name] for name in VARIABLE_MISUSE_PRESETS["tiny"]} == VARIABLE_MISUSE_PRESETS["tiny"]
    assert report["data"]["train"]["files"] == 2 and report["data"]["test"]["files"] == 1
    assert report["data"]["validation"]["files"] == 0
    assert "training 1 epochs x 2 steps of 32 functions (more than the 4 training functions" in printed
    # One held-out file: it is the test file, and training runs without validation, said so.
    facts = report["splits"]
    assert (facts["train"], facts["validation"], facts["test"], facts["overlap_validation_test"]) == (4, 0, 1, 0)
    assert "too few to split again" in facts["how"] and facts["how"] in printed
    assert "no validation function: training runs without validation" in printed
    assert "val_loss" not in report["training"] and report["validation"] == {"functions": 0, "accuracy": None}
    assert json.loads((model_dir / "report.json").read_text())["data"] == report["data"]


def test_a_test_part_without_a_bug_writes_null_figures(small_folder_run):
    model_dir, report, printed = small_folder_run
    saved = json.loads((model_dir / "report.json").read_text())
    assert report["data"]["test"]["examples"] == {"kept": 1, "with_bug": 0, "no_possible_bug": 1}
    for section in ("accuracy", "majority_baseline", "accuracy_without_self_swaps"):
        assert saved["test"][section]["classification"] in (0.0, 1.0)
        assert saved["test"][section]["localisation"] is None
        assert saved["test"][section]["repair"] is None and saved["test"][section]["localisation_and_repair"] is None
    assert "test localisation accuracy: n/a (majority baseline n/a)" in printed
    assert saved["attention_figure"] is None


@pytest.fixture(scope="module")
def failed_evaluation(short_run, source_dir, tmp_path_factory):
    """`(argv, command)`: a copy of the short run whose evaluation fails
    after "training" (the saved model and history stand in for it), and the
    command that failure printed."""
    model_dir = tmp_path_factory.mktemp("rerun") / "run"
    shutil.copytree(short_run[0], model_dir)
    argv = ["--model_dir", str(model_dir), "--source_dir", str(source_dir), *TINY]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(variable_misuse, "train", _saved)
        patch.setattr(variable_misuse, "predict_pointers", _fail)
        printed = io.StringIO()
        with pytest.raises(RuntimeError, match="no memory left"), contextlib.redirect_stderr(printed):
            _main(argv)
    command = printed.getvalue().split("Evaluate it again without training with:\n")[1].splitlines()[0].strip()
    return argv, command


@pytest.fixture(scope="module")
def rerun(failed_evaluation):
    """`(argv, report, printed)` of the printed command, run."""
    argv, command = failed_evaluation
    return argv, *_main(shlex.split(command)[2:])


def _saved(args, run, *rest):
    return run.load_saved_model("variable_misuse"), run.saved_history("variable_misuse")


def _fail(*args):
    raise RuntimeError("no memory left")


def test_a_failed_evaluation_prints_the_command_that_reruns_it(failed_evaluation):
    argv, command = failed_evaluation
    python, script, *arguments = shlex.split(command)
    assert (python, Path(script).resolve()) == ("python", Path(variable_misuse.__file__).resolve())
    assert arguments == [*argv, "--evaluate_only"]


def test_evaluate_only_reproduces_the_figures_from_the_saved_model(rerun, short_run):
    argv, report, printed = rerun
    _, trained, _ = short_run
    assert f"--evaluate_only: loading {Path(argv[1]) / 'variable_misuse.keras'}" in printed
    assert "training done" not in printed
    for section in ("test", "validation", "splits", "training"):
        assert report[section] == trained[section], section
    assert report["model"]["parameters"] == trained["model"]["parameters"]


def test_edges_none_gives_the_model_distances_only(source_dir):
    train, _, _ = _splits(source_dir)
    arrays = programs.encode_examples(train[:3], programs.build_vocabulary(train, 100), MAX_TOKENS + 1)
    rows = np.arange(3)
    args = variable_misuse.parse_args(["--model_dir", "unused", "--max_distance", "4", "--edges", "none"])
    without = variable_misuse.batch_inputs(programs, arrays, rows, args)["relations"]
    args.edges = "all"
    with_edges = variable_misuse.batch_inputs(programs, arrays, rows, args)["relations"]
    assert without.min() > len(programs.EDGE_TYPES)
    assert (with_edges <= len(programs.EDGE_TYPES)).sum() == np.count_nonzero(arrays["edges"])
    assert (with_edges[arrays["edges"] == 0] == without[arrays["edges"] == 0]).all()


def test_bad_flags_are_usage_errors(tmp_path):
    with pytest.raises(harness.UsageError, match="--hidden_dim"):
        variable_misuse.parse_args(["--model_dir", str(tmp_path), "--hidden_dim", "10", "--num_heads", "4"])
    # The preset's width (tiny: 16) against the flag's heads.
    with pytest.raises(harness.UsageError, match=r"--hidden_dim \(16\) must be a multiple of --num_heads \(3\)"):
        variable_misuse.parse_args(["--model_dir", str(tmp_path), "--preset", "tiny", "--num_heads", "3"])
    with pytest.raises(harness.UsageError, match="--source_dir: .*holds no .py file"):
        _main(["--model_dir", str(tmp_path / "run"), "--source_dir", str(tmp_path), *TINY])
    (tmp_path / "one.py").write_text(SMALL_FOLDER["numbers.py"])
    (tmp_path / "two.py").write_text(SMALL_FOLDER["geometry.py"])
    with pytest.raises(harness.UsageError, match="--evaluate_only needs the trained model .*variable_misuse.keras"):
        _main(["--model_dir", str(tmp_path / "run"), "--source_dir", str(tmp_path), *TINY, "--evaluate_only"])
    with pytest.raises(SystemExit):
        with contextlib.redirect_stderr(io.StringIO()):
            variable_misuse.parse_args(["--model_dir", str(tmp_path), "--edges", "some"])


def test_serving_export_gives_the_saved_models_logits(short_run, source_dir):
    import tensorflow as tf

    model_dir, report, _ = short_run
    path = model_dir / "exports" / "variable_misuse" / "1"
    assert report["outputs"]["SavedModel for TensorFlow Serving"] == str(path)
    train, held_out, _ = _splits(source_dir)
    arrays = programs.encode_examples(held_out[:3], programs.build_vocabulary(train, 8000), MAX_TOKENS + 1)
    inputs = {"token_ids": arrays["token_ids"], "relations": programs.relation_ids(arrays["edges"], 4)}
    model = keras.models.load_model(model_dir / "variable_misuse.keras")
    expected = model(inputs, training=False)
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    outputs = serve(**{name: tf.constant(value) for name, value in inputs.items()})
    assert set(outputs) == {"bug", "repair", "status"}
    assert outputs["status"].numpy().tolist() == [b""] * 3  # every row answered
    for name in ("bug", "repair"):
        assert outputs[name].shape == (3, MAX_TOKENS + 1)
        np.testing.assert_allclose(outputs[name].numpy(), keras.ops.convert_to_numpy(expected[name]), atol=1e-4)


def _inline_reference(args, vocabulary_size, num_relations, length):
    """`(model, scores_model)`: the recipe's model as it was written before
    it used graph_transformer (its own embedding, blocks and final norm,
    padding masked by an attention mask of real x real positions), and the
    last block's attention scores."""
    from keras_selfattn.layers import RelationalAttention

    token_ids = keras.Input((length,), dtype="int32", name="token_ids")
    relations = keras.Input((length, length), dtype="int32", name="relations")
    real = keras.ops.not_equal(token_ids, 0)
    attention_mask = keras.ops.logical_and(real[:, :, None], real[:, None, :])
    x = keras.layers.Embedding(vocabulary_size, args.hidden_dim, name="token_embedding")(token_ids)
    for index in range(args.num_layers):
        attention = RelationalAttention(
            num_heads=args.num_heads, key_dim=args.hidden_dim // args.num_heads,
            num_relations=num_relations, dropout=args.dropout, name=f"block_{index}_attention",
        )
        normed = keras.layers.LayerNormalization(epsilon=1e-6, name=f"block_{index}_attention_norm")(x)
        attended, scores = attention(
            normed, normed, relations=relations, attention_mask=attention_mask, return_attention_scores=True
        )
        x = x + keras.layers.Dropout(args.dropout)(attended)
        normed = keras.layers.LayerNormalization(epsilon=1e-6, name=f"block_{index}_feedforward_norm")(x)
        hidden = keras.layers.Dense(args.feedforward_dim, activation="relu", name=f"block_{index}_feedforward")(normed)
        output = keras.layers.Dense(args.hidden_dim, name=f"block_{index}_output")(hidden)
        x = x + keras.layers.Dropout(args.dropout)(output)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm")(x)
    inputs = {"token_ids": token_ids, "relations": relations}
    outputs = {name: _pointer(x, real, name) for name in ("bug", "repair")}
    return keras.Model(inputs, outputs), keras.Model(inputs, scores)


def _pointer(x, real, name):
    """The recipe's pointer as it was written: a score per position, padding at -1e9."""
    scores = keras.ops.squeeze(keras.ops.cast(keras.layers.Dense(1, name=f"{name}_score")(x), "float32"), -1)
    return keras.layers.Identity(name=name)(keras.ops.where(real, scores, -1e9))


def _our_layers(model):
    """The model's layers under the inline reference's names."""
    layers = {
        "token_embedding": model.encoder.token_embedding, "final_norm": model.encoder.encoder_norm,
        "bug_score": model.pointer_scores["bug"], "repair_score": model.pointer_scores["repair"],
    }
    for index, block in enumerate(model.encoder.encoder_blocks):
        for part in ("attention", "attention_norm", "feedforward_norm", "feedforward", "output"):
            layers[f"block_{index}_{part}"] = getattr(block, part)
    return layers


def test_the_model_is_the_inline_encoder_it_replaced(source_dir):
    """Same weights layer by layer (each shape, in the same places) and the
    same logits and last-block attention scores, at the default sizes and
    on left- and right-padded rows."""
    args = variable_misuse.parse_args(["--model_dir", "unused", "--max_distance", "4"])
    sizes = variable_misuse.model_sizes(args)
    assert sizes == dict(  # the defaults the recipe has always had, now its preset
        num_layers=4, hidden_dim=64, num_heads=4, feedforward_dim=128, dropout=0.1, add_relative_bias=False,
        heads_share_relative_embedding=True,
    )
    num_relations, vocabulary_size, length = programs.num_relations(4), 50, MAX_TOKENS + 1
    model = variable_misuse.build_model(args, vocabulary_size, num_relations)
    assert type(model) is VariableMisuseModel
    encoder = model.encoder
    reference, reference_scores = _inline_reference(
        argparse.Namespace(**sizes), vocabulary_size, num_relations, length
    )
    our_layers = _our_layers(model)
    for layer in reference.layers:
        if not layer.weights:
            continue
        ours = our_layers[layer.name]
        earlier_name = {"final_norm": "encoder_norm"}.get(layer.name, layer.name)
        assert ours.name == earlier_name.replace("block_", "encoder_block_")
        assert [w.shape for w in ours.weights] == [w.shape for w in layer.weights], layer.name
        layer.set_weights(ours.get_weights())
    assert model.count_params() == reference.count_params()
    train, _, _ = _splits(source_dir)
    arrays = programs.encode_examples(train[:4], programs.build_vocabulary(train, vocabulary_size - 2), length)
    inputs = {"token_ids": arrays["token_ids"], "relations": programs.relation_ids(arrays["edges"], 4)}
    padding = int((inputs["token_ids"][1] == 0).sum())
    inputs["token_ids"][1] = np.roll(inputs["token_ids"][1], padding)  # this row padded on the left
    inputs["relations"][1] = np.roll(inputs["relations"][1], (padding, padding), axis=(0, 1))
    real = inputs["token_ids"] != 0
    assert padding and not real[1, :padding].any() and not real[0, -1]
    ours, theirs = model(inputs, training=False), reference(inputs, training=False)
    for name in ("bug", "repair"):
        got, want = (keras.ops.convert_to_numpy(x[name]) for x in (ours, theirs))
        np.testing.assert_allclose(got[real], want[real], rtol=1e-5, atol=1e-5)
        assert (got[~real] == -1e9).all() and (want[~real] == -1e9).all()
    got = keras.ops.convert_to_numpy(encoder.attention_scores(inputs["token_ids"], inputs["relations"], block=-1))
    want = keras.ops.convert_to_numpy(reference_scores(inputs, training=False))
    pairs = real[:, None, :, None] & real[:, None, None, :]
    np.testing.assert_allclose(np.where(pairs, got, 0.0), np.where(pairs, want, 0.0), rtol=1e-5, atol=1e-6)


def test_help_explains_every_flag():
    parser = variable_misuse.build_parser()
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help text"
    text = parser.format_help()
    for flag in (
        "--source_dir", "--held_out_fraction", "--validation_files", "--max_tokens", "--max_files", "--vocabulary_size",
        "--eval_examples", "--edges", "--max_distance", "--preset", "--num_layers", "--hidden_dim", "--num_heads",
        "--feedforward_dim", "--dropout", "--epochs", "--steps_per_epoch", "--batch_size", "--learning_rate",
        "--seed", "--strategy", "--mixed_precision", "--model_dir", "--export_dir", "--evaluate_only",
    ):
        assert flag in text
