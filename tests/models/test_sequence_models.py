import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.generation import continue_sequence
from keras_selfattn.layers.local_relative_attention_1d import LocalRelativeAttention1D
from keras_selfattn.layers.memory_compressed_attention import MemoryCompressedAttention
from keras_selfattn.layers.tied_output_projection import TiedOutputProjection
from keras_selfattn.models.music_transformer import MusicTransformer, music_transformer
from keras_selfattn.models.translation_transformer import transformer_translation

RNG = np.random.default_rng(5)


def _cached_logits(model, tokens, encoder=None):
    """The model's logits from a loop of its own cached steps."""
    cache = model.initial_cache(tokens.shape[0], tokens.shape[1])
    cross = {}
    if encoder is not None:
        outputs, mask = model.encode(encoder)
        cross = dict(encoder_outputs=outputs, encoder_padding_mask=mask)
    steps = []
    for t in range(tokens.shape[1]):
        logits, hidden, cache = model.call_with_cache(tokens[:, t : t + 1], cache, t, **cross)
        assert tuple(hidden.shape) == tuple(logits.shape[:2]) + (model.get_config()["hidden_dim"],)
        steps.append(ops.convert_to_numpy(logits))
    return np.concatenate(steps, axis=1)


@pytest.mark.parametrize("position", ["sinusoidal", "shaw"])
@pytest.mark.parametrize("norm_first", [True, False])
def test_translation_cached_decoding_equals_forward_pass(position, norm_first):
    model = transformer_translation(20, 24, preset="tiny", position=position, norm_first=norm_first)
    source = RNG.integers(1, 20, (2, 7))
    source[1, 4:] = 0
    target = RNG.integers(1, 24, (2, 6))
    full = model({"source_tokens": source, "target_tokens": target})
    assert tuple(full.shape) == (2, 6, 24)
    assert keras.backend.standardize_dtype(full.dtype) == "float32"
    np.testing.assert_allclose(_cached_logits(model, target, source), full, atol=1e-5)


def test_translation_ignores_source_padding():
    model = transformer_translation(20, 24, preset="tiny")
    source = RNG.integers(1, 20, (1, 7))
    source[:, 5:] = 0
    target = RNG.integers(1, 24, (1, 4))
    longer = np.concatenate([source, np.zeros((1, 3), int)], axis=1)
    np.testing.assert_allclose(
        model({"source_tokens": source, "target_tokens": target}),
        model({"source_tokens": longer, "target_tokens": target}),
        atol=1e-5,
    )


# A 30-id vocabulary with the note-ons of 8 pitches at 2-9 and their note-offs at 10-17.
NOTE_EVENT_IDS = {"note_on": (2, 9), "note_off": (10, 17)}


@pytest.mark.parametrize("note_event_ids", [None, NOTE_EVENT_IDS], ids=["", "note_state"])
@pytest.mark.parametrize("attention", ["relative_global", "relative_local", "absolute", "local_compressed"])
def test_music_cached_decoding_equals_forward_pass(attention, note_event_ids):
    model = music_transformer(
        30, preset="tiny", attention=attention, block_length=4, max_relative_position=8,
        note_event_ids=note_event_ids,
    )
    tokens = RNG.integers(0, 30, (2, 11))
    full = model(tokens)
    np.testing.assert_allclose(_cached_logits(model, tokens), full, atol=1e-5)


def test_music_note_state_reaches_the_logits_and_survives_a_save(tmp_path):
    model = music_transformer(30, preset="tiny", note_event_ids=NOTE_EVENT_IDS)
    assert model.get_layer("note_state").kernel.shape == (16, 64)
    tokens = np.array([[2, 20, 20, 20]])  # pitch 0 struck, then other events
    released = np.array([[2, 20, 10, 20]])  # ... and released at position 2
    before, after = np.asarray(model(tokens)), np.asarray(model(released))
    assert not np.allclose(before[:, 2:], after[:, 2:])
    model.save(tmp_path / "music.keras")
    loaded = keras.saving.load_model(tmp_path / "music.keras")
    np.testing.assert_allclose(np.asarray(loaded(released)), after, atol=1e-6)
    assert len(loaded.initial_cache(1, 4)) == 3  # two blocks, then the note state


