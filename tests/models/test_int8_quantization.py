"""`model.quantize("int8")` on a small model of every family: its projections
and embeddings hold int8 weights, its outputs stay near the float model's,
cached generation (and beam search) equals the quantized model's own
uncached loop, a `.keras` file gives back the quantized model, and
`export_for_serving` serves what the quantized model computes in process."""

import functools
import gc
from collections.abc import Callable
from dataclasses import dataclass

import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.generation import sample_images, translate_tokens
from keras_selfattn.models import (
    GraphTransformer,
    MelodyConditionedMusicTransformer,
    VariableMisuseModel,
    image_super_resolution,
    image_transformer,
    music_transformer,
    transformer_translation,
)
from tests.export.exported_models import (
    TRANSLATION_VOCABULARY,
    call_signature,
    sentencepiece_model,
    source_tokens,
)
from tests.generation.generation_models import (
    IMAGE_SHAPE,
    LOW_SHAPE,
    greedy_image,
    greedy_music,
    greedy_translation,
    sharpen,
    translation_score,
    with_fitted_upsampler,
)

pytestmark = pytest.mark.backends("tensorflow", "jax", reason="cached generation")

RNG = np.random.default_rng(29)
# Batch 3, 2 heads, 7 target positions, 5 source (or melody) positions and
# 16 features: all different.
TINY = dict(num_layers=1, hidden_dim=16, num_heads=2, feedforward_dim=32)
BATCH, TARGET_LENGTH, SOURCE_LENGTH = 3, 7, 5
PRIMER_LENGTH, NEW_TOKENS = 3, 4
MAX_LENGTH = 8  # of an exported model's sequences
VOCABULARY, RELATIONS = 20, 4
# The image models' blocks, as `greedy_image` orders a categorical local 2D model's positions.
IMAGE_BLOCKS = dict(block_length=8, block_shape=(2, 6), memory_flange=(1, 2))
TEXTS = ["ich habe hunger", "das ist gut", "wir gehen nach hause"]
def tokens(vocabulary, length, low=1):
    return RNG.integers(low, vocabulary, (BATCH, length)).astype("int32")


PRIMER = tokens(VOCABULARY, PRIMER_LENGTH)
MELODY = tokens(VOCABULARY, SOURCE_LENGTH)
EOS = np.ones((BATCH, 1), "int32")
SOURCE = np.concatenate([tokens(TRANSLATION_VOCABULARY, SOURCE_LENGTH - 1, low=2), EOS], axis=1)
LABELS = np.array([0, 2, 1], "int32")
LOW_RESOLUTION = RNG.integers(0, 256, (BATCH,) + LOW_SHAPE).astype("uint8")


def numpy_tree(outputs):
    return keras.tree.map_structure(ops.convert_to_numpy, outputs)


def graph_inputs():
    token_ids = tokens(VOCABULARY, TARGET_LENGTH)
    token_ids[0, :2] = 0  # padded nodes
    relations = RNG.integers(0, RELATIONS + 1, (BATCH, TARGET_LENGTH, TARGET_LENGTH)).astype("int32")
    return {"token_ids": token_ids, "relations": relations}


def melody_uncached(model):
    """The argmax of the full forward pass re-run on the growing sequence."""
    sequence = PRIMER
    for _ in range(NEW_TOKENS):
        logits = ops.convert_to_numpy(model({"melody": MELODY, "tokens": sequence}))
        sequence = np.concatenate([sequence, logits[:, -1:].argmax(-1).astype("int32")], axis=1)
    return sequence


@dataclass
class Family:
    """A small model of one family: how to build it, the inputs of its
    forward pass, and, for a generative family, its cached greedy
    generation and the uncached loop that must equal it."""

    build: Callable
    inputs: Callable
    generate: Callable = None
    uncached: Callable = None


