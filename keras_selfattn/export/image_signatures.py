"""The `sample`, `complete` and `super_resolve` signatures of the image models."""

import tensorflow as tf

from keras_selfattn.export import request_checks
from keras_selfattn.generation.images import generate_image
from keras_selfattn.generation.sampling import (
    DECODINGS,
    choose_pixels_by_row,
    choose_posterior_means,
    choose_tokens_by_row,
)

ROWS = request_checks.ROWS


def image_endpoints(image):
    """`[(name, function, input signature)]` for an `ImageTransformer`."""
    if image.low_resolution_shape is not None:
        return [_super_resolve_endpoint(image)]
    return [_sample_endpoint(image), _complete_endpoint(image)]


def _chooser(image, seed, temperature, posterior_mean=None):
    """Each row's value: drawn at its temperature, or with `posterior_mean`
    (bool `[batch]`) true, its rounded posterior mean."""
    if posterior_mean is not None:
        temperature = tf.where(posterior_mean, tf.zeros_like(temperature), temperature)  # draws nothing

    def choose(outputs, index):
        if image.is_dmol:
            chosen = choose_pixels_by_row(outputs, seed, index, temperature)
        else:
            rows = tf.shape(seed)
            chosen = choose_tokens_by_row(
                outputs, seed, index, temperature, tf.zeros(rows, tf.int32), tf.ones(rows, tf.float32)
            )
        if posterior_mean is None:
            return chosen
        means = choose_posterior_means(outputs, image.is_dmol)
        return tf.where(posterior_mean[:, None] if image.is_dmol else posterior_mean, means, chosen)

    return choose


def _settings_specs():
    return [tf.TensorSpec(ROWS, tf.int32, name="seed"), tf.TensorSpec(ROWS, tf.float32, name="temperature")]


def _class_problems(image, inputs):
    if "class_label" not in inputs:
        return []
    num_classes = image.num_classes
    bad = request_checks.outside(inputs["class_label"], 0, num_classes - 1)
    return [(bad, f"`class_label` must be a class in [0, {num_classes})")]


def _known_rows_problems(image, inputs):
    if "known_rows" not in inputs:
        return []
    height = image.image_shape[0]
    bad = request_checks.outside(inputs["known_rows"], 1, height)
    return [(bad, f"`known_rows` must be in [1, {height}], the image's height")]


def _decoding_problems(inputs):
    if "decoding" not in inputs:
        return []
    bad = tf.logical_not(tf.reduce_any([tf.equal(inputs["decoding"], name) for name in DECODINGS], axis=0))
    return [(bad, f"`decoding` must be {' or '.join(map(repr, DECODINGS))}")]


# What a bad row is generated with, before its pixels are zeroed.
_DEFAULTS = dict(seed=0, temperature=0.0, class_label=0, known_rows=1)


def _generate(image, inputs, **known):
    """`{"pixels", "status"}`: a bad row's problem in `status`, its pixels zero."""
    batch_size, checks = request_checks.batch_size_of(inputs)
    batch_size = request_checks.after(checks, batch_size)
    inputs = {name: request_checks.after(checks, value) for name, value in inputs.items()}
    known = {name: request_checks.after(checks, value) for name, value in known.items()}
    status = request_checks.row_status(
        _known_rows_problems(image, inputs)
        + _class_problems(image, inputs)
        + request_checks.sampling_problems(inputs["temperature"], inputs["seed"])
        + _decoding_problems(inputs)
    )
    good = tf.equal(status, "")
    inputs = {
        name: request_checks.good_or(good, value, _DEFAULTS[name]) if name in _DEFAULTS else value
        for name, value in inputs.items()
    }
    if "known_pixels" in known:
        known["known_rows"] = inputs["known_rows"]
    pixels = generate_image(
        image,
        batch_size,
        _chooser(
            image, inputs["seed"], inputs["temperature"],
            tf.equal(inputs["decoding"], "posterior_mean") if "decoding" in inputs else None,
        ),
        class_labels=inputs.get("class_label"),
        low_resolution=known.pop("low_resolution", None),
        **known,
    )
    return {"pixels": request_checks.good_or(good, pixels, 0), "status": status}


def _sample_endpoint(image):
    if image.conditional:

        def sample(seed, temperature, class_label):
            inputs = dict(seed=seed, temperature=temperature, class_label=class_label)
            return _generate(image, inputs)

        specs = _settings_specs() + [tf.TensorSpec(ROWS, tf.int32, name="class_label")]
    else:

        def sample(seed, temperature):
            return _generate(image, dict(seed=seed, temperature=temperature))

        specs = _settings_specs()
    return "sample", sample, specs


def _complete_endpoint(image):
    def complete_rows(pixels, known_rows, seed, temperature, class_label=None):
        inputs = dict(pixels=pixels, known_rows=known_rows, seed=seed, temperature=temperature)
        if class_label is not None:
            inputs["class_label"] = class_label
        return _generate(image, inputs, known_pixels=pixels)

    specs = [
        tf.TensorSpec([None, *image.image_shape], tf.uint8, name="pixels"),
        tf.TensorSpec(ROWS, tf.int32, name="known_rows"),
    ] + _settings_specs()
    if image.conditional:

        def complete(pixels, known_rows, seed, temperature, class_label):
            return complete_rows(pixels, known_rows, seed, temperature, class_label)

        specs.append(tf.TensorSpec(ROWS, tf.int32, name="class_label"))
    else:

        def complete(pixels, known_rows, seed, temperature):
            return complete_rows(pixels, known_rows, seed, temperature)

    return "complete", complete, specs


def _super_resolve_endpoint(image):
    """`super_resolve`: a row's `decoding` is "sample" (at its `temperature`
    and `seed`) or "posterior_mean" (whose seed and temperature, still
    checked, change nothing)."""

    def super_resolve(low_resolution, seed, temperature, decoding):
        inputs = dict(low_resolution=low_resolution, seed=seed, temperature=temperature, decoding=decoding)
        return _generate(image, inputs, low_resolution=tf.cast(low_resolution, tf.int32))

    specs = [tf.TensorSpec([None, *image.low_resolution_shape], tf.uint8, name="low_resolution")]
    decoding = [tf.TensorSpec(ROWS, tf.string, name="decoding")]
    return "super_resolve", super_resolve, specs + _settings_specs() + decoding
