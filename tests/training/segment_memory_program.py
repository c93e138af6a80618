"""`fit` of a Music Transformer with segment memory over `segment_dataset`
under `MirroredStrategy` on two logical CPUs (or none), at learning rate 0:
prints the epoch's loss and that of the model over whole performances as
JSON. Devices are per process, so the test runs this in its own."""

import argparse
import json

import numpy as np
import tensorflow as tf

SEGMENT, SEGMENTS_PER_PERFORMANCE, BATCH, VOCABULARY = 5, 2, 4, 23


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", default="none", choices=["none", "mirrored"])
    args = parser.parse_args()
    if args.strategy == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    else:
        strategy = tf.distribute.get_strategy()

    import keras

    from keras_selfattn.data.music import segment_dataset
    from keras_selfattn.models import MaskedSparseCategoricalCrossentropy, SegmentMemoryTrainer, music_transformer

    # Whole segments only, so that every replica averages as many tokens.
    length = SEGMENT * SEGMENTS_PER_PERFORMANCE + 1
    performances = list(np.random.default_rng(0).integers(1, VOCABULARY, (2 * BATCH, length)))
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = music_transformer(
            VOCABULARY, preset="tiny", num_layers=2, hidden_dim=16, num_heads=2, key_dim=8,
            feedforward_dim=24, max_relative_position=8, timing_signal=False, memory_length=SEGMENT,
        )
        trainer = SegmentMemoryTrainer(model, batch_size=BATCH)
        loss = MaskedSparseCategoricalCrossentropy(pad_id=0)
        trainer.compile(optimizer=keras.optimizers.SGD(0.0), loss=loss)
    history = trainer.fit(segment_dataset(performances, SEGMENT, BATCH), epochs=1, verbose=0)
    whole = np.stack(performances)
    memory_span = SEGMENT * SEGMENTS_PER_PERFORMANCE
    over_whole = float(loss(whole[:, 1:], model(whole[:, :memory_span])))
    print(json.dumps({"fit": history.history["loss"][0], "whole": over_whole,
                      "replicas": strategy.num_replicas_in_sync}))


if __name__ == "__main__":
    main()
