"""keras_selfattn.data.mixing: task shares by schedule, the warm-up, where task
tokens go, seeds, batching after mixing, and the named errors."""

import collections
import math

import numpy as np
import pytest

from keras_selfattn.data.mixing import SCHEDULES, TOKEN_FEATURES, mix_tasks, task_rates

pytestmark = pytest.mark.backends("tensorflow", reason="tf.data")

TOKENS = {"a": 101, "b": 102, "c": 103}
DRAWS = 4000


def _sequences(count, value, length=3):
    """A task of `count` int32 sequences `[value, value, ...]` of `length`."""
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(np.full((count, length), value, "int32"))


def _tokens(tasks):
    return {name: TOKENS[name] for name in tasks}


def _task_counts(mixed, draws=DRAWS):
    """How many of the first `draws` examples carry each task's token."""
    first_ids = next(iter(mixed.map(lambda sequence: sequence[0]).batch(draws))).numpy()
    assert first_ids.size == draws
    counts = collections.Counter(first_ids.tolist())
    return {name: counts[token] for name, token in TOKENS.items()}


def _assert_shares(counts, rates, draws=DRAWS):
    """Each task's count is within 4 binomial standard deviations of
    `rate * draws` (a task of rate 0 never appears)."""
    for name, rate in rates.items():
        expected = rate * draws
        tolerance = 4 * math.sqrt(draws * rate * (1 - rate))
        assert abs(counts[name] - expected) <= tolerance, (name, counts, rates)


def test_proportional_shares_follow_the_counted_sizes():
    tasks = {"a": _sequences(6000, 1), "b": _sequences(2000, 2)}
    mixed = mix_tasks(tasks, task_token_ids=_tokens(tasks), seed=0)
    _assert_shares(_task_counts(mixed), {"a": 0.75, "b": 0.25})
    assert task_rates(tasks) == {"a": 0.75, "b": 0.25}


def test_proportional_shares_follow_given_sizes_of_repeated_tasks():
    tasks = {"a": _sequences(5, 1).repeat(), "b": _sequences(7, 2).repeat(), "c": _sequences(3, 3).repeat()}
    sizes = {"a": 100, "b": 300, "c": 600}
    mixed = mix_tasks(tasks, task_token_ids=_tokens(tasks), sizes=sizes, seed=1)
    _assert_shares(_task_counts(mixed), {"a": 0.1, "b": 0.3, "c": 0.6})


def test_constant_shares_follow_the_rates_and_a_zero_rate_task_never_comes():
    tasks = {"a": _sequences(5, 1).repeat(), "b": _sequences(5, 2).repeat(), "c": _sequences(5, 3).repeat()}
    mixed = mix_tasks(tasks, task_token_ids=_tokens(tasks), schedule="constant", rates={"a": 1, "b": 3, "c": 0}, seed=2)
    counts = _task_counts(mixed)
    assert counts["c"] == 0
    _assert_shares(counts, {"a": 0.25, "b": 0.75, "c": 0.0})


def test_warmup_yields_only_the_warmup_task_first_then_the_schedule():
    tasks = {"a": _sequences(5, 1).repeat(), "b": _sequences(5, 2).repeat()}
    mixed = mix_tasks(
        tasks, task_token_ids=_tokens(tasks), schedule="constant", rates={"a": 1, "b": 1}, warmup_task="b",
        warmup_examples=300, seed=3,
    )
    first_ids = next(iter(mixed.map(lambda sequence: sequence[0]).batch(300 + DRAWS))).numpy()
    assert set(first_ids[:300].tolist()) == {TOKENS["b"]}
    counts = collections.Counter(first_ids[300:].tolist())
    _assert_shares({name: counts[token] for name, token in TOKENS.items() if name != "c"}, {"a": 0.5, "b": 0.5})


def test_finite_tasks_are_yielded_whole_and_the_stream_ends():
    tasks = {"a": _sequences(40, 1), "b": _sequences(10, 2)}
    for warmup in ({}, {"warmup_task": "b", "warmup_examples": 4}):
        firsts = [int(example[0]) for example in mix_tasks(tasks, task_token_ids=_tokens(tasks), seed=4, **warmup)]
        warmed = warmup.get("warmup_examples", 0)
        assert collections.Counter(firsts) == {TOKENS["a"]: 40, TOKENS["b"]: 10 + warmed}
    # A warm-up longer than its task gives what the task has, then the mixture.
    firsts = [int(example[0]) for example in mix_tasks(
        tasks, task_token_ids=_tokens(tasks), warmup_task="b", warmup_examples=25, seed=4)]
    assert firsts[:10] == [TOKENS["b"]] * 10 and len(firsts) == 60


def test_decoder_only_sequences_take_the_token_first():
    import tensorflow as tf

    tasks = {"a": tf.data.Dataset.from_tensor_slices(np.array([[5, 6, 7]], "int64")), "b": _sequences(0, 0).map(
        lambda sequence: tf.cast(sequence, tf.int64))}
    (example,) = mix_tasks(tasks, task_token_ids={"a": 9, "b": 8}, seed=0)
    assert example.dtype == tf.int64 and example.numpy().tolist() == [9, 5, 6, 7]


