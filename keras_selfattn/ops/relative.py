"""Relative-position attention terms: skewing, table rows, local blocks.

Conventions: a relative table has one row per distance `j - i` (key position
minus query position). A "relative matrix" `[..., query, columns]` holds, in
column `c`, the term for the distance that column stands for; the skews move
it to the usual `[..., query, key]` layout without ever forming a
`[query, key, depth]` tensor.
"""

from keras import ops

from keras_selfattn.compat import pad

# Farther than any two positions can be apart; keeps clipped sums open-ended.
_UNBOUNDED_DISTANCE = 2**30


def _slice_trailing(x, starts, sizes):
    """Slices the last `len(starts)` axes; a size of -1 runs to the end.

    `ops.slice` rather than `x[..., a:b]`: on the CPU TensorFlow's
    strided-slice gradient is over 20 times slower than the slice's. Its
    sizes are spelled out: `ops.slice` documents no -1, and on PyTorch a -1
    drops the last entry.
    """
    leading = len(x.shape) - len(starts)
    shape = ops.shape(x)
    sizes = [
        shape[leading + axis] - start if isinstance(size, int) and size == -1 else size
        for axis, (start, size) in enumerate(zip(starts, sizes))
    ]
    return ops.slice(x, (0,) * leading + tuple(starts), tuple(shape[:leading]) + tuple(sizes))


def _split_last_two(x):
    shape = ops.shape(x)
    return tuple(shape[:-2]), shape[-2], shape[-1]


def skew_causal(x):
    """Music Transformer skew of a causal relative matrix.

    Args:
        x: `[..., L, L]`, column `c` standing for distance `c - (L - 1)`
            (distances `-(L-1) .. 0`).

    Returns:
        `[..., L, L]` with `out[i, j] = x[i, j - i + L - 1]` for `j <= i`. The
        upper triangle (`j > i`) holds unrelated entries: mask it.

    Example:

    >>> import numpy as np
    >>> x = np.array([[1., 2., 3.], [4., 5., 6.], [7., 8., 9.]])  # distances -2, -1, 0
    >>> np.tril(np.asarray(skew_causal(x)))
    array([[3., 0., 0.],
           [5., 6., 0.],
           [7., 8., 9.]])
    """
    leading, length, _ = _split_last_two(x)
    padded = pad(x, [[0, 0]] * len(leading) + [[0, 0], [1, 0]])
    padded = ops.reshape(padded, leading + (length + 1, length))
    return _slice_trailing(padded, (1, 0), (-1, -1))


def skew_causal_square(x, key_length=None, memory_length=0):
    """The causal skew with no tensor larger than `[..., L, M + L]`.

    `skew_causal` goes through an axis of `L + 1`,
    a tensor just over the logits' size. Here query `i`'s row starts
    `M + L - 1` entries after query `i - 1`'s in the flattened matrix of
    distances `-(M + L - 1) .. 0`, so a reshape with rows of `M + L - 1`
    gives every key but the last (Transformer-XL's shift of a `[L, M + L]`
    score matrix); the last key is below the diagonal only for the last
    query, at distance 0.

    Args:
        x: `[..., L, n]`, `1 <= n <= M + L`: query `i` dotted with the table
            rows of distances `-(n - 1) .. 0` (column `c` stands for distance
            `c - (n - 1)`); farther distances count as zero.
        key_length: the number of keys, `M + L` if `None`; keys past
            `M + L - 1` are all in the future of every query (zero columns
            are added), keys are dropped from the end when there are fewer.
        memory_length: `M`, the keys before the queries' segment (segment
            memory): query `i` stands at position `M + i`, key `j` at `j`.

    Returns:
        `[..., L, key_length]`: `out[..., i, j] = x[..., i, j - (M + i) + n - 1]`
        for `M + i - (n - 1) <= j <= M + i` and zero for
        `j < M + i - (n - 1)`. The entries above the diagonal (`j > M + i`)
        are unrelated: mask them.

    Example:

    >>> import numpy as np
    >>> x = np.array([[1., 2., 3.], [4., 5., 6.], [7., 8., 9.]])  # distances -2, -1, 0
    >>> np.tril(np.asarray(skew_causal_square(x)))
    array([[3., 0., 0.],
           [5., 6., 0.],
           [7., 8., 9.]])
    >>> x = np.array([[1., 2., 3.], [4., 5., 6.]])  # 2 queries after 1 memory key
    >>> np.tril(np.asarray(skew_causal_square(x, memory_length=1)), k=1)
    array([[2., 3., 0.],
           [4., 5., 6.]])
    """
    distance_zero = _slice_trailing(x, (ops.shape(x)[-1] - 1,), (1,))
    return _skew_causal_square(x, distance_zero, key_length, memory_length)