# ... and time shifts of 1..5 steps at 20-24.
TIMED_EVENT_IDS = dict(NOTE_EVENT_IDS, time_shift=(20, 24))


def test_music_timed_note_state_reads_time_and_its_cached_steps_equal_the_forward_pass(tmp_path):
    model = music_transformer(
        30, preset="tiny", note_event_ids=TIMED_EVENT_IDS, timed_note_state=True, max_relative_position=8,
    )
    assert model.get_layer("note_state").kernel.shape == (24, 64)
    tokens = RNG.integers(0, 30, (2, 11))
    np.testing.assert_allclose(_cached_logits(model, tokens), model(tokens), atol=1e-5)
    model.save(tmp_path / "music.keras")
    loaded = keras.saving.load_model(tmp_path / "music.keras")
    np.testing.assert_allclose(np.asarray(loaded(tokens)), np.asarray(model(tokens)), atol=1e-6)
    assert loaded.get_config()["timed_note_state"] is True


@pytest.mark.parametrize("timed", [False, True], ids=["events", "timed"])
def test_music_timed_note_state_sees_how_long_ago_a_far_note_was_struck(timed):
    """Pitch 0 struck, then a time shift of one or of five steps, then 15
    other events: far outside what local attention sees from the last
    event, only the timed note state tells the two apart."""
    model = music_transformer(
        30, preset="tiny", attention="relative_local", block_length=2, max_relative_position=4,
        note_event_ids=TIMED_EVENT_IDS, timed_note_state=timed,
    )
    soon, later = (np.array([[2, shift] + [25] * 15]) for shift in (20, 24))
    last = [np.asarray(model(tokens))[0, -1] for tokens in (soon, later)]
    assert not np.allclose(*last) if timed else np.array_equal(*last)


@pytest.mark.parametrize(
    "note_event_ids,message",
    [(None, r"`timed_note_state=True` needs the note state"), (NOTE_EVENT_IDS, r"map 'time_shift'")],
)
def test_music_timed_note_state_without_its_ids_is_an_error(note_event_ids, message):
    with pytest.raises(ValueError, match=message):
        music_transformer(30, preset="tiny", note_event_ids=note_event_ids, timed_note_state=True)


@pytest.mark.parametrize("note_event_ids", [None, NOTE_EVENT_IDS], ids=["", "note_state"])
@pytest.mark.parametrize("attention", ["relative_global", "relative_local", "absolute"])
def test_music_is_causal(attention, note_event_ids):
    model = music_transformer(
        30, preset="tiny", attention=attention, block_length=4, max_relative_position=8,
        note_event_ids=note_event_ids,
    )
    tokens = RNG.integers(0, 30, (1, 12))
    changed = tokens.copy()
    changed[0, 7] = (changed[0, 7] + 1) % 30
    before, after = np.asarray(model(tokens)), np.asarray(model(changed))
    np.testing.assert_allclose(before[:, :7], after[:, :7], atol=1e-6)
    assert not np.allclose(before[:, 7:], after[:, 7:])


# tensor2tensor's local and memory-compressed layers alternated, at sizes where
# the length 13 is a multiple of neither the local block 4 nor the factor 3.
LOCAL_COMPRESSED = dict(
    vocabulary_size=30, num_layers=2, hidden_dim=24, num_heads=3, key_dim=8, feedforward_dim=32,
    attention="local_compressed", block_length=4, max_relative_position=8, compression_factor=3,
)


def test_local_compressed_alternates_local_and_compressed_blocks():
    model = MusicTransformer(**dict(LOCAL_COMPRESSED, num_layers=3))
    local, compressed, local_again = (block.self_attention for block in model.decoder_blocks)
    assert type(local) is LocalRelativeAttention1D and type(local_again) is LocalRelativeAttention1D
    assert (local.block_length, local.max_relative_position) == (4, 8)
    assert type(compressed) is MemoryCompressedAttention and compressed.compression_factor == 3
    tokens = RNG.integers(0, 30, (2, 13))
    assert ops.convert_to_numpy(model.attention_scores(tokens, block=0)).shape == (2, 3, 13, 13)
    scores = ops.convert_to_numpy(model.attention_scores(tokens, block=1))
    assert scores.shape == (2, 3, 13, 6)  # position 0, then blocks [0, 3) .. [12, 13)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
    # Entry 0 is always visible, block j once its last position (j + 1) * 3 - 1 is.
    query, block = np.arange(13)[:, None], np.arange(5)[None, :]
    visible = np.concatenate([np.ones((13, 1), bool), (block + 1) * 3 - 1 <= query], axis=1)
    assert np.all(scores[..., ~visible] == 0) and np.all(scores[..., visible] > 0)


