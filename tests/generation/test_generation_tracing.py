"""The generation functions inside compiled functions: `tf.function` with one
trace for any content, XLA, and `jax.jit`."""

import contextlib

import keras
import numpy as np
import pytest

from keras_selfattn.generation import continue_sequence, sample_images, translate_tokens
from tests.generation.generation_models import (
    IMAGE_SHAPE,
    image_model,
    music_model,
    translation_model,
)

ON_TENSORFLOW = keras.backend.backend() == "tensorflow"
RNG = np.random.default_rng(21)


def _cases():
    music = music_model("absolute")
    translation = translation_model("sinusoidal")
    image = image_model("local_2d")
    dmol = image_model("local_1d", "dmol", num_classes=3)
    labels = np.array([0, 2], "int32")
    return {
        "music": (lambda primer, seed: continue_sequence(music, primer, 5, seed=seed),
                  lambda: RNG.integers(0, 20, (2, 3)).astype("int32")),
        "translation": (lambda source, seed: translate_tokens(translation, source, 5, temperature=1.0, seed=seed),
                        lambda: RNG.integers(2, 14, (2, 4)).astype("int32")),
        "images": (lambda known, seed: sample_images(image, known_pixels=known, known_rows=1, seed=seed),
                   lambda: RNG.integers(0, 256, (2,) + IMAGE_SHAPE).astype("uint8")),
        "dmol": (lambda known, seed: sample_images(dmol, class_labels=labels, known_pixels=known, known_rows=1, seed=seed, temperature=0.8),
                 lambda: RNG.integers(0, 256, (2,) + IMAGE_SHAPE).astype("uint8")),
    }


CASES = ["music", "translation", "images", "dmol"]


@contextlib.contextmanager
def _functions_run_eagerly():
    """`tf.function`s (the generation loop's own among them) run as Python."""
    import tensorflow as tf

    tf.config.run_functions_eagerly(True)
    try:
        yield
    finally:
        tf.config.run_functions_eagerly(False)


@pytest.mark.skipif(not ON_TENSORFLOW, reason="tf.function")
@pytest.mark.parametrize("case", CASES)
def test_one_trace_for_any_content_and_the_eager_draws(case):
    import tensorflow as tf

    generate, make_input = _cases()[case]
    compiled = tf.function(generate)
    first, second = make_input(), make_input()
    seed = tf.constant(5)
    out_first = np.asarray(compiled(first, seed))
    out_second = np.asarray(compiled(second, seed))
    assert compiled.experimental_get_tracing_count() == 1
    with _functions_run_eagerly():
        eager_first, eager_second = generate(first, 5), generate(second, 5)
    np.testing.assert_array_equal(out_first, eager_first)
    np.testing.assert_array_equal(out_second, eager_second)
    graph = compiled.get_concrete_function(first, seed).graph
    assert not {op.type for op in graph.get_operations()} & {"PyFunc", "EagerPyFunc"}


@pytest.mark.skipif(not ON_TENSORFLOW, reason="tf.function")
def test_eager_calls_trace_once_per_shape_and_settings_note_rules_included():
    """As a user calls them: new inputs, a new seed and a new (equal)
    `note_event_ids` dict each call reuse the first call's graph."""
    from keras_selfattn.generation import images, sequences

    note_event_ids = {"note_on": (2, 5), "note_off": (6, 9)}
    music = music_model("relative_global", note_event_ids=note_event_ids)
    translation = translation_model("sinusoidal")
    image = image_model("local_2d")
    calls = {
        sequences._continue_sequence: lambda seed: continue_sequence(
            music, RNG.integers(0, 20, (2, 3)), 4, seed=seed, note_event_ids=dict(note_event_ids)
        ),
        sequences._generate_translation: lambda seed: translate_tokens(
            translation, RNG.integers(2, 14, (2, 4)), 4, temperature=1.0, seed=seed
        ),
        images._generate_images: lambda seed: sample_images(
            image, known_pixels=RNG.integers(0, 256, (2,) + IMAGE_SHAPE).astype("uint8"), known_rows=1,
            seed=seed,
        ),
    }
    for wrapped, call in calls.items():
        call(1)
        traces = wrapped.graph_function.experimental_get_tracing_count()
        for seed in (2, 3):
            call(seed)
        assert wrapped.graph_function.experimental_get_tracing_count() == traces, wrapped.__name__


@pytest.mark.skipif(not ON_TENSORFLOW, reason="tf.function")
@pytest.mark.parametrize("case", CASES)
def test_xla_compiled_generation_follows_the_seed(case):
    """Under XLA a seed's draws are reproducible, another seed's differ, and
    (as docs/layers.md says) they are not the graph's draws for that seed:
    TensorFlow compiles its stateless random ops differently there."""
    import tensorflow as tf

    generate, make_input = _cases()[case]
    inputs = make_input()
    first = np.asarray(tf.function(generate, jit_compile=True)(inputs, tf.constant(3)))
    recompiled = tf.function(generate, jit_compile=True)
    np.testing.assert_array_equal(recompiled(inputs, tf.constant(3)), first)
    assert not np.array_equal(recompiled(inputs, tf.constant(4)), first)
    graph_draw = np.asarray(generate(inputs, 3))
    assert first.shape == graph_draw.shape and first.dtype == graph_draw.dtype
    assert not np.array_equal(first, graph_draw), (
        "XLA now draws what the graph draws: say so in the note on seeds in docs/layers.md"
    )


@pytest.mark.slow
@pytest.mark.skipif(not ON_TENSORFLOW, reason="tf.function")
def test_xla_greedy_equals_eager_greedy_and_beam_search_compiles():
    import tensorflow as tf

    music, translation = music_model("relative_global"), translation_model("shaw")
    primer = RNG.integers(0, 20, (2, 3)).astype("int32")
    source = RNG.integers(2, 14, (2, 5)).astype("int32")
    greedy = tf.function(lambda p: continue_sequence(music, p, 6, temperature=0), jit_compile=True)
    np.testing.assert_array_equal(greedy(primer), continue_sequence(music, primer, 6, temperature=0))
    beam = tf.function(lambda s: translate_tokens(translation, s, 5, beam_size=3), jit_compile=True)
    np.testing.assert_array_equal(beam(source), translate_tokens(translation, source, 5, beam_size=3))


@pytest.mark.skipif(not ON_TENSORFLOW, reason="tf.function")
def test_beam_search_with_a_free_batch_dimension():
    import tensorflow as tf

    model = translation_model("sinusoidal")
    source = RNG.integers(2, 14, (3, 5)).astype("int32")
    serve = tf.function(
        lambda s: translate_tokens(model, s, 5, beam_size=2),
        input_signature=[tf.TensorSpec((None, None), tf.int32)],
    )
    np.testing.assert_array_equal(serve(source), translate_tokens(model, source, 5, beam_size=2))


@pytest.mark.backends("jax", reason="jax.jit")
@pytest.mark.parametrize("case", CASES)
def test_jax_jit_follows_the_seed(case):
    import jax

    generate, make_input = _cases()[case]
    inputs = make_input()
    compiled = jax.jit(lambda x: generate(x, 3))
    np.testing.assert_array_equal(compiled(inputs), generate(inputs, 3))
