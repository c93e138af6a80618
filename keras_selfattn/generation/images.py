"""Image sampling, completion and super-resolution over the cached steps."""

import numpy as np
from keras import ops

from keras_selfattn.generation.decoder_contract import IMAGE, check_decoder
from keras_selfattn.generation.execution import gradients_off, graph_when_eager
from keras_selfattn.generation.sampling import (
    check_decoding,
    check_sampling_arguments,
    choose_pixels,
    choose_posterior_means,
    choose_tokens,
    resolve_seed,
)
from keras_selfattn.ops.cache import cache_writes_in_place, owned_caches


def sample_images(
    model,
    batch_size=None,
    *,
    class_labels=None,
    low_resolution=None,
    known_pixels=None,
    known_rows=0,
    temperature=1.0,
    top_k=0,
    top_p=1.0,
    seed=None,
    decoding="sample",
):
    """Samples images from an Image Transformer, one position per cached step.

    Steps follow the model's generation order: raster order over sub-pixels
    (categorical head) or pixels (DMOL head), block-raster order for
    `local_2d` and `relative_local_2d` attention. With `known_pixels`, the
    top `known_rows` rows are fed to the model unchanged and the rest is
    sampled (image completion). The models' `generate` methods run the same
    (`ImageTransformer.generate`, `SuperResolutionTransformer.generate`).
    Runs eagerly, under `tf.function` (one trace per input shapes and
    settings), with `jit_compile=True`, and under `jax.jit`.

    Args:
        model: an `ImageTransformer` (categorical or DMOL head, with or
            without classes) or `SuperResolutionTransformer` (any model that
            keeps their cached-step contract, `decoder_contract.IMAGE`).
        batch_size: how many images; may be omitted when an input below
            gives it.
        class_labels: int `[batch]` classes, exactly for class-conditional
            models.
        low_resolution: uint8 `[batch, h, w, C]` images, exactly for
            super-resolution models.
        known_pixels: uint8 `[batch, H, W, C]` images whose top rows to keep.
        known_rows: how many top rows of `known_pixels` to keep, in
            `[1, H]` with `known_pixels`, else 0.
        temperature: 0 takes the most likely value (DMOL: the most likely
            component's mean); otherwise the softmax temperature (DMOL: it
            divides the mixture logits and multiplies the logistic scales).
        top_k: categorical head only: sample among the `top_k` most likely
            values; 0 = all.
        top_p: categorical head only: sample from the nucleus of
            probability `top_p`; 1.0 = all.
        seed: an int or int32 scalar tensor; the same seed on the same
            backend gives the same images. `None` draws one.
        decoding: `"sample"` draws each step's value with the settings
            above; `"posterior_mean"` feeds back the rounded expected value
            of the model's distribution instead (categorical head: the sum
            of `p(v) v` over the 256 values; DMOL: the discretized
            mixture's mean, channel by channel, see
            `ops.dmol_posterior_mean`), which is deterministic and leaves
            `temperature`, `top_k` and `top_p` at their defaults.

    Returns:
        uint8 `[batch, H, W, C]` images.

    Raises:
        ValueError: for a model these functions do not support, missing or
            unexpected class labels or low-resolution images, inputs of the
            wrong shape, `known_rows` outside the image, sampling settings
            out of range, or an unknown `decoding`.

    `ImageTransformer.generate`'s example runs this function.
    """
    return generate_images(
        check_decoder(model, IMAGE, "ImageTransformer"), batch_size, class_labels=class_labels,
        low_resolution=low_resolution, known_pixels=known_pixels, known_rows=known_rows,
        temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, decoding=decoding,
    )


def generate_images(image, *args, **kwargs):
    """`_generate_images` with no gradients recorded (`gradients_off`)."""
    with gradients_off():
        return _generate_images(image, *args, **kwargs)


@graph_when_eager
def _generate_images(
    image,
    batch_size=None,
    *,
    class_labels=None,
    low_resolution=None,
    known_pixels=None,
    known_rows=0,
    temperature=1.0,
    top_k=0,
    top_p=1.0,
    seed=None,
    decoding="sample",
):
    """`sample_images` of the `ImageTransformer` `image` (the models'
    `generate` methods run it)."""
    check_sampling_arguments(temperature, top_k, top_p)
    check_decoding(decoding, temperature, top_k, top_p)
    if image.is_dmol and (top_k != 0 or top_p != 1.0):
        raise ValueError(
            "`top_k` and `top_p` filter a categorical head; this model has a DMOL head: "
            f"leave top_k=0 and top_p=1.0. Received: top_k={top_k}, top_p={top_p}"
        )
    inputs = _checked_inputs(image, batch_size, class_labels, low_resolution, known_pixels, known_rows)
    seed = resolve_seed(seed)

    def choose(outputs, index):
        if decoding == "posterior_mean":
            return choose_posterior_means(outputs, image.is_dmol)
        if image.is_dmol:
            return choose_pixels(outputs, seed, index, temperature)
        return choose_tokens(outputs, seed, index, temperature, top_k, top_p)

    return generate_image(
        image,
        inputs.pop("batch_size"),
        choose,
        class_labels=inputs.get("class_labels"),
        low_resolution=inputs.get("low_resolution"),
        known_pixels=inputs.get("known_pixels"),
        known_rows=known_rows,
    )


