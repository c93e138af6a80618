"""MelodyConditionedMusicTransformer: cached steps against the forward pass,
melody padding, causality, the melody's reach, save and load, generation
against a loop of forward passes, and its errors."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.models import MELODY_PRESETS, MelodyConditionedMusicTransformer, list_presets

RNG = np.random.default_rng(41)
VOCABULARY = 30
# Note-ons of 8 pitches at 2-9, their note-offs at 10-17.
NOTE_EVENT_IDS = {"note_on": (2, 9), "note_off": (10, 17)}
# Batch 2 or 3, 3 heads, melodies of 7 and tokens of 11: all different, and
# both longer than the relative table's 5 distances.
CONFIG = dict(
    vocabulary_size=VOCABULARY, num_layers=2, hidden_dim=24, num_heads=3, key_dim=8, feedforward_dim=32,
    max_relative_position=5, max_melody_length=16,
)


def _model(**overrides):
    return MelodyConditionedMusicTransformer(**{**CONFIG, **overrides})


def _logits(model, melody, tokens):
    return ops.convert_to_numpy(model({"melody": melody, "tokens": tokens}))


def _melodies(batch_size, length):
    return RNG.integers(1, VOCABULARY, (batch_size, length)).astype("int32")


def _cached_logits(model, melody, tokens):
    """The logits of a loop of one-token cached steps over the encoded melody."""
    encoder_outputs, padding_mask = model.encode(melody)
    cache = model.initial_cache(tokens.shape[0], tokens.shape[1])
    steps = []
    for t in range(tokens.shape[1]):
        logits, hidden, cache = model.call_with_cache(
            tokens[:, t : t + 1], cache, t, encoder_outputs, padding_mask
        )
        assert tuple(hidden.shape) == (tokens.shape[0], 1, CONFIG["hidden_dim"])
        steps.append(ops.convert_to_numpy(logits))
    return np.concatenate(steps, axis=1)


@pytest.mark.parametrize("note_event_ids", [None, NOTE_EVENT_IDS], ids=["", "note_state"])
@pytest.mark.parametrize("timing_signal", [True, False], ids=["timing", "relative_only"])
def test_cached_decoding_equals_the_forward_pass(note_event_ids, timing_signal):
    model = _model(note_event_ids=note_event_ids, timing_signal=timing_signal)
    melody = _melodies(2, 7)
    melody[1, :2] = 0  # padded on the left
    tokens = RNG.integers(0, VOCABULARY, (2, 11)).astype("int32")
    full = _logits(model, melody, tokens)
    assert full.shape == (2, 11, VOCABULARY) and full.dtype == np.float32
    np.testing.assert_allclose(_cached_logits(model, melody, tokens), full, atol=1e-5)


def test_a_prefill_then_steps_equal_the_forward_pass():
    model = _model(note_event_ids=NOTE_EVENT_IDS)
    melody, tokens = _melodies(3, 7), RNG.integers(0, VOCABULARY, (3, 11)).astype("int32")
    encoder_outputs, padding_mask = model.encode(melody)
    cache = model.initial_cache(3, 11)
    first, _, cache = model.call_with_cache(tokens[:, :6], cache, 0, encoder_outputs, padding_mask)
    rest, _, _ = model.call_with_cache(tokens[:, 6:], cache, 6, encoder_outputs, padding_mask)
    np.testing.assert_allclose(
        np.concatenate([ops.convert_to_numpy(first), ops.convert_to_numpy(rest)], axis=1),
        _logits(model, melody, tokens),
        atol=1e-5,
    )


def test_melodies_padded_on_either_side_give_the_rows_of_the_unpadded_melodies():
    model = _model()
    melodies = _melodies(3, 5)
    tokens = RNG.integers(0, VOCABULARY, (3, 11)).astype("int32")
    alone = [_logits(model, melodies[row : row + 1], tokens[row : row + 1])[0] for row in range(3)]
    padded = np.zeros((3, 9), "int32")
    padded[0, 4:] = melodies[0]  # on the left
    padded[1, :5] = melodies[1]  # on the right
    padded[2, 2:7] = melodies[2]  # both
    np.testing.assert_allclose(_logits(model, padded, tokens), np.stack(alone), atol=1e-5)
    np.testing.assert_allclose(_cached_logits(model, padded, tokens), np.stack(alone), atol=1e-5)


def test_the_decoder_is_causal():
    model = _model(note_event_ids=NOTE_EVENT_IDS)
    melody, tokens = _melodies(1, 7), RNG.integers(0, VOCABULARY, (1, 12)).astype("int32")
    changed = tokens.copy()
    changed[0, 7] = (changed[0, 7] + 1) % VOCABULARY
    before, after = _logits(model, melody, tokens), _logits(model, melody, changed)
    np.testing.assert_allclose(before[:, :7], after[:, :7], atol=1e-6)
    assert not np.allclose(before[:, 7:], after[:, 7:])


def test_the_melody_changes_every_positions_logits():
    model = _model()
    melody, tokens = _melodies(1, 7), RNG.integers(0, VOCABULARY, (1, 12)).astype("int32")
    other = melody.copy()
    other[0, -1] = other[0, -1] % (VOCABULARY - 1) + 1  # the last melody event only
    before, after = _logits(model, melody, tokens), _logits(model, other, tokens)
    assert all(not np.allclose(before[0, t], after[0, t], atol=1e-6) for t in range(12))


def test_save_and_load_round_trip(tmp_path):
    model = _model(note_event_ids=NOTE_EVENT_IDS, dropout=0.1)
    melody, tokens = _melodies(2, 7), RNG.integers(0, VOCABULARY, (2, 11)).astype("int32")
    expected = _logits(model, melody, tokens)
    config = model.get_config()
    assert config == {"name": model.name, "trainable": True, **CONFIG, "dropout": 0.1,
                      "timing_signal": True, "note_event_ids": NOTE_EVENT_IDS}
    rebuilt = MelodyConditionedMusicTransformer.from_config(config)
    assert rebuilt.get_config() == config
    model.save(tmp_path / "melody.keras")
    loaded = keras.saving.load_model(tmp_path / "melody.keras")
    assert isinstance(loaded, MelodyConditionedMusicTransformer)
    # The file stores its config as JSON: the id ranges come back as lists.
    assert loaded.get_config() == {**config, "note_event_ids": {"note_on": [2, 9], "note_off": [10, 17]}}
    np.testing.assert_allclose(_logits(loaded, melody, tokens), expected, atol=1e-6)
    assert len(loaded.initial_cache(2, 11)) == 3  # two blocks, then the note state


def _greedy_uncached(model, melody, primer, max_new_tokens):
    """The argmax of the full forward pass re-run on the growing sequence."""
    tokens = np.asarray(primer, "int32")
    for _ in range(max_new_tokens):
        logits = _logits(model, melody, tokens)
        tokens = np.concatenate([tokens, logits[:, -1:].argmax(-1).astype("int32")], axis=1)
    return tokens


def test_greedy_generation_equals_a_loop_of_forward_passes_and_a_seed_repeats_a_sample():
    keras.utils.set_random_seed(1)  # these tokens must not depend on the tests before
    model = _model(note_event_ids=NOTE_EVENT_IDS)
    rng = np.random.default_rng(3)
    # Embeddings and projection of unit scale, so that the argmax follows the
    # tokens (an untrained model's small ones repeat one token).
    tables = model.target_embedding.embeddings, model.melody_embedding.embeddings, model.output_projection.kernel
    for table in tables:
        table.assign(rng.normal(0.0, 1.0, table.shape))
    melody = rng.integers(1, VOCABULARY, (2, 6)).astype("int32")
    melody[0, :2] = 0
    primer = rng.integers(0, VOCABULARY, (2, 3)).astype("int32")
    expected = _greedy_uncached(model, melody, primer, 10)
    assert len(np.unique(expected[:, 3:])) > 5, "the tokens barely change: the test checks little"
    greedy = model.generate(melody=melody, primer=primer, max_new_tokens=10, temperature=0)
    np.testing.assert_array_equal(ops.convert_to_numpy(greedy), expected)
    other_melody = model.generate(melody=melody[::-1], primer=primer, max_new_tokens=10, temperature=0)
    assert not np.array_equal(ops.convert_to_numpy(other_melody), expected)

    sample = dict(melody=melody, primer=primer, max_new_tokens=10, temperature=1.0, top_p=0.9)
    first = ops.convert_to_numpy(model.generate(**sample, seed=7))
    np.testing.assert_array_equal(ops.convert_to_numpy(model.generate(**sample, seed=7)), first)
    assert first.shape == (2, 13) and np.array_equal(first[:, :3], primer)


def test_generation_follows_the_note_rules():
    model = _model()
    melody, primer = _melodies(2, 6), np.array([[2, 20], [3, 21]], "int32")
    tokens = ops.convert_to_numpy(
        model.generate(melody=melody, primer=primer, max_new_tokens=30, seed=2, note_event_ids=NOTE_EVENT_IDS)
    )
    for row in tokens:
        sounding = set()
        for token in row:
            if 2 <= token <= 9:
                assert token not in sounding, "struck a sounding pitch"
                sounding.add(token)
            elif 10 <= token <= 17:
                assert token - 8 in sounding, "released a silent pitch"
                sounding.remove(token - 8)


def test_attention_scores_cover_the_tokens_and_the_melody():
    model = _model()
    scores = model.attention_scores(_melodies(2, 7), RNG.integers(0, VOCABULARY, (2, 11)), block=0)
    assert tuple(scores["self"].shape) == (2, 3, 11, 11)
    assert tuple(scores["cross"].shape) == (2, 3, 11, 7)


def test_presets_are_listed_and_built():
    assert set(MELODY_PRESETS) == {"tiny", "small"}
    listed = {p["name"] for p in list_presets() if p["family"] == "accompaniment"}
    assert listed == {"tiny", "small"}
    small = MelodyConditionedMusicTransformer.from_preset("small", vocabulary_size=VOCABULARY)
    assert [block.name for block in small.encoder_blocks] == [f"encoder_block_{i}" for i in range(4)]
    assert small.get_layer("decoder_block_3").self_attention.max_relative_position == 128
    assert small.get_layer("decoder_block_3").cross_attention.num_heads == 4
    assert small.get_config()["max_melody_length"] == 2048


class TestErrors:
    def test_a_melody_longer_than_the_model_allows(self):
        model = _model()
        message = r"`melody` is longer than the model's `max_melody_length` 16. Received: melody.shape=\(1, 17\)"
        melody, tokens = _melodies(1, 17), np.array([[3, 4]], "int32")
        with pytest.raises(ValueError, match=message):
            model.generate(melody=melody, primer=tokens, max_new_tokens=2)
        with pytest.raises(ValueError, match=message):
            model({"melody": melody, "tokens": tokens})
        with pytest.raises(ValueError, match=message):
            model.encode(melody)

    @pytest.mark.parametrize(
        "melody,primer,message",
        [
            ([1, 2, 3], [[3]], r"`melody` must be integer tokens `\[batch, length\]` with length >= 1"),
            (np.ones((1, 3), "float32"), [[3]], r"`melody` must be integer tokens"),
            ([[1, 2, 3]], np.zeros((1, 0), "int32"), r"`primer` must be integer tokens `\[batch, length\]`"),
            ([[1, 2, 3]] * 2, [[3]] * 3, r"`melody` and `primer` must have one row per sequence, as many of each"),
        ],
        ids=["1d_melody", "float_melody", "empty_primer", "batch_sizes"],
    )
    def test_bad_shapes(self, melody, primer, message):
        with pytest.raises(ValueError, match=message):
            _model().generate(melody=np.asarray(melody), primer=np.asarray(primer), max_new_tokens=2)

    def test_melody_ids_outside_the_vocabulary(self):
        with pytest.raises(ValueError, match=r"melody"):
            _model()({"melody": np.array([[1, VOCABULARY]]), "tokens": np.array([[3]])})

    @pytest.mark.parametrize("value", [0, 2.5, True, None], ids=str)
    def test_max_melody_length_not_a_positive_integer(self, value):
        message = rf"`max_melody_length` must be an integer >= 1. Received: max_melody_length={value!r}"
        with pytest.raises(ValueError, match=message):
            _model(max_melody_length=value)

    def test_hyperparameters_named_in_errors(self):
        with pytest.raises(ValueError, match="`hidden_dim` \\(24\\) must be divisible by `num_heads` \\(5\\)"):
            _model(num_heads=5)
        with pytest.raises(ValueError, match="`vocabulary_size` must be an integer >= 2"):
            _model(vocabulary_size=1)
        with pytest.raises(ValueError, match="`preset` must be one of"):
            MelodyConditionedMusicTransformer.from_preset("maestro", vocabulary_size=VOCABULARY)
