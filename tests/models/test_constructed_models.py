"""The sequence families as keras-hub-style Backbones: constructed from their
hyperparameters, which `get_config` returns; presets on the class; the
cached-step contract and `generate` on the model; files saved by earlier
versions still load and generate the same tokens."""

import contextlib
import json
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_selfattn.generation import continue_sequence, translate_tokens
from keras_selfattn.models import (
    MaskedSparseCategoricalCrossentropy,
    MusicTransformer,
    TranslationTransformer,
    music_transformer,
    transformer_translation,
)

SAVED = Path(__file__).with_name("saved")
NOTE_EVENT_IDS = {"note_on": (2, 9), "note_off": (10, 17)}
MUSIC = dict(
    vocabulary_size=30, num_layers=2, hidden_dim=24, num_heads=3, key_dim=5, feedforward_dim=40,
    attention="relative_local", max_relative_position=6, block_length=4, timing_signal=False,
    note_event_ids=NOTE_EVENT_IDS,
)
TRANSLATION = dict(
    source_vocabulary_size=19, target_vocabulary_size=17, num_layers=2, hidden_dim=24, num_heads=3,
    feedforward_dim=40, norm_first=True, position="shaw", max_relative_position=4,
    tie_output_projection=False,
)


def _same_outputs(model, other, inputs):
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model(inputs)), keras.ops.convert_to_numpy(other(inputs)), atol=1e-6
    )


@pytest.mark.parametrize(
    "model_class, hyperparameters, inputs",
    [
        (MusicTransformer, MUSIC, np.array([[3, 12, 20, 4, 11]], "int32")),
        (
            TranslationTransformer, TRANSLATION,
            {"source_tokens": np.array([[5, 6, 1, 0]], "int32"), "target_tokens": np.array([[0, 3, 4]], "int32")},
        ),
    ],
    ids=["music", "translation"],
)
def test_get_config_is_the_constructor_arguments_and_rebuilds_the_model(model_class, hyperparameters, inputs):
    model = model_class(**hyperparameters, name="mine")
    config = model.get_config()
    assert config == {"name": "mine", "trainable": True, **_with_defaults(model_class, hyperparameters)}
    rebuilt = model_class.from_config(config)
    assert type(rebuilt) is model_class and rebuilt.get_config() == config
    rebuilt.set_weights(model.get_weights())
    _same_outputs(model, rebuilt, inputs)


def _with_defaults(model_class, hyperparameters):
    import inspect

    parameters = inspect.signature(model_class).parameters
    defaults = {
        name: p.default for name, p in parameters.items() if p.default is not inspect.Parameter.empty
    }
    defaults.pop("kwargs", None)
    return {**defaults, **hyperparameters}


def test_the_model_owns_its_layers():
    model = MusicTransformer(**MUSIC)
    assert [block.name for block in model.decoder_blocks] == ["decoder_block_0", "decoder_block_1"]
    assert model.note_state is model.get_layer("note_state")
    assert model.target_position is None and model.output_projection is model.get_layer("logits")
    translation = TranslationTransformer(**TRANSLATION)
    assert len(translation.encoder_blocks) == 2 and translation.source_position is None


def test_builders_are_presets_with_overrides_and_the_old_keyword_still_works():
    model = music_transformer(23, preset="tiny", num_layers=1)
    same = MusicTransformer.from_preset("tiny", vocabulary_size=23, num_layers=1)
    assert model.get_config() == same.get_config()
    with pytest.warns(DeprecationWarning, match="`vocab_size` is deprecated; pass `vocabulary_size`"):
        old = music_transformer(vocab_size=23, preset="tiny", num_layers=1)
    assert old.get_config() == model.get_config()
    with pytest.warns(DeprecationWarning, match="`source_vocab_size` is deprecated"):
        transformer_translation(source_vocab_size=9, target_vocabulary_size=9, preset="tiny", num_layers=1)


def test_presets_are_listed_on_each_class():
    assert MusicTransformer.presets["maestro_small"]["weights"] is True
    assert MusicTransformer.presets["tiny"] == {
        "description": "untrained architecture", "weights": False,
        "hyperparameters": MusicTransformer.presets["tiny"]["hyperparameters"],
    }
    assert set(TranslationTransformer.presets) == {"base", "big", "tiny"}
    model = TranslationTransformer.from_preset("tiny", source_vocabulary_size=9, target_vocabulary_size=8)
    assert model.get_config()["num_layers"] == TranslationTransformer.presets["tiny"]["hyperparameters"]["num_layers"]


