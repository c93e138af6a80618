"""recipes/variable_misuse.py end to end on a folder of Python files made
here, one of them broken: every output, the held-out accuracies against the
saved model's own pointers scored in numpy, the baseline against counts of
the examples, and the flags' checks."""

import contextlib
import io
import json
from pathlib import Path

import keras
import numpy as np
import pytest

import variable_misuse
from common import harness
from keras_selfattn.data import programs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.backends("tensorflow", reason="tf.data pipeline and tf.distribute"),
]

MAX_TOKENS = 47
TINY = [
    "--max_tokens", str(MAX_TOKENS), "--held_out_fraction", "0.3", "--epochs", "2",
    "--steps_per_epoch", "3", "--batch_size", "8", "--num_layers", "1", "--hidden_dim", "16",
    "--num_heads", "2", "--feedforward_dim", "16", "--max_distance", "4", "--verbose", "0", "--seed", "1",
]
TEMPLATES = [
    "def scale_{i}(values, factor):\n    result = []\n    for value in values:\n"
    "        result.append(value * factor + {i})\n    return result\n",
    "def clamp_{i}(low, high, x):\n    if x < low:\n        x = low\n    elif x > high:\n"
    "        x = high\n    return x - {i}\n",
    "def total_{i}(items, start):\n    count = start\n    for item in items:\n"
    "        count = count + item * {i}\n    return count\n",
    "def pair_{i}(left, right):\n    first = left + {i}\n    second = right - first\n"
    "    return first, second\n",
]


@pytest.fixture(scope="module")
def source_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sources")
    for index in range(12):
        functions = [template.format(i=index * 10 + k) for k, template in enumerate(TEMPLATES)]
        (folder / f"module_{index:02d}.py").write_text("\n\n".join(functions))
    (folder / "broken.py").write_text("def broken(:\n    return 1\n")
    return folder


def _main(argv):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        report = variable_misuse.main(argv)
    return report, printed.getvalue()


@pytest.fixture(scope="module")
def short_run(source_dir, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("run")
    report, printed = _main(["--model_dir", str(model_dir), "--source_dir", str(source_dir), *TINY])
    return model_dir, report, printed


def test_the_run_names_the_broken_file_and_writes_every_output(short_run, source_dir):
    model_dir, report, printed = short_run
    assert f"skipped {source_dir / 'broken.py'}: it does not parse" in printed
    assert report["data"]["skipped_files"][0][0] == str(source_dir / "broken.py")
    assert report["data"]["skipped_file_count"] == 1
    written = printed.split("written:")[1]
    for name in ("variable_misuse.keras", "attention.png", "report.json", "latest.keras"):
        assert name in written
    assert json.loads((model_dir / "report.json").read_text())["held_out_accuracy"] == report["held_out_accuracy"]
    assert (model_dir / "attention.png").stat().st_size > 10_000
    assert report["data"]["edge_types_train"]["computed_from"] > 0


def test_held_out_accuracies_are_the_saved_models_pointers_scored_here(short_run, source_dir):
    model_dir, report, _ = short_run
    _, held_out, _ = programs.varmisuse_splits(
        source_dir, held_out_fraction=0.3, max_tokens=MAX_TOKENS, seed=1, log=lambda line: None
    )
    train, _, _ = programs.varmisuse_splits(
        source_dir, held_out_fraction=0.3, max_tokens=MAX_TOKENS, seed=1, log=lambda line: None
    )
    vocabulary = programs.build_vocabulary(train, 8000)
    arrays = programs.encode_examples(held_out, vocabulary, MAX_TOKENS + 1)
    model = keras.models.load_model(model_dir / "variable_misuse.keras")
    outputs = model.predict(
        {"token_ids": arrays["token_ids"], "relations": programs.relation_ids(arrays["edges"], 4)}, verbose=0
    )
    bug_guess = outputs["bug"].argmax(-1)
    repair_guess = outputs["repair"].argmax(-1)
    buggy = [i for i, example in enumerate(held_out) if example.has_bug]
    classified = [(bug_guess[i] != 0) == example.has_bug for i, example in enumerate(held_out)]
    located = [bug_guess[i] == held_out[i].bug_position + 1 for i in buggy]
    repaired = [repair_guess[i] - 1 in held_out[i].repair_positions for i in buggy]
    scores = report["held_out_accuracy"]
    assert scores["classification"] == pytest.approx(np.mean(classified))
    assert scores["localisation"] == pytest.approx(np.mean(located))
    assert scores["repair"] == pytest.approx(np.mean(repaired))
    train_has_bug = np.mean([example.has_bug for example in train])
    majority_is_bug = train_has_bug > 0.5
    expected = np.mean([example.has_bug == majority_is_bug for example in held_out])
    assert report["majority_baseline"]["classification"] == pytest.approx(expected)


def test_edges_none_gives_the_model_distances_only(source_dir):
    train, _, _ = programs.varmisuse_splits(
        source_dir, held_out_fraction=0.3, max_tokens=MAX_TOKENS, seed=1, log=lambda line: None
    )
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
    with pytest.raises(harness.UsageError, match="--source_dir: .*holds no .py file"):
        _main(["--model_dir", str(tmp_path / "run"), "--source_dir", str(tmp_path), *TINY])
    with pytest.raises(SystemExit):
        with contextlib.redirect_stderr(io.StringIO()):
            variable_misuse.parse_args(["--model_dir", str(tmp_path), "--edges", "some"])
