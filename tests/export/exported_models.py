"""Small models of every family, exported for serving, shared by the export
and the serving tests."""

import io

import numpy as np

from keras_selfattn.export import export_for_serving
from tests.generation.generation_models import SMALL, image_model, music_model, sharpen

SENTENCES = ["ich habe hunger", "das ist gut", "wir gehen nach hause", "i am hungry", "that is good"]
TRANSLATION_VOCABULARY = 24


def sentencepiece_model(vocab_size=TRANSLATION_VOCABULARY):
    """A small SentencePiece model with the ids the export expects: pad 0, EOS 1."""
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES * 20), model_writer=model, vocab_size=vocab_size,
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2,
    )
    return model.getvalue()


def exported_music(export_base, max_length=16):
    """`(model, path)` of a relative music model whose logits are not flat."""
    model = sharpen(music_model("relative_global"), factor=2.0)
    return model, export_for_serving(model, export_base, name="music", max_length=max_length)


def exported_translation(export_base, beam_size=3, max_length=8):
    """`(model, path, tokenizer bytes)` of a Shaw translation model whose
    translations do not all end at once (its untied output layer's bias
    makes EOS less likely; recipes/translate.py's tests export tied models)."""
    from keras_selfattn.models import transformer_translation

    tokenizer = sentencepiece_model()
    model = transformer_translation(
        TRANSLATION_VOCABULARY, TRANSLATION_VOCABULARY, preset="tiny", position="shaw",
        tie_output_projection=False, **SMALL
    )
    bias = model.get_layer("logits").bias
    bias.assign(bias.numpy() - 3.0 * (np.arange(TRANSLATION_VOCABULARY) == 1))
    path = export_for_serving(
        model, export_base, name="translation", tokenizer=tokenizer, beam_size=beam_size, max_length=max_length
    )
    return model, path, tokenizer


def exported_images(export_base):
    """`(model, path)` of a class-conditional local 2D image model."""
    model = sharpen(image_model("local_2d", num_classes=3), factor=2.0)
    return model, export_for_serving(model, export_base, name="images")


def source_tokens(tokenizer, texts):
    """The translation model's source ids for `texts`: SentencePiece ids,
    EOS, padding 0 (what the `translate` signature feeds the model)."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer)
    rows = [processor.encode(text) + [processor.eos_id()] for text in texts]
    width = max(map(len, rows))
    return np.array([row + [0] * (width - len(row)) for row in rows], "int32")


def exported_super_resolution(export_base):
    """`(model, path)` of a small super-resolution model."""
    from tests.generation.generation_models import super_resolution_model

    model = super_resolution_model()
    return model, export_for_serving(model, export_base, name="super_resolution")
