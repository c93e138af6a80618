"""Constructor and input checks shared by the layers and models: each
raises a `ValueError` naming the argument and what was expected
(`checked_in_range` also in a TensorFlow graph, as an `InvalidArgumentError`)."""

import numbers
import warnings

import keras
import numpy as np
from keras import backend, ops

from keras_selfattn.compat import in_xla_context


def check_positive_int(name, value):
    """`value` as an int; `ValueError` naming `name` unless it is an int > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    return int(value)


def check_non_negative_int(name, value):
    """`value` as an int; `ValueError` naming `name` unless it is an int >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer. Received: {name}={value!r}")
    return int(value)


def check_length(name, value, limit, minimum=1):
    """`ValueError` naming `name` unless `value` is an int in `[minimum,
    limit]` (`limit`: what the model's maximum length allows, or `None`)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}. Received: {name}={value!r}")
    if limit is not None and value > limit:
        raise ValueError(
            f"`{name}` must be <= {limit}, the most the model's maximum length allows. "
            f"Received: {name}={value}"
        )


def check_optional_bool(name, value):
    """`value` unless it is neither `None` nor a bool."""
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"`{name}` must be None, True or False. Received: {name}={value!r}")
    return value


def check_input_rank(name, shape, rank, layout):
    """`ValueError` naming `name` unless `shape` has `rank` and a known last dim."""
    if len(shape) != rank:
        raise ValueError(
            f"`{name}` must have rank {rank}, {layout}. Received: {name}.shape={tuple(shape)}"
        )
    if shape[-1] is None:
        raise ValueError(
            f"The last dimension of `{name}` must be defined. Received: {name}.shape={tuple(shape)}"
        )


def checked_in_range(tensor, argument, limits, switch, unchecked_under_xla=False):
    """`tensor` (integers), checked to lie within `limits`.

    Values known now (eager TensorFlow, JAX, PyTorch) raise a `ValueError`.
    In a TensorFlow graph the result carries assertions that fail the run
    with an `InvalidArgumentError` holding the same message, or, where XLA
    compiles the graph (XLA drops assertions), a `ValueError` is raised
    while tracing (unless `unchecked_under_xla`: then `tensor` comes back
    unchecked). Traced by JAX, `tensor` comes back unchecked.

    Args:
        tensor: an integer tensor.
        argument: its argument name, for the messages.
        limits: `[(what, column, size)]`: every value of `tensor[..., column]`
            (`column` None: of all of `tensor`), a `what` ("relation id"),
            must lie in `[0, size)`; `size` an int or a scalar tensor.
        switch: the argument that turns the check off, named in the error
            under XLA (`"check_relations"`).
    """
    values = concrete_value(tensor)
    if values is not None:
        for what, column, size in limits:
            _check_range(what, argument, values if column is None else values[..., column], size)
        return tensor
    if backend.backend() != "tensorflow" or isinstance(tensor, keras.KerasTensor):
        return tensor
    if unchecked_under_xla and in_xla_context():
        return tensor
    return _asserted_in_range(tensor, argument, limits, switch)


def _range_message(what, argument, last):
    return f"Every {what} in `{argument}` must lie in [0, {last}]. Received: values from"


def _check_range(what, argument, values, size):
    """`ValueError` naming `argument` unless `0 <= values < size`."""
    if values.size == 0:
        return
    low, high = int(values.min()), int(values.max())
    if low < 0 or high >= size:
        raise ValueError(
            f"{_range_message(what, argument, int(size) - 1)} {low} to {high}"
        )


def _asserted_in_range(tensor, argument, limits, switch):
    """`checked_in_range` in a TensorFlow graph."""
    import tensorflow as tf

    if in_xla_context():
        raise ValueError(
            f"`{argument}` cannot be checked in a function compiled with XLA "
            "(`jit_compile=True`), which drops assertions: compile it without XLA, "
            f"or pass `{switch}=False` to run unchecked."
        )
    values = tf.cast(tensor, tf.int64)
    assertions = []
    for what, column, size in limits:
        column_values = values if column is None else values[..., column]
        low, high = tf.reduce_min(column_values), tf.reduce_max(column_values)
        size = tf.cast(size, tf.int64)
        template = _range_message(what, argument, "{}") + " {} to {}"
        message = tf.strings.format(template, (size - 1, low, high))
        assertions.append(tf.debugging.Assert((low >= 0) & (high < size), [message]))
    with tf.control_dependencies(assertions):
        return tf.identity(tensor)


def concrete_value(tensor):
    """`tensor` as a numpy array when its values are known without running a graph."""
    if isinstance(tensor, np.ndarray):
        return tensor
    if isinstance(tensor, keras.KerasTensor):
        return None
    try:
        return ops.convert_to_numpy(tensor)
    except Exception:  # A symbolic or traced value: checked at run time only.
        return None


def renamed_argument(overrides, old_name, new_name, value):
    """`value`, or the one `overrides` gives under the argument's old name
    (popped from `overrides`, with a `DeprecationWarning`).

    Raises:
        ValueError: both names are given.
    """
    if old_name not in overrides:
        return value
    if value is not None:
        raise ValueError(f"Pass `{new_name}` only; `{old_name}` is its old name.")
    warnings.warn(
        f"`{old_name}` is deprecated; pass `{new_name}`.", DeprecationWarning, stacklevel=3
    )
    return overrides.pop(old_name)


def renamed_required_argument(value, new_name, old_name, deprecated):
    """`value` of the required argument `new_name`, or the one `deprecated`
    (the caller's other keyword arguments) gives under its old name
    `old_name`, with a `DeprecationWarning`.

    Raises:
        TypeError: neither is given, or `deprecated` holds another name.
    """
    value = renamed_argument(deprecated, old_name, new_name, value)
    if deprecated:
        raise TypeError(f"Unexpected keyword arguments {sorted(deprecated)}")
    if value is None:
        raise TypeError(f"Missing the argument `{new_name}`.")
    return value
