"""2D query blocks with flanges, block-raster order, and the masks inside blocks.

An image `[batch, height, width, ...]` (height and width multiples of the
query shape `(qh, qw)`) is cut into query blocks; blocks are numbered in
raster order and positions inside a block in raster order too: that is
*block-raster order*, the generation order of causal 2D local attention.

The memory of query block `(R, C)` is a list of positions given by their
offsets `(dy, dx)` from the block's top-left corner `(R * qh, C * qw)`:

- not causal: the `(qh + 2 fh) x (qw + 2 fw)` window centred on the block,
  `dy in [-fh, qh + fh)`, `dx in [-fw, qw + fw)`;
- causal: the `fh` rows above the block over `dx in [-fw, qw + fw)`, then the
  block's own rows over `dx in [-fw, qw)` (the `fw` columns to its left and
  the block itself); `causal_memory_mask_2d` keeps, inside the block, the
  positions up to the query in raster order.

`memory_offsets_2d` lists the offsets in the order `extract_memory_2d` lays
the memory out, so one description serves the full pass and a cached step:
both gather the positions `memory_pixels_2d` gives.

Example:

>>> import numpy as np
>>> dy, dx = memory_offsets_2d((1, 2), (1, 1), causal=True)
>>> [(int(y), int(x)) for y, x in zip(np.asarray(dy), np.asarray(dx))]
[(-1, -1), (-1, 0), (-1, 1), (-1, 2), (0, -1), (0, 0), (0, 1)]
>>> np.asarray(causal_memory_mask_2d((1, 2), (1, 1)))[0]  # query (0, 0)
array([ True,  True,  True,  True,  True,  True, False])
"""

from keras import ops

from keras_selfattn.compat import pad


def check_divisible(height, width, block_shape):
    """Raises a `ValueError` unless `block_shape` tiles `(height, width)`."""
    block_height, block_width = block_shape
    if height % block_height or width % block_width:
        raise ValueError(
            f"The image ({height} x {width}) must be a multiple of "
            f"`block_shape` {tuple(block_shape)}; pad it first "
            "(`pad_image_to_blocks`)."
        )


