"""What `export_for_serving` asks of a model: its serving signatures, given
the export's options. Each family class answers with `serving_endpoints`."""

import dataclasses
import os

from keras_selfattn.layers.argument_checks import check_length

# Which family each option belongs to, named when another family gets it.
_OPTION_OWNERS = {"tokenizer": "translation", "note_event_ids": "music"}


@dataclasses.dataclass(frozen=True)
class ServingOptions:
    """`export_for_serving`'s options (see its Args)."""

    tokenizer: object = None
    beam_size: int = 4
    alpha: float = 0.6
    max_length: int = None
    note_event_ids: dict = None

    def refuse_others(self, family, *accepted):
        """`ValueError` for a family option given to another family's model."""
        for name, owner in _OPTION_OWNERS.items():
            if name not in accepted and getattr(self, name) is not None:
                raise ValueError(f"`{name}` is for {owner} models only. Received a {family} model")

    def length_for(self, model, default):
        """The longest sequence a signature generates: `max_length`, checked
        against the model's own maximum, else that maximum, else `default`."""
        limit = model.max_length
        if self.max_length is None:
            return limit or default
        check_length("max_length", self.max_length, limit, minimum=2)
        return self.max_length


def forward_endpoint(model, output_name):
    """`serving_default`: the forward pass -> `{output_name: outputs}`, or
    with `output_name=None` the model's own dict of named outputs."""
    import tensorflow as tf

    specs = [tf.TensorSpec((None,) + tuple(t.shape[1:]), t.dtype, name=t.name) for t in model.inputs]
    names = [spec.name for spec in specs]

    def forward(inputs):
        outputs = model(inputs if isinstance(model.input, dict) else inputs[names[0]], training=False)
        if output_name is None:
            return {name: tf.cast(output, "float32") for name, output in outputs.items()}
        return {output_name: tf.cast(outputs, "float32")}

    return "serving_default", forward, [dict(zip(names, specs))]


def sentencepiece_tokenizer(tokenizer):
    """A tensorflow-text tokenizer holding the SentencePiece model, and its EOS id."""
    import sentencepiece
    import tensorflow_text

    if isinstance(tokenizer, (str, os.PathLike)):
        with open(tokenizer, "rb") as file:
            tokenizer = file.read()
    if not isinstance(tokenizer, bytes):
        raise ValueError(
            "`tokenizer` must be a SentencePiece model file: a path or its bytes. "
            f"Received: {type(tokenizer).__name__}"
        )
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer)
    if processor.pad_id() != 0 or processor.eos_id() < 1:
        raise ValueError(
            "`tokenizer` must be a SentencePiece model with pad_id=0 (the models' padding) and "
            f"an end-of-sentence id. Received: pad_id={processor.pad_id()}, eos_id={processor.eos_id()}"
        )
    return tensorflow_text.SentencepieceTokenizer(model=tokenizer, add_eos=True), processor.eos_id()
