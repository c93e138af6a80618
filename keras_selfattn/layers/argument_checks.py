"""Constructor and input checks shared by the layers: each raises a
`ValueError` naming the argument and what was expected."""

import numbers


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
