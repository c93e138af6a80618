"""`export_for_serving` of heads over a `graph_transformer` (a `VariableMisuseModel`
or a Functional model of heads): serving_default
takes token_ids and relations and gives the heads' named outputs, and each
row's `status`: a row with a bad id spares the others merged with it."""

import keras
import numpy as np
import pytest

pytestmark = pytest.mark.backends("tensorflow", reason="SavedModels for TF Serving")

import tensorflow as tf  # noqa: E402

from keras_selfattn.export import export_for_serving  # noqa: E402
from keras_selfattn.export.family_endpoints import serving_endpoints  # noqa: E402
from keras_selfattn.export.serving_options import ServingOptions  # noqa: E402
from keras_selfattn.models import graph_transformer  # noqa: E402

VOCABULARY, NUM_RELATIONS = 19, 4


def heads_model(with_encoder=True):
    """Two pointer-like heads (a score per node) over a tiny encoder's nodes."""
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    relations = keras.Input((None, None), dtype="int32", name="relations")
    inputs = {"token_ids": token_ids, "relations": relations}
    if with_encoder:
        encoder = graph_transformer(VOCABULARY, NUM_RELATIONS, preset="tiny", hidden_dim=6, num_heads=2)
        nodes = encoder(inputs)
    else:
        nodes = keras.layers.Embedding(VOCABULARY, 6)(token_ids)
    outputs = {
        name: keras.ops.squeeze(keras.layers.Dense(1, name=f"{name}_score")(nodes), -1)
        for name in ("first", "second")
    }
    return keras.Model(inputs, outputs)


def graph_inputs(batch, nodes, seed=0):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(1, VOCABULARY, (batch, nodes)).astype("int32")
    token_ids[0, -2:] = 0
    relations = rng.integers(0, NUM_RELATIONS + 1, (batch, nodes, nodes)).astype("int32")
    return {"token_ids": token_ids, "relations": relations}


@pytest.fixture(scope="module")
def exported_heads(tmp_path_factory):
    """`(model, path)`: `heads_model()` exported once for this module."""
    keras.utils.set_random_seed(0)
    model = heads_model()
    return model, export_for_serving(model, tmp_path_factory.mktemp("graph_heads"), name="heads")


def test_serving_default_gives_the_heads_outputs_at_any_batch_and_length(exported_heads):
    model, path = exported_heads
    serve = tf.saved_model.load(path).signatures["serving_default"]
    assert set(serve.structured_input_signature[1]) == {"token_ids", "relations"}
    for batch, nodes in ((3, 7), (1, 4)):
        inputs = graph_inputs(batch, nodes)
        outputs = serve(**{k: tf.constant(v) for k, v in inputs.items()})
        expected = model(inputs, training=False)
        assert set(outputs) == {"first", "second", "status"}
        assert outputs["status"].numpy().tolist() == [b""] * batch
        for name in ("first", "second"):
            assert outputs[name].dtype == tf.float32
            np.testing.assert_allclose(outputs[name].numpy(), keras.ops.convert_to_numpy(expected[name]), atol=1e-5)


# name -> (input, value put on row 1, the start of that row's status)
BAD_ROWS = {
    "relation_id_7": ("relations", 7, "`relations` must be relation ids in [0, 4]"),
    "relation_id_-1": ("relations", -1, "`relations` must be relation ids in [0, 4]"),
    "token_id_past_the_vocabulary": ("token_ids", VOCABULARY, "`token_ids` must be token ids in [0, 19)"),
    "token_id_-1": ("token_ids", -1, "`token_ids` must be token ids in [0, 19)"),
}


def with_bad_row(name, batch=3, nodes=6):
    argument, value, _ = BAD_ROWS[name]
    inputs = graph_inputs(batch, nodes)
    inputs[argument][(1, 2) + (3,) * (argument == "relations")] = value
    return inputs


def assert_bad_row_spares_the_others(outputs, model, inputs, status):
    assert outputs["status"][[0, 2]].tolist() == [b"", b""]
    assert outputs["status"][1].decode().startswith(status), outputs["status"][1]
    for name in ("first", "second"):
        np.testing.assert_array_equal(outputs[name][1], 0.0)
        for row in (0, 2):
            alone = {key: value[row : row + 1] for key, value in inputs.items()}
            expected = keras.ops.convert_to_numpy(model(alone, training=False)[name])[0]
            np.testing.assert_allclose(outputs[name][row], expected, atol=1e-5)


