"""graph_transformer: node tokens and relations in, node encodings out;
padding, saving, fit under tf.distribute, and the serving export."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.models import GRAPH_PRESETS, GraphTransformer, graph_transformer

VOCABULARY, NUM_RELATIONS, NODES = 23, 5, 7
TINY = dict(preset="tiny", num_heads=2, hidden_dim=6, feedforward_dim=11)


def numpy(x):
    return ops.convert_to_numpy(x)


def graph_inputs(seed=0):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(1, VOCABULARY, (2, NODES)).astype("int32")
    token_ids[0, :3] = 0  # padded on the left
    token_ids[1, -1:] = 0  # and on the right
    relations = rng.integers(0, NUM_RELATIONS + 1, (2, NODES, NODES)).astype("int32")
    return {"token_ids": token_ids, "relations": relations}


def test_encodes_every_node_and_gives_attention_scores():
    model = graph_transformer(VOCABULARY, NUM_RELATIONS, **TINY)
    assert isinstance(model, GraphTransformer)
    assert model.num_relations == NUM_RELATIONS
    inputs = graph_inputs()
    encodings = model(inputs)
    assert tuple(encodings.shape) == (2, NODES, 6)
    assert keras.backend.standardize_dtype(encodings.dtype) == "float32"
    scores = numpy(model.attention_scores(inputs["token_ids"], inputs["relations"], block=0))
    assert scores.shape == (2, 2, NODES, NODES)
    real = inputs["token_ids"] != 0
    np.testing.assert_allclose(scores.sum(-1)[real[:, None].repeat(2, 1)], 1.0, atol=1e-5)
    np.testing.assert_array_equal(scores[0, :, :, :3], 0.0)


def test_padded_nodes_and_their_relations_change_no_real_node():
    model = graph_transformer(VOCABULARY, NUM_RELATIONS, **TINY)
    inputs = graph_inputs()
    before = numpy(model(inputs))
    changed = {name: array.copy() for name, array in inputs.items()}
    changed["relations"][0, :3] = 1
    changed["relations"][0, :, :3] = 2
    after = numpy(model(changed))
    np.testing.assert_allclose(after[0, 3:], before[0, 3:], atol=1e-5)
    alone = numpy(model({"token_ids": inputs["token_ids"][:1, 3:],
                         "relations": inputs["relations"][:1, 3:, 3:]}))
    np.testing.assert_allclose(before[0, 3:], alone[0], atol=1e-5)
    other = dict(inputs, relations=(inputs["relations"] + 1) % (NUM_RELATIONS + 1))
    assert not np.allclose(numpy(model(other))[1], before[1], atol=1e-4)


def test_saves_and_loads_as_itself_without_custom_objects(tmp_path):
    model = graph_transformer(VOCABULARY, NUM_RELATIONS, **TINY)
    inputs = graph_inputs()
    path = str(tmp_path / "graph.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert isinstance(restored, GraphTransformer)
    np.testing.assert_allclose(numpy(restored(inputs)), numpy(model(inputs)), atol=1e-6)
    plain = keras.Model(model.input, model.output)
    viewed = GraphTransformer.from_model(plain)
    np.testing.assert_allclose(numpy(viewed(inputs)), numpy(model(inputs)), atol=1e-6)


def test_presets_and_bad_arguments():
    assert set(GRAPH_PRESETS) == {"base", "small", "tiny"}
    with pytest.raises(ValueError, match="preset"):
        graph_transformer(VOCABULARY, NUM_RELATIONS, preset="huge")
    with pytest.raises(ValueError, match="num_layer"):
        graph_transformer(VOCABULARY, NUM_RELATIONS, preset="tiny", num_layer=3)
    with pytest.raises(ValueError, match="num_relations"):
        graph_transformer(VOCABULARY, 0, preset="tiny")
    with pytest.raises(ValueError, match="hidden_dim"):
        graph_transformer(VOCABULARY, NUM_RELATIONS, preset="tiny", hidden_dim=7)


@pytest.mark.backends("tensorflow", reason="tf.distribute")
def test_fits_under_a_distribution_strategy():
    import tensorflow as tf

    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        model = graph_transformer(VOCABULARY, NUM_RELATIONS, **TINY)
        model.compile(optimizer="adam", loss="mse")
    inputs = graph_inputs()
    before = [numpy(w) for w in model.trainable_weights]
    history = model.fit(inputs, np.ones((2, NODES, 6), "float32"), batch_size=2, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    after = [numpy(w) for w in model.trainable_weights]
    assert any(not np.array_equal(a, b) for a, b in zip(before, after))


@pytest.mark.backends("tensorflow", reason="SavedModels and TensorFlow's C API")
@pytest.mark.slow
def test_serving_default_takes_tokens_and_relations_through_the_c_api_loader(tmp_path):
    from keras_selfattn.export import export_for_serving
    from serving.emulator.c_api_loader import CApiSavedModel

    model = graph_transformer(VOCABULARY, NUM_RELATIONS, **TINY)
    path = export_for_serving(model, tmp_path, name="graph")
    inputs = graph_inputs()
    with CApiSavedModel(path) as loaded:
        assert set(loaded.input_names("serving_default")) == {"token_ids", "relations"}
        outputs = loaded.run("serving_default", inputs)
        np.testing.assert_allclose(outputs["encodings"], numpy(model(inputs)), atol=1e-5)
        assert outputs["status"].tolist() == [b"", b""]
        shorter = {"token_ids": inputs["token_ids"][:1, 3:], "relations": inputs["relations"][:1, 3:, 3:]}
        np.testing.assert_allclose(
            loaded.run("serving_default", shorter)["encodings"], numpy(model(shorter)), atol=1e-5
        )
        # A row with a bad id: its status, zero encodings, and row 0 answered as alone.
        bad, _ = with_bad_value("relation_id_7")
        outputs = loaded.run("serving_default", bad)
        assert outputs["status"][0] == b"" and outputs["status"][1].startswith(b"`relations` must be relation ids")
        np.testing.assert_array_equal(outputs["encodings"][1], 0.0)
        np.testing.assert_allclose(outputs["encodings"][0], numpy(model(inputs))[0], atol=1e-5)


def with_bad_value(name):
    """`(inputs with one bad value on row 1, words of the error)`."""
    inputs = graph_inputs()
    bad = {
        "relation_id_7": ("relations", 7, r"Every relation id in `relations` must lie in \[0, 5\]"),
        "relation_id_-1": ("relations", -1, r"Every relation id in `relations` must lie in \[0, 5\]"),
        "token_id_past_the_vocabulary": ("token_ids", VOCABULARY, r"Every token id in `token_ids` must lie in \[0, 22\]"),
        "token_id_-1": ("token_ids", -1, r"Every token id in `token_ids` must lie in \[0, 22\]"),
    }
    argument, value, words = bad[name]
    inputs[argument][(1, 2) + (4,) * (argument == "relations")] = value
    return inputs, words


BAD_VALUES = ["relation_id_7", "relation_id_-1", "token_id_past_the_vocabulary", "token_id_-1"]


@pytest.mark.parametrize("name", BAD_VALUES)
def test_a_bad_id_raises_a_value_error_naming_its_input(name):
    model = graph_transformer(VOCABULARY, NUM_RELATIONS, **TINY)
    inputs, words = with_bad_value(name)
    with pytest.raises(ValueError, match=words):
        model(inputs)
    with pytest.raises(ValueError, match=words):
        model.attention_scores(inputs["token_ids"], inputs["relations"])


@pytest.mark.backends("tensorflow", reason="predict and fit run a TensorFlow graph")
def test_predict_and_fit_fail_on_a_bad_id_naming_its_input():
    import tensorflow as tf

    model = graph_transformer(VOCABULARY, NUM_RELATIONS, **TINY)
    model.compile(optimizer="sgd", loss="mse")
    model.predict(graph_inputs(), verbose=0)
    for name in BAD_VALUES:
        inputs, words = with_bad_value(name)
        with pytest.raises(tf.errors.InvalidArgumentError, match=words):
            model.predict(inputs, batch_size=2, verbose=0)
    target = np.zeros((2, NODES, 6), "float32")
    for name in ("relation_id_7", "token_id_past_the_vocabulary"):
        inputs, words = with_bad_value(name)
        with pytest.raises(tf.errors.InvalidArgumentError, match=words):
            model.fit(inputs, target, batch_size=2, verbose=0)


@pytest.mark.backends("tensorflow", reason="XLA drops TensorFlow's assertions")
def test_a_checking_model_is_not_compiled_with_xla_and_check_inputs_false_is():
    from keras.src.trainers.trainer import model_supports_jit

    assert not model_supports_jit(graph_transformer(VOCABULARY, NUM_RELATIONS, **TINY))
    unchecked = graph_transformer(VOCABULARY, NUM_RELATIONS, check_inputs=False, **TINY)
    assert model_supports_jit(unchecked)
    inputs, _ = with_bad_value("relation_id_7")
    without = graph_inputs()
    without["relations"][1, 2, 4] = 0
    np.testing.assert_allclose(
        unchecked.predict(inputs, verbose=0), unchecked.predict(without, verbose=0), atol=1e-5
    )
    with pytest.raises(ValueError, match="`check_inputs` must be True or False"):
        graph_transformer(VOCABULARY, NUM_RELATIONS, check_inputs=1, **TINY)
