"""Generation by a Music Transformer with segment memory: sliding-window
caches of `memory_length + segment_length` positions per block, whose shape
never grows however long the generation runs."""

import keras
import numpy as np

from keras_selfattn.generation import continue_sequence
from keras_selfattn.models import music_transformer
from tests.generation.generation_models import SMALL, greedy_music, sharpen

MEMORY, SEGMENT = 4, 6
WINDOW = MEMORY + SEGMENT


def memory_model(num_layers=2, seed=2):
    """Token embeddings of unit scale and sharp logits (an untrained model's
    small ones repeat one token, which a broken window would repeat too),
    and the attention outputs scaled up, so that the keys in the window, not
    only the current token, decide each argmax."""
    model = music_transformer(
        20, preset="tiny", key_dim=8, max_relative_position=8, timing_signal=False,
        memory_length=MEMORY, segment_length=SEGMENT, **dict(SMALL, num_layers=num_layers),
    )
    table = model.target_embedding.embeddings
    table.assign(np.random.default_rng(seed).normal(0.0, 1.0, table.shape))
    for block in model.decoder_blocks:
        output = block.self_attention.output_dense.kernel
        output.assign(keras.ops.convert_to_numpy(output) * 8.0)
    return sharpen(model)


def primer(batch=2, length=3, seed=0):
    return np.random.default_rng(seed).integers(0, 20, (batch, length)).astype("int32")


def test_the_cache_keeps_its_shape_over_eight_times_the_segment_length():
    model = memory_model()
    total = 8 * SEGMENT
    cache = model.initial_cache(2, total)
    shapes = [tuple(c.shape) for c in cache]
    assert shapes == [(2, 2, WINDOW, 2, 8)] * 2
    tokens = primer(length=total)
    for index in range(total):
        logits, _, cache = model.call_with_cache(tokens[:, index : index + 1], cache, index)
        assert [tuple(c.shape) for c in cache] == shapes
    assert np.isfinite(keras.ops.convert_to_numpy(logits)).all()
    generated = continue_sequence(model, primer(), total, temperature=0)
    assert tuple(generated.shape) == (2, 3 + total)
    assert len(np.unique(np.asarray(generated)[:, 3:])) > 3, "the tokens barely change"


def test_greedy_tokens_equal_the_uncached_argmax_while_the_window_covers_them():
    model = memory_model()
    start = primer()
    expected = greedy_music(model, start, WINDOW - 3)
    assert len(np.unique(expected[:, 3:])) > 3, "the tokens barely change: the test checks little"
    np.testing.assert_array_equal(continue_sequence(model, start, WINDOW - 3, temperature=0), expected)


def test_past_the_window_one_block_attends_to_the_last_window_of_tokens():
    """With one block every cached key depends on its own token only, so a
    step past the window equals the model over the last `WINDOW` tokens.
    The primer is longer than the window too."""
    model = memory_model(num_layers=1)
    start, new = primer(length=WINDOW + 2), 2 * WINDOW
    tokens = np.pad(start, [(0, 0), (0, new)])
    for t in range(start.shape[1], start.shape[1] + new):
        logits = model.predict_on_batch(tokens[:, t - WINDOW : t])
        tokens[:, t] = logits[:, -1].argmax(-1)
    assert len(np.unique(tokens[:, WINDOW + 2 :])) > 3, "the tokens barely change"
    np.testing.assert_array_equal(continue_sequence(model, start, new, temperature=0), tokens)
