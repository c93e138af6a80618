"""Graph models saved by the version whose GraphTransformer was a Functional
model assembled by `graph_transformer`, and whose VarMisuse model was a
plain Functional model built by the recipe, load with the outputs they had
then (`saved/graph_outputs.json`, written beside the files by that version)."""

import json
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_selfattn.models import GraphTransformer, VariableMisuseModel

SAVED = Path(__file__).with_name("saved")
EXPECTED = json.loads((SAVED / "graph_outputs.json").read_text())
INPUTS = {name: np.array(EXPECTED[name], "int32") for name in ("token_ids", "relations")}

pytestmark = pytest.mark.backends("tensorflow", "jax", reason="loads files saved on TensorFlow")


def test_a_saved_graph_transformer_loads_as_itself_with_its_outputs():
    model = keras.models.load_model(SAVED / "graph_transformer_functional.keras")
    assert type(model) is GraphTransformer
    assert model.get_config() == dict(  # EXPECTED["made_by"]
        name="graph_transformer", trainable=True, vocabulary_size=23, num_relations=5, num_layers=2,
        hidden_dim=8, num_heads=2, feedforward_dim=12, dropout=0.1, add_relative_bias=True,
        heads_share_relative_embedding=False, check_inputs=True,
    )
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(INPUTS)), EXPECTED["encodings"], atol=1e-5)
    scores = model.attention_scores(INPUTS["token_ids"], INPUTS["relations"], block=0)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(scores), EXPECTED["attention_scores_block_0"], atol=1e-6)


def test_a_saved_variable_misuse_model_gives_its_logits():
    model = keras.models.load_model(SAVED / "variable_misuse_functional.keras", compile=False)
    outputs = model(INPUTS, training=False)
    for name in ("bug", "repair"):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(outputs[name]), EXPECTED[name], atol=1e-5)


def test_a_saved_variable_misuse_model_becomes_the_class_with_its_logits():
    """The recipe saved a plain Functional model (compiled with its repair
    loss under the recipe's name): `from_model` rebuilds it as the class."""
    plain = keras.models.load_model(SAVED / "variable_misuse_functional.keras")
    assert keras.saving.get_registered_name(plain.loss["repair"]) == "keras_selfattn>repair_loss"
    model = VariableMisuseModel.from_model(plain)
    assert type(model) is VariableMisuseModel and model is not plain
    assert model.get_config()["num_layers"] == 1 and model.get_config()["dropout"] == 0.1
    outputs = model(INPUTS, training=False)
    for name in ("bug", "repair"):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(outputs[name]), EXPECTED[name], atol=1e-5)
    assert VariableMisuseModel.from_model(model) is model


def test_a_plain_functional_graph_transformer_is_rebuilt_as_the_class():
    saved = keras.models.load_model(SAVED / "graph_transformer_functional.keras")
    plain = keras.Model(saved.input, saved.output)
    rebuilt = GraphTransformer.from_model(plain)
    assert type(rebuilt) is GraphTransformer and rebuilt.get_config() == saved.get_config() | {"name": plain.name}
    np.testing.assert_allclose(keras.ops.convert_to_numpy(rebuilt(INPUTS)), EXPECTED["encodings"], atol=1e-5)
