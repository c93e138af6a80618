import numpy as np
import pytest
from keras import ops

from keras_selfattn.ops.blocking_1d import (
    block_attention,
    causal_window_mask,
    memory_windows,
    merge_blocks,
    pad_to_blocks,
    scores_over_keys,
    split_blocks,
    window_positions,
    window_relative_positions,
    window_validity,
)
from keras_selfattn.ops.blocking_2d import (
    block_raster_index,
    block_raster_to_raster,
    blocks_to_image,
    check_divisible,
    extract_memory_2d,
    image_to_blocks,
    causal_memory_mask_2d,
    memory_offsets_2d,
    memory_validity_2d,
    pad_image_to_blocks,
    raster_to_block_raster,
)


def numpy(x):
    return ops.convert_to_numpy(x)


def naive_windows(sequence, block_length, left, right):
    """Window `b` read position by position; zeros outside the sequence."""
    length = len(sequence)
    blocks = -(-length // block_length)
    windows = np.zeros((blocks, left + block_length + right) + sequence.shape[1:], sequence.dtype)
    for b in range(blocks):
        for j in range(windows.shape[1]):
            position = b * block_length - left + j
            if 0 <= position < length:
                windows[b, j] = sequence[position]
    return windows


@pytest.mark.parametrize(
    "length, block_length, left, right",
    [
        (12, 4, 4, 0),
        (12, 4, 2, 2),
        (12, 3, 5, 1),
        (12, 4, 2, -4),
        (12, 2, 7, 3),
        (6, 6, 0, 0),
        (10, 4, 1, 9),
    ],
)
def test_memory_windows_match_position_loop(length, block_length, left, right):
    sequence = np.random.default_rng(0).normal(size=(length, 3)).astype("float32")
    padded = numpy(pad_to_blocks(sequence[None], block_length))
    windows = numpy(memory_windows(padded, block_length, left, right))[0]
    expected = naive_windows(sequence, block_length, left, right)
    # Positions in the padding read the zeros `pad_to_blocks` put there.
    np.testing.assert_array_equal(windows, expected)


def test_memory_windows_on_another_axis():
    image = np.random.default_rng(1).normal(size=(2, 4, 6)).astype("float32")
    windows = numpy(memory_windows(image, 3, 1, 2, axis=2))  # [2, 4, 2, 6]
    for b in range(2):
        for row in range(4):
            np.testing.assert_array_equal(windows[b, row], naive_windows(image[b, row], 3, 1, 2))


def test_split_and_merge_blocks_round_trip():
    x = np.arange(2 * 7 * 3, dtype="float32").reshape(2, 7, 3)
    padded = pad_to_blocks(x, 3)
    blocks = numpy(split_blocks(padded, 3))
    assert blocks.shape == (2, 3, 3, 3)
    np.testing.assert_array_equal(blocks[:, 1, 2], x[:, 5])
    np.testing.assert_array_equal(numpy(merge_blocks(blocks))[:, :7], x)


@pytest.mark.parametrize("left, right", [(4, 0), (2, 2), (0, 3)])
def test_window_validity_and_positions(left, right):
    length, block_length = 10, 4
    validity = numpy(window_validity(length, 12, block_length, left, right))
    relative = numpy(window_relative_positions(block_length, left, right))
    causal = numpy(causal_window_mask(block_length, left, right))
    key_mask = np.random.default_rng(2).random((2, length)) > 0.3
    padded_validity = numpy(window_validity(length, 12, block_length, left, right, key_mask))
    for b in range(3):
        for j in range(left + block_length + right):
            key = b * block_length - left + j
            real = 0 <= key < length
            assert validity[b, j] == real
            np.testing.assert_array_equal(
                padded_validity[:, b, j], real and key_mask[:, key] if real else False
            )
            for i in range(block_length):
                query = b * block_length + i
                assert relative[i, j] == key - query
                assert causal[i, j] == (key <= query)


def naive_block_attention(query, key, value, mask, bias):
    """Per batch, head, block and query, written out with numpy loops."""
    batch, heads, blocks, block_length, depth = query.shape
    output = np.zeros(query.shape[:-1] + value.shape[-1:])
    for b in range(batch):
        for h in range(heads):
            for n in range(blocks):
                for i in range(block_length):
                    allowed = np.flatnonzero(mask[b, n, i])
                    if not len(allowed):
                        continue
                    logits = (
                        key[b, h, n, allowed] @ query[b, h, n, i] / np.sqrt(depth)
                        + bias[0, h, n, i, allowed]
                    )
                    weights = np.exp(logits - logits.max())
                    output[b, h, n, i] = (weights / weights.sum()) @ value[b, h, n, allowed]
    return output


def test_block_attention_matches_per_block_reference():
    rng = np.random.default_rng(3)
    query = rng.normal(size=(2, 2, 3, 4, 5)).astype("float32")
    key = rng.normal(size=(2, 2, 3, 6, 5)).astype("float32")
    value = rng.normal(size=(2, 2, 3, 6, 3)).astype("float32")
    mask = rng.random((2, 3, 4, 6)) > 0.4
    mask[0, 1, 2] = False  # a query with no key gets zeros
    bias = rng.normal(size=(1, 2, 3, 4, 6)).astype("float32")
    output = numpy(block_attention(query, key, value, mask=mask, bias=bias))
    np.testing.assert_allclose(
        output, naive_block_attention(query, key, value, mask, bias), atol=1e-5
    )
    np.testing.assert_array_equal(output[0, :, 1, 2], 0.0)


def test_block_attention_mask_factors_equal_their_conjunction():
    rng = np.random.default_rng(4)
    query = rng.normal(size=(2, 2, 3, 4, 5)).astype("float32")
    key = rng.normal(size=(2, 2, 3, 6, 5)).astype("float32")
    causal = numpy(causal_window_mask(4, 2, 0))  # [queries, keys]
    validity = rng.random((2, 3, 1, 6)) > 0.3  # [batch, blocks, 1, keys]
    validity[1, 0] = False  # a block whose keys are all padding
    factored = numpy(block_attention(query, key, key, mask=(causal, validity)))
    merged = causal[None, None] & validity
    expected = naive_block_attention(query, key, key, merged, np.zeros((1, 2, 3, 4, 6)))
    np.testing.assert_allclose(factored, expected, atol=1e-5)
    np.testing.assert_allclose(
        numpy(block_attention(query, key, key, mask=merged)), expected, atol=1e-5
    )


def test_block_attention_returns_the_masked_probabilities_it_weighs_values_with():
    rng = np.random.default_rng(5)
    query = rng.normal(size=(2, 3, 2, 4, 5)).astype("float32")
    key = rng.normal(size=(2, 3, 2, 7, 5)).astype("float32")
    value = rng.normal(size=(2, 3, 2, 7, 6)).astype("float32")
    mask = rng.random((2, 2, 4, 7)) > 0.4
    mask[1, 0, 3] = False
    output, probabilities = block_attention(query, key, value, mask=mask, return_probabilities=True)
    output, probabilities = numpy(output), numpy(probabilities)
    assert probabilities.shape == (2, 3, 2, 4, 7)
    assert np.all(probabilities[~np.broadcast_to(mask[:, None], probabilities.shape)] == 0)
    np.testing.assert_allclose(probabilities.sum(-1), mask.any(-1)[:, None].repeat(3, 1), atol=1e-6)
    np.testing.assert_allclose(output, probabilities @ value, atol=1e-5)
    np.testing.assert_allclose(
        output, numpy(block_attention(query, key, value, mask=mask)), atol=1e-5
    )


@pytest.mark.parametrize("left, right", [(3, 0), (2, 2)])
def test_scores_over_keys_lays_each_window_entry_at_its_position(left, right):
    length, block_length = 8, 3
    blocks = -(-length // block_length)
    positions = numpy(window_positions(blocks, block_length, left, right))
    for b in range(blocks):
        np.testing.assert_array_equal(
            positions[b], np.arange(b * block_length - left, (b + 1) * block_length + right)
        )
    valid = (positions >= 0) & (positions < length)
    rng = np.random.default_rng(6)
    block_scores = rng.random((2, 3, blocks, block_length, positions.shape[1])) * valid
    dense = numpy(scores_over_keys(block_scores.astype("float32"), positions, length))
    expected = np.zeros((2, 3, blocks, block_length, length))
    for b in range(blocks):
        for entry, position in enumerate(positions[b]):
            if valid[b, entry]:
                expected[:, :, b, :, position] = block_scores[:, :, b, :, entry]
    np.testing.assert_array_equal(dense, expected.astype("float32"))


def test_window_of_non_positive_size_is_rejected():
    with pytest.raises(ValueError, match="at least one position"):
        memory_windows(np.zeros((1, 4)), 2, 1, -3)


def block_raster_order(height, width, block_shape):
    """`[(row, column)]` of every pixel, sorted into block-raster order by hand."""
    qh, qw = block_shape
    order = []
    for block_row in range(height // qh):
        for block_column in range(width // qw):
            for r in range(qh):
                for c in range(qw):
                    order.append((block_row * qh + r, block_column * qw + c))
    return order


def test_block_raster_conversions_and_index():
    height, width, block_shape = 4, 6, (2, 3)
    image = np.random.default_rng(4).normal(size=(2, height, width, 3)).astype("float32")
    order = block_raster_order(height, width, block_shape)
    raster = image.reshape(2, height * width, 3)
    block_raster = numpy(raster_to_block_raster(raster, (height, width), block_shape))
    for position, (row, column) in enumerate(order):
        np.testing.assert_array_equal(block_raster[:, position], image[:, row, column])
        assert block_raster_index(row, column, width, block_shape) == position
    np.testing.assert_array_equal(
        numpy(block_raster_to_raster(block_raster, (height, width), block_shape)), raster
    )
    blocks = numpy(image_to_blocks(image, block_shape))
    assert blocks.shape == (2, 4, 6, 3)
    np.testing.assert_array_equal(blocks.reshape(2, -1, 3), block_raster)
    np.testing.assert_array_equal(
        numpy(blocks_to_image(blocks, (height, width), block_shape)), image
    )


def test_block_raster_helpers_reject_partial_blocks():
    with pytest.raises(ValueError, match="multiple of `block_shape`"):
        raster_to_block_raster(np.zeros((1, 15, 2)), (3, 5), (2, 2))
    with pytest.raises(ValueError, match="pad_image_to_blocks"):
        check_divisible(5, 4, (2, 2))
    assert pad_image_to_blocks(np.zeros((1, 3, 5, 2)), (2, 2)).shape == (1, 4, 6, 2)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "not-causal"])
@pytest.mark.parametrize(
    "block_shape, memory_flange", [((2, 3), (1, 2)), ((2, 2), (3, 1)), ((1, 4), (0, 5))]
)
@pytest.mark.parametrize("height, width", [(4, 12), (5, 11)], ids=["tiled", "partial-blocks"])
def test_extract_memory_2d_reads_offsets(block_shape, memory_flange, causal, height, width):
    image = np.random.default_rng(5).normal(size=(1, height, width, 2)).astype("float32")
    memory = numpy(extract_memory_2d(image, block_shape, memory_flange, causal=causal))[0]
    dy, dx = (numpy(t) for t in memory_offsets_2d(block_shape, memory_flange, causal=causal))
    qh, qw = block_shape
    fh, fw = memory_flange
    expected_length = (
        (qh + 2 * fh) * (qw + 2 * fw) if not causal else fh * (qw + 2 * fw) + qh * (qw + fw)
    )
    assert memory.shape[1] == len(dy) == expected_length
    blocks_per_row = -(-width // qw)
    assert memory.shape[0] == -(-height // qh) * blocks_per_row
    for block in range(memory.shape[0]):
        top, left = (block // blocks_per_row) * qh, (block % blocks_per_row) * qw
        for m in range(expected_length):
            row, column = top + dy[m], left + dx[m]
            inside = 0 <= row < height and 0 <= column < width
            np.testing.assert_array_equal(
                memory[block, m], image[0, row, column] if inside else 0.0
            )


@pytest.mark.parametrize("block_shape, memory_flange", [((2, 3), (1, 2)), ((3, 2), (0, 0))])
def test_causal_memory_mask_2d_follows_block_raster_order(block_shape, memory_flange):
    mask = numpy(causal_memory_mask_2d(block_shape, memory_flange))
    dy, dx = (numpy(t) for t in memory_offsets_2d(block_shape, memory_flange, causal=True))
    qh, qw = block_shape
    for query in range(qh * qw):
        r, c = divmod(query, qw)
        for m in range(len(dy)):
            in_block = 0 <= dy[m] < qh and 0 <= dx[m] < qw
            expected = not in_block or (dy[m], dx[m]) <= (r, c)
            assert mask[query, m] == expected


def test_memory_validity_2d_masks_padding_and_outside():
    grid_shape, block_shape, flange = (3, 5), (2, 3), (1, 2)
    key_mask = np.random.default_rng(6).random((2, 3, 5)) > 0.3
    validity = numpy(memory_validity_2d(grid_shape, block_shape, flange, True, key_mask))
    dy, dx = (numpy(t) for t in memory_offsets_2d(block_shape, flange, causal=True))
    for block in range(4):
        top, left = (block // 2) * 2, (block % 2) * 3
        for m in range(len(dy)):
            row, column = top + dy[m], left + dx[m]
            real = 0 <= row < 3 and 0 <= column < 5
            expected = key_mask[:, row, column] if real else np.zeros(2, bool)
            np.testing.assert_array_equal(validity[:, block, m], expected)
