"""One cached step of the image models' decoders, in generation order.

Generation order is raster order over the position grid (sub-pixels for the
categorical head, pixels for DMOL), or block-raster order for `local_2d` and
`relative_local_2d`.
Step `t` feeds the value at step `t - 1` (nothing at step 0), exactly as the
models' shifted forward pass does, so a loop of steps equals that pass.
"""

import functools

import numpy as np
from keras import ops

from keras_selfattn.models.image_common import (
    coded_values,
    differences_from,
    is_grid_attention,
    position_grid,
    values_from_differences,
)
from keras_selfattn.ops.blocking_2d import block_raster_index
from keras_selfattn.ops.timing import timing_signal_nd


def generation_order(image_shape, hyperparameters):
    """`[positions, 2]` int32 `(row, column)` grid coordinates in generation order."""
    grid = is_grid_attention(hyperparameters["attention"])
    block_shape = tuple(hyperparameters["block_shape"]) if grid else None
    return _generation_order(tuple(image_shape), hyperparameters["head"], block_shape).copy()


@functools.lru_cache(maxsize=32)
def _generation_order(image_shape, head, block_shape):
    # Cached: every decoding step looks the order up.
    rows, columns = position_grid(image_shape, head)
    grid = np.stack(np.meshgrid(np.arange(rows), np.arange(columns), indexing="ij"), -1)
    grid = grid.reshape(-1, 2)
    if block_shape is not None:
        order = block_raster_index(grid[:, 0], grid[:, 1], columns, block_shape)
        grid = grid[np.argsort(order)]
    return grid.astype("int32")


def image_decoder_step(
    model, hyperparameters, image_shape, previous, step, cache, class_condition=None, encoder_outputs=None,
    position_condition=None, position_logits=None, estimates=None,
):
    """The outputs for the position at `step` in generation order.

    Args:
        model: the image model, whose decoder layers (`pixel_embedding`,
            `target_position`, `decoder_blocks`, `decoder_norm`,
            `output_projection`) the step runs.
        hyperparameters: the model's hyperparameters.
        image_shape: `(height, width, channels)`.
        previous: the value generated at `step - 1`: `[batch]` int sub-pixel
            values for the categorical head, `[batch, channels]` pixels for
            DMOL; ignored at step 0.
        step: the step, an int or scalar int tensor.
        cache: the model's cache, one self-attention cache per decoder
            block, from its `initial_cache` or the previous step.
        class_condition: optional `[batch, hidden_dim]` class embedding.
        encoder_outputs: optional encoder outputs (super-resolution).
        position_condition: optional `[batch, positions, hidden_dim]`
            vectors in raster order, the one of this step's position added
            to its input (the upsampled image of super-resolution).
        position_logits: optional `[batch, positions, 256]` logits in raster
            order, the ones of this step's position added to its outputs
            (the interpolation prior of super-resolution).
        estimates: optional int `[batch, positions]` values in raster order,
            for a decoder that codes values as differences from them (the
            upsampled image of super-resolution): the previous value enters
            as its difference from its position's estimate, and the outputs
            over differences come back as logits over values.

    Returns:
        `(outputs, hidden, cache)`: `[batch, 256]` logits or `[batch, 10 m]`
        DMOL parameters, the `[batch, hidden_dim]` final hidden state they
        project, and the updated cache.
    """
    order = ops.convert_to_tensor(generation_order(image_shape, hyperparameters))
    step = ops.cast(step, "int32")
    raster_index = _raster_index(hyperparameters, image_shape, order, step)
    if estimates is not None:
        previous_index = _raster_index(hyperparameters, image_shape, order, ops.maximum(step - 1, 0))
        previous = differences_from(previous, ops.take(estimates, previous_index, axis=1))
    x = _previous_embedding(model.pixel_embedding, hyperparameters, image_shape, previous, order, step)
    if class_condition is not None:
        x = x + class_condition
    if position_condition is not None:
        x = x + ops.take(position_condition, raster_index, axis=1)
    x = x + _position_signal(model.target_position, hyperparameters, image_shape, step, raster_index, x.dtype)
    x = x[:, None, None, :] if is_grid_attention(hyperparameters["attention"]) else x[:, None, :]
    cross = {} if encoder_outputs is None else {"encoder_outputs": encoder_outputs}
    new_cache = []
    for block, block_cache in zip(model.decoder_blocks, cache):
        x, block_cache = block(x, cache=block_cache, cache_update_index=step, **cross)
        new_cache.append(block_cache)
    hidden = model.decoder_norm(x)
    outputs = model.output_projection(hidden)
    hidden = ops.reshape(hidden, (-1, hidden.shape[-1]))
    outputs = ops.reshape(outputs, (-1, outputs.shape[-1]))
    if estimates is not None:
        outputs = values_from_differences(outputs, ops.take(estimates, raster_index, axis=1))
    if position_logits is not None:
        outputs = outputs + ops.take(position_logits, raster_index, axis=1)
    return outputs, hidden, new_cache


def _previous_embedding(embedding, hyperparameters, image_shape, previous, order, step):
    if hyperparameters["head"] == "dmol":
        vector = embedding(ops.cast(previous, "float32") / 127.5 - 1.0)
    else:
        previous_column = ops.take(order, ops.maximum(step - 1, 0), axis=0)[1]
        channel = previous_column % image_shape[-1]
        vector = embedding(ops.cast(previous, "int32") + channel * coded_values(embedding, image_shape))
    return vector * ops.cast(step > 0, vector.dtype)


def _position_signal(position, hyperparameters, image_shape, step, raster_index, dtype):
    if not is_grid_attention(hyperparameters["attention"]):
        signal = position(ops.zeros((1, 1, hyperparameters["hidden_dim"]), dtype), cache_update_index=step)
        return signal[:, 0]
    grid_shape = position_grid(image_shape, hyperparameters["head"])
    signal = timing_signal_nd(
        grid_shape, hyperparameters["hidden_dim"], position.min_timescale, position.max_timescale
    )
    signal = ops.take(ops.reshape(signal, (-1, signal.shape[-1])), raster_index, axis=0)
    return ops.cast(signal[None], dtype)


def _raster_index(hyperparameters, image_shape, order, step):
    """The raster-order index of the position generated at `step`."""
    columns = position_grid(image_shape, hyperparameters["head"])[1]
    position = ops.take(order, step, axis=0)
    return position[0] * columns + position[1]
