import numpy as np
import pytest
from keras import ops

from keras_selfattn.ops.blocking_1d import causal_window_mask
from keras_selfattn.ops.relative import (
    causal_relative_logits,
    gather_relative_logits,
    local_relative_logits,
    local_relative_weights,
    relative_distances,
    relative_table_window,
    shaw_row_distances,
    shaw_table_rows,
    shaw_table_window,
    skew,
    skew_causal,
    skew_causal_square,
    skew_row_distances,
    skew_table_rows,
    sum_weights_by_distance,
    unskew,
    unskew_causal,
    unskew_causal_square,
)

LENGTHS = [1, 2, 5, 37]


def numpy(x):
    return ops.convert_to_numpy(x)


def random(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


@pytest.mark.parametrize("length", LENGTHS)
def test_skew_causal_moves_distances_to_keys_below_the_diagonal(length):
    x = random(2, 3, length, length)
    out = numpy(skew_causal(x))
    assert out.shape == x.shape
    for i in range(length):
        for j in range(i + 1):
            np.testing.assert_array_equal(out[..., i, j], x[..., i, j - i + length - 1])


@pytest.mark.parametrize("query_length", LENGTHS)
@pytest.mark.parametrize("key_length", [1, 4, 37])
def test_skew_covers_every_distance(query_length, key_length):
    x = random(2, query_length, query_length + key_length - 1)
    out = numpy(skew(x, key_length))
    assert out.shape == (2, query_length, key_length)
    for i in range(query_length):
        for j in range(key_length):
            np.testing.assert_array_equal(out[:, i, j], x[:, i, j - i + query_length - 1])


@pytest.mark.parametrize("length", LENGTHS)
def test_unskew_causal_inverts_the_skew_of_a_lower_triangle(length):
    weights = np.tril(random(2, length, length))
    out = numpy(unskew_causal(weights))
    for i in range(length):
        for c in range(length):
            j = c + i - (length - 1)
            expected = weights[:, i, j] if j >= 0 else 0.0
            np.testing.assert_array_equal(out[:, i, c], expected)
    np.testing.assert_array_equal(np.tril(numpy(skew_causal(out))), weights)


@pytest.mark.parametrize("query_length", LENGTHS)
@pytest.mark.parametrize("key_length", [1, 4, 37])
def test_unskew_places_each_key_at_its_distance(query_length, key_length):
    weights = random(3, query_length, key_length)
    out = numpy(unskew(weights))
    assert out.shape == (3, query_length, query_length + key_length - 1)
    for i in range(query_length):
        for c in range(query_length + key_length - 1):
            j = c + i - (query_length - 1)
            expected = weights[:, i, j] if 0 <= j < key_length else 0.0
            np.testing.assert_array_equal(out[:, i, c], expected)
    np.testing.assert_array_equal(numpy(skew(out, key_length)), weights)


def test_relative_distances_count_from_the_query_offset():
    distances = numpy(relative_distances(2, 5, cache_update_index=3))
    np.testing.assert_array_equal(distances, [[-3, -2, -1, 0, 1], [-4, -3, -2, -1, 0]])


def test_skew_table_rows_have_no_row_beyond_the_table():
    distances = np.arange(-4, 4, dtype="int32")
    rows, valid = skew_table_rows(distances, max_relative_position=3, num_rows=5)
    np.testing.assert_array_equal(numpy(valid), [False, False, True, True, True, True, True, False])
    np.testing.assert_array_equal(numpy(rows)[2:7], [0, 1, 2, 3, 4])


def test_shaw_table_rows_clip_distances():
    distances = np.arange(-5, 6, dtype="int32")
    expected = [np.clip(d, -2, 2) + 2 for d in range(-5, 6)]
    np.testing.assert_array_equal(numpy(shaw_table_rows(distances, 2)), expected)


@pytest.mark.parametrize("first_distance, count", [(-6, 13), (-2, 3), (0, 1), (-10, 4)])
def test_relative_table_window_zero_pads_missing_distances(first_distance, count):
    max_relative_position = 4
    table = random(2, 2 * max_relative_position - 1, 3)
    window = numpy(relative_table_window(table, first_distance, count, max_relative_position))
    assert window.shape == (2, count, 3)
    for n in range(count):
        row = first_distance + n + max_relative_position - 1
        expected = table[:, row] if 0 <= row < table.shape[1] else np.zeros((2, 3))
        np.testing.assert_array_equal(window[:, n], expected)


def test_gather_relative_logits_picks_each_pairs_row():
    dots = random(2, 3, 4, 7)
    rows = np.random.default_rng(1).integers(0, 7, size=(4, 6)).astype("int32")
    out = numpy(gather_relative_logits(dots, rows))
    for i in range(4):
        for j in range(6):
            np.testing.assert_array_equal(out[:, :, i, j], dots[:, :, i, rows[i, j]])


def naive_sum_by_row(weights, positions, row_of_distance, num_rows):
    out = np.zeros(weights.shape[:-1] + (num_rows,))
    for i, position in enumerate(positions):
        for j in range(weights.shape[-1]):
            row = row_of_distance(j - position)
            if row is not None:
                out[..., i, row] += weights[..., i, j]
    return out


@pytest.mark.parametrize("offset", [0, 5])
def test_sum_weights_by_distance_for_skew_rows(offset):
    max_relative_position, num_rows = 4, 7
    weights = np.abs(random(2, 3, 10))
    positions = np.arange(3, dtype="int32") + offset
    low, high = skew_row_distances(max_relative_position, num_rows)
    out = numpy(sum_weights_by_distance(weights, positions, low, high))

    def row_of(distance):
        row = distance + max_relative_position - 1
        return row if 0 <= row < num_rows else None

    np.testing.assert_allclose(out, naive_sum_by_row(weights, positions, row_of, num_rows), atol=1e-6)


@pytest.mark.parametrize("offset", [0, 4])
def test_sum_weights_by_distance_for_clipped_shaw_rows(offset):
    k = 2
    weights = np.abs(random(2, 5, 12))
    positions = np.arange(5, dtype="int32") + offset
    low, high = shaw_row_distances(k, 2 * k + 1)
    out = numpy(sum_weights_by_distance(weights, positions, low, high))
    expected = naive_sum_by_row(weights, positions, lambda d: int(np.clip(d, -k, k)) + k, 2 * k + 1)
    np.testing.assert_allclose(out, expected, atol=1e-6)
    np.testing.assert_allclose(out.sum(-1), weights.sum(-1), atol=1e-6)


@pytest.mark.parametrize("block_length", [1, 3, 8])
def test_local_relative_logits_and_weights(block_length):
    b = block_length
    dots = random(2, 4, b, 2 * b)  # column c: distance c - (2b - 1)
    logits = numpy(local_relative_logits(dots))
    weights = random(2, 4, b, 2 * b, seed=1) * numpy(causal_window_mask(b, b, 0))
    by_distance = numpy(local_relative_weights(weights))
    for q in range(b):
        for m in range(2 * b):
            distance = m - b - q
            column = distance + 2 * b - 1
            if distance <= 0:
                np.testing.assert_array_equal(logits[..., q, m], dots[..., q, column])
                np.testing.assert_array_equal(by_distance[..., q, column], weights[..., q, m])
            else:
                np.testing.assert_array_equal(logits[..., q, m], 0.0)


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("count_less", [0, 1, 3])
@pytest.mark.parametrize("key_extra", [0, 2, -1])
def test_skew_causal_square_moves_distances_to_keys_below_the_diagonal(length, count_less, key_extra):
    count = max(1, length - count_less)
    key_length = max(1, length + key_extra)
    x = random(2, 3, length, count)  # column c: distance c - (count - 1)
    out = numpy(skew_causal_square(x, key_length))
    assert out.shape == (2, 3, length, key_length)
    for i in range(length):
        for j in range(min(i + 1, key_length)):
            column = j - i + count - 1
            expected = x[..., i, column] if column >= 0 else 0.0
            np.testing.assert_array_equal(out[..., i, j], expected)


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("count_less", [0, 2])
@pytest.mark.parametrize("key_extra", [0, 3, -1])
def test_unskew_causal_square_reads_weights_by_distance(length, count_less, key_extra):
    count = max(1, length - count_less)
    key_length = max(1, length + key_extra)
    weights = np.zeros((2, 3, length, key_length), "float32")
    for i in range(length):
        keys = min(i + 1, key_length)
        weights[..., i, :keys] = random(2, 3, keys, seed=i)
    out = numpy(unskew_causal_square(weights, count))
    assert out.shape == (2, 3, length, count)
    for i in range(length):
        for c in range(count):
            j = i + c - (count - 1)
            expected = weights[..., i, j] if 0 <= j < key_length else 0.0
            np.testing.assert_array_equal(out[..., i, c], expected)


@pytest.mark.parametrize("length, count, key_length", [(1, 1, 1), (5, 5, 5), (5, 2, 7), (37, 37, 36)])
def test_causal_relative_logits_dot_each_query_with_its_distances_row(length, count, key_length):
    query, rows = random(2, 3, length, 4), random(1, 3, count, 4, seed=1)
    out = numpy(causal_relative_logits(query, rows, key_length))
    assert out.shape == (2, 3, length, key_length) and out.dtype == np.float32
    for i in range(length):
        for j in range(min(i + 1, key_length)):
            column = j - i + count - 1
            expected = np.einsum("bhd,hd->bh", query[..., i, :], rows[0, :, column]) if column >= 0 else 0.0
            np.testing.assert_allclose(out[..., i, j], expected, atol=1e-5)


def test_shaw_table_window_clips_and_stops_at_a_causal_table():
    k = 2
    full, causal_table = random(2 * k + 1, 3), random(k + 1, 3, seed=1)
    window = numpy(shaw_table_window(full, -4, 9, k))
    for n, distance in enumerate(range(-4, 5)):
        np.testing.assert_array_equal(window[n], full[int(np.clip(distance, -k, k)) + k])
    window = numpy(shaw_table_window(causal_table, -4, 5, k))
    for n, distance in enumerate(range(-4, 1)):
        np.testing.assert_array_equal(window[n], causal_table[max(distance, -k) + k])


def test_shaw_row_distances_of_a_causal_table_end_at_zero():
    low, high = (numpy(t) for t in shaw_row_distances(2, 3))
    assert low[0] < -1000 and list(low[1:]) == [-1, 0]
    assert list(high) == [-2, -1, 0]


def naive_rectangular_causal_skew(x, memory_length, key_length):
    """Query `i` at position `M + i`: each key `j <= M + i` reads the column
    of its distance `j - (M + i)` (column `c` is distance `c - (n - 1)`),
    zero beyond the `n` distances; `None` above the diagonal."""
    *leading, length, count = x.shape
    out = np.full((*leading, length, key_length), np.nan, "float32")
    for i in range(length):
        for j in range(min(memory_length + i + 1, key_length)):
            column = j - (memory_length + i) + count - 1
            out[..., i, j] = x[..., i, column] if column >= 0 else 0.0
    return out


@pytest.mark.parametrize(
    "length, memory_length, count, key_extra",
    [(1, 1, 2, 0), (3, 5, 8, 0), (5, 3, 2, 0), (4, 7, 11, 2), (6, 2, 8, -1), (7, 4, 7, 0)],
)
def test_skew_causal_square_with_memory_equals_a_per_pair_gather(
    length, memory_length, count, key_extra
):
    key_length = memory_length + length + key_extra
    x = random(2, 3, length, count)
    out = numpy(skew_causal_square(x, key_length, memory_length=memory_length))
    assert out.shape == (2, 3, length, key_length)
    expected = naive_rectangular_causal_skew(x, memory_length, key_length)
    visible = ~np.isnan(expected)
    np.testing.assert_array_equal(out[visible], expected[visible])


@pytest.mark.parametrize("length, memory_length, count", [(3, 5, 8), (5, 4, 3), (1, 6, 7)])
def test_causal_relative_logits_with_memory_dot_each_pair_with_its_distance_row(
    length, memory_length, count
):
    query, rows = random(2, 3, length, 4), random(1, 3, count, 4, seed=1)
    out = numpy(causal_relative_logits(query, rows, memory_length=memory_length))
    key_length = memory_length + length
    assert out.shape == (2, 3, length, key_length) and out.dtype == np.float32
    for i in range(length):
        for j in range(memory_length + i + 1):
            column = j - (memory_length + i) + count - 1
            expected = np.einsum("bhd,hd->bh", query[..., i, :], rows[0, :, column]) if column >= 0 else 0.0
            np.testing.assert_allclose(out[..., i, j], expected, atol=1e-5)
