"""`export_for_serving`: a model and its generation as a TF Serving SavedModel."""

import os
import secrets
import shutil

import keras

from keras_selfattn.export.contract import check_serving_contract
from keras_selfattn.export.family_endpoints import FAMILY_ENDPOINTS, serving_endpoints
from keras_selfattn.export.serving_options import ServingOptions


def export_for_serving(
    model, export_base, *, name, version=None, tokenizer=None, beam_size=4, alpha=0.6, max_length=None,
    note_event_ids=None, directions=None, min_note_steps=0, melody_onsets=False,
):
    """Writes `model` with its generation signatures to `export_base/name/version/`.

    The SavedModel runs in TensorFlow Serving as exported: it loads without
    `keras_selfattn`, every input has a free leading batch dimension (REST
    `instances` and `inputs` requests both work, and each row may carry its
    own settings), outputs are dense, nothing is marked for XLA and no op
    runs Python; `check_serving_contract` verifies this before the version
    appears. The version directory is written aside and renamed into place,
    so a server watching `export_base/name` never loads half a model; its
    permissions follow the process umask, as ordinary files' do.

    The signatures of each model class are in `family_endpoints`; by family:

    - every model: `serving_default`, the forward pass, keyed by the model's
      input names -> `logits` (`dmol_params` for a DMOL head, `encodings`
      for `graph_transformer`, whose inputs are `token_ids` int32 `[B, N]`
      and `relations` int32 `[B, N, N]`). A `VariableMisuseModel` gives its
      `bug` and `repair` logits float32 `[B, N]`; a Functional model with
      those two inputs that holds a `GraphTransformer` (heads on its node
      encodings) and has named outputs (a dict) gives those outputs, as
      float32. A graph model's `serving_default` also outputs `status`
      string `[B]`, as
      the generation signatures do: a row with a token id outside the
      vocabulary or a relation id outside `[0, num_relations]` gets its
      problem there and zeros in its other outputs.
    - `music_transformer` (decoder-only): `generate`: `primer` int32
      `[B, T]` (primers padded to the longest), `primer_length` int32 `[B]`
      (each row's own), `max_new_tokens` int32 `[B]`, `temperature` float32
      `[B]`, `top_k` int32 `[B]`, `top_p` float32 `[B]`, `seed` int32 `[B]`
      -> `tokens` int32 `[B, L]`: a row's primer, its new tokens, then
      zeros.
    - `accompaniment` (`MelodyConditionedMusicTransformer`): `serving_default`
      takes `melody` and `tokens`; `accompany`: `melody` int32 `[B, M]`
      (melodies padded to the longest), `melody_length` int32 `[B]` (each
      row's own, at most the model's `max_melody_length`), then
      `generate`'s inputs -> `generate`'s `tokens`, each row accompanying
      its own melody.
    - `transformer_translation` with a `tokenizer`: `translate`: `text`
      string `[B]` -> `translation` string `[B]`, `tokens` int32 `[B,
      max_length]`, `score` float32 `[B]` (beam search with `beam_size` and
      `alpha`). With `directions` (a model trained on several directions,
      each source led by its direction's token): `translate`: `text`
      string `[B]`, `direction` string `[B]` (one of `directions`' names)
      -> the same outputs, each row's text translated after its
      direction's prefix; a row of another direction gets `status`
      "`direction` must be one of ..." naming the accepted ones.
    - `image_transformer`: `sample`: `seed` int32 `[B]`, `temperature`
      float32 `[B]` (+ `class_label` int32 `[B]` when conditional) ->
      `pixels` uint8 `[B, H, W, C]`; `complete`: `pixels` uint8
      `[B, H, W, C]`, `known_rows` int32 `[B]`, `seed`, `temperature` (+
      `class_label`) -> `pixels`.
    - `image_super_resolution`: `super_resolve`: `low_resolution` uint8
      `[B, h, w, C]`, `seed`, `temperature`, `decoding` string `[B]`
      (`"sample"`, or `"posterior_mean"`: `sample_images(...,
      decoding="posterior_mean")`, whose row's seed and temperature change
      nothing) -> `pixels` uint8.

    A row's output is what `keras_selfattn.generation` gives for that row
    alone with the same settings and seed (`continue_sequence`, the
    melody-conditioned model's `generate`, `translate_tokens`,
    `sample_images`). Every generation signature also
    outputs `status` string `[B]`: "" for a row that was answered, else the
    problem with that row's own settings or text (its other outputs are then
    zeros or ""), so one bad row fails no other row merged into its batch.
    Inputs of different batch sizes fail the request with an InvalidArgument
    error naming the input.

    Args:
        model: a model built by `keras_selfattn.models`, or a Functional
            model of heads over a `graph_transformer` (see above).
        export_base: the folder TF Serving watches for all models.
        name: the model's name in TF Serving: one plain folder name (its
            folder under `export_base`), not a path.
        version: a positive integer; `None` takes the next after the
            versions already there.
        tokenizer: translation only, and needed for `translate`: a
            SentencePiece model file (path or serialized bytes) whose id 0
            is padding; its end-of-sentence id ends translations.
        beam_size: `translate`'s beam width (1 decodes greedily).
        alpha: `translate`'s length penalty exponent.
        max_length: the longest sequence a signature generates: for
            `generate` and `accompany`, primer plus new tokens; for
            `translate`, target tokens. `None` takes the model's maximum,
            else 2048 (music, accompaniment) or 256 (translation).
        note_event_ids: music and accompaniment only: the note-on and
            note-off id ranges (`keras_selfattn.data.music.event_id_ranges()`);
            `generate` and `accompany` then keep `continue_sequence`'s note
            rules on every row.
        min_note_steps: music with `note_event_ids` only: `generate` also
            keeps `continue_sequence`'s minimum note length (e.g. a trained
            preset's `model.generation_settings["min_note_steps"]`); 0: none.
        melody_onsets: accompaniment with `note_event_ids` (and its
            `"time_shift"` range) only: `accompany` also places each melody
            note-on at its time, as `generate(..., melody_onsets=True)`.
        directions: translation with a `tokenizer` only: for a model trained
            on several directions, a dict of each direction's name to the
            text its sources start with, e.g. `{"forward": "<forward> ",
            "reverse": "<reverse> "}` (recipes/translate.py's `--tasks
            both_directions`); `translate` then takes each row's
            `direction`. `None` keeps `translate(text)`.

    Returns:
        The path of the written version directory.

    Raises:
        ValueError: for a model or argument these signatures do not support,
            or a version that exists already.
        ServingContractError: if the written graph breaks the server's
            contract.
    """
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            "`export_for_serving` writes a TensorFlow SavedModel: it needs the TensorFlow "
            f"backend. Received: the {keras.backend.backend()!r} backend"
        )
    _check_name(name)
    options = ServingOptions(
        tokenizer, beam_size, alpha, max_length, note_event_ids, directions, min_note_steps or None,
        melody_onsets or None,
    )
    endpoints, resources = serving_endpoints(_family_model(model), options)
    model_dir = os.path.join(os.fspath(export_base), name)
    version = _version(model_dir, version)
    os.makedirs(model_dir, exist_ok=True)
    staging = _staging_folder(model_dir, version)
    try:
        _write([model, *resources], endpoints, staging)
        check_serving_contract(staging)
        path = os.path.join(model_dir, str(version))
        os.rename(staging, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path


def _check_name(name):
    """`name` must be one folder inside `export_base`: not a path, nor one
    that leads out of it."""
    separators = [separator for separator in (os.sep, os.altsep, "\0") if separator]
    if not isinstance(name, str) or name in ("", ".", "..") or any(s in name for s in separators):
        raise ValueError(
            "`name` must be one plain folder name (not empty, '.' or '..', and without "
            f"{' or '.join(map(repr, separators))}). Received: name={name!r}"
        )


def _family_model(model):
    """`model` as the model class of its family."""
    for model_class in FAMILY_ENDPOINTS:
        try:
            return model_class.from_model(model)
        except ValueError:
            continue
    raise ValueError(
        "`model` must be built by keras_selfattn.models (music_transformer, "
        "MelodyConditionedMusicTransformer, transformer_translation, image_transformer, "
        "image_super_resolution, graph_transformer or VariableMisuseModel), or be a Functional model with "
        "inputs token_ids and relations, dict outputs, and a graph_transformer inside. "
        f"Received: model {getattr(model, 'name', type(model).__name__)!r}"
    )


def _version(model_dir, version):
    existing = [int(entry) for entry in _entries(model_dir) if entry.isdigit()]
    if version is None:
        return max(existing, default=0) + 1
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"`version` must be an integer >= 1 or None. Received: version={version!r}")
    if version in existing:
        raise ValueError(f"Version {version} exists already in {model_dir}; pass another `version`.")
    return version


def _staging_folder(model_dir, version):
    """A new empty folder `.{version}-<random hex>` in `model_dir`, made as
    any folder is, with the process umask: the version it becomes is as
    readable as the user's other files (TF Serving may run as another user),
    not 0700 as a `tempfile.mkdtemp` folder."""
    while True:
        path = os.path.join(model_dir, f".{version}-{secrets.token_hex(8)}")
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        return path


def _entries(folder):
    return os.listdir(folder) if os.path.isdir(folder) else []


def _write(tracked, endpoints, path):
    archive = keras.export.ExportArchive()
    for resource in tracked:
        archive.track(resource)
    for endpoint_name, function, signature in endpoints:
        archive.add_endpoint(endpoint_name, function, input_signature=signature)
    archive.write_out(path, verbose=False)
