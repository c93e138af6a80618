"""A small, deterministic training run of a tiny model: the Music Transformer
(`--family music`, the default) or the graph Transformer with a Dense head
on a synthetic node task (`--family graph`).

The distribution and resumable-training tests start it as a separate
process (TensorFlow's devices and cluster are fixed per process) and
compare what it writes: the per-step losses and the final weights, in
`<output>/<strategy>_<family>.npz` for each strategy and family it is given
(one process runs them all: starting one costs more than a run). From the
repository root:

    python -m tests.training.fit_program --output DIR [--family music graph]
        [--strategy none mirrored | multi_worker] [--backup_dir DIR --pause_at EPOCH:BATCH]
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

GLOBAL_BATCH, LENGTH, VOCAB = 8, 16, 12
NODES, NUM_RELATIONS = 8, 3


def periodic_sequences(count, seed=0):
    """Event sequences that repeat a random motif of 2 to 4 events."""
    rng = np.random.default_rng(seed)
    sequences = []
    for _ in range(count):
        motif = rng.integers(1, VOCAB, size=rng.integers(2, 5))
        sequences.append(np.resize(motif, LENGTH + 1))
    sequences = np.stack(sequences).astype("int32")
    return sequences[:, :-1], sequences[:, 1:]


def pointer_graphs(count, seed=0):
    """Graphs whose node labels need the relations: each real node has
    relation 1 to one other real node and must predict that node's token;
    relations 2 and 3 are distractor edges. The last 0 to 3 nodes are padding
    (token 0, no relations, label 0)."""
    rng = np.random.default_rng(seed)
    token_ids = np.zeros((count, NODES), "int32")
    relations = np.zeros((count, NODES, NODES), "int32")
    labels = np.zeros((count, NODES), "int32")
    for sample in range(count):
        real = NODES - rng.integers(0, 4)
        token_ids[sample, :real] = rng.integers(1, VOCAB, size=real)
        distractors = rng.integers(2, NUM_RELATIONS + 1, size=(real, real)) * (rng.random((real, real)) < 0.3)
        relations[sample, :real, :real] = distractors
        for node in range(real):
            target = (node + rng.integers(1, real)) % real
            relations[sample, node, target] = 1
            labels[sample, node] = token_ids[sample, target]
    return {"token_ids": token_ids, "relations": relations}, labels


def graph_model():
    """The tiny graph Transformer with a Dense head over each node's encoding."""
    from keras_selfattn.models import graph_transformer

    encoder = graph_transformer(VOCAB, NUM_RELATIONS, preset="tiny")
    logits = keras.layers.Dense(VOCAB, dtype="float32", name="node_head")(encoder.output)
    return keras.Model(encoder.input, logits, name="graph_pointer")


def build(family):
    """`(model, inputs, targets)` for `family`, built under the current scope."""
    if family == "graph":
        inputs, targets = pointer_graphs(64)
        return graph_model(), inputs, targets
    from keras_selfattn.models.music_transformer import music_transformer

    inputs, targets = periodic_sequences(64)
    return music_transformer(VOCAB, preset="tiny"), inputs, targets


def split_the_cpu():
    """Two logical CPUs for `MirroredStrategy`: set before TensorFlow runs anything."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


def make_strategy(name):
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    if name == "multi_worker":
        from keras_selfattn.distribute import enable_multi_worker_fit

        enable_multi_worker_fit()
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.get_strategy()


def dataset(inputs, targets):
    data = tf.data.Dataset.from_tensor_slices((inputs, targets)).batch(GLOBAL_BATCH, drop_remainder=True)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return data.with_options(options)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", required=True, help="the folder for the results")
    parser.add_argument("--family", nargs="+", default=["music"], choices=["music", "graph"])
    parser.add_argument("--strategy", nargs="+", default=["none"], choices=["none", "mirrored", "multi_worker"])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--backup_dir")
    parser.add_argument("--pause_at", help="EPOCH:BATCH where the run writes <output>/paused and sleeps")
    parser.add_argument("--policy", default="float32")
    args = parser.parse_args()

    if "mirrored" in args.strategy:
        split_the_cpu()
    keras.config.disable_traceback_filtering()
    tf.config.experimental.enable_op_determinism()
    os.makedirs(args.output, exist_ok=True)
    for strategy_name in args.strategy:
        strategy = make_strategy(strategy_name)
        for family in args.family:
            weights, losses = train(strategy, family, args)
            is_chief = strategy_name != "multi_worker" or json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0
            if is_chief:
                np.savez(os.path.join(args.output, f"{strategy_name}_{family}.npz"), losses=losses, **weights)


def train(strategy, family, args):
    """`(weights, per-step losses)` of one run, from the same seed as every other."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    keras.config.set_dtype_policy(args.policy)
    with strategy.scope():
        model, inputs, targets = build(family)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    losses = []
    callbacks = [keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: losses.append(float(logs["loss"])))]
    if args.backup_dir:
        callbacks.append(keras.callbacks.BackupAndRestore(args.backup_dir))
    if args.pause_at:
        epoch, batch = (int(v) for v in args.pause_at.split(":"))
        state = {"epoch": -1}

        def pause(batch_index, logs):
            if state["epoch"] == epoch and batch_index == batch:
                open(os.path.join(args.output, "paused"), "w").close()
                time.sleep(600)

        callbacks += [
            keras.callbacks.LambdaCallback(on_epoch_begin=lambda e, logs: state.update(epoch=e)),
            keras.callbacks.LambdaCallback(on_train_batch_end=pause),
        ]
    model.fit(dataset(inputs, targets), epochs=args.epochs, verbose=0, callbacks=callbacks)
    weights = {f"w{i}": np.asarray(w) for i, w in enumerate(model.get_weights())}
    return weights, np.array(losses)


if __name__ == "__main__":
    main()