def test_local_compressed_round_trips_through_its_config_a_keras_file_and_a_plain_model(tmp_path):
    # A factor other than the default, so that one dropped on the way shows.
    model = MusicTransformer(**dict(LOCAL_COMPRESSED, compression_factor=4), name="mine")
    config = model.get_config()
    assert config["attention"] == "local_compressed" and config["compression_factor"] == 4
    tokens = RNG.integers(0, 30, (2, 13))
    expected = ops.convert_to_numpy(model(tokens))
    rebuilt = MusicTransformer.from_config(config)
    assert rebuilt.get_config() == config
    rebuilt.set_weights(model.get_weights())
    np.testing.assert_allclose(ops.convert_to_numpy(rebuilt(tokens)), expected, atol=1e-6)
    model.save(tmp_path / "local_compressed.keras")
    loaded = keras.models.load_model(tmp_path / "local_compressed.keras")
    assert type(loaded) is MusicTransformer and loaded.get_config() == config
    np.testing.assert_allclose(ops.convert_to_numpy(loaded(tokens)), expected, atol=1e-6)
    viewed = MusicTransformer.from_model(keras.Model(model.input, model.output, name="mine"))
    assert viewed.get_config() == config
    np.testing.assert_allclose(ops.convert_to_numpy(viewed(tokens)), expected, atol=1e-6)


def _greedy_uncached(model, primer, max_new_tokens):
    """The argmax of the full forward pass re-run on the growing sequence."""
    tokens = np.asarray(primer, "int32")
    for _ in range(max_new_tokens):
        logits = ops.convert_to_numpy(model(tokens))
        tokens = np.concatenate([tokens, logits[:, -1:].argmax(-1).astype("int32")], axis=1)
    return tokens


def test_local_compressed_generates_the_tokens_of_the_uncached_loop():
    model = MusicTransformer(**LOCAL_COMPRESSED)
    rng = np.random.default_rng(2)  # its own: these tokens must not depend on the tests before
    # Token embeddings of unit scale, so that the argmax follows the tokens
    # (an untrained model's small ones repeat one token).
    table = model.target_embedding.embeddings
    table.assign(rng.normal(0.0, 1.0, table.shape))
    primer = rng.integers(0, 30, (2, 3)).astype("int32")
    expected = _greedy_uncached(model, primer, 10)
    assert len(np.unique(expected[:, 3:])) > 5, "the tokens barely change: the test checks little"
    np.testing.assert_array_equal(np.asarray(model.generate(primer, 10, temperature=0)), expected)
    # Rows of different primer lengths each continue as they would alone.
    wide = np.concatenate([primer, rng.integers(0, 30, (2, 2)).astype("int32")], axis=1)
    tokens = np.asarray(continue_sequence(model, wide, 8, primer_length=[3, 5], temperature=0))
    np.testing.assert_array_equal(tokens[0, :11], expected[0, :11])
    np.testing.assert_array_equal(tokens[1], _greedy_uncached(model, wide[1:], 8)[0])


@pytest.mark.parametrize("factor", [1, 0, 2.5, True, None], ids=str)
def test_local_compressed_factor_that_is_not_an_integer_above_one_is_an_error(factor):
    message = (
        r"`compression_factor` must be an integer >= 2 \(how many positions the memory-compressed "
        rf"blocks of `attention='local_compressed'` reduce to one\). Received: compression_factor={factor!r}"
    )
    with pytest.raises(ValueError, match=message):
        MusicTransformer(**dict(LOCAL_COMPRESSED, compression_factor=factor))
    with pytest.raises(ValueError, match=message):  # checked whichever the attention, as it is saved
        MusicTransformer(**dict(LOCAL_COMPRESSED, attention="relative_local", compression_factor=factor))