def causal_relative_logits(query, rows, key_length=None, memory_length=0):
    """`skew_causal_square(query . rows^T)` in float32.

    The distance-0 column the skew reads on its own is a product of its
    own: sliced from `query . rows^T`, its gradient would be a zero-padded
    tensor of that whole size.

    Args:
        query: `[..., L, depth]`.
        rows: `[..., n, depth]`, broadcastable against `query`,
            `1 <= n <= M + L`: the table rows of distances `-(n - 1) .. 0`.
        key_length, memory_length: as for `skew_causal_square`.

    Returns:
        `[..., L, key_length]` float32, as `skew_causal_square` returns.
    """
    count = ops.shape(rows)[-2]
    nearest = _slice_trailing(rows, (count - 1, 0), (1, -1))
    dots, distance_zero = (
        ops.cast(ops.matmul(query, ops.swapaxes(r, -1, -2)), "float32") for r in (rows, nearest)
    )
    return _skew_causal_square(dots, distance_zero, key_length, memory_length)


def _skew_causal_square(x, distance_zero, key_length, memory_length=0):
    """`skew_causal_square` with `x`'s last column given as `distance_zero`."""
    leading, length, count = _split_last_two(x)
    width = length + memory_length
    x = pad(x, [[0, 0]] * len(leading) + [[0, 0], [width - count, 0]])
    # out[i, j] = flat[L - 1 + (W - 1) * i + j] for the first W - 1 keys,
    # W = M + L: row i of the padded matrix holds distance j - (M + i) in
    # column j - i + L - 1.
    flat = ops.reshape(x, leading + (length * width,))
    rows = _slice_trailing(flat, (length - 1,), (length * (width - 1),))
    rows = ops.reshape(rows, leading + (length, width - 1))
    skewed = ops.concatenate([rows, distance_zero], axis=-1)
    return skewed if key_length is None else _fit_last_axis(skewed, key_length)


def unskew_causal_square(weights, count):
    """Inverse of `skew_causal_square` for causally masked weights, with no
    tensor larger than `[..., L, L]`.

    Args:
        weights: `[..., L, key_length]`, zero above the diagonal (`j > i`),
            e.g. causally masked attention weights.
        count: the number of distances `n` to return, `1 <= n <= L`.

    Returns:
        `[..., L, n]`: `out[..., i, c]` is the weight of query `i` on the key
        at distance `c - (n - 1)` (key `i + c - (n - 1)`), zero where that key
        is before position 0.

    Example:

    >>> import numpy as np
    >>> weights = np.array([[1., 0.], [2., 3.]])
    >>> np.asarray(unskew_causal_square(weights, count=2))  # distances -1, 0
    array([[0., 1.],
           [2., 3.]])
    """
    leading, length, _ = _split_last_two(weights)
    weights = _fit_last_axis(weights, length)
    # Key `i + d` of query `i` is flat[(L + 1) * i + d]: past the first
    # entry, rows of `L + 1` put query `i` in row `i - 1`, distance `d` in
    # column `L + d` (earlier columns of a row hold the zeros above the
    # diagonal, where a key would be before position 0).
    flat = ops.reshape(weights, leading + (length * length,))
    later = _slice_trailing(flat, (1,), (length * length - 1,))
    later = ops.reshape(later, leading + (length - 1, length + 1))
    later = _slice_trailing(later, (0, length + 1 - count), (length - 1, count))
    first = _slice_trailing(weights, (0, 0), (1, 1))
    first = pad(first, [[0, 0]] * len(leading) + [[0, 0], [count - 1, 0]])
    return ops.concatenate([first, later], axis=-2)


def _fit_last_axis(x, size):
    """Crops or zero-pads the last axis to `size`. With a size known only
    when the graph runs, both ops are emitted; the one not needed is a no-op."""
    current = ops.shape(x)[-1]
    static = isinstance(current, int) and isinstance(size, int)
    if static and current == size:
        return x
    if not static or current < size:
        padding = size - current if static else ops.maximum(size - current, 0)
        x = pad(x, [[0, 0]] * (len(x.shape) - 1) + [[0, padding]])
    return _slice_trailing(x, (0,), (size,))


