"""A signature's own checks of its request. Each message names the input and
what it must be (and holds no request data, which may not even be valid UTF-8).

With `--enable_batching` the server merges concurrent requests into one run
and answers them all with its one status, so only the request's structure
fails the run (InvalidArgument): rows that do not share a batch size. A row's
own settings are checked row by row: a bad row gets its message in the
`status` output and an empty result, and the other rows are answered as if
they came alone."""

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


def checked_request(inputs):
    """`inputs` (`{name: tensor}`), each computed only once all share the
    first one's batch size."""
    _, checks = batch_size_of(inputs)
    return {name: after(checks, value) for name, value in inputs.items()}


def row_status(problems):
    """string `[batch]`: each row's first problem's message, "" for a good row.

    `problems` is a list of `(bad, message)`, `bad` a bool `[batch]` tensor.
    """
    status = tf.zeros_like(problems[0][0], tf.string)
    for bad, message in reversed(problems):
        status = tf.where(bad, message, status)
    return status


def outside(values, low=None, high=None):
    """bool: where `values` is below `low` or above `high` (either may be None)."""
    bad = tf.zeros_like(values, tf.bool)
    if low is not None:
        bad |= values < tf.cast(low, values.dtype)
    if high is not None:
        bad |= values > tf.cast(high, values.dtype)
    return bad


def sampling_problems(temperature, seed, top_k=None, top_p=None):
    """`(bad [batch], message)` of the per-row sampling settings."""
    problems = [
        (
            tf.logical_not(tf.logical_and(temperature >= 0.0, tf.math.is_finite(temperature))),
            "`temperature` must be a finite number >= 0 (0 takes the most likely value)",
        ),
        (seed < 0, "`seed` must be an integer >= 0"),
    ]
    if top_k is not None:
        problems.append((top_k < 0, "`top_k` must be >= 0 (0 keeps every token)"))
    if top_p is not None:
        problems.append(
            (
                tf.logical_not(tf.logical_and(top_p > 0.0, top_p <= 1.0)),
                "`top_p` must be in (0, 1] (1 keeps every token)",
            )
        )
    return problems


def good_or(good, value, default):
    """`value` on good rows, `default` on the others (`good` bool `[batch]`)."""
    good = tf.reshape(good, tf.concat([tf.shape(good), tf.ones([tf.rank(value) - 1], tf.int32)], 0))
    return tf.where(good, value, tf.cast(default, value.dtype))


def after(checks, tensor):
    """`tensor`, computed only once every check passed."""
    with tf.control_dependencies(checks):
        return tf.identity(tensor)