def test_presets_follow_the_papers():
    base = transformer_translation(100, 100, preset="base")
    blocks = [layer for layer in base.layers if layer.name.startswith("decoder_block_")]
    assert len(blocks) == 6
    attention = blocks[0].self_attention
    assert (attention.num_heads, attention.key_dim) == (8, 64)
    assert blocks[0].feedforward_dim == 2048 and blocks[0].dropout == 0.1
    big = transformer_translation(100, 100, preset="big")
    big_block = big.get_layer("encoder_block_0")
    assert big_block.self_attention.num_heads == 16 and big_block.feedforward_dim == 4096
    music = music_transformer(390, preset="maestro")
    music_attention = music.get_layer("decoder_block_7").self_attention
    assert music_attention.max_relative_position == 1024
    assert music.get_layer("decoder_block_0").feedforward_dim == 1024
    small = music_transformer(390, preset="small")
    assert [layer.name for layer in small.layers if layer.name.startswith("decoder_block_")][-1] == "decoder_block_3"
    assert small.get_layer("decoder_block_3").self_attention.max_relative_position == 128
    assert small.get_layer("decoder_block_3").feedforward_dim == 512
    assert small.get_layer("target_embedding").output_dim == 128


@pytest.mark.parametrize(
    "build",
    [
        lambda: transformer_translation(20, 20, preset="tiny", position="shaw", share_embeddings=True),
        lambda: music_transformer(30, preset="tiny", attention="relative_local", block_length=4, max_relative_position=8),
    ],
    ids=["translation", "music"],
)
def test_save_and_load_without_custom_objects(build, tmp_path):
    model = build()
    inputs = (
        {"source_tokens": RNG.integers(1, 20, (2, 5)), "target_tokens": RNG.integers(1, 20, (2, 4))}
        if len(model.inputs) == 2
        else RNG.integers(0, 30, (2, 9))
    )
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(restored(inputs), model(inputs), atol=1e-6)


def test_translation_output_projection_is_the_target_embedding():
    model = transformer_translation(20, 24, preset="tiny")
    logits = model.get_layer("logits")
    assert isinstance(logits, TiedOutputProjection) and logits.units == 24
    assert logits.embedding is model.get_layer("target_embedding")
    untied = transformer_translation(20, 24, preset="tiny", tie_output_projection=False)
    assert isinstance(untied.get_layer("logits"), keras.layers.Dense)
    assert untied.count_params() - model.count_params() == 64 * 24 + 24