FAMILIES = {
    "music": Family(
        build=lambda: sharpen(
            music_transformer(
                VOCABULARY, preset="tiny", attention="relative_global", key_dim=8, max_relative_position=4,
                **TINY,
            ),
            factor=2.0,
        ),
        inputs=lambda: {"tokens": tokens(VOCABULARY, TARGET_LENGTH)},
        generate=lambda model: model.generate(PRIMER, NEW_TOKENS, temperature=0),
        uncached=lambda model: greedy_music(model, PRIMER, NEW_TOKENS),
    ),
    "accompaniment": Family(
        build=lambda: sharpen(
            MelodyConditionedMusicTransformer(
                VOCABULARY, key_dim=8, max_relative_position=4, max_melody_length=MAX_LENGTH, **TINY
            ),
            factor=2.0,
        ),
        inputs=lambda: {"melody": MELODY, "tokens": tokens(VOCABULARY, TARGET_LENGTH)},
        generate=lambda model: model.generate(MELODY, PRIMER, NEW_TOKENS, temperature=0),
        uncached=melody_uncached,
    ),
    "translation": Family(
        build=lambda: sharpen(
            transformer_translation(
                TRANSLATION_VOCABULARY, TRANSLATION_VOCABULARY, preset="tiny", position="shaw", **TINY
            ),
            factor=2.0,
        ),
        inputs=lambda: {
            "source_tokens": SOURCE, "target_tokens": tokens(TRANSLATION_VOCABULARY, TARGET_LENGTH)
        },
        generate=lambda model: translate_tokens(model, SOURCE, NEW_TOKENS),
        uncached=lambda model: greedy_translation(model, SOURCE, NEW_TOKENS),
    ),
    "images": Family(
        build=lambda: sharpen(
            image_transformer(
                IMAGE_SHAPE, preset="tiny", attention="local_2d", num_classes=3, **IMAGE_BLOCKS, **TINY
            ),
            factor=2.0,
        ),
        inputs=lambda: {
            "pixels": RNG.integers(0, 256, (BATCH,) + IMAGE_SHAPE).astype("int32"), "class_label": LABELS
        },
        generate=lambda model: sample_images(model, class_labels=LABELS, temperature=0),
        uncached=lambda model: greedy_image(model, "local_2d", "categorical", BATCH, {"class_label": LABELS}),
    ),
    "super_resolution": Family(
        build=lambda: with_fitted_upsampler(
            image_super_resolution(
                LOW_SHAPE, IMAGE_SHAPE, preset="tiny", num_encoder_layers=1, **IMAGE_BLOCKS, **TINY
            )
        ),
        inputs=lambda: {
            "low_resolution": LOW_RESOLUTION.astype("int32"),
            "pixels": RNG.integers(0, 256, (BATCH,) + IMAGE_SHAPE).astype("int32"),
        },
        generate=lambda model: sample_images(model, low_resolution=LOW_RESOLUTION, temperature=0),
        uncached=lambda model: greedy_image(
            model, "local_2d", "categorical", BATCH, {"low_resolution": LOW_RESOLUTION}
        ),
    ),
    "graph": Family(
        build=lambda: GraphTransformer.from_preset(
            "tiny", vocabulary_size=VOCABULARY, num_relations=RELATIONS, **TINY
        ),
        inputs=graph_inputs,
    ),
    "variable_misuse": Family(
        build=lambda: VariableMisuseModel.from_preset(
            "tiny", vocabulary_size=VOCABULARY, num_relations=RELATIONS, **TINY
        ),
        inputs=graph_inputs,
    ),
}
GENERATIVE = [name for name, family in FAMILIES.items() if family.generate is not None]


def quantized_int8(model):
    """`model` quantized to int8. Keras collects garbage in full for each
    weight it replaces; the objects alive before are frozen meanwhile
    (`gc.freeze`), so that each pass looks at new ones only (0.3 s against
    9 s for a translation model on one core)."""
    gc.freeze()
    try:
        model.quantize("int8")
    finally:
        gc.unfreeze()
    return model


@dataclass
class Quantized:
    model: keras.Model
    inputs: dict
    float_outputs: object
    outputs: object


@pytest.fixture(scope="module")
def quantized():
    """`{family: Quantized}`, each family's model built and quantized once
    for this module, on first use."""

    class Models(dict):
        def __missing__(self, name):
            keras.utils.set_random_seed(0)  # the same weights whichever test asks first
            family = FAMILIES[name]
            model, inputs = family.build(), family.inputs()
            float_outputs = numpy_tree(model(inputs))
            outputs = numpy_tree(quantized_int8(model)(inputs))
            self[name] = Quantized(model, inputs, float_outputs, outputs)
            return self[name]

    return Models()


def quantized_weights(model):
    """`(layer class, layer name, dtype of its matrix)` of every quantized
    layer of `model`, sorted (a loaded model's layer paths may differ)."""
    weights = []
    for layer in model._flatten_layers():
        if layer.quantization_mode is not None:
            matrix = layer.embeddings if isinstance(layer, keras.layers.Embedding) else layer.kernel
            weights.append((type(layer).__name__, layer.name, keras.backend.standardize_dtype(matrix.dtype)))
    return sorted(weights)


def assert_outputs_equal(actual, expected):
    keras.tree.map_structure(np.testing.assert_array_equal, numpy_tree(actual), expected)


