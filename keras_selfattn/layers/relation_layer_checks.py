"""Argument checks the relation layers share (relative and relational
attention): both form their logits themselves, over one sequence axis."""


def check_no_flash_attention(layer_name, flash_attention, terms):
    """`ValueError` unless `flash_attention` is `None`.

    Args:
        layer_name: the layer's class name, for the message.
        flash_attention: the constructor's `flash_attention` argument.
        terms: what the layer adds to the content logits, e.g. `"relative"`.
    """
    if flash_attention is not None:
        raise ValueError(
            f"`flash_attention` must be None: {layer_name} forms its logits "
            f"itself (content plus {terms} terms), so no fused kernel applies. "
            f"Received: flash_attention={flash_attention!r}"
        )


def check_sequence_attention(kind, query_shape, attention_axes):
    """`ValueError` unless the query is a sequence `[batch, length, features]`
    attended along its one position axis.

    Args:
        kind: the attention's name for the message, e.g. `"Relative"`.
        query_shape: the shape the layer is built on.
        attention_axes: the layer's `attention_axes`.
    """
    if len(query_shape) != 3 or tuple(attention_axes or (1,)) != (1,):
        raise ValueError(
            f"{kind} attention needs sequence inputs `[batch, length, "
            "features]` and `attention_axes=None` or `(1,)`. Received: "
            f"query.shape={tuple(query_shape)}, attention_axes={attention_axes}"
        )
