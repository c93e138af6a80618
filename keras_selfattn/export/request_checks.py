"""A signature's own checks of its request: each failure is an
InvalidArgument error whose message names the input and what it must be
(and holds no request data, which may not even be valid UTF-8)."""

import tensorflow as tf

ROWS = [None]  # the shape of a per-row input: one value a row, any number of rows


def check(condition, message):
    """An assertion that `condition` holds everywhere, failing with `message`."""
    return tf.debugging.Assert(tf.reduce_all(condition), [message])


def batch_size_of(inputs):
    """The batch size all `{name: tensor}` inputs share, and its checks."""
    names = list(inputs)
    batch_size = tf.shape(inputs[names[0]])[0]
    checks = [check(batch_size > 0, f"`{names[0]}` must hold at least one row")]
    checks += [
        check(
            tf.equal(tf.shape(inputs[name])[0], batch_size),
            f"`{name}` must have one row per row of `{names[0]}` (the same batch size)",
        )
        for name in names[1:]
    ]
    return batch_size, checks


def in_range(name, values, low=None, high=None, expected=""):
    """Checks `low <= values <= high` (either bound may be None); `expected`
    words the rule for the message."""
    checks = []
    if low is not None:
        checks.append(check(values >= tf.cast(low, values.dtype), f"`{name}` must be {expected}"))
    if high is not None:
        checks.append(check(values <= tf.cast(high, values.dtype), f"`{name}` must be {expected}"))
    return checks


def sampling_settings(temperature, seed, top_k=None, top_p=None):
    """Checks of the per-row sampling settings."""
    checks = [
        check(
            tf.logical_and(temperature >= 0.0, tf.math.is_finite(temperature)),
            "`temperature` must be a finite number >= 0 (0 takes the most likely value)",
        ),
        check(seed >= 0, "`seed` must be an integer >= 0"),
    ]
    if top_k is not None:
        checks.append(check(top_k >= 0, "`top_k` must be >= 0 (0 keeps every token)"))
    if top_p is not None:
        checks.append(
            check(tf.logical_and(top_p > 0.0, top_p <= 1.0), "`top_p` must be in (0, 1] (1 keeps every token)")
        )
    return checks


def after(checks, tensor):
    """`tensor`, computed only once every check passed."""
    with tf.control_dependencies(checks):
        return tf.identity(tensor)
