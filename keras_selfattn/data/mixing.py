"""Several `tf.data` tasks mixed into one stream, each example marked with its
task's token, as tensor2tensor's multi-problems mix tasks (one shared
vocabulary, a task id in every example, a mixing schedule).

`mix_tasks(tasks, task_token_ids=...)` takes `{name: tf.data.Dataset}` of
unbatched examples and returns one dataset of the same examples with the
task token prepended, drawn by `tf.data.Dataset.sample_from_datasets` at the
schedule's rates; batch it afterwards (`padded_batch`, bucketing).

Where the token goes (the example layouts):

- a sequence of ids, int `[length]`: a decoder-only example (a language
  model's text, music events); the token becomes its first id. Mix whole
  sequences, before splitting them into inputs and shifted labels, so that
  the labels stay aligned.
- a tuple, e.g. `(source, target)` or `(features, labels)`: an
  encoder-decoder example; the token goes into the first element, by these
  same rules; the other elements are never changed.
- a dict: the feature named by `feature`, else the first of
  `TOKEN_FEATURES` that the dict has (`"source_tokens"`, the translation
  models' encoder input; `"inputs"`, tensor2tensor's; `"token_ids"`).

Schedules (the rates at which tasks are drawn):

- `"proportional"`: rates proportional to the tasks' sizes, given in
  `sizes` or read from each dataset's `cardinality()`.
- `"constant"`: the given `rates` (any non-negative numbers; normalised).
- either one after a warm-up: `warmup_task` alone for the first
  `warmup_examples` examples (tensor2tensor's "pretrain" schedule).

Example:

>>> import tensorflow as tf
>>> tasks = {
...     "copy": tf.data.Dataset.from_tensor_slices([[5, 6], [7, 8]]),
...     "reverse": tf.data.Dataset.from_tensor_slices([[6, 5], [8, 7]]),
... }
>>> mixed = mix_tasks(tasks, task_token_ids={"copy": 1, "reverse": 2}, seed=0)
>>> sorted(example.tolist() for example in mixed.as_numpy_iterator())
[[1, 5, 6], [1, 7, 8], [2, 6, 5], [2, 8, 7]]
"""

import math
import numbers

SCHEDULES = ("proportional", "constant")
TOKEN_FEATURES = ("source_tokens", "inputs", "token_ids")


def mix_tasks(
    tasks,
    *,
    task_token_ids,
    schedule="proportional",
    rates=None,
    sizes=None,
    warmup_task=None,
    warmup_examples=0,
    reserved_ids=(),
    feature=None,
    seed=None,
):
    """One dataset of the tasks' examples, each with its task token, drawn
    at the schedule's rates.

    Each draw picks a task at random with probability `rate / sum(rates)`
    and yields that task's next example. A task that runs out is skipped
    from then on (the stream ends when every task has), so the rates hold
    while every task still has examples: pass repeated datasets
    (`.repeat()`) for step-based training. After a warm-up, the warm-up
    task is read again from its start for the mixture (a shuffled dataset
    reshuffles).

    Args:
        tasks: `{name: tf.data.Dataset}` of unbatched examples, in one of
            the layouts of the module docstring; the tasks' examples must
            have the same structure and dtypes.
        task_token_ids: `{name: id}`, a distinct non-negative int for every
            task, prepended to its examples (e.g. ids past the vocabulary,
            as tensor2tensor, or pieces reserved in it).
        schedule: one of `SCHEDULES`, the rates after any warm-up.
        rates: with `"constant"`: `{name: rate}` for every task, each
            `>= 0`, summing to more than 0.
        sizes: with `"proportional"`: `{name: examples}` for some or all
            tasks; the others' sizes are their `cardinality()`, which must
            be finite (a repeated dataset has none: give its size here).
        warmup_task: the task alone at the start, or None.
        warmup_examples: with `warmup_task`: how many of its examples come
            first (fewer if it has fewer).
        reserved_ids: ids the task tokens must not take, e.g.
            `range(vocabulary_size)` or `{PAD_ID, EOS_ID}`.
        feature: the dict key that takes the token in dict examples
            (default: the first of `TOKEN_FEATURES` present).
        seed: int seed of the draws; the same seed and tasks give the same
            stream, in every pass.

    Returns:
        A `tf.data.Dataset` of the examples, unbatched, with the task token
        prepended where the layout rules say.

    Raises:
        ValueError: naming the argument: an empty or badly typed `tasks`,
            examples of no known layout or of different structures, task
            tokens that are missing, repeated, negative or in
            `reserved_ids`, an unknown `schedule`, rates or sizes for
            unknown tasks, negative or all-zero rates, a task of infinite or
            unknown size without `sizes`, a bad warm-up.
    """
    import tensorflow as tf

    _check_tasks(tasks)
    tokens = _checked_task_tokens(task_token_ids, tasks, reserved_ids)
    weights = task_rates(tasks, schedule, rates, sizes)
    warmup_examples = _checked_warmup(warmup_task, warmup_examples, tasks)
    marked = {name: _with_task_token(name, dataset, tokens[name], feature) for name, dataset in tasks.items()}
    _check_same_structure(marked)
    names = list(marked)
    mixed = tf.data.Dataset.sample_from_datasets(
        [marked[name] for name in names], weights=[weights[name] for name in names], seed=seed,
        stop_on_empty_dataset=False,
    )
    if warmup_task is None or not warmup_examples:
        return mixed
    return _after_warmup(marked[warmup_task], warmup_examples, mixed)