def generate_image(
    image, batch_size, choose, *, class_labels=None, low_resolution=None, known_pixels=None, known_rows=0
):
    """uint8 `[batch, H, W, C]` images of the `ImageTransformer` `image`, each step's
    value `choose(outputs, index)` of one cached step.

    `known_rows` is an int or an int `[batch]` tensor (one count per image,
    as a serving signature takes it); the top `known_rows` rows of
    `known_pixels` are fed to the model unchanged.
    """
    image_shape = image.image_shape
    encoded = {}
    if class_labels is not None:
        encoded["class_condition"] = image.class_condition(class_labels)
    if low_resolution is not None:
        encoded = image.encode_low_resolution(low_resolution)

    order = image.generation_order()
    columns = image.position_grid_shape[1]
    raster_index = order[:, 0] * columns + order[:, 1]  # of each step
    value_shape = (3,) if image.is_dmol else ()
    known = None
    if known_pixels is not None:
        flat = ops.reshape(ops.cast(known_pixels, "int32"), (-1, raster_index.size) + value_shape)
        rows_known = ops.reshape(ops.cast(known_rows, "int32"), (-1, 1))
        keep = ops.convert_to_tensor(order[:, 0])[None, :] < rows_known  # [batch or 1, steps]
        known = (keep, ops.take(flat, raster_index, axis=1))

    def step(index, state):
        values, previous, caches = state
        outputs, _, caches = image.call_with_cache(previous[:, None], caches, index, **encoded)
        chosen = choose(outputs[:, 0], index)
        if known is not None:
            keep, known_values = known
            keep_now = ops.take(keep, index, axis=1)
            if image.is_dmol:
                keep_now = keep_now[:, None]
            chosen = ops.where(keep_now, ops.take(known_values, index, axis=1), chosen)
        return _write_step(values, index, chosen), chosen, caches

    values = ops.zeros((batch_size, raster_index.size) + value_shape, "int32")
    previous = ops.zeros((batch_size,) + value_shape, "int32")
    caches = image.initial_cache(batch_size)
    with cache_writes_in_place():
        state = (values, previous, owned_caches(caches))
        values, _, _ = ops.fori_loop(0, raster_index.size, step, state)
    raster = ops.take(values, np.argsort(raster_index), axis=1)
    return ops.cast(ops.reshape(raster, (-1,) + tuple(image_shape)), "uint8")


def _checked_inputs(image, batch_size, class_labels, low_resolution, known_pixels, known_rows):
    """The inputs as int32 tensors and the batch size; ValueError for bad ones."""
    inputs = {}
    if image.conditional != (class_labels is not None):
        raise ValueError(
            "`class_labels` must be given exactly for a class-conditional model "
            f"(this one is {'' if image.conditional else 'not '}conditional): int [batch] "
            f"classes. Received: class_labels={'None' if class_labels is None else 'a tensor'}"
        )
    super_resolution = image.low_resolution_shape is not None
    if super_resolution != (low_resolution is not None):
        raise ValueError(
            "`low_resolution` must be given exactly for an image_super_resolution model: "
            f"uint8 [batch, h, w, C] images. Received: low_resolution="
            f"{'None' if low_resolution is None else 'a tensor'}"
        )
    _check_known_rows(known_rows, known_pixels is not None, image.image_shape[0])
    expected_shapes = {
        "class_labels": (class_labels, ()),
        "low_resolution": (low_resolution, image.low_resolution_shape),
        "known_pixels": (known_pixels, tuple(image.image_shape)),
    }
    batch_sizes = set()
    for name, (value, shape) in expected_shapes.items():
        if value is None:
            continue
        value = ops.convert_to_tensor(value)
        if tuple(value.shape[1:]) != tuple(shape):
            raise ValueError(
                f"`{name}` must have shape {('batch',) + tuple(shape)}. "
                f"Received: {name}.shape={tuple(value.shape)}"
            )
        inputs[name] = ops.cast(value, "int32")
        batch_sizes.add(value.shape[0])
        inputs.setdefault("batch_size", ops.shape(value)[0])
    static = {size for size in batch_sizes if size is not None}
    if batch_size is not None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"`batch_size` must be an integer >= 1. Received: batch_size={batch_size!r}")
        static.add(batch_size)
        inputs["batch_size"] = batch_size
    if len(static) > 1:
        raise ValueError(
            f"`batch_size` and the inputs' batch dimensions must agree. Received: {sorted(static)}"
        )
    if "batch_size" not in inputs:
        raise ValueError("`batch_size` is needed when no input gives the batch. Received: batch_size=None")
    return inputs


def _check_known_rows(known_rows, has_known_pixels, height):
    low, high = (1, height) if has_known_pixels else (0, 0)
    if isinstance(known_rows, bool) or not isinstance(known_rows, int) or not low <= known_rows <= high:
        expected = f"in [1, {height}] with `known_pixels`" if has_known_pixels else "0 without `known_pixels`"
        raise ValueError(f"`known_rows` must be an integer {expected}. Received: known_rows={known_rows!r}")


def _write_step(values, index, chosen):
    """`values` with step `index` set to `chosen` (a select: no XLA-only op)."""
    steps = ops.arange(values.shape[1], dtype="int32")
    where = ops.equal(steps, index)[None, :]
    if len(values.shape) == 3:
        return ops.where(where[..., None], chosen[:, None, :], values)
    return ops.where(where, chosen[:, None], values)
