"""LoRA on every family: `enable_lora(rank)` adapts the attention and
feed-forward kernels and leaves only the adapters trainable; a LoRA model's
logits, cached generation and exported signature equal those of the model
with the adapters merged into its kernels (Keras merges them when it saves
weights, the independent reference here); the adapters alone save and load."""

import keras
import numpy as np
import pytest

from keras_selfattn.generation import continue_sequence, translate_tokens
from keras_selfattn.models import (
    MelodyConditionedMusicTransformer,
    MusicTransformer,
    VariableMisuseModel,
    image_super_resolution,
    image_transformer,
    music_transformer,
    transformer_translation,
)
from keras_selfattn.models.lora import LORA_TARGETS

IMAGE = dict(preset="tiny", num_layers=1, block_shape=(2, 6), memory_flange=(1, 3), block_length=8)
BUILDERS = {
    "music": lambda: music_transformer(23, preset="tiny", num_layers=2, num_heads=2, key_dim=6, hidden_dim=16),
    "accompaniment": lambda: MelodyConditionedMusicTransformer(
        vocabulary_size=30, num_layers=2, hidden_dim=24, num_heads=3, key_dim=8, feedforward_dim=32,
        max_relative_position=5, max_melody_length=16,
    ),
    "translation": lambda: transformer_translation(19, 17, preset="tiny", num_layers=2),
    "images": lambda: image_transformer((4, 4, 3), num_classes=3, **IMAGE),
    "super_resolution": lambda: image_super_resolution((2, 2, 3), (4, 4, 3), **IMAGE),
    "variable_misuse": lambda: VariableMisuseModel(
        vocabulary_size=13, num_relations=4, num_layers=2, hidden_dim=6, num_heads=3, feedforward_dim=10,
        dropout=0.1, add_relative_bias=False, heads_share_relative_embedding=False, check_inputs=False,
    ),
}


def _inputs(model, seed=0):
    """Random valid inputs: batch 2, every unknown length 5 (a graph's
    relations are [batch, 5, 5]); ids below each input's bound."""
    rng = np.random.default_rng(seed)
    bounds = model._input_bounds()
    inputs = {}
    for tensor in model.inputs:
        shape = [2] + [5 if size is None else size for size in tensor.shape[1:]]
        bound = bounds.get(tensor.name, ("", 4))[1]
        inputs[tensor.name] = rng.integers(1, bound, shape).astype("int32")
    return inputs


def _randomized_adapters(model, seed=1):
    """Gives every adapter non-zero values (`lora_kernel_b` starts at zero)."""
    rng = np.random.default_rng(seed)
    for variable in model.trainable_variables:
        variable.assign(0.3 * rng.standard_normal(variable.shape).astype("float32"))


def _merged(model, build, tmp_path):
    """A fresh model of the same architecture with `model`'s weights, the
    adapters merged into the kernels (as Keras saves a LoRA layer's kernel)."""
    path = tmp_path / "merged.weights.h5"
    model.save_weights(path)
    merged = build()
    merged.load_weights(path)
    return merged


def _numpy(tree):
    return [keras.ops.convert_to_numpy(x) for x in keras.tree.flatten(tree)]


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_only_the_adapters_train_and_they_change_the_logits_as_merged_kernels_do(family, tmp_path):
    build = BUILDERS[family]
    model = build()
    inputs = _inputs(model)
    before = _numpy(model(inputs, training=False))
    model.enable_lora(4)
    trainable = {variable.path for variable in model.trainable_variables}
    assert trainable and all(path.rsplit("/", 1)[-1] in ("lora_kernel_a", "lora_kernel_b") for path in trainable)
    adapted = {path.rsplit("/", 2)[-2] for path in trainable}
    assert {name.rsplit("_", 1)[0] if name.rsplit("_", 1)[-1].isdigit() else name for name in adapted} <= set(LORA_TARGETS)
    for got, want in zip(_numpy(model(inputs, training=False)), before):  # adapters start as zero
        np.testing.assert_allclose(got, want, atol=1e-6)
    _randomized_adapters(model)
    adapted_logits = _numpy(model(inputs, training=False))
    assert not all(np.allclose(a, b, atol=1e-3) for a, b in zip(adapted_logits, before))
    for got, want in zip(adapted_logits, _numpy(_merged(model, build, tmp_path)(inputs, training=False))):
        np.testing.assert_allclose(got, want, atol=2e-5)


