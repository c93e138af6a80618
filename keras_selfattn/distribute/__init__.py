"""TensorFlow distribution helpers."""

from keras_selfattn.distribute.multi_worker import enable_multi_worker_fit