def test_encoder_decoder_pairs_take_the_token_on_the_source_only():
    import tensorflow as tf

    def pairs(source, target):
        return tf.data.Dataset.from_tensor_slices((np.array([source], "int32"), np.array([target], "int32")))

    tasks = {"a": pairs([5, 6], [7, 8, 1]), "b": pairs([6, 5], [8, 7, 1])}
    examples = sorted(
        (source.tolist(), target.tolist())
        for source, target in mix_tasks(tasks, task_token_ids={"a": 3, "b": 4}, seed=0).as_numpy_iterator()
    )
    assert examples == [([3, 5, 6], [7, 8, 1]), ([4, 6, 5], [8, 7, 1])]


def test_dict_examples_take_the_token_on_the_encoder_feature_or_the_one_named():
    import tensorflow as tf

    def task(source, labels):
        features = {"source_tokens": np.array([source], "int32"), "target_tokens": np.array([[0, 7]], "int32")}
        return tf.data.Dataset.from_tensor_slices((features, np.array([labels], "int32")))

    tasks = {"a": task([5, 1], [7, 1]), "b": task([6, 1], [8, 1])}
    (features, labels), *_ = sorted(
        mix_tasks(tasks, task_token_ids={"a": 3, "b": 4}, seed=0).as_numpy_iterator(),
        key=lambda example: example[0]["source_tokens"][0],
    )
    assert features["source_tokens"].tolist() == [3, 5, 1]
    assert features["target_tokens"].tolist() == [0, 7] and labels.tolist() == [7, 1]
    (features, _), *_ = mix_tasks(tasks, task_token_ids={"a": 3, "b": 4}, feature="target_tokens", seed=0)
    assert features["target_tokens"].numpy().tolist()[1:] == [0, 7] and features["source_tokens"].shape == [2]
    t2t_style = {"a": tf.data.Dataset.from_tensors({"inputs": [5], "targets": [6]})}
    (example,) = mix_tasks(t2t_style, task_token_ids={"a": 3})
    assert example["inputs"].numpy().tolist() == [3, 5] and example["targets"].numpy().tolist() == [6]
    assert TOKEN_FEATURES[0] == "source_tokens"


def test_the_same_seed_gives_the_same_stream_and_another_seed_another():
    tasks = {"a": _sequences(5, 1).repeat(), "b": _sequences(5, 2).repeat()}

    def firsts(seed):
        mixed = mix_tasks(tasks, task_token_ids=_tokens(tasks), sizes={"a": 1, "b": 1}, seed=seed)
        return next(iter(mixed.map(lambda sequence: sequence[0]).batch(200))).numpy().tolist()

    assert firsts(7) == firsts(7)
    assert firsts(7) != firsts(8)
    mixed = mix_tasks(tasks, task_token_ids=_tokens(tasks), sizes={"a": 1, "b": 1}, seed=7).take(50)
    assert [e.tolist() for e in mixed.as_numpy_iterator()] == [e.tolist() for e in mixed.as_numpy_iterator()]


def test_ragged_and_padded_batches_after_mixing():
    import tensorflow as tf

    def ragged_task(rows):
        return tf.data.Dataset.from_tensor_slices(tf.ragged.constant(rows, dtype=tf.int32))

    tasks = {"a": ragged_task([[5], [5, 5, 5]]), "b": ragged_task([[6, 6]])}
    mixed = mix_tasks(tasks, task_token_ids=_tokens(tasks), seed=0)
    (padded,) = mixed.padded_batch(3, padding_values=0).as_numpy_iterator()
    assert sorted(padded.tolist()) == [[101, 5, 0, 0], [101, 5, 5, 5], [102, 6, 6, 0]]
    (ragged,) = list(mixed.ragged_batch(3))
    assert isinstance(ragged, tf.RaggedTensor)
    assert sorted(ragged.to_list()) == [[101, 5], [101, 5, 5, 5], [102, 6, 6]]


