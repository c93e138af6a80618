"""tf.data pipelines and the offline default data sets."""
