import keras
import numpy as np
import pytest

from keras_selfattn.generation import continue_sequence, translate_tokens
from tests.generation.generation_models import (
    greedy_music,
    greedy_translation,
    music_model,
    sharpen,
    translation_model,
    translation_score,
)

RNG = np.random.default_rng(3)
ON_TENSORFLOW = keras.backend.backend() == "tensorflow"


def _primer(batch=2, length=3, vocab_size=20):
    return RNG.integers(0, vocab_size, (batch, length)).astype("int32")


def _source(batch=3):
    source = RNG.integers(2, 14, (batch, 6)).astype("int32")
    source[1, 4:] = 0
    return source


@pytest.mark.parametrize("attention", ["relative_global", "relative_local", "absolute"])
def test_greedy_music_equals_the_uncached_argmax_loop(attention):
    model = music_model(attention)
    primer = _primer()
    tokens = continue_sequence(model, primer, 7, temperature=0)
    np.testing.assert_array_equal(tokens, greedy_music(model, primer, 7))
    assert keras.backend.standardize_dtype(tokens.dtype) == "int32"


def test_greedy_local_compressed_music_equals_the_uncached_argmax_loop():
    """Local and memory-compressed blocks alternated. Token embeddings of
    unit scale (an untrained model's small ones repeat one token, which a
    broken cache would repeat too) and the compressed block's output scaled
    up, so that its memory, not only the local blocks, decides each argmax."""
    model = music_model("local_compressed")
    rng = np.random.default_rng(2)
    table = model.target_embedding.embeddings
    table.assign(rng.normal(0.0, 1.0, table.shape))
    output = model.decoder_blocks[1].self_attention.output_dense.kernel
    output.assign(keras.ops.convert_to_numpy(output) * 8.0)
    primer = rng.integers(0, 20, (2, 3)).astype("int32")
    expected = greedy_music(model, primer, 7)
    assert len(np.unique(expected[:, 3:])) > 3, "the tokens barely change: the test checks little"
    np.testing.assert_array_equal(continue_sequence(model, primer, 7, temperature=0), expected)


def test_a_one_token_primer_continues():
    model = music_model("absolute")
    primer = _primer(length=1)
    np.testing.assert_array_equal(
        continue_sequence(model, primer, 5, temperature=0), greedy_music(model, primer, 5)
    )


@pytest.mark.parametrize(
    "settings", [dict(top_k=1), dict(top_p=1e-6), dict(top_k=3, top_p=1e-6)], ids=str
)
def test_settings_that_keep_one_token_equal_greedy(settings):
    model = music_model("absolute")
    primer = _primer()
    greedy = continue_sequence(model, primer, 6, temperature=0)
    np.testing.assert_array_equal(continue_sequence(model, primer, 6, seed=4, **settings), greedy)


def test_sampling_keeps_the_primer_and_follows_the_seed():
    model = music_model("absolute")
    primer = _primer(batch=4, length=5)
    first = np.asarray(continue_sequence(model, primer, 8, seed=7))
    np.testing.assert_array_equal(first[:, :5], primer)
    np.testing.assert_array_equal(continue_sequence(model, primer, 8, seed=7), first)
    assert not np.array_equal(continue_sequence(model, primer, 8, seed=8), first)
    assert first.min() >= 0 and first.max() < 20


@pytest.mark.parametrize("attention", ["relative_global", "relative_local", "absolute"])
def test_primers_of_different_lengths_each_continue_from_their_own_length(attention):
    model = sharpen(music_model(attention), factor=2.0)
    primer = _primer(batch=3, length=6)
    lengths = np.array([3, 6, 2])
    padding = RNG.integers(0, 20, primer.shape).astype("int32")
    padded = np.where(np.arange(6) < lengths[:, None], primer, padding)  # padding values are ignored
    tokens = np.asarray(continue_sequence(model, padded, 4, primer_length=lengths, temperature=0))
    assert tokens.shape == (3, 10)
    for row, length in enumerate(lengths):
        expected = greedy_music(model, primer[row : row + 1, :length], 4)[0]
        np.testing.assert_array_equal(tokens[row, : length + 4], expected, err_msg=f"row {row}")
        assert not tokens[row, length + 4 :].any()


def test_a_padded_sampled_primer_draws_what_it_draws_unpadded():
    model = music_model("relative_global")
    primer = _primer(batch=1, length=6)
    for length in (2, 5):
        padded = continue_sequence(model, primer, 5, primer_length=[length], seed=3, top_k=6)
        alone = continue_sequence(model, primer[:, :length], 5, seed=3, top_k=6)
        np.testing.assert_array_equal(np.asarray(padded)[:, : length + 5], alone)


def test_a_source_translates_alike_however_far_it_is_padded():
    model = sharpen(translation_model("shaw"))
    source = _source()
    wider = np.pad(source, [(0, 0), (0, 5)])
    np.testing.assert_array_equal(translate_tokens(model, wider, 7), translate_tokens(model, source, 7))
    if ON_TENSORFLOW:  # beam search
        tokens, scores = translate_tokens(model, source, 7, beam_size=3, return_scores=True)
        wide_tokens, wide_scores = translate_tokens(model, wider, 7, beam_size=3, return_scores=True)
        np.testing.assert_array_equal(wide_tokens, tokens)
        np.testing.assert_allclose(wide_scores, scores, rtol=1e-6)


