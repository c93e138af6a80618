"""The note state against a plain Python walk over the events."""

import math

import numpy as np
import pytest
from keras import ops

from keras_selfattn.ops.cache import update_token_cache
from keras_selfattn.ops.note_state import note_id_ranges, note_state, running_max

# 0-1 reserved, note-ons of 3 pitches at 2-4, note-offs at 5-7, other events 8-9.
IDS = dict(note_on_id=2, note_off_id=5, num_pitches=3)


def _walked_state(row):
    """`[len(row), 6]`: sounding flags, then log1p(age) / log1p(512), one event at a time."""
    struck = {}
    states = []
    for position, token in enumerate(row):
        if 2 <= token <= 4:
            struck[token - 2] = position
        elif 5 <= token <= 7:
            struck.pop(token - 5, None)
        flags = [1.0 if pitch in struck else 0.0 for pitch in range(3)]
        ages = [math.log1p(position - struck[pitch]) / math.log1p(512) if pitch in struck else 0.0 for pitch in range(3)]
        states.append(flags + ages)
    return np.array(states, "float32")


def test_state_follows_every_note_on_and_off():
    tokens = np.random.default_rng(3).integers(0, 10, (4, 40)).astype("int32")
    state = ops.convert_to_numpy(note_state(tokens, **IDS))
    assert state.shape == (4, 40, 6)
    for row in range(4):
        np.testing.assert_allclose(state[row], _walked_state(tokens[row]), atol=1e-6, err_msg=f"row {row}")


def test_a_restruck_note_ages_from_its_last_note_on_and_padding_changes_nothing():
    tokens = np.array([[2, 8, 8, 2, 8, 5, 0, 0]], "int32")  # pitch 0 struck twice, then released
    state = ops.convert_to_numpy(note_state(tokens, **IDS))[0]
    np.testing.assert_allclose(state[4, 3] * math.log1p(512), math.log1p(1), atol=1e-6)
    np.testing.assert_array_equal(state[5:], 0.0)


@pytest.mark.parametrize("start,length", [(0, 5), (7, 1), (12, 8)])
def test_a_window_of_positions_sees_every_earlier_token(start, length):
    tokens = np.random.default_rng(4).integers(0, 10, (2, 20)).astype("int32")
    window = ops.convert_to_numpy(note_state(tokens, **IDS, start=start, length=length))
    whole = ops.convert_to_numpy(note_state(tokens, **IDS))
    np.testing.assert_allclose(window, whole[:, start : start + length], atol=1e-6)


def test_token_cache_writes_each_row_at_the_index():
    cache = np.full((2, 6), 9, "int32")
    updated = ops.convert_to_numpy(update_token_cache(cache, np.array([[1, 2], [3, 4]], "int32"), 3))
    np.testing.assert_array_equal(updated, [[9, 9, 9, 1, 2, 9], [9, 9, 9, 3, 4, 9]])


def test_note_id_ranges_reads_the_vocabularys_ranges():
    assert note_id_ranges({"note_on": (2, 4), "note_off": (5, 7), "velocity": (8, 9)}, 10) == (2, 5, 3)
    with pytest.raises(ValueError, match=r"`note_event_ids` must map .*\[0, 7\)"):
        note_id_ranges({"note_on": (2, 4), "note_off": (5, 7)}, 7)


@pytest.mark.parametrize("length", [1, 2, 7, 16, 33])
def test_running_max_equals_numpys(length):
    values = np.random.default_rng(length).integers(-1, 50, (2, length, 3)).astype("int32")
    np.testing.assert_array_equal(
        ops.convert_to_numpy(running_max(values)), np.maximum.accumulate(values, axis=1)
    )
