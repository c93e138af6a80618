"""Devices and dtypes of a recipe run: the `tf.distribute` strategy of
`--strategy`, the Keras dtype policy of `--mixed_precision`, and which
process writes the run's files."""

from recipes.common.cli import UsageError

STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")
MIXED_PRECISION = ("off", "auto", "mixed_float16", "mixed_bfloat16")


def make_strategy(name, tpu="local"):
    """The `tf.distribute.Strategy` for `--strategy`.

    Raises:
        UsageError: for an unknown name, or `"tpu"` where no TPU is reachable.
    """
    import tensorflow as tf

    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        from keras_selfattn.distribute import enable_multi_worker_fit

        enable_multi_worker_fit()
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        return _tpu_strategy(tpu)
    raise UsageError(f"Unknown `--strategy` {name!r}; valid values: {', '.join(STRATEGIES)}")


def _tpu_strategy(tpu):
    import tensorflow as tf

    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as error:
        text = str(error).strip()
        first_line = text.splitlines()[0][:120] if text else type(error).__name__
        raise UsageError(
            f"`--strategy tpu` found no TPU at --tpu={tpu!r} ({first_line}). Run on a Cloud "
            "TPU VM (--tpu local), pass the TPU's name or grpc:// address with --tpu, or "
            "choose --strategy default, mirrored or multi_worker."
        ) from error
    return tf.distribute.TPUStrategy(resolver)


def dtype_policy_name(choice, strategy_name="default"):
    """The Keras dtype policy for `--mixed_precision`: `auto` is
    `mixed_float16` where a GPU is visible, else `mixed_bfloat16`."""
    if choice not in MIXED_PRECISION:
        raise UsageError(
            f"Unknown `--mixed_precision` {choice!r}; valid values: {', '.join(MIXED_PRECISION)}"
        )
    if choice == "off":
        return "float32"
    if choice != "auto":
        return choice
    import tensorflow as tf

    if strategy_name != "tpu" and tf.config.list_physical_devices("GPU"):
        return "mixed_float16"
    return "mixed_bfloat16"


def is_chief(strategy):
    """Whether this process writes the run's files (always, except the
    non-chief workers of a multi-worker run)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def task_name(strategy):
    """`<task type>_<task id>` of this process in a multi-worker cluster."""
    resolver = getattr(strategy, "cluster_resolver", None)
    return f"{resolver.task_type}_{resolver.task_id}"
