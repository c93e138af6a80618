"""Segment memory of the Music Transformer (Transformer-XL): a segment with
the previous segment's block inputs as memory equals the last rows of the
model over both segments."""

import numpy as np
import pytest
from keras import ops

from keras_selfattn.models.music_transformer import MusicTransformer, music_transformer

VOCABULARY = 23
TINY = dict(
    preset="tiny", num_layers=2, hidden_dim=16, num_heads=2, key_dim=8, feedforward_dim=24,
    max_relative_position=8, timing_signal=False,
)


def memory_model(memory_length, **overrides):
    return music_transformer(VOCABULARY, **{**TINY, "memory_length": memory_length, **overrides})


def tokens(batch, length, seed=0):
    return np.random.default_rng(seed).integers(0, VOCABULARY, (batch, length)).astype("int32")


def numpy(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


@pytest.mark.parametrize("memory_length", [5, 7], ids=["memory_equals_segment", "memory_longer"])
def test_second_segment_with_memory_equals_the_last_rows_over_both(memory_length):
    model = memory_model(memory_length)
    sequence = tokens(3, 11)
    first, second = sequence[:, :5], sequence[:, 5:]
    full = numpy(model(sequence))
    first_logits, memory = model.call_with_memory(first)
    second_logits, memory = model.call_with_memory(second, memory)
    np.testing.assert_allclose(numpy(first_logits), full[:, :5], atol=1e-5)
    np.testing.assert_allclose(numpy(second_logits), full[:, 5:], atol=1e-5)
    assert [tuple(state.shape) for state in memory["states"]] == [(3, memory_length, 16)] * 2
    assert numpy(memory["lengths"]).tolist() == [memory_length] * 3


def test_memory_holds_the_last_block_inputs_without_gradient():
    model = memory_model(4)
    sequence = tokens(2, 6)
    _, memory = model.call_with_memory(sequence)
    x, _ = model._embed_targets(sequence)
    np.testing.assert_allclose(numpy(memory["states"][0]), numpy(x)[:, -4:], atol=1e-6)
    second = model.decoder_blocks[0](x)
    np.testing.assert_allclose(numpy(memory["states"][1]), numpy(second)[:, -4:], atol=1e-5)


def test_forward_pass_without_memory_is_unchanged():
    without = music_transformer(VOCABULARY, **TINY)
    model = memory_model(4)
    model.set_weights(without.get_weights())
    sequence = tokens(2, 9)
    np.testing.assert_allclose(numpy(model(sequence)), numpy(without(sequence)), atol=1e-6)
    assert without.get_config()["memory_length"] == 0 and without.cache_window is None


def test_memory_length_round_trips_through_the_config():
    model = memory_model(4, segment_length=6)
    config = model.get_config()
    assert (config["memory_length"], config["segment_length"]) == (4, 6)
    rebuilt = MusicTransformer.from_config(config)
    assert (rebuilt.memory_length, rebuilt.cache_window) == (4, 10)
    assert memory_model(3).cache_window == 6


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(memory_length=-1), r"`memory_length` must be an integer >= 0 .*memory_length=-1"),
        (dict(memory_length=True), r"`memory_length` must be an integer >= 0 .*memory_length=True"),
        (dict(memory_length=2.0), r"`memory_length` must be an integer >= 0"),
        (dict(memory_length=0, segment_length=4), r"`segment_length` must be None or an integer >= 1, given only with"),
        (dict(memory_length=4, segment_length=0), r"`segment_length` must be None or an integer >= 1"),
        (dict(memory_length=4, attention="absolute"), r"attention='absolute' \(only 'relative_global' takes memory\)"),
        (dict(memory_length=4, attention="relative_local"), r"attention='relative_local'"),
        (dict(memory_length=4, timing_signal=True), r"timing_signal=True \(absolute positions"),
        (
            dict(memory_length=4, note_event_ids={"note_on": (2, 5), "note_off": (6, 9)}),
            r"note_event_ids \(the note state",
        ),
    ],
)
def test_bad_memory_settings_are_refused_by_name(overrides, message):
    config = {**TINY, **overrides}
    note_event_ids = config.pop("note_event_ids", None)
    with pytest.raises(ValueError, match=message):
        music_transformer(VOCABULARY, note_event_ids=note_event_ids, **config)


def test_memory_calls_need_a_model_with_memory():
    model = music_transformer(VOCABULARY, **TINY)
    with pytest.raises(ValueError, match=r"needs a model built with `memory_length > 0`.*memory_length=0"):
        model.call_with_memory(tokens(1, 3))
