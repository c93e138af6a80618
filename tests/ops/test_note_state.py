"""The note state against a plain Python walk over the events."""

import math

import numpy as np
import pytest
from keras import ops

from keras_selfattn.ops.cache import update_token_cache
from keras_selfattn.ops.note_state import (
    elapsed_steps,
    initial_last_note_events,
    note_id_ranges,
    note_state,
    note_state_after,
    running_max,
    time_shift_id_range,
)

# 0-1 reserved, note-ons of 3 pitches at 2-4, note-offs at 5-7, other events 8-9;
# timed, ids 8 and 9 are time shifts of 1 and 2 steps.
IDS = dict(note_on_id=2, note_off_id=5, num_pitches=3)
TIME_SHIFTS = (8, 2)


def _walked_state(row, timed=False):
    """`[len(row), 6]`: sounding flags, then log1p(age) / log1p(512), one
    event at a time; timed `[len(row), 9]`, then log1p(steps) / log1p(1000)."""
    struck, struck_at_step, step = {}, {}, 0
    states = []
    for position, token in enumerate(row):
        if 2 <= token <= 4:
            struck[token - 2], struck_at_step[token - 2] = position, step
        elif 5 <= token <= 7:
            struck.pop(token - 5, None)
        elif timed and token in (8, 9):
            step += token - 7
        flags = [1.0 if pitch in struck else 0.0 for pitch in range(3)]
        ages = [math.log1p(position - struck[pitch]) / math.log1p(512) if pitch in struck else 0.0 for pitch in range(3)]
        times = [math.log1p(step - struck_at_step[pitch]) / math.log1p(1000) if pitch in struck else 0.0 for pitch in range(3)]
        states.append(flags + ages + (times if timed else []))
    return np.array(states, "float32")


def test_state_follows_every_note_on_and_off():
    tokens = np.random.default_rng(3).integers(0, 10, (4, 40)).astype("int32")
    state = ops.convert_to_numpy(note_state(tokens, **IDS))
    assert state.shape == (4, 40, 6)
    for row in range(4):
        np.testing.assert_allclose(state[row], _walked_state(tokens[row]), atol=1e-6, err_msg=f"row {row}")


def test_a_timed_state_also_follows_each_notes_time_steps():
    tokens = np.random.default_rng(5).integers(0, 10, (4, 40)).astype("int32")
    state = ops.convert_to_numpy(note_state(tokens, **IDS, time_shifts=TIME_SHIFTS))
    assert state.shape == (4, 40, 9)
    for row in range(4):
        np.testing.assert_allclose(state[row], _walked_state(tokens[row], timed=True), atol=1e-6, err_msg=f"row {row}")


@pytest.mark.parametrize("timed", [False, True], ids=["events", "timed"])
def test_steps_carried_in_the_last_events_equal_the_whole_sequence(timed):
    tokens = np.random.default_rng(6).integers(0, 10, (3, 17)).astype("int32")
    time_shifts = TIME_SHIFTS if timed else None
    last_events = initial_last_note_events(3, 3, timed=timed)
    states = []
    for start, end in ((0, 5), (5, 6), (6, 12), (12, 17)):
        state, last_events = note_state_after(last_events, tokens[:, start:end], **IDS, start=start, time_shifts=time_shifts)
        states.append(ops.convert_to_numpy(state))
    whole = ops.convert_to_numpy(note_state(tokens, **IDS, time_shifts=time_shifts))
    np.testing.assert_allclose(np.concatenate(states, axis=1), whole, atol=1e-6)
    if timed:
        np.testing.assert_array_equal(ops.convert_to_numpy(last_events)[:, 3, 0], np.sum(np.where(tokens >= 8, tokens - 7, 0), axis=1))


def test_elapsed_steps_add_up_only_the_time_shifts():
    tokens = np.array([[8, 2, 9, 0, 9, 10]], "int32")  # 10 is past the two time shift ids
    np.testing.assert_array_equal(ops.convert_to_numpy(elapsed_steps(tokens, *TIME_SHIFTS)), [[1, 1, 3, 3, 5, 5]])


def test_time_shift_id_range_reads_the_vocabularys_range():
    assert time_shift_id_range({"note_on": (2, 4), "time_shift": (8, 9)}, 10) == (8, 2)
    with pytest.raises(ValueError, match=r"needs `note_event_ids` to map 'time_shift'.*\[0, 10\)"):
        time_shift_id_range({"note_on": (2, 4), "note_off": (5, 7)}, 10)


def test_a_restruck_note_ages_from_its_last_note_on_and_padding_changes_nothing():
    tokens = np.array([[2, 8, 8, 2, 8, 5, 0, 0]], "int32")  # pitch 0 struck twice, then released
    state = ops.convert_to_numpy(note_state(tokens, **IDS))[0]
    np.testing.assert_allclose(state[4, 3] * math.log1p(512), math.log1p(1), atol=1e-6)
    np.testing.assert_array_equal(state[5:], 0.0)


@pytest.mark.parametrize("timed", [False, True], ids=["events", "timed"])
@pytest.mark.parametrize("start,length", [(0, 5), (7, 1), (12, 8)])
def test_a_window_of_positions_sees_every_earlier_token(start, length, timed):
    tokens = np.random.default_rng(4).integers(0, 10, (2, 20)).astype("int32")
    time_shifts = TIME_SHIFTS if timed else None
    window = ops.convert_to_numpy(note_state(tokens, **IDS, start=start, length=length, time_shifts=time_shifts))
    whole = ops.convert_to_numpy(note_state(tokens, **IDS, time_shifts=time_shifts))
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


@pytest.mark.backends("tensorflow", reason="only a TensorFlow graph leaves the length unknown when traced")
def test_running_max_of_a_length_unknown_when_traced_equals_numpys():
    import tensorflow as tf

    loop = tf.function(running_max, input_signature=[tf.TensorSpec([None, None, 3], tf.int32)])
    for length in (1, 2, 7, 33):
        values = np.random.default_rng(length).integers(-1, 50, (2, length, 3)).astype("int32")
        np.testing.assert_array_equal(loop(values).numpy(), np.maximum.accumulate(values, axis=1))
