"""recipes/variable_misuse.py end to end on a folder of Python files made
here, one of them broken: every output, the held-out accuracies against the
saved model's own pointers scored in numpy, the baseline against counts of
the examples, the serving export against the saved model, the model against
the recipe's earlier inline encoder, and the flags' checks."""

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
    export_dir = model_dir / "exports"
    report, printed = _main(
        ["--model_dir", str(model_dir), "--source_dir", str(source_dir), "--export_dir", str(export_dir), *TINY]
    )
    return model_dir, report, printed


def test_the_run_names_the_broken_file_and_writes_every_output(short_run, source_dir):
    model_dir, report, printed = short_run
    assert f"skipped {source_dir / 'broken.py'}: it does not parse" in printed
    assert report["data"]["skipped_files"][0][0] == str(source_dir / "broken.py")
    assert report["data"]["skipped_file_count"] == 1
    written = printed.split("written:")[1]
    for name in ("variable_misuse.keras", "attention.png", "report.json", "latest.keras", "exports/variable_misuse/1"):
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


def test_serving_export_gives_the_saved_models_logits(short_run, source_dir):
    import tensorflow as tf

    model_dir, report, _ = short_run
    path = model_dir / "exports" / "variable_misuse" / "1"
    assert report["outputs"]["SavedModel for TensorFlow Serving"] == str(path)
    train, held_out, _ = programs.varmisuse_splits(
        source_dir, held_out_fraction=0.3, max_tokens=MAX_TOKENS, seed=1, log=lambda line: None
    )
    arrays = programs.encode_examples(held_out[:3], programs.build_vocabulary(train, 8000), MAX_TOKENS + 1)
    inputs = {"token_ids": arrays["token_ids"], "relations": programs.relation_ids(arrays["edges"], 4)}
    model = keras.models.load_model(model_dir / "variable_misuse.keras")
    expected = model(inputs, training=False)
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    outputs = serve(**{name: tf.constant(value) for name, value in inputs.items()})
    assert set(outputs) == {"bug", "repair"}
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
    outputs = {name: variable_misuse._pointer(x, real, name) for name in ("bug", "repair")}
    return keras.Model(inputs, outputs), keras.Model(inputs, scores)


def test_the_model_is_the_inline_encoder_it_replaced(source_dir):
    """Same weights layer by layer (each shape, in the same places) and the
    same logits and last-block attention scores, at the default sizes and
    on left- and right-padded rows."""
    args = variable_misuse.parse_args(["--model_dir", "unused", "--max_distance", "4"])
    sizes = (args.num_layers, args.hidden_dim, args.num_heads, args.feedforward_dim, args.dropout)
    assert sizes == (4, 64, 4, 128, 0.1)  # the defaults the recipe has always had
    num_relations, vocabulary_size, length = programs.num_relations(4), 50, MAX_TOKENS + 1
    model, encoder = variable_misuse.build_model(args, vocabulary_size, num_relations)
    reference, reference_scores = _inline_reference(args, vocabulary_size, num_relations, length)
    renamed = {"final_norm": "encoder_norm"}
    for layer in reference.layers:
        if not layer.weights:
            continue
        name = renamed.get(layer.name, layer.name)
        if name.startswith("block_"):
            name = "encoder_" + name
        ours = model.get_layer(name) if name.endswith("_score") else encoder.get_layer(name)
        assert [w.shape for w in ours.weights] == [w.shape for w in layer.weights], name
        layer.set_weights(ours.get_weights())
    assert model.count_params() == reference.count_params()
    train, _, _ = programs.varmisuse_splits(
        source_dir, held_out_fraction=0.3, max_tokens=MAX_TOKENS, seed=1, log=lambda line: None
    )
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
        "--source_dir", "--held_out_fraction", "--max_tokens", "--max_files", "--vocabulary_size",
        "--eval_examples", "--edges", "--max_distance", "--num_layers", "--hidden_dim", "--num_heads",
        "--feedforward_dim", "--dropout", "--epochs", "--steps_per_epoch", "--batch_size", "--learning_rate",
        "--seed", "--strategy", "--mixed_precision", "--model_dir", "--export_dir",
    ):
        assert flag in text
