"""Data for the recipes, each with an embedded default that ships inside a package.

- `keras_selfattn.data.music`: MIDI to note-seq performance events and back,
  MAESTRO splits, augmentation, cached encodings, `tf.data` crops.
- `keras_selfattn.data.text`: sentence pairs (TSV, WMT14, the Ding
  dictionary), SentencePiece, token-count `tf.data` batches.
- `keras_selfattn.data.images`: digits, tensorflow-datasets image sets and
  image folders; `images.patches` for super-resolution.
- `keras_selfattn.data.programs`: Python functions as program graphs
  (tokens, syntax and data-flow edges) with injected variable-misuse bugs;
  the default is the running interpreter's own standard library.
- `keras_selfattn.data.mixing`: several tasks' `tf.data` examples mixed into
  one stream, a task token in each, at proportional or constant rates after
  an optional warm-up (multitask training, tensor2tensor's multi-problems).

Music and text keep their downloads and encodings in `cache.cache_folder(kind)`:
`$KERAS_SELFATTN_DATA/<kind>`, else `~/.cache/keras_selfattn/<kind>`.
"""
