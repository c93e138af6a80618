"""Writing and reading the static key/value cache `[batch, 2, max_length, heads, dim]`."""

import contextlib
import threading

import keras
from keras import ops

from keras_selfattn.compat import in_xla_context

_WRITES = threading.local()


def update_cache(cache, key, value, cache_update_index):
    """`cache` with `key` and `value` written at positions `cache_update_index ...`.

    A scatter of the new rows, not a dynamic update slice: on TensorFlow
    `slice_update` lowers to `XlaDynamicUpdateSlice`, an XLA op that a graph
    run without XLA (TensorFlow Serving) compiles on demand. Under XLA and
    JAX the scatter updates a loop-carried cache in place; a TensorFlow
    graph without XLA copies the cache once per write, unless the write runs
    inside `cache_writes_in_place()`.

    Args:
        cache: `[batch, 2, max_length, heads, dim]`, keys then values.
        key: `[batch, length, heads, dim]` projected keys.
        value: `[batch, length, heads, dim]` projected values.
        cache_update_index: int or int scalar tensor, the position of row 0;
            the rows must fit: `cache_update_index + length <= max_length`.

    Returns:
        The updated cache.

    Example:

    >>> import numpy as np
    >>> cache = np.zeros((1, 2, 4, 1, 2), "float32")
    >>> new = np.ones((1, 1, 1, 2), "float32")
    >>> updated = update_cache(cache, new, 2 * new, 1)
    >>> np.asarray(updated)[0, :, :, 0, 0].tolist()
    [[0.0, 1.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0]]
    """
    if _writes_in_place():
        return _update_in_place(cache, key, value, cache_update_index)
    batch_size, length = ops.shape(key)[0], ops.shape(key)[1]
    grid = (batch_size, 2, length)
    batch_ids = ops.broadcast_to(ops.arange(batch_size, dtype="int32")[:, None, None], grid)
    halves = ops.broadcast_to(ops.arange(2, dtype="int32")[None, :, None], grid)
    positions = ops.arange(length, dtype="int32") + ops.cast(cache_update_index, "int32")
    positions = ops.broadcast_to(positions[None, None, :], grid)
    indices = ops.reshape(ops.stack([batch_ids, halves, positions], axis=-1), (-1, 3))
    rows = ops.stack([key, value], axis=1)
    rows = ops.reshape(rows, (-1,) + tuple(cache.shape[3:]))
    return ops.scatter_update(cache, indices, ops.cast(rows, cache.dtype))


@contextlib.contextmanager
def cache_writes_in_place():
    """Within it, `update_cache` on a TensorFlow graph without XLA writes
    the new rows into the cache's own buffer (`InplaceUpdate`) rather than
    into a copy of the whole cache.

    Only for a loop that owns its caches: it enters this context while it
    traces its step, over caches from `owned_caches`, and every read of a
    cache comes after the write of its step (each step's input depends on
    the previous step's output). Elsewhere (and on JAX, PyTorch or under
    XLA) `update_cache` returns a new tensor and leaves its input as it was.
    """
    previous = getattr(_WRITES, "in_place", False)
    _WRITES.in_place = True
    try:
        yield
    finally:
        _WRITES.in_place = previous


def owned_caches(caches):
    """`caches` (any nest of tensors) copied into buffers nothing else
    holds, for `cache_writes_in_place`; as they are where writes are not
    in place."""
    if not _writes_in_place():
        return caches
    import tensorflow as tf

    return tf.nest.map_structure(lambda cache: tf.raw_ops.DeepCopy(x=cache), caches)


def _writes_in_place():
    if not getattr(_WRITES, "in_place", False) or keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

    return not tf.executing_eagerly() and not in_xla_context()


def _update_in_place(cache, key, value, cache_update_index):
    import tensorflow as tf

    # Rows of the cache flattened to `[batch * 2 * max_length, heads * dim]`
    # (a reshape shares the buffer): row `(b * 2 + half) * max_length + position`.
    shape = tf.shape(cache)
    max_length, row_width = shape[2], tf.reduce_prod(shape[3:])
    batch_size, length = tf.shape(key)[0], tf.shape(key)[1]
    positions = tf.range(length) + tf.cast(cache_update_index, "int32")
    first_rows = (tf.range(batch_size)[:, None] * 2 + tf.range(2)[None, :]) * max_length
    row_ids = tf.reshape(first_rows[:, :, None] + positions[None, None, :], [-1])
    rows = tf.reshape(tf.cast(tf.stack([key, value], axis=1), cache.dtype), [-1, row_width])
    flat = tf.raw_ops.InplaceUpdate(x=tf.reshape(cache, [-1, row_width]), i=row_ids, v=rows)
    return tf.reshape(flat, shape)


def read_cache(cache):
    """`(keys, values)` of `cache`, each `[batch, max_length, heads, dim]`.

    With a batch of one (known when tracing) both halves are slices along
    the leading axis of a reshape, which TensorFlow takes as views of the
    cache; `cache[:, 0]` would copy the keys, and then the values, every step.

    Example:

    >>> import numpy as np
    >>> cache = np.arange(8, dtype="float32").reshape(1, 2, 4, 1, 1)
    >>> keys, values = read_cache(cache)
    >>> np.asarray(values)[0, :, 0, 0].tolist()
    [4.0, 5.0, 6.0, 7.0]
    """
    if cache.shape[0] == 1:
        halves = ops.reshape(cache, (2, -1) + tuple(cache.shape[3:]))
        return halves[0:1], halves[1:2]
    return cache[:, 0], cache[:, 1]


def update_token_cache(cache, tokens, cache_update_index):
    """`cache [batch, max_length]` with `tokens [batch, length]` written at
    positions `cache_update_index ...` (a scatter, as `update_cache`).

    Example:

    >>> import numpy as np
    >>> cache = np.zeros((1, 4), "int32")
    >>> np.asarray(update_token_cache(cache, np.array([[7, 8]], "int32"), 1)).tolist()
    [[0, 7, 8, 0]]
    """
    batch_size, length = ops.shape(tokens)[0], ops.shape(tokens)[1]
    grid = (batch_size, length)
    batch_ids = ops.broadcast_to(ops.arange(batch_size, dtype="int32")[:, None], grid)
    positions = ops.arange(length, dtype="int32") + ops.cast(cache_update_index, "int32")
    positions = ops.broadcast_to(positions[None, :], grid)
    indices = ops.reshape(ops.stack([batch_ids, positions], axis=-1), (-1, 2))
    return ops.scatter_update(cache, indices, ops.reshape(ops.cast(tokens, cache.dtype), (-1,)))