@pytest.mark.parametrize("name", FAMILIES)
def test_every_projection_and_embedding_holds_int8_weights_and_the_outputs_stay_near(quantized, name):
    model = quantized[name]
    kinds = (keras.layers.Dense, keras.layers.EinsumDense, keras.layers.Embedding)
    layers = model.model._flatten_layers()
    quantizable = sorted((type(layer).__name__, layer.name) for layer in layers if type(layer) in kinds)
    weights = quantized_weights(model.model)
    assert [weight[:2] for weight in weights] == quantizable
    assert {dtype for _, _, dtype in weights} == {"int8"}
    assert "EinsumDense" in {kind for kind, _, _ in weights}  # the attention projections
    # Rounding the weights of these small models moves their outputs by
    # hundredths; a lost scale (an int8 matrix read as float) by hundreds.
    keras.tree.map_structure(
        lambda a, b: np.testing.assert_allclose(a, b, atol=0.15), model.outputs, model.float_outputs
    )


@pytest.mark.parametrize("name", GENERATIVE)
def test_cached_greedy_generation_equals_the_quantized_models_uncached_loop(quantized, name):
    family, model = FAMILIES[name], quantized[name].model
    generated = ops.convert_to_numpy(family.generate(model))
    np.testing.assert_array_equal(generated, family.uncached(model))


def test_beam_search_scores_its_translations_as_the_quantized_model_does(quantized):
    model = quantized["translation"].model
    translations, scores = translate_tokens(
        model, SOURCE, NEW_TOKENS, beam_size=3, alpha=0.6, return_scores=True
    )
    expected = translation_score(model, SOURCE, ops.convert_to_numpy(translations), alpha=0.6)
    np.testing.assert_allclose(ops.convert_to_numpy(scores), expected, rtol=1e-4)


@pytest.mark.parametrize(
    "name",
    FAMILIES,
)
def test_a_functional_model_of_the_quantized_layers_loads_back_the_same(quantized, name, tmp_path):
    """The layers' own configs keep their sublayers quantized: a plain
    Functional model of them (what the builders returned before the model
    classes) saved to `.keras` loads with int8 weights and the same outputs."""
    model = quantized[name]
    plain = keras.Model(model.model.input, model.model.output)
    path = str(tmp_path / f"{name}.keras")
    plain.save(path)
    restored = keras.models.load_model(path)
    assert quantized_weights(restored) == quantized_weights(plain)
    assert_outputs_equal(restored(model.inputs), model.outputs)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_quantized_model_saves_and_loads_as_its_class(quantized, name, tmp_path):
    family, model = FAMILIES[name], quantized[name]
    path = str(tmp_path / f"{name}.keras")
    model.model.save(path)
    restored = keras.models.load_model(path)
    assert type(restored) is type(model.model)
    assert quantized_weights(restored) == quantized_weights(model.model)
    assert_outputs_equal(restored(model.inputs), model.outputs)
    if family.generate is not None:
        assert_outputs_equal(family.generate(restored), ops.convert_to_numpy(family.generate(model.model)))


def test_the_quantized_music_model_saves_as_a_preset_folder_and_loads_int8(quantized, tmp_path):
    model = quantized["music"].model
    folder = model.save_to_preset(tmp_path / "int8_preset")
    restored = type(model).from_preset(folder)
    assert quantized_weights(restored) == quantized_weights(model)
    assert_outputs_equal(restored(quantized["music"].inputs), quantized["music"].outputs)


# What each family's generation signature gives for the module's inputs
# (greedy rows), and what `Family.generate` gives in process.
def served_music(loaded):
    inputs = row_settings(primer=PRIMER, primer_length=PRIMER_LENGTH)
    return call_signature(loaded, "generate", **inputs)["tokens"]


def served_accompaniment(loaded):
    inputs = row_settings(
        melody=MELODY, melody_length=SOURCE_LENGTH, primer=PRIMER, primer_length=PRIMER_LENGTH
    )
    return call_signature(loaded, "accompany", **inputs)["tokens"]


def served_images(loaded):
    greedy = dict(seed=np.arange(BATCH, dtype="int32"), temperature=np.zeros(BATCH, "float32"))
    return call_signature(loaded, "sample", class_label=LABELS, **greedy)["pixels"]


def served_super_resolution(loaded):
    greedy = dict(seed=np.arange(BATCH, dtype="int32"), temperature=np.zeros(BATCH, "float32"))
    inputs = dict(low_resolution=LOW_RESOLUTION, decoding=np.array([b"sample"] * BATCH), **greedy)
    return call_signature(loaded, "super_resolve", **inputs)["pixels"]


