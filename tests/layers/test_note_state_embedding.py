import numpy as np
import pytest
from keras import ops
from layer_testing import run_layer_test

from keras_selfattn.layers.note_state_embedding import NoteStateEmbedding
from keras_selfattn.ops.note_state import note_state

IDS = dict(note_on_id=2, note_off_id=6, num_pitches=4)
TOKENS = np.random.default_rng(7).integers(0, 12, (3, 13)).astype("int32")


def test_shared_layer_checks(tmp_path):
    run_layer_test(
        NoteStateEmbedding, dict(IDS, output_dim=5), {"tokens": TOKENS}, tmp_path,
        expected_output_shape=(3, 13, 5),
    )


def test_output_is_the_state_through_the_kernel():
    layer = NoteStateEmbedding(**IDS, output_dim=5)
    output = ops.convert_to_numpy(layer(TOKENS))
    state = ops.convert_to_numpy(note_state(TOKENS, **IDS))
    np.testing.assert_allclose(output, state @ ops.convert_to_numpy(layer.kernel), atol=1e-5)


def test_cached_steps_equal_the_full_call():
    layer = NoteStateEmbedding(**IDS, output_dim=5)
    full = ops.convert_to_numpy(layer(TOKENS))
    cache = layer.initial_cache(3)
    assert tuple(cache.shape) == (3, 2, 4)
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


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(num_pitches=0), "`num_pitches` must be an integer >= 1"),
        (dict(note_on_id=0, note_off_id=6), "`note_on_id` must be an integer >= 1"),
        (dict(output_dim=2.0), "`output_dim` must be an integer >= 1"),
        (dict(note_off_id=4), r"note-on ids \[2, 6\) and note-off ids \[4, 8\) must not overlap"),
    ],
)
def test_bad_arguments_are_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        NoteStateEmbedding(**{**IDS, "output_dim": 5, **overrides})
