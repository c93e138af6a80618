"""The presets: every one listed, the shipped model loaded with its sha256
checked, and its model card's held-out NLL reproduced on the embedded test data."""

import functools
import re
import shutil
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_selfattn.models import MUSIC_PRESETS, MusicTransformer, list_presets, presets

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = presets.TRAINED_PRESETS["maestro_small"]


def test_list_presets_names_every_preset_and_which_have_weights():
    listed = {(p["family"], p["name"]): p["weights"] for p in list_presets()}
    assert listed[("music", "maestro_small")] is True
    for name in MUSIC_PRESETS:
        assert listed[("music", name)] is False
    families = {family for family, _ in listed}
    assert families == {"music", "accompaniment", "translation", "image", "super_resolution", "graph", "variable_misuse"}
    assert sum(listed.values()) == len(presets.TRAINED_PRESETS)


def test_the_written_out_event_ids_are_the_encodings():
    music = pytest.importorskip("keras_selfattn.data.music")
    assert presets.MAESTRO_EVENT_IDS == music.event_id_ranges()
    assert SHIPPED.hyperparameters["vocabulary_size"] == music.MUSIC_VOCABULARY_SIZE


def test_each_shipped_weights_file_is_small_and_has_a_card():
    for preset in presets.TRAINED_PRESETS.values():
        assert preset.weights_path.stat().st_size <= 10 * 2**20
        assert (ROOT / preset.card).is_file()


def test_from_preset_loads_the_weights_it_checked():
    model = MusicTransformer.from_preset("maestro_small")
    untrained = MusicTransformer.from_preset("maestro_small", load_weights=False)
    assert isinstance(model, MusicTransformer)
    assert model.count_params() == untrained.count_params()
    trained_kernel = model.get_layer("logits").get_weights()[0]
    assert not np.allclose(trained_kernel, untrained.get_layer("logits").get_weights()[0])
    assert model.generation_settings == SHIPPED.generation
    assert model.has_note_state


def test_the_decoding_settings_are_a_hyperparameter_saved_with_the_model(tmp_path):
    model = MusicTransformer.from_preset("maestro_small", load_weights=False)
    assert model.get_config()["generation_settings"] == SHIPPED.generation
    path = str(tmp_path / "shipped.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert restored.generation_settings["min_note_steps"] == SHIPPED.generation["min_note_steps"]
    assert restored.generation_settings["temperature"] == SHIPPED.generation["temperature"]
    untrained = MusicTransformer.from_preset("tiny", vocabulary_size=12)
    assert untrained.generation_settings == {} and "generation_settings" not in untrained.get_config()
    with pytest.raises(ValueError, match=r"`generation_settings` must be a dict"):
        MusicTransformer.from_preset("tiny", vocabulary_size=12, generation_settings=[0.9])


def test_a_damaged_weights_file_is_refused(tmp_path, monkeypatch):
    damaged = tmp_path / SHIPPED.weights_file
    shutil.copy(SHIPPED.weights_path, damaged)
    with open(damaged, "r+b") as handle:
        handle.seek(-1, 2)
        last = handle.read(1)
        handle.seek(-1, 2)
        handle.write(bytes([last[0] ^ 1]))
    monkeypatch.setattr(presets, "WEIGHTS_DIR", tmp_path)
    with pytest.raises(ValueError, match="sha256"):
        MusicTransformer.from_preset("maestro_small")
    damaged.unlink()
    with pytest.raises(ValueError, match="missing"):
        MusicTransformer.from_preset("maestro_small")


def test_unknown_and_untrained_presets_are_named():
    with pytest.raises(ValueError, match=r"\['maestro', 'maestro_small', 'small', 'tiny'\].*Received: preset='nope'"):
        MusicTransformer.from_preset("nope")
    with pytest.raises(TypeError, match="vocabulary_size"):
        MusicTransformer.from_preset("small")


def card_nll(card_text):
    """`{factor: NLL}` from the card's rows `| 1x | 256 | chunks | NLL |`."""
    rows = re.findall(r"^\| (\d)x \| (\d+) \| (\d+) \| ([\d.]+) \|", card_text, re.MULTILINE)
    return {int(factor): (int(length), int(chunks), float(nll)) for factor, length, chunks, nll in rows}


@pytest.mark.slow
@pytest.mark.backends("tensorflow", reason="the embedded data's encoding (note-seq) and long predicts")
@pytest.mark.parametrize("factor", [1, 2, 4])
def test_the_cards_held_out_nll_reproduces(factor):
    """NLL per event on every non-overlapping chunk of the three test
    performances, from the logits by numpy, against the card's figure at
    1x, 2x and 4x the training length."""
    music = pytest.importorskip("keras_selfattn.data.music")
    figures = card_nll((ROOT / SHIPPED.card).read_text(encoding="utf-8"))
    assert sorted(figures) == [1, 2, 4]
    test = music.load_performances(progress=False)["test"]
    assert len(test) == 3
    model = _shipped_model()
    length, chunks, nll = figures[factor]
    windows = music.evaluation_chunks(test, length + 1)
    assert len(windows) == chunks
    logits = model.predict(windows[:, :-1], batch_size=max(1, 16 // factor), verbose=0)
    log_probs = keras.ops.convert_to_numpy(keras.ops.log_softmax(logits.astype("float64"), axis=-1))
    targets = windows[:, 1:]
    measured = -np.take_along_axis(log_probs, targets[..., None], axis=-1).mean()
    assert abs(measured - nll) <= 0.01, f"{factor}x: measured {measured:.4f}, card {nll}"


@functools.cache
def _shipped_model():
    return MusicTransformer.from_preset("maestro_small")