def test_joint_vocabulary_is_one_matrix_for_source_target_and_logits(tmp_path):
    model = transformer_translation(20, 20, preset="tiny", share_embeddings=True)
    assert model.target_embedding is model.source_embedding is model.output_projection.embedding
    assert sum("embeddings" in weight.path for weight in model.weights) == 1
    path = str(tmp_path / "joint.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert restored.target_embedding is restored.source_embedding is restored.output_projection.embedding


def test_translation_embeddings_start_at_the_papers_scale():
    model = transformer_translation(4000, 4000, preset="tiny", share_embeddings=True)
    table = ops.convert_to_numpy(model.get_layer("source_embedding").embeddings)
    assert abs(table.std() - 64**-0.5) < 0.01 and abs(table.mean()) < 0.01


class TestBadInput:
    def test_unknown_position(self):
        with pytest.raises(ValueError, match=r"Unknown `position` 'rotary'; valid values: \['sinusoidal', 'shaw'\]"):
            transformer_translation(10, 10, preset="tiny", position="rotary")

    def test_unknown_attention(self):
        valid = r"valid values: \['relative_global', 'relative_local', 'absolute', 'local_compressed'\]"
        with pytest.raises(ValueError, match=valid):
            music_transformer(10, preset="tiny", attention="global")

    def test_vocabulary_below_two(self):
        with pytest.raises(ValueError, match="`target_vocabulary_size` must be an integer >= 2"):
            transformer_translation(10, 1, preset="tiny")
        with pytest.raises(ValueError, match="`vocabulary_size` must be an integer >= 2"):
            music_transformer(0, preset="tiny")

    def test_unknown_preset_and_hyperparameter(self):
        with pytest.raises(ValueError, match="valid presets: \\['base', 'big', 'tiny'\\]"):
            transformer_translation(10, 10, preset="huge")
        with pytest.raises(ValueError, match="Unknown hyperparameters \\['layers'\\]"):
            music_transformer(10, preset="tiny", layers=3)

    def test_shared_embeddings_need_one_vocabulary(self):
        with pytest.raises(ValueError, match="`share_embeddings=True` needs"):
            transformer_translation(10, 12, preset="tiny", share_embeddings=True)

    def test_width_divisible_by_heads(self):
        with pytest.raises(ValueError, match="divisible by `num_heads`"):
            transformer_translation(10, 10, preset="tiny", hidden_dim=30)


def test_music_note_event_ids_outside_the_vocabulary_is_an_error():
    with pytest.raises(ValueError, match=r"`note_event_ids` must map .*\[0, 12\)"):
        music_transformer(12, preset="tiny", note_event_ids=NOTE_EVENT_IDS)


@pytest.mark.parametrize("attention", ["relative_local", "local_compressed"])
def test_music_local_table_longer_than_its_window_is_an_error(attention):
    with pytest.raises(ValueError, match="`max_relative_position` must be at most 2 \\* block_length = 8"):
        music_transformer(30, preset="tiny", attention=attention, block_length=4, max_relative_position=9)


def _token_id_calls():
    """`(name, call)`: each way a model runs its forward pass on TensorFlow."""
    import tensorflow as tf

    return [
        ("eager", lambda model, inputs: model(inputs)),
        ("tf.function", lambda model, inputs: tf.function(model)(inputs)),
        ("predict", lambda model, inputs: model.predict(inputs, verbose=0)),
    ]


def _error_for(how):
    import tensorflow as tf

    return ValueError if how == "eager" else tf.errors.InvalidArgumentError


@pytest.mark.backends("tensorflow", reason="graph-mode assertions")
@pytest.mark.parametrize("bad", [12, -1], ids=["past the vocabulary", "negative"])
def test_music_token_ids_are_checked_in_every_mode(bad):
    model = music_transformer(12, preset="tiny", num_layers=1)
    tokens = np.array([[0, 1, 2, 3, 4], [5, 6, 7, 8, 11]], "int32")
    tokens[1, 3] = bad
    for how, call in _token_id_calls():
        low, high = (0, bad) if bad > 0 else (bad, 11)
        message = rf"token id in `tokens` must lie in \[0, 11\]. Received: values from {low} to {high}"
        with pytest.raises(_error_for(how), match=message):
            call(model, tokens)
    # Under XLA, which drops assertions, the model still compiles and runs.
    import tensorflow as tf

    tokens[1, 3] = 11
    compiled = tf.function(model, jit_compile=True)(tokens)
    np.testing.assert_allclose(np.asarray(compiled), np.asarray(model(tokens)), rtol=1e-4, atol=1e-4)


@pytest.mark.backends("tensorflow", reason="graph-mode assertions")
@pytest.mark.parametrize("name, size", [("source_tokens", 10), ("target_tokens", 8)])
def test_translation_token_ids_are_checked_against_their_own_vocabulary(name, size):
    model = transformer_translation(10, 8, preset="tiny", num_layers=1)
    inputs = {"source_tokens": RNG.integers(1, 10, (2, 4)), "target_tokens": RNG.integers(0, 8, (2, 3))}
    inputs[name][0, 1] = size
    for how, call in _token_id_calls():
        with pytest.raises(_error_for(how), match=rf"token id in `{name}` must lie in \[0, {size - 1}\]"):
            call(model, inputs)
    # Inputs as a list, in the model's input order, are checked too.
    with pytest.raises(ValueError, match=rf"`{name}`"):
        model([inputs["source_tokens"], inputs["target_tokens"]])


def test_token_ids_within_the_vocabulary_run_on_every_backend():
    model = music_transformer(12, preset="tiny", num_layers=1)
    tokens = np.array([[0, 11, 5]], "int32")
    assert ops.convert_to_numpy(model(tokens)).shape == (1, 3, 12)
    # Eagerly every backend raises the named error.
    with pytest.raises(ValueError, match=r"token id in `tokens` must lie in \[0, 11\]"):
        model(np.array([[0, 12, 5]], "int32"))