def _after_warmup(warmup, count, mixed):
    """The first `count` examples of `warmup` (fewer if it has fewer), then
    `mixed`'s. (`concatenate` fails on a `sample_from_datasets` dataset in
    TF 2.20: "Incompatible shapes at component 0".)"""
    import tensorflow as tf

    # Choosing a dataset that has run out skips to the next choice, and the
    # stream ends once every dataset has been seen to run out: the warm-up
    # is chosen once more than it has examples.
    choices = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).repeat(count + 1)
    choices = choices.concatenate(tf.data.Dataset.from_tensors(tf.constant(1, tf.int64)).repeat())
    return tf.data.Dataset.choose_from_datasets([warmup.take(count), mixed], choices, stop_on_empty_dataset=False)


def task_rates(tasks, schedule="proportional", rates=None, sizes=None):
    """`{name: rate}` of the schedule, normalised to sum to 1 (see
    `mix_tasks` for the arguments and the errors)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"`schedule` must be one of {SCHEDULES}. Received: schedule={schedule!r}")
    if schedule == "constant":
        if sizes is not None:
            raise ValueError("`sizes` is only used by schedule='proportional'; the 'constant' schedule takes `rates`")
        weights = _checked_rates(rates, tasks)
    else:
        if rates is not None:
            raise ValueError(
                "`rates` is only used by schedule='constant'; the 'proportional' schedule reads task sizes "
                "(pass `sizes` to give them)"
            )
        weights = _task_sizes(tasks, sizes)
    total = sum(weights.values())
    if not total > 0:
        argument = "rates" if schedule == "constant" else "sizes"
        raise ValueError(f"`{argument}` must sum to more than 0 (some task must be drawn). Received: {weights}")
    return {name: weight / total for name, weight in weights.items()}


def _check_tasks(tasks):
    import tensorflow as tf

    if not isinstance(tasks, dict) or not tasks:
        raise ValueError(f"`tasks` must be a non-empty dict of {{name: tf.data.Dataset}}. Received: tasks={tasks!r}")
    for name, dataset in tasks.items():
        if not isinstance(name, str):
            raise ValueError(f"`tasks` names must be strings. Received the name {name!r}")
        if not isinstance(dataset, tf.data.Dataset):
            raise ValueError(f"`tasks[{name!r}]` must be a tf.data.Dataset. Received: {type(dataset).__name__}")


def _is_count(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_known_names(argument, mapping, tasks):
    if not isinstance(mapping, dict):
        raise ValueError(f"`{argument}` must be a dict {{task name: value}}. Received: {argument}={mapping!r}")
    unknown = sorted(set(mapping) - set(tasks), key=str)
    if unknown:
        raise ValueError(f"`{argument}` names unknown tasks {unknown}; the tasks are {list(tasks)}")


def _checked_task_tokens(task_token_ids, tasks, reserved_ids):
    _check_known_names("task_token_ids", task_token_ids, tasks)
    missing = [name for name in tasks if name not in task_token_ids]
    if missing:
        raise ValueError(f"`task_token_ids` must give every task a token; missing: {missing}")
    for name, token in task_token_ids.items():
        if not _is_count(token) or token < 0:
            raise ValueError(f"`task_token_ids[{name!r}]` must be a non-negative int. Received: {token!r}")
        if token in reserved_ids:
            raise ValueError(
                f"`task_token_ids[{name!r}]` = {token} is one of the `reserved_ids` (ids already in use); "
                "choose ids outside them, e.g. past the vocabulary"
            )
    if len(set(task_token_ids.values())) < len(task_token_ids):
        raise ValueError(f"`task_token_ids` must be distinct, one token per task. Received: {task_token_ids}")
    return {name: int(token) for name, token in task_token_ids.items()}


def _checked_rates(rates, tasks):
    if rates is None:
        raise ValueError("schedule='constant' needs `rates`: {task name: rate} for every task")
    _check_known_names("rates", rates, tasks)
    missing = [name for name in tasks if name not in rates]
    if missing:
        raise ValueError(f"`rates` must give every task a rate (0 to leave one out); missing: {missing}")
    for name, rate in rates.items():
        if not isinstance(rate, numbers.Real) or isinstance(rate, bool) or not math.isfinite(rate) or rate < 0:
            raise ValueError(f"`rates[{name!r}]` must be a finite number >= 0. Received: {rate!r}")
    return {name: float(rates[name]) for name in tasks}


def _task_sizes(tasks, sizes):
    sizes = {} if sizes is None else sizes
    _check_known_names("sizes", sizes, tasks)
    counted = {}
    for name, dataset in tasks.items():
        size = sizes[name] if name in sizes else _cardinality(name, dataset)
        if not _is_count(size) or size < 0:
            raise ValueError(f"`sizes[{name!r}]` must be an int >= 0 (examples). Received: {size!r}")
        counted[name] = float(size)
    return counted


def _cardinality(name, dataset):
    import tensorflow as tf

    cardinality = int(dataset.cardinality())
    if cardinality == tf.data.INFINITE_CARDINALITY:
        what = "infinite (a repeated dataset)"
    elif cardinality == tf.data.UNKNOWN_CARDINALITY:
        what = "unknown (e.g. after `filter`)"
    else:
        return cardinality
    raise ValueError(
        f"schedule='proportional' needs the size of task {name!r}, whose dataset's cardinality is {what}: "
        f"pass `sizes={{{name!r}: examples}}`"
    )


def _checked_warmup(warmup_task, warmup_examples, tasks):
    if not _is_count(warmup_examples) or warmup_examples < 0:
        raise ValueError(f"`warmup_examples` must be an int >= 0. Received: warmup_examples={warmup_examples!r}")
    if warmup_task is None:
        if warmup_examples:
            raise ValueError(f"`warmup_examples` ({warmup_examples}) needs a `warmup_task`, the task to start with")
        return 0
    if warmup_task not in tasks:
        raise ValueError(f"`warmup_task` must be one of the tasks {list(tasks)}. Received: warmup_task={warmup_task!r}")
    if not warmup_examples:
        raise ValueError(f"`warmup_task` {warmup_task!r} needs `warmup_examples` >= 1, the examples it comes alone")
    return int(warmup_examples)


# ------------------------------------------------------------ task tokens


def _with_task_token(name, dataset, token, feature):
    """`dataset` with `token` prepended at the layout's place."""
    path = _token_path(name, dataset.element_spec, feature)
    if isinstance(dataset.element_spec, tuple):  # `map` unpacks a tuple into arguments
        return dataset.map(lambda *example: _prepended_at(example, path, token))
    return dataset.map(lambda example: _prepended_at(example, path, token))


