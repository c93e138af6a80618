import numpy as np
import pytest
from keras import ops

from keras_selfattn.ops.blocking_2d import (
    extract_memory_2d,
    image_to_blocks,
    pad_image_to_blocks,
)
from keras_selfattn.ops.relative_2d import (
    block_relative_offsets_2d,
    clipped_offset_rows,
    relative_logits_2d,
)

# batch, heads, blocks, depth: distinct, and none equal to a query or key count.
BATCH, HEADS, BLOCKS, DEPTH = 2, 3, 5, 7

CASES = [
    # height, width, block_shape, memory_flange
    (4, 6, (2, 3), (1, 2)),
    (5, 7, (2, 3), (2, 4)),
    (6, 5, (3, 1), (0, 2)),
    (3, 4, (3, 4), (0, 0)),
]


def numpy(x):
    return ops.convert_to_numpy(x)


def coordinate_images(height, width):
    """`[1, H, W, 2]` whose pixel `(y, x)` holds `(y, x)`, shifted by 1 so
    that the zeros read for pixels outside the image stand out."""
    rows, columns = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    return np.stack([rows, columns], -1)[None].astype("int32") + 1


@pytest.mark.parametrize("causal", [True, False], ids=["masked", "unmasked"])
@pytest.mark.parametrize("height, width, block_shape, memory_flange", CASES)
def test_block_offsets_are_each_memory_pixel_minus_each_query_pixel(
    height, width, block_shape, memory_flange, causal
):
    """The offsets against the pixels the blocking gathers, pixel by pixel."""
    dy, dx = (numpy(x) for x in block_relative_offsets_2d(block_shape, memory_flange, causal))
    coordinates = coordinate_images(height, width)
    memory = numpy(extract_memory_2d(coordinates, block_shape, memory_flange, causal))[0]
    queries = numpy(image_to_blocks(pad_image_to_blocks(coordinates, block_shape), block_shape))[0]
    assert dy.shape == dx.shape == (block_shape[0] * block_shape[1], memory.shape[1])
    for block in range(memory.shape[0]):
        for q in range(queries.shape[1]):
            query = queries[block, q]
            if not query.all():
                continue  # padding
            for m in range(memory.shape[1]):
                key = memory[block, m]
                if key.all():  # a pixel of the image
                    assert (dy[q, m], dx[q, m]) == tuple(key - query)


def test_clipped_offset_rows_clip_like_shaw():
    offsets = np.array([[-5, -2, -1, 0, 1, 2, 9]], "int32")
    np.testing.assert_array_equal(numpy(clipped_offset_rows(offsets, 2)), [[0, 0, 1, 2, 3, 4, 4]])
    np.testing.assert_array_equal(numpy(clipped_offset_rows(offsets, 0)), np.zeros((1, 7)))


@pytest.mark.parametrize("shared", [True, False], ids=["shared_table", "per_head_tables"])
def test_relative_logits_2d_equal_the_materialised_relations(shared):
    queries, keys, height_k, width_k = 4, 6, 2, 3
    rng = np.random.default_rng(1)
    query = rng.normal(size=(BATCH, HEADS, BLOCKS, queries, DEPTH)).astype("float32")
    lead = () if shared else (HEADS,)
    height_table = rng.normal(size=lead + (2 * height_k + 1, DEPTH)).astype("float32")
    width_table = rng.normal(size=lead + (2 * width_k + 1, DEPTH)).astype("float32")
    dy = rng.integers(-4, 5, (queries, keys))
    dx = rng.integers(-5, 6, (queries, keys))
    out = numpy(
        relative_logits_2d(
            query,
            height_table,
            width_table,
            clipped_offset_rows(dy, height_k),
            clipped_offset_rows(dx, width_k),
        )
    )
    # [.., query, key, depth] relations, materialised.
    height_rows = np.clip(dy, -height_k, height_k) + height_k
    width_rows = np.clip(dx, -width_k, width_k) + width_k
    if shared:
        relations = height_table[height_rows] + width_table[width_rows]  # [q, k, d]
        expected = np.einsum("bhnqd,qkd->bhnqk", query, relations)
    else:
        relations = height_table[:, height_rows] + width_table[:, width_rows]  # [h, q, k, d]
        expected = np.einsum("bhnqd,hqkd->bhnqk", query, relations)
    assert out.dtype == np.float32 and out.shape == (BATCH, HEADS, BLOCKS, queries, keys)
    np.testing.assert_allclose(out, expected, atol=1e-5)
