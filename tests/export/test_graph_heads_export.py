"""`export_for_serving` of heads over a `graph_transformer`: serving_default
takes token_ids and relations and gives the heads' named outputs."""

import keras
import numpy as np
import pytest

pytestmark = pytest.mark.backends("tensorflow", reason="SavedModels for TF Serving")

import tensorflow as tf  # noqa: E402

from keras_selfattn.export import export_for_serving  # noqa: E402
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


def test_serving_default_gives_the_heads_outputs_at_any_batch_and_length(tmp_path):
    model = heads_model()
    loaded = tf.saved_model.load(export_for_serving(model, tmp_path, name="heads"))
    serve = loaded.signatures["serving_default"]
    assert set(serve.structured_input_signature[1]) == {"token_ids", "relations"}
    for batch, nodes in ((3, 7), (1, 4)):
        inputs = graph_inputs(batch, nodes)
        outputs = serve(**{k: tf.constant(v) for k, v in inputs.items()})
        expected = model(inputs, training=False)
        assert set(outputs) == {"first", "second"}
        for name in outputs:
            assert outputs[name].dtype == tf.float32
            np.testing.assert_allclose(outputs[name].numpy(), keras.ops.convert_to_numpy(expected[name]), atol=1e-5)


def test_heads_without_a_graph_transformer_and_foreign_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="graph_transformer inside"):
        export_for_serving(heads_model(with_encoder=False), tmp_path, name="no_encoder")
    with pytest.raises(ValueError, match="`note_event_ids` is for music models only"):
        export_for_serving(heads_model(), tmp_path, name="heads", note_event_ids=((1, 2), (3, 4)))
    assert not (tmp_path / "heads").exists()
