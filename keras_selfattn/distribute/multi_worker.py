"""`model.fit` under `tf.distribute.MultiWorkerMirroredStrategy` with Keras 3.

Keras 3 (through 3.15) cannot `fit` under this strategy: it averages the
scalar loss and metrics across workers with `strategy.reduce("MEAN", v,
axis=0)`, which rejects rank-0 values, and it takes the first batch for its
symbolic build through one `strategy.reduce` over the whole `(x, y)` tuple,
which the collective strategy rejects too (tensorflow/tensorflow#72388).
`enable_multi_worker_fit()` replaces those two steps with ones that work:
scalars are averaged with `axis=None`, and the build uses the first local
replica's batch (it only needs shapes). Single-process strategies are
unaffected: the replacements fall back to Keras's own code for them.
"""

import tensorflow as tf

from keras_selfattn.compat import (
    in_multi_worker_mode,
    symbolic_build,
    tensorflow_trainer_module,
    trainer_distribute_strategy,
)

tensorflow_trainer = tensorflow_trainer_module()
_KERAS_REDUCE_PER_REPLICA = tensorflow_trainer.reduce_per_replica
_KERAS_MAYBE_SYMBOLIC_BUILD = tensorflow_trainer.TensorFlowTrainer._maybe_symbolic_build


def _is_multi_worker(strategy):
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and in_multi_worker_mode(
        strategy
    )


def _reduce_per_replica(values, strategy, reduction):
    if not _is_multi_worker(strategy) or reduction not in ("auto", "mean"):
        return _KERAS_REDUCE_PER_REPLICA(values, strategy, reduction)

    def average(value):
        local = strategy.experimental_local_results(value)[0]
        return strategy.reduce("MEAN", value, axis=None if local.shape.rank == 0 else 0)

    return tf.nest.map_structure(average, values)


def _maybe_symbolic_build(self, iterator=None, data_batch=None):
    strategy = trainer_distribute_strategy(self)
    if strategy is None or not _is_multi_worker(strategy) or iterator is None:
        return _KERAS_MAYBE_SYMBOLIC_BUILD(self, iterator=iterator, data_batch=data_batch)
    for _, _, batches in iterator:
        batch = next(batches)
        break
    local_batch = tf.nest.map_structure(
        lambda value: strategy.experimental_local_results(value)[0]
        if isinstance(value, tf.distribute.DistributedValues)
        else value,
        batch,
    )
    with strategy.scope():
        symbolic_build(self, data_batch=local_batch)


def enable_multi_worker_fit():
    """Lets Keras 3 `fit`/`evaluate` run under `MultiWorkerMirroredStrategy`.

    Call once per process, before `fit`. Idempotent.
    """
    tensorflow_trainer.reduce_per_replica = _reduce_per_replica
    tensorflow_trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
