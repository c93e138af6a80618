"""What the recipes share: the harness (flags, distribution, checkpoints,
export, the report), plots, and the music and image recipes' flags, data and
helpers. Recipes import them as `from recipes.common import harness`.

Importing any of them first sets up the environment before Keras is
imported: TensorFlow's C++ log level and the TensorFlow backend, unless the
environment sets them."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
