"""The graph family as keras-hub-style Backbones: `GraphTransformer` and
`VariableMisuseModel` constructed from their hyperparameters, which
`get_config` returns; their layers as attributes with the names earlier
versions gave them; presets on the class; errors that name the argument."""

import inspect

import keras
import numpy as np
import pytest

from keras_selfattn.models import (
    VARIABLE_MISUSE_PRESETS,
    GraphTransformer,
    VariableMisuseModel,
    graph_transformer,
    list_presets,
)
from keras_selfattn.models.losses import repair_loss

GRAPH = dict(
    vocabulary_size=13, num_relations=4, num_layers=2, hidden_dim=6, num_heads=3, feedforward_dim=10,
    dropout=0.1, add_relative_bias=False, heads_share_relative_embedding=False, check_inputs=False,
)


def graph_inputs(seed=0):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(1, 13, (2, 5)).astype("int32")
    token_ids[0, :2] = 0
    return {"token_ids": token_ids, "relations": rng.integers(0, 5, (2, 5, 5)).astype("int32")}


def numpy(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize("model_class", [GraphTransformer, VariableMisuseModel])
def test_get_config_is_the_constructor_arguments_and_rebuilds_the_model(model_class):
    model = model_class(**GRAPH, name="mine")
    config = model.get_config()
    assert config == {"name": "mine", "trainable": True, **GRAPH}
    assert set(config) - {"name", "trainable"} == set(inspect.signature(model_class).parameters) - {"kwargs"}
    rebuilt = model_class.from_config(config)
    assert type(rebuilt) is model_class and rebuilt.get_config() == config
    rebuilt.set_weights(model.get_weights())
    inputs = graph_inputs()
    keras.tree.map_structure(
        lambda a, b: np.testing.assert_allclose(numpy(a), numpy(b), atol=1e-6),
        model(inputs, training=False), rebuilt(inputs, training=False),
    )


def test_saved_and_loaded_as_the_classes(tmp_path):
    inputs = graph_inputs()
    for model in (GraphTransformer(**GRAPH), VariableMisuseModel(**GRAPH)):
        path = tmp_path / f"{model.name}.keras"
        model.save(path)
        loaded = keras.models.load_model(path)
        assert type(loaded) is type(model) and loaded.get_config() == model.get_config()
        keras.tree.map_structure(
            lambda a, b: np.testing.assert_allclose(numpy(a), numpy(b), atol=1e-6),
            model(inputs, training=False), loaded(inputs, training=False),
        )


def test_the_models_own_their_layers_with_the_names_of_earlier_versions():
    model = GraphTransformer(**GRAPH)
    assert model.token_embedding.name == "token_embedding" and model.encoder_norm.name == "encoder_norm"
    assert len(model.encoder_blocks) == 2
    block = model.encoder_blocks[1]
    for part in ("attention_norm", "attention", "dropout", "feedforward_norm", "feedforward", "output"):
        assert getattr(block, part).name == f"encoder_block_1_{part}"
    assert block.attention.num_relations == 4 and not block.attention.check_relations
    assert [layer.name for layer in model.layers if layer.weights] == [
        "token_embedding",
        *[f"encoder_block_{i}_{part}" for i in range(2)
          for part in ("attention_norm", "attention", "feedforward_norm", "feedforward", "output")],
        "encoder_norm",
    ]
    heads = VariableMisuseModel(**GRAPH)
    assert type(heads.encoder) is GraphTransformer and heads.encoder.name == "graph_transformer"
    assert heads.encoder.get_config() == {"name": "graph_transformer", "trainable": True, **GRAPH}
    assert [heads.pointer_scores[name].name for name in ("bug", "repair")] == ["bug_score", "repair_score"]
    assert sorted(heads.output) == ["bug", "repair"]


def test_attention_scores_are_the_encoders():
    model = VariableMisuseModel(**GRAPH)
    inputs = graph_inputs()
    scores = numpy(model.attention_scores(inputs["token_ids"], inputs["relations"], block=0))
    assert scores.shape == (2, 3, 5, 5)
    np.testing.assert_array_equal(
        scores, numpy(model.encoder.attention_scores(inputs["token_ids"], inputs["relations"], block=-2))
    )
    np.testing.assert_array_equal(scores[0, :, :, :2], 0.0)  # padded nodes are not attended to


def test_padded_nodes_point_nowhere():
    model = VariableMisuseModel(**GRAPH)
    outputs = model(graph_inputs(), training=False)
    for name in ("bug", "repair"):
        logits = numpy(outputs[name])
        assert logits.dtype == np.float32 and logits.shape == (2, 5)
        assert (logits[0, :2] == -1e9).all() and (logits[:, 2:] > -1e9).all()


def test_presets_are_listed_and_built_with_overrides():
    assert set(VariableMisuseModel.presets) == {"small", "tiny"} == set(VARIABLE_MISUSE_PRESETS)
    listed = [p for p in list_presets() if p["family"] == "variable_misuse"]
    assert sorted(p["name"] for p in listed) == ["small", "tiny"]
    model = VariableMisuseModel.from_preset("tiny", vocabulary_size=9, num_relations=3, num_layers=2)
    assert model.get_config() == {
        "name": "variable_misuse", "trainable": True, **VARIABLE_MISUSE_PRESETS["tiny"], "num_layers": 2,
        "vocabulary_size": 9, "num_relations": 3, "check_inputs": True,
    }
    same = graph_transformer(9, 3, preset="tiny", num_layers=1)
    assert same.get_config() == GraphTransformer.from_preset(
        "tiny", vocabulary_size=9, num_relations=3, num_layers=1
    ).get_config()


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"`preset` must be one of \['small', 'tiny'\] for VariableMisuseModel"):
        VariableMisuseModel.from_preset("base", vocabulary_size=9, num_relations=3)
    with pytest.raises(ValueError, match=r"Unknown arguments \['layers'\] for VariableMisuseModel"):
        VariableMisuseModel.from_preset("tiny", vocabulary_size=9, num_relations=3, layers=2)
    with pytest.raises(TypeError, match="num_relations"):
        VariableMisuseModel.from_preset("tiny", vocabulary_size=9)
    bad = {
        "vocabulary_size": (1, "`vocabulary_size` must be an integer >= 2"),
        "num_relations": (0, "`num_relations` must be a positive integer"),
        "num_layers": (0, "`num_layers` must be a positive integer"),
        "hidden_dim": (7, r"`hidden_dim` \(7\) must be divisible by `num_heads` \(3\)"),
        "feedforward_dim": (2.5, "`feedforward_dim` must be a positive integer"),
        "dropout": (1.0, r"`dropout` must lie in \[0, 1\)"),
        "check_inputs": (1, "`check_inputs` must be True or False"),
        "heads_share_relative_embedding": ("yes", "`heads_share_relative_embedding` must be True or False"),
    }
    for model_class in (GraphTransformer, VariableMisuseModel):
        for name, (value, words) in bad.items():
            with pytest.raises(ValueError, match=words):
                model_class(**{**GRAPH, name: value})


def test_from_model_refuses_other_models():
    music_like = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    for model_class in (GraphTransformer, VariableMisuseModel):
        with pytest.raises(ValueError, match=f"`model` must be a Keras model built by {model_class.builder_name}"):
            model_class.from_model(music_like)
    with pytest.raises(ValueError, match="must be a Keras model built by VariableMisuseModel"):
        VariableMisuseModel.from_model(GraphTransformer(**GRAPH))


def test_the_repair_loss_counts_every_right_position_and_nothing_without_a_bug():
    logits = np.log(np.array([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]], "float32"))
    targets = np.array([[0, 1, 0, 1], [0, 0, 0, 0]], "float32")
    np.testing.assert_allclose(numpy(repair_loss(targets, logits)), [-np.log(0.6), 0.0], rtol=1e-6)