@pytest.mark.parametrize("position", ["sinusoidal", "shaw"])
def test_greedy_translation_equals_the_uncached_argmax_loop(position):
    model = sharpen(translation_model(position))
    source = _source()
    expected = greedy_translation(model, source, 7)
    np.testing.assert_array_equal(translate_tokens(model, source, 7), expected)
    np.testing.assert_array_equal(translate_tokens(model, source, 7, beam_size=1), expected)


def test_a_model_with_one_embedding_for_both_sides_translates():
    model = sharpen(translation_model("shaw", vocab_size=14, share_embeddings=True))
    source = _source()
    np.testing.assert_array_equal(translate_tokens(model, source, 7), greedy_translation(model, source, 7))


def test_translation_pads_after_eos():
    model = sharpen(translation_model("sinusoidal", vocab_size=4), factor=1.0)
    tokens = np.asarray(translate_tokens(model, _source(8), 10, temperature=1.0, seed=2))
    assert tokens.shape == (8, 10)
    ends = [np.flatnonzero(row == 1) for row in tokens]
    assert any(len(end) for end in ends), "no translation ended: the test checks nothing"
    for row, end in zip(tokens, ends):
        if len(end):
            assert not row[end[0] + 1 :].any()


@pytest.mark.skipif(not ON_TENSORFLOW, reason="beam search runs on TensorFlow")
@pytest.mark.parametrize("position", ["sinusoidal", "shaw"])
def test_beam_search_scores_at_least_greedy(position):
    model = translation_model(position, vocab_size=8)
    source = np.random.default_rng(3).integers(2, 14, (12, 6)).astype("int32")
    greedy = np.asarray(translate_tokens(model, source, 6))
    beam = np.asarray(translate_tokens(model, source, 6, beam_size=4, alpha=0.6))
    assert beam.shape == greedy.shape == (12, 6)
    beam_scores = translation_score(model, source, beam, 0.6)
    greedy_scores = translation_score(model, source, greedy, 0.6)
    assert (beam_scores >= greedy_scores - 1e-4).all(), (beam_scores, greedy_scores)
    if position == "shaw":  # this model's greedy translations are not all the best
        assert (beam_scores > greedy_scores + 0.1).sum() >= 3
    for row in beam:
        ends = np.flatnonzero(row == 1)
        if len(ends):
            assert not row[ends[0] + 1 :].any()


@pytest.mark.backends("torch", reason="autograd records eager torch ops")
def test_generation_records_no_autograd_graph_on_torch():
    model = translation_model("shaw", vocab_size=8)
    _, scores = translate_tokens(model, _source(), 4, temperature=1.0, seed=3, return_scores=True)
    assert not scores.requires_grad


def test_returned_scores_are_the_gnmt_scores_of_the_translations():
    model = translation_model("shaw", vocab_size=8)
    source = np.random.default_rng(4).integers(2, 14, (6, 5)).astype("int32")
    settings = [dict(), dict(temperature=1.0, seed=3)]
    if ON_TENSORFLOW:
        settings.append(dict(beam_size=3))
    for setting in settings:
        tokens, scores = translate_tokens(model, source, 6, alpha=0.6, return_scores=True, **setting)
        expected = translation_score(model, source, np.asarray(tokens), 0.6)
        np.testing.assert_allclose(np.asarray(scores), expected, rtol=1e-4, atol=1e-4, err_msg=str(setting))


@pytest.mark.skipif(ON_TENSORFLOW, reason="TensorFlow runs beam search")
def test_beam_search_needs_tensorflow():
    with pytest.raises(ValueError, match="`beam_size` > 1 .* TensorFlow backend"):
        translate_tokens(translation_model("sinusoidal"), _source(), 4, beam_size=2)


@pytest.mark.skipif(not ON_TENSORFLOW, reason="beam search runs on TensorFlow")
def test_a_better_truncated_hypothesis_beats_a_one_token_eos():
    """The documented case of `generation.beam`'s override: `[EOS]` (log 0.4,
    score -0.92) finishes at once; `[a, a, a]` runs to `max_length` unfinished
    with the better penalised score (log 0.6 * 0.99^2 / 1.19 = -0.45).
    tf-models-official returns the finished one; the override the truncated."""
    import tensorflow as tf
    from official.nlp.modeling.ops.beam_search import SequenceBeamSearch

    from keras_selfattn.generation.beam import _truncated_hypotheses_compete

    eos, token = 1, 2
    first_step = np.log([1e-9, 0.4, 0.6]).astype("float32")
    later_steps = np.log([1e-9, 0.01, 0.99]).astype("float32")

    def symbols_to_logits(ids, index, state):
        logits = tf.where(index == 0, first_step, later_steps)
        return tf.tile(logits[None], [tf.shape(ids)[0], 1]), state

    def search(search_class):
        beam = search_class(
            symbols_to_logits, vocab_size=3, beam_size=2, alpha=0.6, max_decode_length=3,
            eos_id=eos, padded_decode=False, dtype="float32",
        )
        state = {"unused": tf.zeros((1, 1))}
        ids, scores = beam.search(tf.zeros((1,), "int32"), state)
        return ids.numpy(), scores.numpy()

    official_ids, _ = search(SequenceBeamSearch)
    assert official_ids[0, 0, 1] == eos  # its best: the one-token EOS
    ids, scores = search(_truncated_hypotheses_compete())
    np.testing.assert_array_equal(ids[0, 1:], [token, token, token])
    expected = np.log(0.6 * 0.99 * 0.99) / ((5.0 + 3) / 6.0) ** 0.6
    np.testing.assert_allclose(scores[0], expected, rtol=1e-4)