SERVED_GENERATION = {
    "music": served_music,
    "accompaniment": served_accompaniment,
    "images": served_images,
    "super_resolution": served_super_resolution,
}


def row_settings(**columns):
    """A request of `BATCH` greedy rows of `NEW_TOKENS` new tokens with
    `columns`: an array as it is, a number every row's (int32 or float32)."""
    greedy = dict(max_new_tokens=NEW_TOKENS, temperature=0.0, top_k=0, top_p=1.0, seed=0)
    request = {}
    for key, value in {**greedy, **columns}.items():
        if np.ndim(value) == 0:
            value = np.full(BATCH, value, "float32" if isinstance(value, float) else "int32")
        request[key] = value
    return request


def served_outputs(name, outputs):
    """The quantized model's `outputs` under the names `serving_default` gives them."""
    if isinstance(outputs, dict):
        return outputs
    return {"encodings" if name == "graph" else "logits": outputs}


@functools.cache
def tokenizer():
    """The translation model's SentencePiece model (its bytes)."""
    return sentencepiece_model()


@pytest.fixture(scope="module")
def exported(quantized, tmp_path_factory):
    """`{family: SavedModel path}`: each quantized model exported once for
    this module, on first use (the translation model with a tokenizer)."""
    from keras_selfattn.export import export_for_serving

    base = tmp_path_factory.mktemp("int8_exports")

    class Exports(dict):
        def __missing__(self, name):
            options = EXPORT_OPTIONS.get(name, {})
            if name == "translation":
                options = dict(options, tokenizer=tokenizer())
            self[name] = export_for_serving(quantized[name].model, base, name=name, **options)
            return self[name]

    return Exports()


EXPORT_OPTIONS = {
    "music": dict(max_length=MAX_LENGTH),
    "accompaniment": dict(max_length=MAX_LENGTH),
    "translation": dict(beam_size=3, max_length=MAX_LENGTH),
}
# Exporting traces every generation signature (10 to 30 s each on one busy
# core): the graph model's forward pass alone stays in the fast suite.
EXPORTED_FAMILIES = [
    pytest.param(name, marks=[] if name == "graph" else [pytest.mark.slow])
    for name in FAMILIES
    if name != "translation"
]


@pytest.mark.backends("tensorflow", reason="SavedModels for TF Serving")
@pytest.mark.parametrize("name", EXPORTED_FAMILIES)
def test_the_saved_model_serves_what_the_quantized_model_computes(quantized, exported, name):
    import tensorflow as tf

    model, loaded = quantized[name], tf.saved_model.load(exported[name])
    assert tf.int8 in {variable.dtype for variable in loaded.variables}
    forward = call_signature(loaded, "serving_default", **model.inputs)
    for key, value in served_outputs(name, model.outputs).items():
        np.testing.assert_allclose(forward[key], value, rtol=1e-5, atol=1e-5, err_msg=key)
    if name in SERVED_GENERATION:
        in_process = ops.convert_to_numpy(FAMILIES[name].generate(model.model))
        np.testing.assert_array_equal(SERVED_GENERATION[name](loaded), in_process)


@pytest.mark.slow
@pytest.mark.backends("tensorflow", reason="SavedModels for TF Serving")
def test_the_translate_signature_gives_the_quantized_models_beam_search(quantized, exported):
    import tensorflow as tf

    model = quantized["translation"].model
    loaded = tf.saved_model.load(exported["translation"])
    outputs = call_signature(loaded, "translate", text=np.array(TEXTS, object))
    source = source_tokens(tokenizer(), TEXTS)
    expected, scores = translate_tokens(model, source, MAX_LENGTH, beam_size=3, alpha=0.6, return_scores=True)
    np.testing.assert_array_equal(outputs["tokens"], ops.convert_to_numpy(expected))
    np.testing.assert_allclose(outputs["score"], ops.convert_to_numpy(scores), rtol=1e-5)


@pytest.mark.slow
@pytest.mark.backends("tensorflow", reason="SavedModels and TensorFlow's C API")
def test_through_the_c_api_loader_the_quantized_music_model_serves_as_in_process(quantized, exported):
    from serving.emulator.c_api_loader import CApiSavedModel

    model = quantized["music"]
    with CApiSavedModel(exported["music"]) as loaded:
        logits = loaded.run("serving_default", model.inputs)["logits"]
        generated = loaded.run("generate", row_settings(primer=PRIMER, primer_length=PRIMER_LENGTH))["tokens"]
    np.testing.assert_allclose(logits, model.outputs, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(generated, ops.convert_to_numpy(FAMILIES["music"].generate(model.model)))
