"""The shared layer test: every public layer goes through `run_layer_test`.

It checks, for one layer configuration and one batch of inputs: the config
round trip and registered serialization, the symbolic (Functional) call, the
eager call, one `fit` step, `mixed_float16` and `mixed_bfloat16`, `.keras`
save and load without `custom_objects`, and a `jit_compile=True` predict
(on PyTorch, `torch.compile`, for the first configuration of each layer class,
twice: the second compiles nothing).
"""

import keras
import numpy as np

MIXED_PRECISION_TOLERANCE = {"mixed_float16": 2e-2, "mixed_bfloat16": 1e-1}


def jit(function):
    """Compiles `function` with XLA on TensorFlow and JAX; PyTorch runs it eagerly."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(function)
    if keras.backend.backend() == "torch":
        return function
    import tensorflow as tf

    return tf.function(function, jit_compile=True)


def run_layer_test(
    layer_cls,
    init_kwargs,
    inputs,
    tmp_path,
    call_kwargs=None,
    expected_output_shape=None,
    trainable=True,
):
    """Runs the full battery of layer checks.

    Args:
        layer_cls: the layer class.
        init_kwargs: constructor arguments, or a function returning them
            (for layers that take sublayer instances, which cannot be shared).
        inputs: dict of call argument name -> numpy array (batch first).
        tmp_path: a folder for the saved model.
        call_kwargs: non-tensor call arguments.
        expected_output_shape: the eager output shape; defaults to the shape
            of the first input.
        trainable: whether the layer has weights that one `fit` step updates.
    """
    call_kwargs = call_kwargs or {}
    if not callable(init_kwargs):
        init_kwargs = _constant(init_kwargs)
    first_input = next(iter(inputs.values()))
    expected_output_shape = tuple(expected_output_shape or first_input.shape)

    _check_config_round_trip(layer_cls, init_kwargs())
    layer = layer_cls(**init_kwargs())
    _check_attention_sizes_distinct(layer, inputs)
    model = _functional_model(layer, inputs, call_kwargs)
    symbolic_output = model.outputs[0]
    assert tuple(symbolic_output.shape) == (None,) + expected_output_shape[1:]
    assert symbolic_output.dtype == layer.compute_dtype

    eager = keras.ops.convert_to_numpy(layer(**inputs, **call_kwargs))
    assert eager.shape == expected_output_shape
    assert np.all(np.isfinite(eager))
    np.testing.assert_allclose(_predict(model, inputs), eager, atol=1e-5, rtol=1e-5)

    _check_save_and_load(model, inputs, eager, tmp_path)
    _check_jit_predict(model, layer_cls, inputs, eager)
    for policy, tolerance in MIXED_PRECISION_TOLERANCE.items():
        _check_mixed_precision(
            layer_cls, init_kwargs, inputs, call_kwargs, layer, eager, policy, tolerance
        )
    if trainable:
        _check_fit_step(model, inputs, eager)


def _check_attention_sizes_distinct(layer, inputs):
    """An attention layer is tested with batch, heads, head size, every
    query and key axis and the feature sizes all different, so that one axis
    mixed up with another cannot pass."""
    if not isinstance(layer, keras.layers.MultiHeadAttention):
        return
    query = inputs["query"]
    value = inputs.get("value", query)
    sizes = {"batch": query.shape[0], "num_heads": layer.num_heads, "key_dim": layer.key_dim}
    sizes.update({f"query axis {axis}": size for axis, size in enumerate(query.shape[1:-1], 1)})
    sizes["query features"] = query.shape[-1]
    if value is not query:
        if value.shape[1:-1] != query.shape[1:-1]:
            sizes.update({f"key axis {axis}": n for axis, n in enumerate(value.shape[1:-1], 1)})
        sizes["value features"] = value.shape[-1]
    assert len(set(sizes.values())) == len(sizes), f"attention test sizes must differ: {sizes}"


def _constant(kwargs):
    return lambda: dict(kwargs)


def _check_config_round_trip(layer_cls, init_kwargs):
    layer = layer_cls(**init_kwargs)
    config = layer.get_config()
    assert layer_cls.from_config(config).get_config() == config
    revived = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(revived) is layer_cls
    assert revived.get_config() == config


def _functional_model(layer, inputs, call_kwargs):
    symbolic = {
        name: keras.Input(shape=array.shape[1:], dtype=str(array.dtype), name=name)
        for name, array in inputs.items()
    }
    return keras.Model(symbolic, layer(**symbolic, **call_kwargs))


def _predict(model, inputs):
    return model.predict(inputs, batch_size=len(next(iter(inputs.values()))), verbose=0)


def _check_jit_predict(model, layer_cls, inputs, expected):
    if model.jit_compile:
        return  # `_predict` already ran compiled (JAX compiles by default).
    # On PyTorch `jit_compile=True` is `torch.compile`: tracing Keras's frames takes 10-23 s
    # for a layer's first compiled predict, so there it runs for the first configuration of
    # each layer class a session tests.
    on_torch = keras.backend.backend() == "torch"
    if on_torch and not _first_configuration("torch.compile", layer_cls):
        return
    model.compile(jit_compile=True)
    np.testing.assert_allclose(_predict(model, inputs), expected, atol=1e-5, rtol=1e-5)
    if on_torch:
        _check_compiled_once(model, inputs, expected)


def _check_compiled_once(model, inputs, expected):
    """A second `torch.compile`d predict runs what the first compiled: the compiled
    graphs are guarded on the Python state they read, so a layer that changes
    such state on every call is compiled anew every call."""
    import torch

    with torch._dynamo.config.patch(error_on_recompile=True):
        np.testing.assert_allclose(_predict(model, inputs), expected, atol=1e-5, rtol=1e-5)


def _check_save_and_load(model, inputs, expected, tmp_path):
    path = str(tmp_path / "layer_test_model.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(_predict(restored, inputs), expected, atol=1e-6, rtol=1e-6)


def _check_mixed_precision(
    layer_cls, init_kwargs, inputs, call_kwargs, float32_layer, expected, policy, tolerance
):
    # The global policy, as users set it, so that sublayers passed in get it too.
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        layer = layer_cls(**init_kwargs())
        model = _functional_model(layer, inputs, call_kwargs)
    finally:
        keras.config.set_dtype_policy(previous_policy)
    layer.set_weights(float32_layer.get_weights())
    output = layer(**inputs, **call_kwargs)
    assert keras.backend.standardize_dtype(output.dtype) == layer.compute_dtype
    output = keras.ops.convert_to_numpy(keras.ops.cast(output, "float32"))
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(output, expected, atol=tolerance * scale, rtol=tolerance)
    if layer.trainable_weights and _fits_in(policy, layer_cls):
        _check_fit_step(model, inputs, expected)


# JAX's CPU compiler has no float16 dot accumulating in float32, so a float16 `fit` runs
# eagerly there, at several times the cost of a compiled one: on JAX it runs for the
# first configuration of each layer class a session tests; TensorFlow and PyTorch fit
# every configuration.
def _fits_in(policy, layer_cls):
    if keras.backend.backend() != "jax" or policy != "mixed_float16":
        return True
    return _first_configuration("float16 fit", layer_cls)


_CHECKED_ONCE = set()  # (check, layer class) pairs that `_first_configuration` has seen


def _first_configuration(check, layer_cls):
    """Whether `check` meets `layer_cls` for the first time in this session."""
    if (check, layer_cls) in _CHECKED_ONCE:
        return False
    _CHECKED_ONCE.add((check, layer_cls))
    return True


def _check_fit_step(model, inputs, eager_output):
    # As `fit` compiles by default (XLA on JAX), except float16 on JAX's CPU, whose XLA has no
    # float16 dot accumulating in float32.
    float16_on_jax = keras.backend.backend() == "jax" and model.compute_dtype == "float16"
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=False if float16_on_jax else "auto")
    before = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    target = np.random.default_rng(0).normal(size=eager_output.shape).astype("float32")
    batch_size = len(eager_output)
    history = model.fit(inputs, target, batch_size=batch_size, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][-1])
    after = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    assert any(not np.array_equal(a, b) for a, b in zip(before, after))