def _token_path(name, spec, feature):
    """The keys and indices from the example to the sequence that takes the
    task token (the module docstring's rules)."""
    import tensorflow as tf

    # Slicing a ragged batch gives rank-1 ragged specs whose elements are plain tensors.
    if isinstance(spec, (tf.TensorSpec, tf.RaggedTensorSpec)):
        _check_sequence(name, spec)
        return ()
    if isinstance(spec, tuple) and spec:
        return (0, *_token_path(name, spec[0], feature))
    if isinstance(spec, dict):
        key = _token_feature(name, spec, feature)
        return (key, *_token_path(name, spec[key], feature))
    raise ValueError(
        f"`tasks[{name!r}]` examples must be an int sequence, a tuple whose first element takes the token, "
        f"or a dict; its element_spec is {spec}"
    )


def _token_feature(name, spec, feature):
    if feature is not None:
        if feature not in spec:
            raise ValueError(
                f"`feature` {feature!r} is not a key of `tasks[{name!r}]` examples; their keys are {sorted(spec)}"
            )
        return feature
    for key in TOKEN_FEATURES:
        if key in spec:
            return key
    raise ValueError(
        f"`tasks[{name!r}]` examples are dicts without any of {TOKEN_FEATURES} (keys {sorted(spec)}): "
        "pass `feature`, the key that takes the task token"
    )


def _check_sequence(name, spec):
    if spec.shape.rank != 1 or not spec.dtype.is_integer:
        raise ValueError(
            f"the task token of `tasks[{name!r}]` goes into an unbatched int sequence `[length]`, but it is "
            f"{spec.dtype.name} of shape {spec.shape}: mix before batching, and mix token ids"
        )


def _prepended_at(example, path, token):
    """`example` with `token` prepended to the sequence at `path`."""
    import tensorflow as tf

    if not path:
        return tf.concat([tf.constant([token], example.dtype), example], axis=0)
    head, rest = path[0], path[1:]
    if isinstance(example, dict):
        return {**example, head: _prepended_at(example[head], rest, token)}
    return (_prepended_at(example[head], rest, token), *example[1:])


def _check_same_structure(marked):
    import tensorflow as tf

    (first, first_dataset), *others = marked.items()
    first_dtypes = tf.nest.map_structure(lambda spec: spec.dtype, first_dataset.element_spec)
    for name, dataset in others:
        try:
            tf.nest.assert_same_structure(first_dataset.element_spec, dataset.element_spec)
            same = first_dtypes == tf.nest.map_structure(lambda spec: spec.dtype, dataset.element_spec)
        except (TypeError, ValueError):
            same = False
        if not same:
            raise ValueError(
                f"`tasks` must have examples of one structure and dtypes to mix: {first!r} has "
                f"{first_dataset.element_spec} and {name!r} has {dataset.element_spec} (task tokens included)"
            )