def test_rank_4_adapts_under_5_percent_of_the_shipped_model():
    model = MusicTransformer.from_preset("maestro_small", load_weights=False)
    total = model.count_params()
    model.enable_lora(4)
    adapters = sum(int(np.prod(variable.shape)) for variable in model.trainable_variables)
    # Per block, Keras's adapters: query and value kernels [128, 4, 32] get
    # [128, 4, 4] and [4, 32]; the feed-forward kernels [128, 512] and [512, 128]
    # get [128, 4] and [4, 512], [512, 4] and [4, 128].
    assert adapters == 4 * (2 * (128 * 4 * 4 + 4 * 32) + 2 * (128 * 4 + 4 * 512))
    assert adapters / total < 0.05


def test_fit_moves_only_the_adapters():
    model = BUILDERS["music"]()
    model.enable_lora(2)
    frozen = {v.path: keras.ops.convert_to_numpy(v) for v in model.non_trainable_variables}
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="sparse_categorical_crossentropy")
    tokens = np.random.default_rng(0).integers(1, 23, (4, 9)).astype("int32")
    model.fit(tokens[:, :-1], tokens[:, 1:], epochs=2, verbose=0)
    for variable in model.non_trainable_variables:
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(variable), frozen[variable.path])
    assert any(np.abs(keras.ops.convert_to_numpy(v)).max() > 0 for v in model.trainable_variables if "lora_kernel_b" in v.path)


def test_cached_generation_of_a_lora_model_equals_the_merged_models(tmp_path):
    for family, generate in (
        ("music", lambda m: continue_sequence(m, np.array([[3, 4, 5], [6, 7, 8]], "int32"), 6, seed=3)),
        ("translation", lambda m: translate_tokens(m, np.array([[5, 6, 7, 1]], "int32"), 5, beam_size=2)),
    ):
        model = BUILDERS[family]()
        model.enable_lora(3)
        _randomized_adapters(model)
        merged = _merged(model, BUILDERS[family], tmp_path)
        np.testing.assert_array_equal(_numpy(generate(model))[0], _numpy(generate(merged))[0])


@pytest.mark.backends("tensorflow", reason="exports a TensorFlow SavedModel")
def test_the_exported_signature_of_a_lora_model_equals_the_merged_models(tmp_path):
    import tensorflow as tf

    from keras_selfattn.export import export_for_serving

    model = BUILDERS["music"]()
    model.enable_lora(3)
    _randomized_adapters(model)
    merged = _merged(model, BUILDERS["music"], tmp_path)
    tokens = tf.constant(_inputs(model)["tokens"])
    outputs = []
    for name, candidate in (("lora", model), ("merged", merged)):
        path = export_for_serving(candidate, str(tmp_path / name), name="music", version=1)
        outputs.append(tf.saved_model.load(str(path)).signatures["serving_default"](tokens=tokens))
    for key in outputs[0]:
        np.testing.assert_allclose(outputs[0][key].numpy(), outputs[1][key].numpy(), atol=2e-5)


def test_the_adapters_alone_save_and_load(tmp_path):
    base = BUILDERS["music"]()
    base_weights = tmp_path / "base.weights.h5"
    base.save_weights(base_weights)
    base.enable_lora(4)
    _randomized_adapters(base)
    base.save_lora_weights(tmp_path / "adapters.lora.h5")
    other = BUILDERS["music"]()
    other.load_weights(base_weights)
    other.load_lora_weights(tmp_path / "adapters.lora.h5")  # enables LoRA at the saved rank
    inputs = _inputs(base)
    np.testing.assert_allclose(_numpy(other(inputs))[0], _numpy(base(inputs))[0], atol=1e-6)
    assert [v.shape for v in other.trainable_variables] == [v.shape for v in base.trainable_variables]


def test_lora_errors_name_what_is_wrong(tmp_path):
    model = BUILDERS["music"]()
    with pytest.raises(ValueError, match="`rank` must be a positive integer"):
        model.enable_lora(0)
    with pytest.raises(ValueError, match="call `enable_lora"):
        model.save_lora_weights(tmp_path / "a.lora.h5")
    with pytest.raises(ValueError, match="`target_names` must name Dense or EinsumDense layers"):
        model.enable_lora(2, target_names=["no_such_layer"])
    model.enable_lora(2)
    with pytest.raises(ValueError, match="already enabled"):
        model.enable_lora(2)
    with pytest.raises(ValueError, match=r"must end in '\.lora\.h5'"):
        model.save_lora_weights(tmp_path / "adapters.h5")
    model.save_lora_weights(tmp_path / "rank2.lora.h5")
    other = BUILDERS["music"]()
    other.enable_lora(3)
    with pytest.raises(ValueError, match="holds adapters of rank 2"):
        other.load_lora_weights(tmp_path / "rank2.lora.h5")
