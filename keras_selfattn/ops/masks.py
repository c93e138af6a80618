"""Boolean attention masks: `True` means "may attend".

Every mask here broadcasts to `[batch, heads, query, key]`.
"""

from keras import ops


def sequence_mask(lengths, max_length):
    """Returns a `[batch, max_length]` padding mask, `True` for real positions.

    Args:
        lengths: integer tensor of shape `[batch]`, the length of each sequence.
        max_length: the padded length.
    """
    positions = ops.arange(max_length, dtype="int32")
    lengths = ops.cast(lengths, "int32")
    return ops.less(positions[None, :], lengths[:, None])


def padding_attention_mask(query_mask=None, key_mask=None):
    """Combines per-position padding masks into an attention mask.

    Args:
        query_mask: optional `[batch, query]` mask (for example a Keras mask).
        key_mask: optional `[batch, key]` mask.

    Returns:
        A `[batch, 1, query, key]` (or `[batch, 1, 1, key]`, `[batch, 1, query, 1]`)
        boolean mask, or `None` when both masks are `None`.
    """
    # expand_dims, not `x[:, None, :, None]`: LiteRT has no builtin for a strided slice
    # that adds axes to a tensor with two unknown dimensions (it would need Flex ops).
    mask = None
    if query_mask is not None:
        mask = ops.expand_dims(ops.cast(query_mask, "bool"), (1, 3))
    if key_mask is not None:
        mask = merge_masks(mask, ops.expand_dims(ops.cast(key_mask, "bool"), (1, 2)))
    return mask


def causal_mask(query_length, key_length, cache_update_index=0):
    """Returns a `[query_length, key_length]` causal mask.

    Query row `i` stands at absolute position `cache_update_index + i` and may
    attend to every key at a position `<=` its own. With
    `cache_update_index=0` and equal lengths this is the usual lower triangle.

    Args:
        query_length: number of query positions.
        key_length: number of key positions (a cache's `max_length`).
        cache_update_index: absolute position of the first query row; a Python
            int or a scalar integer tensor.
    """
    query_positions = ops.arange(query_length, dtype="int32") + ops.cast(
        cache_update_index, "int32"
    )
    key_positions = ops.arange(key_length, dtype="int32")
    return ops.greater_equal(query_positions[:, None], key_positions[None, :])


def merge_masks(*masks):
    """Logical AND of the masks that are not `None`; `None` if all are."""
    merged = None
    for mask in masks:
        if mask is None:
            continue
        mask = ops.cast(mask, "bool")
        merged = mask if merged is None else ops.logical_and(merged, mask)
    return merged


def as_attention_mask(mask, argument_name="attention_mask"):
    """Expands a `[query, key]`, `[batch, query, key]` or 4D mask to rank 4.

    Raises:
        ValueError: if the mask's rank is not 2, 3 or 4.
    """
    rank = len(mask.shape)
    if rank not in (2, 3, 4):
        raise ValueError(
            f"`{argument_name}` must have rank 2 `[query, key]`, 3 "
            "`[batch, query, key]` or 4 `[batch, heads, query, key]`. "
            f"Received: {argument_name}.shape={tuple(mask.shape)}"
        )
    mask = ops.cast(mask, "bool")
    if rank == 2:
        return mask[None, None]
    if rank == 3:
        return mask[:, None]
    return mask
