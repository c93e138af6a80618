"""`Translator`: batched, padded decoding gives each sentence its own
translation; the scores are sacrebleu's."""

import numpy as np

from keras_selfattn.generation import Translator, translate_tokens
from keras_selfattn.models import transformer_translation
from keras_selfattn.models.metrics import translation_scores


class WordPieces:
    """A stand-in for a SentencePieceProcessor: one id per word."""

    def encode(self, text):
        return [2 + sum(map(ord, word)) % 11 for word in text.split()]

    def decode(self, ids):
        return " ".join(f"w{i}" for i in ids)

    def eos_id(self):
        return 1


def test_batched_padded_translations_equal_each_sentence_alone():
    model = transformer_translation(13, 13, preset="tiny", num_layers=1)
    sentences = ["a bb ccc", "dddd", "e f g h i j k l m", "nn oo", "p"]
    translator = Translator(model, WordPieces(), max_new_tokens=6, batch_size=2, length_step=4)
    texts, tokens = translator.translate(sentences)
    assert len(texts) == len(tokens) == len(sentences)
    for sentence, text, ids in zip(sentences, texts, tokens):
        alone = np.asarray(translate_tokens(model, np.array([translator.source_ids(sentence)]), 6))[0]
        alone = list(alone[: list(alone).index(1)]) if 1 in alone else [i for i in alone if i]
        assert ids == [int(i) for i in alone], sentence
        assert text == WordPieces().decode(ids)


def test_translation_scores_are_sacrebleus():
    references = ["the cat sat on the mat", "a dog ran in the park today"]
    perfect = translation_scores(references, references)
    assert perfect["bleu"] == 100.0 and perfect["chrf"] == 100.0
    worse = translation_scores(["the cat sat on the mat", "a dog ran in the park"], references)
    assert 0 < worse["bleu"] < 100 and 0 < worse["chrf"] < 100
    assert "tok:13a" in worse["bleu_signature"] and "nrefs:1" in worse["chrf_signature"]
