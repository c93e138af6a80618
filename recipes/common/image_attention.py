"""One query pixel's attention weights in an Image Transformer's decoder,
as the model's `attention_scores` returns them.

The query is the pixel's first sub-pixel; a key pixel's weight is the sum
over its sub-pixels. What a query may see follows its layer: `global`
attention every earlier sub-pixel in raster order, `local_1d` its block up
to itself and the block before, `local_2d` and `relative_local_2d` its
causal memory block (the flange rows above, the flange columns to the left,
its own block up to itself in raster order).
"""

import numpy as np
from keras import ops

from keras_selfattn.layers import LocalAttention2D
from keras_selfattn.models.image_common import position_grid
from keras_selfattn.models import ImageTransformer


def decoder_inputs(model, image, class_label=None, block_index=-1):
    """`(model, block, h, grid_shape)`: the model as an `ImageTransformer`,
    its decoder block `block_index`, the input of that block's
    self-attention `[1, positions, hidden]` in raster order of the position
    grid, and that grid's `(rows, columns)`, for `image [H, W, C]`."""
    model = ImageTransformer.from_model(model)
    pixels, labels = _batch_of_one(image, class_label)
    h = model.self_attention_inputs(pixels, labels, block_index)
    grid_shape = position_grid(model.image_shape, model.decoder_config["head"])
    return model, model.decoder_blocks[block_index], h, grid_shape


def query_attention(model, image, query, class_label=None, block_index=-1):
    """`([heads, positions] weights, memory box)`: the softmax weights of
    the query position `(row, column)` of the position grid over the grid in
    raster order (zero where it cannot attend), as the model's
    `attention_scores` gives them, and the memory box `(top, left, bottom,
    right)` in grid units (`None` unless local 2D)."""
    model = ImageTransformer.from_model(model)
    scores = ops.convert_to_numpy(model.attention_scores(*_batch_of_one(image, class_label), block_index))
    grid_shape = position_grid(model.image_shape, model.decoder_config["head"])
    weights = scores[0, :, query[0] * grid_shape[1] + query[1]]
    attention = model.decoder_blocks[block_index].self_attention
    return weights, memory_box(attention, grid_shape, query)


def _batch_of_one(image, class_label):
    pixels = ops.convert_to_tensor(np.asarray(image, "int32")[None])
    labels = None if class_label is None else ops.convert_to_tensor(np.array([class_label], "int32"))
    return pixels, labels


def memory_box(attention, grid_shape, query):
    """`(top, left, bottom, right)` in grid units: the box of a local 2D
    layer's causal memory around the block of `query`, clipped to the grid;
    `None` for other layers."""
    if not isinstance(attention, LocalAttention2D):
        return None
    (qh, qw), (fh, fw) = attention.block_shape, attention.memory_flange
    rows, columns = grid_shape
    block_row, block_column = query[0] // qh, query[1] // qw
    top, left = block_row * qh - fh, block_column * qw - fw
    bottom, right = (block_row + 1) * qh, (block_column + 1) * qw + fw
    return max(top, 0), max(left, 0), min(bottom, rows), min(right, columns)


def attention_map(model, image, pixel, class_label=None, block_index=-1):
    """`([heads, H, W] weights, memory box in pixels or None)` of the
    query pixel `(row, column)` of `image [H, W, C]` in decoder block
    `block_index` (default: the last)."""
    image = np.asarray(image)
    model = ImageTransformer.from_model(model)
    grid_shape = position_grid(model.image_shape, model.decoder_config["head"])
    positions_per_pixel = grid_shape[1] // image.shape[1]  # sub-pixels, or 1
    query = (pixel[0], pixel[1] * positions_per_pixel)
    weights, box = query_attention(model, image, query, class_label, block_index)
    heads = weights.shape[0]
    per_pixel = weights.reshape(heads, image.shape[0], image.shape[1], positions_per_pixel).sum(-1)
    if box is not None:
        top, left, bottom, right = box
        box = (top, left // positions_per_pixel, bottom, -(-right // positions_per_pixel))
    return per_pixel, box
