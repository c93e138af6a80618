"""Generation for every model family over the cached decoder steps.

`continue_sequence` (music), `translate_tokens` (translation, with beam
search on TensorFlow) and `sample_images` (image generation, completion and
super-resolution) take `temperature` (0 = greedy), `top_k`, `top_p` and
`seed` (`sample_images` also `decoding="posterior_mean"`, each step's
rounded expected value); they trace under `tf.function` and `jax.jit`,
compile with XLA, and draw with stateless random ops, so a seed gives the
same output eagerly and in a graph on one backend (XLA reproduces its own
draws, which differ).
`Translator` puts SentencePiece on both ends of `translate_tokens`.
"""

from keras_selfattn.generation.images import sample_images
from keras_selfattn.generation.sampling import filter_logits
from keras_selfattn.generation.sequences import continue_sequence, translate_tokens
from keras_selfattn.generation.translator import Translator
