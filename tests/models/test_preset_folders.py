"""Preset folders: `save_to_preset(folder)` writes keras-hub's layout and
`from_preset(folder)` gives the same logits and decoding settings; a folder
is data: its config loads in Keras's safe mode and weights whose sha256
differs from its metadata are refused."""

import json

import keras
import numpy as np
import pytest

from keras_selfattn.models import (
    GraphHeads,
    MusicTransformer,
    TranslationTransformer,
    graph_transformer,
    list_presets,
    music_transformer,
)


@pytest.fixture(scope="module")
def shipped():
    return MusicTransformer.from_preset("maestro_small")


def _logits(model, tokens):
    return keras.ops.convert_to_numpy(model(tokens, training=False))


def test_the_shipped_model_saved_as_a_folder_loads_with_the_same_logits_and_settings(shipped, tmp_path):
    presets_before = list_presets()
    folder = shipped.save_to_preset(tmp_path / "mine", training_command="python recipes/music.py --model_dir x")
    assert sorted(path.name for path in folder.iterdir()) == [
        "README.md", "config.json", "metadata.json", "model.weights.h5",
    ]
    config = json.loads((folder / "config.json").read_text())
    assert config["class_name"] == "MusicTransformer"  # keras-hub's config.json: a Keras serialization
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["parameter_count"] == shipped.count_params() and metadata["keras_version"] == keras.__version__
    assert "python recipes/music.py --model_dir x" in (folder / "README.md").read_text()
    loaded = MusicTransformer.from_preset(str(folder))
    tokens = np.random.default_rng(0).integers(2, 310, (2, 37)).astype("int32")
    np.testing.assert_array_equal(_logits(loaded, tokens), _logits(shipped, tokens))
    as_json = json.loads(json.dumps(shipped.generation_settings))  # id ranges come back as lists
    assert loaded.generation_settings == as_json
    assert list_presets() == presets_before


def test_weights_whose_sha256_differs_are_refused_naming_the_file(tmp_path):
    model = music_transformer(23, preset="tiny")
    folder = model.save_to_preset(tmp_path / "tampered")
    weights = folder / "model.weights.h5"
    data = bytearray(weights.read_bytes())
    data[-9] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"model\.weights\.h5 has sha256 [0-9a-f]{64}; metadata\.json expects"):
        MusicTransformer.from_preset(folder)
    architecture = MusicTransformer.from_preset(folder, load_weights=False)  # the config alone still loads
    assert architecture.get_config() == model.get_config()


def test_a_folder_whose_config_asks_for_a_lambda_is_refused_in_safe_mode(tmp_path):
    encoder = graph_transformer(9, 3, preset="tiny", num_layers=1)
    token_ids, relations = encoder.inputs
    doubled = keras.layers.Lambda(lambda x: 2 * x, name="code")(encoder.output)
    heads = GraphHeads([token_ids, relations], {"score": keras.layers.Dense(1, name="score")(doubled)})
    folder = heads.save_to_preset(tmp_path / "with_code")
    assert "Lambda" in (folder / "config.json").read_text()
    with pytest.raises(ValueError, match="cannot be loaded in safe mode"):
        GraphHeads.from_preset(folder)


def test_a_folder_of_another_class_or_architecture_is_refused(tmp_path):
    folder = music_transformer(23, preset="tiny").save_to_preset(tmp_path / "music")
    with pytest.raises(ValueError, match="holds a 'MusicTransformer', not a TranslationTransformer"):
        TranslationTransformer.from_preset(folder)
    with pytest.raises(ValueError, match=r"\['num_layers'\] would change the architecture"):
        MusicTransformer.from_preset(folder, num_layers=3)
    assert MusicTransformer.from_preset(folder, dropout=0.3).get_config()["dropout"] == 0.3
    (folder / "metadata.json").unlink()
    with pytest.raises(ValueError, match="is not a preset folder: it has no metadata.json"):
        MusicTransformer.from_preset(folder)
