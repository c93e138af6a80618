"""Segment memory (Transformer-XL) and the sliding generation window it allows."""

from keras import ops


def memory_mask(lengths, memory_length):
    """bool `[batch, memory_length]`: which memory positions are real when
    row `i`'s last `lengths[i]` positions are (a memory fills from the end).

    Example:

    >>> import numpy as np
    >>> np.asarray(memory_mask(np.array([0, 2]), 3)).tolist()
    [[False, False, False], [False, True, True]]
    """
    first_real = memory_length - ops.cast(lengths, "int32")
    return ops.arange(memory_length, dtype="int32")[None, :] >= first_real[:, None]


def next_memory(memory, block_inputs, memory_length):
    """The memory after a segment: each block's last `memory_length` inputs
    over its old memory state and `block_inputs` (the segment's inputs to
    that block, `[batch, length, width]` each), without gradient, and the
    real positions' count grown by the segment's length (at most
    `memory_length`).

    Args:
        memory: `{"states": [[batch, memory_length, width]] * blocks,
            "lengths": int32 [batch]}`.
        block_inputs: one `[batch, length, width]` tensor per block.
        memory_length: the memory's length (static).

    Returns:
        A memory of the same structure and shapes.
    """
    states = []
    for state, inputs in zip(memory["states"], block_inputs):
        joined = ops.concatenate([ops.cast(state, inputs.dtype), inputs], axis=1)
        states.append(ops.stop_gradient(ops.cast(joined[:, -memory_length:], state.dtype)))
    segment_length = ops.shape(block_inputs[0])[1]
    lengths = ops.minimum(ops.cast(memory["lengths"], "int32") + segment_length, memory_length)
    return {"states": states, "lengths": lengths}


def slide_caches(caches, cache_update_index, steps):
    """`(caches, slot)` for writing `steps` positions from absolute position
    `cache_update_index` into sliding-window caches `[batch, 2, window,
    heads, dim]` that hold the positions before it (at most the last
    `window`): the caches with as many of their oldest positions dropped as
    the new ones need (the rest moved to the front), and the slot where
    the new positions go. Relative distances between slots are those
    between positions, so no absolute position is stored.

    Example:

    >>> import numpy as np
    >>> cache = np.arange(4, dtype="float32").reshape(1, 1, 4, 1, 1) * np.ones((1, 2, 1, 1, 1))
    >>> (slid,), slot = slide_caches([cache], 5, 1)
    >>> np.asarray(slid)[0, 0, :, 0, 0].tolist(), int(slot)
    ([1.0, 2.0, 3.0, 3.0], 3)
    """
    window = caches[0].shape[2]
    if isinstance(steps, int) and steps > window:
        raise ValueError(
            f"A sliding-window cache of {window} positions takes at most {window} new "
            f"positions a call. Received {steps} tokens"
        )
    index = ops.cast(cache_update_index, "int32")
    overflow = ops.maximum(index + steps - window, 0)
    dropped = overflow - ops.maximum(index - window, 0)
    # The last `dropped` slots keep stale copies: the new positions overwrite them.
    kept = ops.minimum(ops.arange(window, dtype="int32") + dropped, window - 1)
    return [ops.take(cache, kept, axis=2) for cache in caches], index - overflow


def with_memory_columns(key_mask, attention_mask, attention_bias, memory, query, memory_mask=None):
    """A segment's masks and bias extended over the memory's keys in front.

    The segment's keys come after the `memory_length` memory positions, as
    over `concatenate([memory, query], axis=1)`; memory positions are visible
    where `memory_mask` says (`None`: all of them) and get no bias.

    Args:
        key_mask: `None` or bool `[batch, query_length]`, the segment's
            padding mask of the keys.
        attention_mask: `None` or a mask `[..., query_length]` or
            `[..., 1]` (a broadcast key axis), e.g. `[query, key]`.
        attention_bias: `None` or a float bias `[..., query_length]` or
            `[..., 1]`.
        memory: `[batch, memory_length, features]`; only its shape is read.
        query: `[batch, query_length, features]`; only its shape is read.
        memory_mask: `None` or bool `[batch, memory_length]`, `False` where a
            memory position is hidden.

    Returns:
        `(key_mask, attention_mask, attention_bias)`, each `None` where it
        was given as `None` (`key_mask` is made when only `memory_mask` is
        given), the key axis grown to `memory_length + query_length`:
        `key_mask` bool `[batch, memory_length + query_length]`,
        `attention_mask` bool, `attention_bias` in its dtype.

    Example:

    >>> import numpy as np
    >>> memory, query = np.zeros((1, 2, 3)), np.zeros((1, 1, 3))
    >>> key_mask, mask, bias = with_memory_columns(
    ...     np.array([[True]]), None, None, memory, query, np.array([[False, True]]))
    >>> np.asarray(key_mask).tolist()
    [[False, True, True]]
    """
    memory_length, segment_length = ops.shape(memory)[1], ops.shape(query)[1]
    if memory_mask is not None and key_mask is None:
        key_mask = ops.ones_like(query[..., 0], dtype="bool")
    if key_mask is not None:
        if memory_mask is None:
            memory_mask = ops.ones_like(memory[..., 0], dtype="bool")
        key_mask = ops.concatenate([ops.cast(memory_mask, "bool"), ops.cast(key_mask, "bool")], axis=-1)
    if attention_mask is not None:
        attention_mask = prepend_key_columns(
            ops.cast(attention_mask, "bool"), memory_length, segment_length, True
        )
    if attention_bias is not None:
        attention_bias = prepend_key_columns(attention_bias, memory_length, segment_length, 0)
    return key_mask, attention_mask, attention_bias


def prepend_key_columns(x, count, key_length, fill):
    """`x` with `count` columns of `fill` in front of its last (key) axis.

    Args:
        x: `[..., key_length]`, or `[..., 1]` (a broadcast key axis, first
            repeated to `key_length`).
        count: how many columns to add (int or scalar tensor).
        key_length: the key axis's length where `x` broadcasts it.
        fill: the value of the new columns, in `x`'s dtype.

    Returns:
        `[..., count + key_length]` in `x`'s dtype.

    Example:

    >>> import numpy as np
    >>> np.asarray(prepend_key_columns(np.array([[1], [2]]), 2, 3, 0)).tolist()
    [[0, 0, 1, 1, 1], [0, 0, 2, 2, 2]]
    """
    if x.shape[-1] == 1:
        x = ops.repeat(x, key_length, axis=-1)
    front = ops.repeat(ops.full_like(x[..., :1], fill), count, axis=-1)
    return ops.concatenate([front, x], axis=-1)