def padded_grid_shape(height, width, block_shape):
    """`(height, width)` rounded up to multiples of `block_shape`."""
    block_height, block_width = block_shape
    return (-(-height // block_height) * block_height, -(-width // block_width) * block_width)


def pad_image_to_blocks(image, block_shape):
    """Zero-pads `[batch, height, width, ...]` to multiples of `block_shape`."""
    height, width = image.shape[1], image.shape[2]
    padded_height, padded_width = padded_grid_shape(height, width, block_shape)
    widths = [(0, 0)] * len(image.shape)
    widths[1] = (0, padded_height - height)
    widths[2] = (0, padded_width - width)
    return pad(image, widths)


def image_to_blocks(image, block_shape):
    """`[batch, H, W, ...]` -> `[batch, num_blocks, qh * qw, ...]`, block-raster order."""
    height, width = image.shape[1], image.shape[2]
    check_divisible(height, width, block_shape)
    block_height, block_width = block_shape
    rest = list(ops.shape(image)[3:])
    blocks = ops.reshape(
        image,
        [-1, height // block_height, block_height, width // block_width, block_width] + rest,
    )
    blocks = ops.transpose(blocks, _swap_axes_2_and_3(len(blocks.shape)))
    return ops.reshape(
        blocks,
        [-1, (height // block_height) * (width // block_width), block_height * block_width] + rest,
    )


def blocks_to_image(blocks, grid_shape, block_shape):
    """Inverse of `image_to_blocks`; `grid_shape` is the (padded) `(height, width)`."""
    height, width = grid_shape
    check_divisible(height, width, block_shape)
    block_height, block_width = block_shape
    rest = list(ops.shape(blocks)[3:])
    grid = ops.reshape(
        blocks,
        [-1, height // block_height, width // block_width, block_height, block_width] + rest,
    )
    grid = ops.transpose(grid, _swap_axes_2_and_3(len(grid.shape)))
    return ops.reshape(grid, [-1, height, width] + rest)


def raster_to_block_raster(sequence, grid_shape, block_shape):
    """Reorders `[batch, H * W, ...]` from raster to block-raster order."""
    height, width = grid_shape
    image = ops.reshape(sequence, [-1, height, width] + list(ops.shape(sequence)[2:]))
    blocks = image_to_blocks(image, block_shape)
    return ops.reshape(blocks, [-1, height * width] + list(ops.shape(sequence)[2:]))


def block_raster_to_raster(sequence, grid_shape, block_shape):
    """Reorders `[batch, H * W, ...]` from block-raster to raster order."""
    height, width = grid_shape
    block_height, block_width = block_shape
    check_divisible(height, width, block_shape)
    rest = list(ops.shape(sequence)[2:])
    blocks = ops.reshape(
        sequence,
        [-1, (height // block_height) * (width // block_width), block_height * block_width] + rest,
    )
    image = blocks_to_image(blocks, grid_shape, block_shape)
    return ops.reshape(image, [-1, height * width] + rest)


def block_raster_index(rows, columns, padded_width, block_shape):
    """Position in block-raster order of pixels `(rows, columns)` (int tensors)."""
    block_height, block_width = block_shape
    blocks_per_row = padded_width // block_width
    block = (rows // block_height) * blocks_per_row + columns // block_width
    inside = (rows % block_height) * block_width + columns % block_width
    return block * (block_height * block_width) + inside


def memory_regions_2d(block_shape, memory_flange, causal):
    """The memory as rectangles of offsets: `[(dy0, dy1, dx0, dx1), ...]`.

    Each rectangle covers `dy in [dy0, dy1)`, `dx in [dx0, dx1)` relative to
    the block's top-left corner, in the order of `extract_memory_2d`.
    """
    (block_height, block_width), (flange_height, flange_width) = block_shape, memory_flange
    if not causal:
        return [
            (
                -flange_height,
                block_height + flange_height,
                -flange_width,
                block_width + flange_width,
            )
        ]
    regions = []
    if flange_height:
        regions.append((-flange_height, 0, -flange_width, block_width + flange_width))
    regions.append((0, block_height, -flange_width, block_width))
    return regions


def memory_offsets_2d(block_shape, memory_flange, causal):
    """`(dy, dx)`: two int32 `[memory_length]` tensors, one entry per memory position."""
    rows, columns = [], []
    for top, bottom, left, right in memory_regions_2d(block_shape, memory_flange, causal):
        dy = ops.arange(top, bottom, dtype="int32")[:, None]
        dx = ops.arange(left, right, dtype="int32")[None, :]
        rows.append(ops.reshape(ops.broadcast_to(dy, (bottom - top, right - left)), [-1]))
        columns.append(ops.reshape(ops.broadcast_to(dx, (bottom - top, right - left)), [-1]))
    return ops.concatenate(rows, axis=0), ops.concatenate(columns, axis=0)


def memory_pixels_2d(block_rows, block_columns, block_shape, memory_flange, causal):
    """`(rows, columns)` of the memory pixels of query blocks `(block_rows, block_columns)`.

    Args:
        block_rows, block_columns: int32 tensors (or ints) of one shape `S`.
        block_shape, memory_flange, causal: as in `extract_memory_2d`.

    Returns:
        Two int32 `S + [memory_length]` tensors in the order of
        `memory_offsets_2d`; pixels may lie outside the image.
    """
    block_height, block_width = block_shape
    offset_rows, offset_columns = memory_offsets_2d(block_shape, memory_flange, causal)
    top = ops.expand_dims(ops.convert_to_tensor(block_rows, "int32") * block_height, -1)
    left = ops.expand_dims(ops.convert_to_tensor(block_columns, "int32") * block_width, -1)
    return top + offset_rows, left + offset_columns


def memory_positions_2d(grid_shape, block_shape, memory_flange, causal):
    """Raster positions of the memory of every query block of an image.

    Args:
        grid_shape: `(height, width)`, any size; blocks tile the image padded
            to multiples of `block_shape`.
        block_shape, memory_flange, causal: as in `extract_memory_2d`.

    Returns:
        int32 `[num_blocks, memory_length]`: `row * width + column` for pixels
        of the image, `height * width` for pixels outside it.
    """
    height, width = grid_shape
    padded_height, padded_width = padded_grid_shape(height, width, block_shape)
    block_rows, block_columns = padded_height // block_shape[0], padded_width // block_shape[1]
    grid = ops.meshgrid(
        ops.arange(block_rows, dtype="int32"),
        ops.arange(block_columns, dtype="int32"),
        indexing="ij",
    )
    rows, columns = memory_pixels_2d(
        *(ops.reshape(x, [-1]) for x in grid), block_shape, memory_flange, causal
    )
    inside = inside_image(rows, columns, grid_shape)
    return ops.where(inside, rows * width + columns, height * width)


def inside_image(rows, columns, grid_shape):
    """Whether pixels `(rows, columns)` lie in a `grid_shape` `(height, width)` image."""
    height, width = grid_shape
    return ops.logical_and(
        ops.logical_and(rows >= 0, rows < height), ops.logical_and(columns >= 0, columns < width)
    )


def extract_memory_2d(image, block_shape, memory_flange, causal):
    """The memory of every query block.

    One gather from the flattened image (as tensor2tensor's 2D local
    attention does): the windows overlap, and cutting them with pads and
    slices costs several window-sized copies forward and backward.

    Args:
        image: `[batch, height, width, ...]`, any size (blocks tile it padded
            to multiples of `block_shape`); positions outside it read as zeros.
        block_shape: `(qh, qw)`.
        memory_flange: `(fh, fw)`.
        causal: whether to cut the causal memory (rows above and columns to the
            left) or the centred window.

    Returns:
        `[batch, num_blocks, memory_length, ...]`, blocks in raster order,
        memory positions in the order of `memory_offsets_2d`.
    """
    grid_shape = (image.shape[1], image.shape[2])
    positions = memory_positions_2d(grid_shape, block_shape, memory_flange, causal)
    return gather_pixels(image, positions)


def gather_pixels(image, positions):
    """`image` `[batch, height, width, ...]` read at raster `positions`.

    Args:
        image: `[batch, height, width, ...]`.
        positions: int32 tensor of raster positions, `height * width` for a
            pixel outside the image (as `memory_positions_2d` gives them).

    Returns:
        `[batch] + positions.shape + [...]`, zeros at outside positions.
    """
    height, width = image.shape[1], image.shape[2]
    rest = list(ops.shape(image)[3:])
    pixels = ops.reshape(image, [-1, height * width] + rest)
    # One zero pixel at index `height * width` stands for every outside position.
    pixels = ops.concatenate([pixels, ops.zeros_like(pixels[:, :1])], axis=1)
    gathered = ops.take(pixels, ops.reshape(positions, [-1]), axis=1)
    return ops.reshape(gathered, [-1] + list(positions.shape) + rest)


def causal_memory_mask_2d(block_shape, memory_flange):
    """`[qh * qw, memory_length]`: which causal memory entries each query may see.

    Everything outside the query's own block is in the past in block-raster
    order; inside the block, keys up to the query in raster order.
    """
    block_height, block_width = block_shape
    dy, dx = memory_offsets_2d(block_shape, memory_flange, causal=True)
    query = ops.arange(block_height * block_width, dtype="int32")[:, None]
    outside_block = ops.logical_or(dy < 0, dx < 0)[None, :]
    not_after = (dy * block_width + dx)[None, :] <= query
    return ops.logical_or(outside_block, not_after)


def memory_validity_2d(grid_shape, block_shape, memory_flange, causal, key_mask=None):
    """Which memory entries are pixels of the image (and not padding).

    Args:
        grid_shape: the `(height, width)` of the image.
        block_shape, memory_flange, causal: as in `extract_memory_2d`.
        key_mask: optional `[batch, height, width]` padding mask.

    Returns:
        Boolean `[1 or batch, num_blocks, memory_length]`.
    """
    positions = memory_positions_2d(grid_shape, block_shape, memory_flange, causal)
    return pixel_validity(positions, grid_shape, key_mask)


def pixel_validity(positions, grid_shape, key_mask=None):
    """Which raster `positions` are pixels of the image (and not padding).

    Args:
        positions: int32 tensor, `height * width` for outside pixels.
        grid_shape: the `(height, width)` of the image.
        key_mask: optional `[batch, height, width]` padding mask.

    Returns:
        Boolean `[1 or batch] + positions.shape`.
    """
    height, width = grid_shape
    inside = (positions < height * width)[None]
    if key_mask is None:
        return inside
    key_mask = ops.reshape(ops.cast(key_mask, "bool"), [-1, height * width])
    key_mask = pad(key_mask, [(0, 0), (0, 1)])  # outside positions read False
    return ops.logical_and(inside, ops.take(key_mask, positions, axis=1))


def _swap_axes_2_and_3(rank):
    return [0, 1, 3, 2] + list(range(4, rank))