def test_from_preset_names_what_is_wrong():
    with pytest.raises(ValueError, match=r"`preset` must be one of \['maestro', 'maestro_small', 'small', 'tiny'\]"):
        MusicTransformer.from_preset("nope")
    with pytest.raises(ValueError, match=r"Unknown arguments \['layers'\] for MusicTransformer.from_preset\('tiny'\)"):
        MusicTransformer.from_preset("tiny", vocabulary_size=9, layers=2)
    with pytest.raises(ValueError, match=r"\['num_layers'\] would change the architecture of the trained preset"):
        MusicTransformer.from_preset("maestro_small", num_layers=2)
    with pytest.raises(TypeError, match="vocabulary_size"):
        MusicTransformer.from_preset("tiny")


def test_generate_is_the_free_functions():
    music = MusicTransformer(**MUSIC)
    primer = np.array([[3, 12, 20], [4, 5, 6]], "int32")
    np.testing.assert_array_equal(
        music.generate(primer, 5, seed=3, top_k=4, note_event_ids=NOTE_EVENT_IDS),
        continue_sequence(music, primer, 5, seed=3, top_k=4, note_event_ids=NOTE_EVENT_IDS),
    )
    translation = TranslationTransformer(**TRANSLATION)
    source = np.array([[5, 6, 1, 0], [7, 8, 9, 1]], "int32")
    np.testing.assert_array_equal(
        translation.generate(source, 6, temperature=0.7, seed=2),
        translate_tokens(translation, source, 6, temperature=0.7, seed=2),
    )


@pytest.mark.backends("tensorflow", "jax", reason="loads files saved on TensorFlow")
def test_files_saved_as_functional_classes_by_an_earlier_version_load_and_generate_the_same():
    """The two files were saved by the version whose classes were Functional
    models assembled by builders, with the tokens they generated then."""
    expected = json.loads((SAVED / "functional_generated.json").read_text())
    music = keras.models.load_model(SAVED / "music_transformer_functional.keras")
    assert type(music) is MusicTransformer and music.has_note_state
    primer = np.array(expected["primer"], "int32")
    sampled = music.generate(primer, 6, seed=1, note_event_ids=expected["note_event_ids"])
    assert np.asarray(sampled).tolist() == expected["music_tokens"]
    assert np.asarray(music.generate(primer, 6, temperature=0.0)).tolist() == expected["music_greedy"]
    translation = keras.models.load_model(SAVED / "transformer_translation_functional.keras")
    assert type(translation) is TranslationTransformer
    assert translation.target_embedding is translation.source_embedding
    source = np.array(expected["source"], "int32")
    translated = translation.generate(source, 5, temperature=1.0, seed=2)
    assert np.asarray(translated).tolist() == expected["translation_tokens"]


def test_every_family_class_lists_its_presets_and_builds_them():
    from keras_selfattn.models import (
        GRAPH_PRESETS,
        IMAGE_PRESETS,
        SUPER_RESOLUTION_PRESETS,
        GraphTransformer,
        ImageTransformer,
        SuperResolutionTransformer,
    )

    assert set(ImageTransformer.presets) == set(IMAGE_PRESETS)
    assert set(SuperResolutionTransformer.presets) == set(SUPER_RESOLUTION_PRESETS)
    assert set(GraphTransformer.presets) == set(GRAPH_PRESETS)
    image = ImageTransformer.from_preset("tiny", image_shape=(4, 4, 3), num_layers=1)
    assert type(image) is ImageTransformer and image.image_shape == (4, 4, 3)
    graph = GraphTransformer.from_preset("tiny", vocabulary_size=9, num_relations=2, num_layers=1)
    assert graph.vocabulary_size == 9 and graph.num_relations == 2


def _count_traces(model):
    """Counts the Python runs of `model.train_step`: one per trace in graph mode."""
    traces = []
    train_step = model.train_step

    def counted(data):
        traces.append(1)
        return train_step(data)

    model.train_step = counted
    return traces


@pytest.mark.parametrize("strategy", ["default", "mirrored"])
def test_fit_traces_the_training_step_once(strategy):
    if keras.config.backend() != "tensorflow":
        pytest.skip("tracing is TensorFlow's")
    import tensorflow as tf

    scope = tf.distribute.MirroredStrategy(["CPU:0"]).scope() if strategy == "mirrored" else contextlib.nullcontext()
    with scope:
        model = MusicTransformer(**MUSIC)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=MaskedSparseCategoricalCrossentropy())
    traces = _count_traces(model)
    tokens = np.random.default_rng(0).integers(1, 30, (4, 9))
    history = model.fit(tokens[:, :-1], tokens[:, 1:], batch_size=2, epochs=2, verbose=0)
    assert len(traces) == 1
    assert model.optimizer.iterations.numpy() == 4
    assert np.isfinite(history.history["loss"]).all()
