"""Masked softmax that is safe in every float dtype."""

from keras import backend, ops


def large_negative(dtype):
    """A large negative logit that stays finite in `dtype`.

    float16 overflows past 65504, so it gets `-3e4`; wider types get `-1e9`.
    """
    if backend.standardize_dtype(dtype) == "float16":
        return -3e4
    return -1e9


def masked_softmax(logits, mask=None, axis=-1):
    """Softmax over `axis` computed in float32, ignoring masked entries.

    Args:
        logits: tensor of logits, any float dtype.
        mask: optional boolean tensor broadcastable to `logits`, `True` where an
            entry takes part.
        axis: the axis to normalise over.

    Returns:
        float32 probabilities. A row whose entries are all masked is all zeros.
    """
    logits = ops.cast(logits, "float32")
    if mask is None:
        return ops.softmax(logits, axis=axis)
    mask = ops.cast(mask, "bool")
    logits = ops.where(mask, logits, large_negative("float32"))
    probabilities = ops.softmax(logits, axis=axis)
    # A fully masked row softmaxes to a uniform row; the second `where`
    # turns it (and only it, other masked entries are already 0) into zeros.
    return ops.where(mask, probabilities, 0.0)