def _two_tasks():
    return {"a": _sequences(4, 1), "b": _sequences(4, 2)}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tasks": {}}, "`tasks` must be a non-empty dict"),
        ({"tasks": {"a": [[1, 2]]}}, r"`tasks\['a'\]` must be a tf.data.Dataset"),
        ({"task_token_ids": {"a": 101}}, r"`task_token_ids` must give every task a token; missing: \['b'\]"),
        ({"task_token_ids": {"a": 101, "b": 101}}, "`task_token_ids` must be distinct"),
        ({"task_token_ids": {"a": 101, "b": -1}}, r"`task_token_ids\['b'\]` must be a non-negative int"),
        ({"task_token_ids": {"a": 101, "b": 102, "z": 9}}, r"`task_token_ids` names unknown tasks \['z'\]"),
        ({"reserved_ids": range(102)}, r"`task_token_ids\['a'\]` = 101 is one of the `reserved_ids`"),
        ({"schedule": "exponential"}, r"`schedule` must be one of \('proportional', 'constant'\)"),
        ({"schedule": "constant"}, "schedule='constant' needs `rates`"),
        ({"schedule": "constant", "rates": {"a": 1, "b": 1, "z": 1}}, r"`rates` names unknown tasks \['z'\]"),
        ({"schedule": "constant", "rates": {"a": 1}}, r"`rates` must give every task a rate .*missing: \['b'\]"),
        ({"schedule": "constant", "rates": {"a": 1, "b": -0.5}}, r"`rates\['b'\]` must be a finite number >= 0"),
        ({"schedule": "constant", "rates": {"a": 0, "b": 0.0}}, "`rates` must sum to more than 0"),
        ({"rates": {"a": 1, "b": 1}}, "`rates` is only used by schedule='constant'"),
        ({"schedule": "constant", "rates": {"a": 1, "b": 1}, "sizes": {"a": 1}}, "`sizes` is only used by"),
        ({"sizes": {"a": 0, "b": 0}}, "`sizes` must sum to more than 0"),
        ({"sizes": {"c": 3}}, r"`sizes` names unknown tasks \['c'\]"),
        ({"warmup_task": "z", "warmup_examples": 3}, "`warmup_task` must be one of the tasks"),
        ({"warmup_task": "a"}, "`warmup_task` 'a' needs `warmup_examples` >= 1"),
        ({"warmup_examples": 3}, "`warmup_examples` .3. needs a `warmup_task`"),
        ({"feature": "source_tokens"}, "the task token of `tasks\\['a'\\]` goes into an unbatched int sequence"),
    ],
    ids=[
        "no_tasks", "not_a_dataset", "token_missing", "tokens_repeated", "token_negative", "token_unknown_task",
        "token_reserved", "schedule", "constant_without_rates", "rate_unknown_task", "rate_missing",
        "rate_negative", "rates_zero", "rates_with_proportional", "sizes_with_constant", "sizes_zero",
        "size_unknown_task", "warmup_unknown", "warmup_without_count", "count_without_warmup", "batched",
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    arguments = {"tasks": _two_tasks(), "task_token_ids": {"a": 101, "b": 102}, **kwargs}
    if kwargs.get("feature"):  # batched examples, before the feature is even looked at
        arguments = {**arguments, "feature": None, "tasks": {name: d.batch(2) for name, d in _two_tasks().items()}}
    tasks = arguments.pop("tasks")
    with pytest.raises(ValueError, match=message):
        mix_tasks(tasks, **arguments)


@pytest.mark.parametrize("repeat_or_filter", ["repeat", "filter"])
def test_proportional_needs_sizes_for_tasks_of_infinite_or_unknown_size(repeat_or_filter):
    tasks = _two_tasks()
    tasks["b"] = tasks["b"].repeat() if repeat_or_filter == "repeat" else tasks["b"].filter(lambda s: s[0] > 0)
    what = {"repeat": "infinite", "filter": "unknown"}[repeat_or_filter]
    with pytest.raises(ValueError, match=f"size of task 'b', whose dataset's cardinality is {what}.*pass `sizes="):
        mix_tasks(tasks, task_token_ids={"a": 101, "b": 102})
    mix_tasks(tasks, task_token_ids={"a": 101, "b": 102}, sizes={"b": 4})


def test_examples_of_other_layouts_or_structures_are_named():
    import tensorflow as tf

    floats = {"a": tf.data.Dataset.from_tensors(tf.constant([1.0]))}
    with pytest.raises(ValueError, match=r"`tasks\['a'\]` goes into an unbatched int sequence.*float32"):
        mix_tasks(floats, task_token_ids={"a": 1})
    no_key = {"a": tf.data.Dataset.from_tensors({"pixels": [1]})}
    with pytest.raises(ValueError, match=r"dicts without any of \('source_tokens', 'inputs', 'token_ids'\)"):
        mix_tasks(no_key, task_token_ids={"a": 1})
    with pytest.raises(ValueError, match="`feature` 'tokens' is not a key of `tasks\\['a'\\]` examples"):
        mix_tasks(no_key, task_token_ids={"a": 1}, feature="tokens")
    mixed_layouts = {"a": _sequences(2, 1), "b": _sequences(2, 2).map(lambda s: (s, s))}
    with pytest.raises(ValueError, match="`tasks` must have examples of one structure and dtypes"):
        mix_tasks(mixed_layouts, task_token_ids={"a": 1, "b": 2})
    mixed_dtypes = {"a": _sequences(2, 1), "b": _sequences(2, 2).map(lambda s: tf.cast(s, tf.int64))}
    with pytest.raises(ValueError, match="`tasks` must have examples of one structure and dtypes"):
        mix_tasks(mixed_dtypes, task_token_ids={"a": 1, "b": 2})
    assert SCHEDULES == ("proportional", "constant")
