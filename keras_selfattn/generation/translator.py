"""Text in, text out: a translation model between two SentencePiece ends."""

import math

import keras
import numpy as np

from keras_selfattn.generation.sequences import translate_tokens
from keras_selfattn.layers.argument_checks import renamed_required_argument


class Translator:
    """Translates sentences with a `transformer_translation` model.

    Sources are SentencePiece ids with the end-of-sentence id appended,
    decoded in batches of similar length, each padded to a multiple of
    `length_step` ids (on TensorFlow one compiled graph per padded shape, so
    few traces for a whole corpus).

    Args:
        model: a `transformer_translation` model.
        sentencepiece: a `sentencepiece.SentencePieceProcessor` of the model's
            joint vocabulary.
        max_new_tokens: the most target tokens a translation may have
            (`max_length=` is its old name, with a `DeprecationWarning`).
        batch_size: sentences per decoding batch.
        alpha: the length penalty of beam search and of the scores.
        length_step: sources are padded to a multiple of this many ids.

    Example:

    >>> from keras import ops
    >>> class Pieces:  # a stand-in for a SentencePieceProcessor
    ...     def encode(self, text): return [2 + len(word) % 8 for word in text.split()]
    ...     def decode(self, ids): return " ".join(map(str, ids))
    ...     def eos_id(self): return 1
    >>> class Counting:  # an encoder-decoder whose logits favour the next id
    ...     vocabulary_size, max_length = 10, None
    ...     def encode(self, source_tokens): return source_tokens, None
    ...     def initial_cache(self, batch_size, max_length): return []
    ...     def call_with_cache(self, token_ids, cache, index, encoder_outputs, padding_mask):
    ...         return ops.one_hot(token_ids + 2, 10) * 10.0, None, cache
    >>> Translator(Counting(), Pieces(), max_new_tokens=3).translate(["a bb", "ccc"])
    (['2 4 6', '2 4 6'], [[2, 4, 6], [2, 4, 6]])
    """

    def __init__(
        self, model, sentencepiece, max_new_tokens=None, batch_size=32, alpha=0.6, length_step=8, **deprecated
    ):
        self.model = model
        self.sentencepiece = sentencepiece
        self.max_new_tokens = renamed_required_argument(
            max_new_tokens, "max_new_tokens", "max_length", deprecated
        )
        self.batch_size = batch_size
        self.alpha = alpha
        self.length_step = length_step

    def source_ids(self, sentence):
        """The model's source ids of `sentence`, end of sentence included."""
        return self.sentencepiece.encode(sentence) + [self.sentencepiece.eos_id()]

    def translate(self, sentences, beam_size=1):
        """`(texts, token lists)` of `sentences`, in their order; greedy for
        `beam_size` 1, beam search otherwise."""
        encoded = [self.source_ids(sentence) for sentence in sentences]
        order = sorted(range(len(encoded)), key=lambda index: len(encoded[index]))
        tokens = [None] * len(encoded)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            result = self._translate_batch([encoded[row] for row in rows], beam_size)
            for slot, row in enumerate(rows):
                tokens[row] = _until_eos(result[slot], self.sentencepiece.eos_id())
        return [self.sentencepiece.decode(ids) for ids in tokens], tokens

    def _translate_batch(self, sources, beam_size):
        step = self.length_step
        width = step * math.ceil(max(len(ids) for ids in sources) / step)
        batch = np.zeros((self.batch_size, width), "int32")
        for slot, ids in enumerate(sources):
            batch[slot, : len(ids)] = ids
        return keras.ops.convert_to_numpy(
            translate_tokens(self.model, batch, self.max_new_tokens, beam_size=beam_size, alpha=self.alpha)
        )


def _until_eos(ids, eos_id):
    ids = [int(i) for i in ids]
    return ids[: ids.index(eos_id)] if eos_id in ids else [i for i in ids if i != 0]