def skew(x, key_length):
    """Skew of a relative matrix covering every query-key distance.

    Args:
        x: `[..., Lq, Lq + key_length - 1]`, column `c` standing for distance
            `c - (Lq - 1)` (distances `-(Lq-1) .. key_length-1`). With
            `Lq == key_length == L` this is the unmasked `2L - 1` layout.
        key_length: number of key positions `Lk`.

    Returns:
        `[..., Lq, Lk]` with `out[i, j] = x[i, j - i + Lq - 1]`.
    """
    leading, query_length, width = _split_last_two(x)
    # With one extra column, row i starts i entries later than a row stride
    # of `width`, so reading with stride `width` shifts row i left by i.
    padded = pad(x, [[0, 0]] * len(leading) + [[0, 0], [0, 1]])
    flat = ops.reshape(padded, leading + (query_length * (width + 1),))
    flat = _slice_trailing(flat, (query_length - 1,), (query_length * width,))
    return _slice_trailing(ops.reshape(flat, leading + (query_length, width)), (0,), (key_length,))


def unskew_causal(x):
    """Inverse of `skew_causal` for a matrix whose upper triangle is zero.

    Args:
        x: `[..., L, L]` in query-key layout, zero where `j > i` (e.g.
            causally masked attention weights).

    Returns:
        `[..., L, L]` with `out[i, c] = x[i, c + i - (L - 1)]`, zero where that
        key is before position 0.
    """
    leading, length, _ = _split_last_two(x)
    padded = pad(x, [[0, 0]] * len(leading) + [[1, 0], [0, 0]])
    padded = ops.reshape(padded, leading + (length, length + 1))
    return _slice_trailing(padded, (1,), (-1,))


def unskew(x):
    """Inverse of `skew`: query-key layout to the full relative layout.

    Args:
        x: `[..., Lq, Lk]`.

    Returns:
        `[..., Lq, Lq + Lk - 1]` with `out[i, c] = x[i, c + i - (Lq - 1)]`,
        zero where that key lies outside `0 .. Lk - 1`.
    """
    leading, query_length, key_length = _split_last_two(x)
    width = query_length + key_length - 1
    padded = pad(x, [[0, 0]] * len(leading) + [[0, 0], [0, query_length - 1]])
    flat = ops.reshape(padded, leading + (query_length * width,))
    flat = pad(flat, [[0, 0]] * len(leading) + [[query_length - 1, 1]])
    return _slice_trailing(ops.reshape(flat, leading + (query_length, width + 1)), (0,), (width,))


def relative_distances(query_length, key_length, cache_update_index=0):
    """`[Lq, Lk]` int32 distances `j - (cache_update_index + i)`: query row
    `i` stands at position `cache_update_index + i`, key `j` at `j`."""
    query_positions = ops.arange(query_length, dtype="int32") + ops.cast(
        cache_update_index, "int32"
    )
    key_positions = ops.arange(key_length, dtype="int32")
    return key_positions[None, :] - query_positions[:, None]


def skew_table_rows(distances, max_relative_position, num_rows):
    """Rows of a skew table (row `r` = distance `r - (M - 1)`) and validity.

    Returns:
        `(rows, valid)`: rows clipped into the table, and whether the distance
        has a row at all (no relative term otherwise).
    """
    rows = distances + (max_relative_position - 1)
    valid = ops.logical_and(rows >= 0, rows < num_rows)
    return ops.clip(rows, 0, num_rows - 1), valid


def shaw_table_rows(distances, max_relative_position):
    """Rows of a Shaw table: distance clipped to `[-k, k]`, plus `k`."""
    k = max_relative_position
    return ops.clip(distances, -k, k) + k


def relative_table_window(table, first_distance, count, max_relative_position):
    """Rows of a skew table for distances `first_distance .. + count - 1`.

    Args:
        table: `[..., rows, depth]`, row `r` standing for distance
            `r - (max_relative_position - 1)`.
        first_distance: the distance of the first returned row.
        count: number of rows to return.
        max_relative_position: `M`.

    Returns:
        `[..., count, depth]`; zero rows for distances the table lacks.
    """
    distances = ops.arange(count, dtype="int32") + ops.cast(first_distance, "int32")
    rows, valid = skew_table_rows(distances, max_relative_position, table.shape[-2])
    window = ops.take(table, rows, axis=-2)
    return window * ops.cast(valid, table.dtype)[:, None]