@pytest.mark.parametrize("name", BAD_ROWS)
def test_a_row_with_a_bad_id_gets_its_status_and_spares_the_others(exported_heads, name):
    model, path = exported_heads
    serve = tf.saved_model.load(path).signatures["serving_default"]
    inputs = with_bad_row(name)
    outputs = {key: value.numpy() for key, value in serve(**{k: tf.constant(v) for k, v in inputs.items()}).items()}
    assert_bad_row_spares_the_others(outputs, model, inputs, BAD_ROWS[name][2])


@pytest.mark.slow
def test_through_the_c_api_loader_a_bad_row_spares_the_others_and_a_bad_layout_fails(exported_heads):
    from serving.emulator.c_api_loader import CApiSavedModel
    from serving.emulator.tensor_wire import ServingError

    model, path = exported_heads
    with CApiSavedModel(path) as loaded:
        for name in BAD_ROWS:
            inputs = with_bad_row(name)
            assert_bad_row_spares_the_others(loaded.run("serving_default", inputs), model, inputs, BAD_ROWS[name][2])
        inputs = graph_inputs(2, 6)
        with pytest.raises(ServingError, match="`relations` must be \\[batch, nodes, nodes\\] over the nodes"):
            loaded.run("serving_default", dict(inputs, relations=inputs["relations"][:, :5]))


def test_a_head_named_status_is_refused(tmp_path):
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    relations = keras.Input((None, None), dtype="int32", name="relations")
    encoder = graph_transformer(VOCABULARY, NUM_RELATIONS, preset="tiny", hidden_dim=6, num_heads=2)
    nodes = encoder({"token_ids": token_ids, "relations": relations})
    model = keras.Model({"token_ids": token_ids, "relations": relations}, {"status": keras.layers.Dense(1)(nodes)})
    with pytest.raises(ValueError, match="must not be named `status`"):
        export_for_serving(model, tmp_path, name="heads")
    assert not (tmp_path / "heads").exists()


def test_heads_without_a_graph_transformer_and_foreign_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="graph_transformer inside"):
        export_for_serving(heads_model(with_encoder=False), tmp_path, name="no_encoder")
    with pytest.raises(ValueError, match="`note_event_ids` is for music and accompaniment models only"):
        export_for_serving(heads_model(), tmp_path, name="heads", note_event_ids=((1, 2), (3, 4)))
    assert not (tmp_path / "heads").exists()


def test_a_variable_misuse_model_exports_its_pointers_through_its_own_signatures(tmp_path):
    """`VariableMisuseModel`'s serving signatures: `bug` and `repair` logits and
    `status`; a bad row spares the others; a plain model saved by an earlier
    recipe exports as the class, with the logits it gave then."""
    import json
    from pathlib import Path

    from keras_selfattn.models import VariableMisuseModel

    model = VariableMisuseModel.from_preset("tiny", vocabulary_size=VOCABULARY, num_relations=NUM_RELATIONS)
    endpoints, resources = serving_endpoints(model, ServingOptions())
    assert [name for name, _, _ in endpoints] == ["serving_default"] and resources == []
    serve = tf.saved_model.load(export_for_serving(model, tmp_path, name="varmisuse")).signatures["serving_default"]
    inputs = graph_inputs(3, 6)
    outputs = {key: value.numpy() for key, value in serve(**{k: tf.constant(v) for k, v in inputs.items()}).items()}
    assert set(outputs) == {"bug", "repair", "status"}
    expected = model(inputs, training=False)
    for name in ("bug", "repair"):
        np.testing.assert_allclose(outputs[name], keras.ops.convert_to_numpy(expected[name]), atol=1e-5)
    bad = dict(inputs, relations=inputs["relations"].copy())
    bad["relations"][1, 2, 3] = NUM_RELATIONS + 1
    outputs = serve(**{k: tf.constant(v) for k, v in bad.items()})
    assert outputs["status"].numpy()[1].decode().startswith("`relations` must be relation ids in [0, 4]")
    np.testing.assert_array_equal(outputs["bug"].numpy()[1], 0.0)
    with pytest.raises(ValueError, match="`tokenizer` is for translation models only. Received a variable_misuse"):
        export_for_serving(model, tmp_path, name="other", tokenizer=b"spm")

    saved = Path(__file__).parents[1] / "models" / "saved"
    expected = json.loads((saved / "graph_outputs.json").read_text())
    plain = keras.models.load_model(saved / "variable_misuse_functional.keras", compile=False)
    serve = tf.saved_model.load(export_for_serving(plain, tmp_path, name="earlier")).signatures["serving_default"]
    outputs = serve(**{name: tf.constant(expected[name], tf.int32) for name in ("token_ids", "relations")})
    assert outputs["status"].numpy().tolist() == [b"", b""]
    for name in ("bug", "repair"):
        np.testing.assert_allclose(outputs[name].numpy(), expected[name], atol=1e-5)
