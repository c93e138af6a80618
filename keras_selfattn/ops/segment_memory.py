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
