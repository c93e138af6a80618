"""One query pixel's attention weights in an Image Transformer's decoder,
read from the model's own layers (the local layers return no scores).

The query is the pixel's first sub-pixel; a key pixel's weight is the sum
over its sub-pixels. What a query may see follows its layer: `global`
attention every earlier sub-pixel in raster order, `local_1d` its block up
to itself and the block before, `local_2d` and `relative_local_2d` its
causal memory block (the flange rows above, the flange columns to the left,
its own block up to itself in raster order). A relative layer's logits
include its terms for each key's row and column offset.
"""

import numpy as np
from keras import ops

from keras_selfattn.models.image_common import position_grid
from keras_selfattn.models.image_models import ImageTransformer
from keras_selfattn.ops.blocking_2d import causal_memory_mask_2d, memory_pixels_2d


def decoder_inputs(model, image, class_label=None, block_index=-1):
    """`(model, block, h, grid_shape)`: the model as an `ImageTransformer`,
    its decoder block `block_index`, the input of that block's
    self-attention `[1, positions, hidden]` in raster order of the position
    grid, and that grid's `(rows, columns)`, for `image [H, W, C]`."""
    model = ImageTransformer.from_model(model)
    pixels = ops.convert_to_tensor(np.asarray(image, "int32")[None])
    labels = None if class_label is None else ops.convert_to_tensor(np.array([class_label], "int32"))
    h = model.self_attention_inputs(pixels, labels, block_index)
    grid_shape = position_grid(model.image_shape, model.decoder_config["head"])
    return model, model.decoder_blocks[block_index], h, grid_shape


def visible_positions(attention, grid_shape, query):
    """`[positions]` bool: which raster positions of the grid the query
    position `(row, column)` attends to, and the memory box
    `(top, left, bottom, right)` in grid units (`None` unless local 2D)."""
    rows, columns = grid_shape
    raster = np.arange(rows * columns)
    query_index = query[0] * columns + query[1]
    if hasattr(attention, "query_shape"):
        (qh, qw), (fh, fw) = attention.query_shape, attention.memory_flange
        block = (query[0] // qh, query[1] // qw)
        memory_rows, memory_columns = (
            ops.convert_to_numpy(v) for v in memory_pixels_2d(block[0], block[1], (qh, qw), (fh, fw), True)
        )
        allowed = ops.convert_to_numpy(causal_memory_mask_2d((qh, qw), (fh, fw)))[
            (query[0] % qh) * qw + query[1] % qw
        ]
        inside = (memory_rows >= 0) & (memory_rows < rows) & (memory_columns >= 0) & (memory_columns < columns)
        keep = allowed & inside
        visible = np.zeros(rows * columns, bool)
        visible[memory_rows[keep] * columns + memory_columns[keep]] = True
        top, left = block[0] * qh - fh, block[1] * qw - fw
        box = (max(top, 0), max(left, 0), min((block[0] + 1) * qh, rows), min((block[1] + 1) * qw + fw, columns))
        return visible, box
    if hasattr(attention, "block_length"):
        first = (query_index // attention.block_length - 1) * attention.block_length
        return (raster >= first) & (raster <= query_index), None
    return raster <= query_index, None


def query_attention(attention, h, grid_shape, query):
    """`[heads, positions]` softmax weights of the query position over the
    grid (zero where it cannot attend), from the layer's projections."""
    visible, box = visible_positions(attention, grid_shape, query)
    query_index = query[0] * grid_shape[1] + query[1]
    q = ops.convert_to_numpy(attention.query_dense(h))[0, query_index].astype("float64")  # [heads, dim]
    k = ops.convert_to_numpy(attention.key_dense(h))[0].astype("float64")  # [positions, heads, dim]
    logits = np.einsum("hd,phd->hp", q, k) + _relative_logits(attention, q, grid_shape, query)
    logits = logits * float(attention.logit_scale)
    logits = np.where(visible[None], logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    return weights / weights.sum(-1, keepdims=True), box


def _relative_logits(attention, q, grid_shape, query):
    """`[heads, positions]`: `q . r^H[dy] + q . r^W[dx]` of a 2D relative
    layer for every position's clipped offset from the query, else 0."""
    if getattr(attention, "relative_height_embeddings", None) is None:
        return 0.0
    rows, columns = np.meshgrid(np.arange(grid_shape[0]), np.arange(grid_shape[1]), indexing="ij")
    logits = 0.0
    for table, offsets, limit in zip(
        (attention.relative_height_embeddings, attention.relative_width_embeddings),
        (rows.reshape(-1) - query[0], columns.reshape(-1) - query[1]),
        attention.max_relative_position,
    ):
        table = ops.convert_to_numpy(table).astype("float64")  # [(heads,) 2 k + 1, dim]
        relations = np.take(table, np.clip(offsets, -limit, limit) + limit, axis=-2)
        logits = logits + np.einsum("hd,hpd->hp" if table.ndim == 3 else "hd,pd->hp", q, relations)
    return logits


def attention_map(model, image, pixel, class_label=None, block_index=-1):
    """`([heads, H, W] weights, memory box in pixels or None)` of the
    query pixel `(row, column)` of `image [H, W, C]` in decoder block
    `block_index` (default: the last)."""
    image = np.asarray(image)
    channels = image.shape[-1]
    _, block, h, grid_shape = decoder_inputs(model, image, class_label, block_index)
    query = (pixel[0], pixel[1] * channels)
    weights, box = query_attention(block.self_attention, h, grid_shape, query)
    heads = weights.shape[0]
    per_pixel = weights.reshape(heads, image.shape[0], image.shape[1], channels).sum(-1)
    if box is not None:
        top, left, bottom, right = box
        box = (top, left // channels, bottom, -(-right // channels))
    return per_pixel, box
