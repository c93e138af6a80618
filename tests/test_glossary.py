"""One name per concept: every argument name of the public API is Keras's own
or defined in docs/glossary.md, and no old spelling the glossary lists (in
brackets) is still an argument of its own."""

import inspect
import re
from pathlib import Path

import keras

import keras_selfattn.export
import keras_selfattn.generation
import keras_selfattn.layers
import keras_selfattn.models

GLOSSARY = Path(__file__).resolve().parents[1] / "docs" / "glossary.md"
PUBLIC_MODULES = (keras_selfattn.layers, keras_selfattn.generation, keras_selfattn.models, keras_selfattn.export)
# The methods of a public class whose arguments users write.
PUBLIC_METHODS = (
    "__init__", "call", "generate", "call_with_cache", "initial_cache", "from_preset", "update_state",
    "save_to_preset", "enable_lora", "save_lora_weights", "load_lora_weights",
)
# Keras defines these arguments' names: a layer's, a loss's, a model's.
KERAS_SIGNATURES = (
    keras.layers.Layer.__init__, keras.layers.Layer.call, keras.layers.Dense.__init__,
    keras.layers.Embedding.__init__, keras.layers.LayerNormalization.__init__,
    keras.layers.MultiHeadAttention.__init__, keras.layers.MultiHeadAttention.call,
    keras.losses.SparseCategoricalCrossentropy.__init__, keras.losses.Loss.call,
    keras.metrics.Mean.update_state, keras.Model.__init__,
    keras.optimizers.schedules.LearningRateSchedule.__call__,
)


def _arguments(function):
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return []
    return [
        p.name for p in parameters
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in ("self", "cls")
    ]


def public_arguments():
    """`{argument name: [where it appears]}` over the public classes and
    functions of the package's modules."""
    found = {}
    for module in PUBLIC_MODULES:
        for name in dir(module):
            obj = getattr(module, name)
            if name.startswith("_") or not getattr(obj, "__module__", "").startswith("keras_selfattn"):
                continue
            functions = [(name, obj)] if inspect.isfunction(obj) else []
            if inspect.isclass(obj):
                functions = [(f"{name}.{m}", getattr(obj, m)) for m in PUBLIC_METHODS if hasattr(obj, m)]
            for where, function in functions:
                for argument in _arguments(function):
                    found.setdefault(argument, []).append(where)
    return found


def glossary_names():
    """`(current names, old names)` of the glossary's tables: the backticked
    names of each row's first cell, those in brackets being old spellings."""
    current, old = set(), set()
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        if not line.startswith("| `"):
            continue
        cell = line.split("|")[1]
        for bracketed in re.findall(r"\(([^)]*)\)", cell):
            old |= set(re.findall(r"`([A-Za-z_]\w*)", bracketed))
        current |= set(re.findall(r"`([A-Za-z_]\w*)", re.sub(r"\([^)]*\)", "", cell)))
    return current, old


def test_every_public_argument_is_kerass_or_in_the_glossary():
    keras_names = {argument for function in KERAS_SIGNATURES for argument in _arguments(function)}
    current, _ = glossary_names()
    undefined = {
        argument: where for argument, where in sorted(public_arguments().items())
        if argument not in keras_names | current
    }
    assert not undefined, "arguments docs/glossary.md does not define:\n" + "\n".join(
        f"{argument}: {', '.join(sorted(set(where)))}" for argument, where in undefined.items()
    )


def test_no_old_spelling_is_still_an_argument_of_its_own():
    _, old = glossary_names()
    still = {argument: where for argument, where in public_arguments().items() if argument in old}
    assert not still, f"old spellings that are arguments: {still}"


def test_every_sequence_family_generates_max_new_tokens():
    for model_class in (
        keras_selfattn.models.MusicTransformer,
        keras_selfattn.models.MelodyConditionedMusicTransformer,
        keras_selfattn.models.TranslationTransformer,
    ):
        assert "max_new_tokens" in _arguments(model_class.generate), model_class.__name__
    for function in (keras_selfattn.generation.continue_sequence, keras_selfattn.generation.translate_tokens):
        assert "max_new_tokens" in _arguments(function), function.__name__


def test_the_glossary_parser_reads_current_and_old_names(tmp_path, monkeypatch):
    glossary = tmp_path / "glossary.md"
    glossary.write_text("| name | means |\n| --- | --- |\n| `hidden_dim` (`d_model`) | width |\n")
    monkeypatch.setitem(globals(), "GLOSSARY", glossary)
    assert glossary_names() == ({"hidden_dim"}, {"d_model"})
