import numpy as np
import pytest
from keras import ops
from layer_testing import run_layer_test

from keras_selfattn.layers.note_state_embedding import NoteStateEmbedding
from keras_selfattn.ops.note_state import note_state

IDS = dict(note_on_id=2, note_off_id=6, num_pitches=4)
# Ids 10 and 11 are time shifts of one and two steps.
TIME_SHIFTS = dict(time_shift_id=10, num_time_shifts=2)
TOKENS = np.random.default_rng(7).integers(0, 12, (3, 13)).astype("int32")
TIMINGS = pytest.mark.parametrize("time_shifts", [{}, TIME_SHIFTS], ids=["events", "timed"])


@TIMINGS
def test_shared_layer_checks(tmp_path, time_shifts):
    run_layer_test(
        NoteStateEmbedding, dict(IDS, output_dim=5, **time_shifts), {"tokens": TOKENS}, tmp_path,
        expected_output_shape=(3, 13, 5),
    )


@TIMINGS
def test_output_is_the_state_through_the_kernel(time_shifts):
    layer = NoteStateEmbedding(**IDS, output_dim=5, **time_shifts)
    output = ops.convert_to_numpy(layer(TOKENS))
    timed = (time_shifts["time_shift_id"], time_shifts["num_time_shifts"]) if time_shifts else None
    state = ops.convert_to_numpy(note_state(TOKENS, **IDS, time_shifts=timed))
    assert state.shape[-1] == (12 if time_shifts else 8)
    np.testing.assert_allclose(output, state @ ops.convert_to_numpy(layer.kernel), atol=1e-5)


@TIMINGS
def test_cached_steps_equal_the_full_call(time_shifts):
    layer = NoteStateEmbedding(**IDS, output_dim=5, **time_shifts)
    full = ops.convert_to_numpy(layer(TOKENS))
    cache = layer.initial_cache(3)
    assert tuple(cache.shape) == (3, 4 if time_shifts else 2, 4)
    output, cache = layer(TOKENS[:, :6], cache=cache, cache_update_index=0)
    steps = [ops.convert_to_numpy(output)]
    for t in range(6, 13):
        output, cache = layer(TOKENS[:, t : t + 1], cache=cache, cache_update_index=t)
        steps.append(ops.convert_to_numpy(output))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)
    last = ops.convert_to_numpy(cache)
    for batch in range(3):
        for row, first_id in enumerate((IDS["note_on_id"], IDS["note_off_id"])):
            for pitch in range(IDS["num_pitches"]):
                hits = np.flatnonzero(TOKENS[batch] == first_id + pitch)
                assert last[batch, row, pitch] == (hits[-1] if hits.size else -1)


@TIMINGS
def test_a_cached_call_on_no_tokens_leaves_the_cache_as_it_was(time_shifts):
    """A one-token primer fills the cache with no token before its first step."""
    layer = NoteStateEmbedding(**IDS, output_dim=5, **time_shifts)
    _, cache = layer(TOKENS[:, :4], cache=layer.initial_cache(3), cache_update_index=0)
    output, again = layer(TOKENS[:, :0], cache=cache, cache_update_index=4)
    assert tuple(output.shape) == (3, 0, 5)
    np.testing.assert_array_equal(ops.convert_to_numpy(again), ops.convert_to_numpy(cache))


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(num_pitches=0), "`num_pitches` must be an integer >= 1"),
        (dict(note_on_id=0, note_off_id=6), "`note_on_id` must be an integer >= 1"),
        (dict(output_dim=2.0), "`output_dim` must be an integer >= 1"),
        (dict(note_off_id=4), r"note-on ids \[2, 6\) and note-off ids \[4, 8\) must not overlap"),
        (dict(time_shift_id=10), r"`num_time_shifts` must be an integer >= 1 \(`time_shift_id` and `num_time"),
        (dict(time_shift_id=7, num_time_shifts=3), r"note-off ids \[6, 10\) and time shift ids \[7, 10\) must not"),
    ],
)
def test_bad_arguments_are_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        NoteStateEmbedding(**{**IDS, "output_dim": 5, **overrides})