def shaw_table_window(table, first_distance, count, max_relative_position):
    """Rows of a Shaw table for distances `first_distance .. + count - 1`.

    Args:
        table: `[..., rows, depth]`, row `r` standing for the distances that
            clip to `r - k`, `k = max_relative_position` (`rows = 2k + 1`, or
            `k + 1` for a causal table, which has no row for distances > 0).
        first_distance: the distance of the first returned row.
        count: number of rows to return.
        max_relative_position: `k`.

    Returns:
        `[..., count, depth]`, the clipped row of each distance.
    """
    distances = ops.arange(count, dtype="int32") + ops.cast(first_distance, "int32")
    rows = ops.minimum(shaw_table_rows(distances, max_relative_position), table.shape[-2] - 1)
    return ops.take(table, rows, axis=-2)


def gather_relative_logits(query_table_logits, rows):
    """Relative logits picked from `query . table` products per query and key.

    Args:
        query_table_logits: `[..., Lq, R]`, query `i` dotted with each of the
            `R` table rows.
        rows: `[Lq, Lk]` int32 table row of each query-key pair.

    Returns:
        `[..., Lq, Lk]` with `out[..., i, j] = query_table_logits[..., i, rows[i, j]]`.
    """
    leading, query_length, num_rows = _split_last_two(query_table_logits)
    flat = ops.reshape(query_table_logits, leading + (query_length * num_rows,))
    offsets = ops.arange(query_length, dtype="int32")[:, None] * num_rows
    return ops.take(flat, offsets + ops.cast(rows, "int32"), axis=-1)


def sum_weights_by_distance(weights, query_positions, low, high):
    """Sums attention weights over the keys of each relative row.

    Row `r` collects the keys `j` with `low[r] <= j - query_positions[i] <=
    high[r]`: one distance for a skew table, the clipped ends of a Shaw table.

    Args:
        weights: `[..., Lq, Lk]` attention weights.
        query_positions: `[Lq]` int32 absolute position of each query.
        low: `[R]` int32 smallest distance of each row.
        high: `[R]` int32 largest distance of each row.

    Returns:
        `[..., Lq, R]`.
    """
    leading, query_length, key_length = _split_last_two(weights)
    # cumulative[..., i, m] = sum of weights[..., i, :m]
    cumulative = ops.cumsum(weights, axis=-1)
    cumulative = pad(cumulative, [[0, 0]] * len(leading) + [[0, 0], [1, 0]])
    flat = ops.reshape(cumulative, leading + (query_length * (key_length + 1),))
    positions = ops.cast(query_positions, "int32")[:, None]
    start = ops.clip(positions + low[None, :], 0, key_length)
    stop = ops.clip(positions + high[None, :] + 1, 0, key_length)
    offsets = ops.arange(query_length, dtype="int32")[:, None] * (key_length + 1)
    return ops.take(flat, offsets + stop, axis=-1) - ops.take(flat, offsets + start, axis=-1)


def skew_row_distances(max_relative_position, num_rows):
    """`(low, high)` distance ranges of skew table rows: one distance each."""
    distances = ops.arange(num_rows, dtype="int32") - (max_relative_position - 1)
    return distances, distances


def shaw_row_distances(max_relative_position, num_rows):
    """`(low, high)` distance ranges of Shaw rows (row `r` is distance `r - k`):
    the first row is open towards the past, a last row of distance `k` (a
    table of `2k + 1` rows) towards the future."""
    k = max_relative_position
    distances = ops.arange(num_rows, dtype="int32") - k
    low = ops.where(ops.equal(distances, -k), -_UNBOUNDED_DISTANCE, distances)
    high = ops.where(ops.equal(distances, k), _UNBOUNDED_DISTANCE, distances)
    return low, high


def local_relative_logits(query_table_logits):
    """Relative logits of a query block over its two-block window.

    Args:
        query_table_logits: `[..., block, 2 * block]`, query `q` dotted with
            the table rows for distances `-(2 block - 1) .. 0`.

    Returns:
        `[..., block, 2 * block]` in query-window layout; entries for future
        keys (`m > block + q`) are zero.
    """
    leading, block_length, _ = _split_last_two(query_table_logits)
    future = [[0, 0]] * len(leading) + [[0, 0], [0, block_length - 1]]
    return skew(pad(query_table_logits, future), 2 * block_length)


def local_relative_weights(weights):
    """Inverse of `local_relative_logits`: weights by distance `-(2b-1) .. 0`.

    Args:
        weights: `[..., block, 2 * block]` in query-window layout.

    Returns:
        `[..., block, 2 * block]`, column `c` holding the weight of distance
        `c - (2 block - 1)`.
    """
    block_length = ops.shape(weights)[-2]
    return _slice_trailing(unskew(weights), (0,), (2 * block_length,))
