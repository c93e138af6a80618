"""serving/README.md's Python examples run as written: its blocks in order, in
one namespace (as tests/test_docs_examples.py runs README.md's), against real
objects.

The page assumes five trained models and a SentencePiece file `spm.model`, and,
for the client, a running server. The namespace holds tiny models of each
family built with `keras_selfattn.models`, the working directory a
SentencePiece model trained on a few lines, and the server is the emulator of
the other serving tests (TensorFlow's C API loader with the server's request
rules) on local REST and gRPC ports, answering for what the examples exported
under `runs/serving`; `GRPC_PORT` names its port, as it would for
docker-compose.yml.
"""

import pathlib
import re

import numpy as np
import pytest

pytest.importorskip("tensorflow_serving", reason="the client's gRPC path needs tensorflow-serving-api")

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "serving" / "README.md"
# The tree the page draws: each model's first version, a SavedModel.
NAMES = ("music", "translation", "image_generation", "super_resolution", "accompaniment")
# A few lines for the tokenizer: the page's sentences among them.
LINES = ["Ich habe Hunger.", "Guten Morgen.", "Das ist gut.", "I am hungry.", "Good morning.", "That is good."]
VOCABULARY = 28


def python_blocks(page):
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)


def train_sentencepiece(prefix="spm"):
    """Writes `<prefix>.model`, with the ids the export expects: pad 0, EOS 1."""
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(LINES * 20), model_prefix=prefix, vocab_size=VOCABULARY,
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2,
    )


def page_models():
    """The models the page's export example names, tiny, of each family."""
    from keras_selfattn.models import transformer_translation
    from tests.export.exported_models import melody_model
    from tests.generation import generation_models

    return {
        "music_model": generation_models.music_model("relative_global"),
        "translation_model": transformer_translation(
            VOCABULARY, VOCABULARY, preset="tiny", position="shaw", **generation_models.SMALL
        ),
        "image_model": generation_models.image_model("local_2d"),
        "super_resolution_model": generation_models.super_resolution_model(),
        "melody_conditioned_model": melody_model(),
    }


def test_the_page_shows_python_examples():
    blocks = python_blocks(PAGE)
    assert len(blocks) == 2
    assert "export_for_serving" in blocks[0] and "client.predict(" in blocks[1]


@pytest.mark.slow
@pytest.mark.backends("tensorflow", reason="the examples export SavedModels and call TF Serving's APIs")
def test_examples_run_as_written(tmp_path, monkeypatch):
    from tests.serving.emulated_server import EmulatedServing

    monkeypatch.chdir(tmp_path)  # runs/serving and spm.model live here
    train_sentencepiece()
    namespace = page_models()
    with EmulatedServing(tmp_path / "runs" / "serving") as server:
        monkeypatch.setenv("GRPC_PORT", str(server.grpc_port))
        for index, block in enumerate(python_blocks(PAGE)):
            try:
                exec(compile(block, f"serving/README.md python block {index}", "exec"), namespace)  # noqa: S102
            except Exception as error:  # noqa: BLE001 - report which example broke
                pytest.fail(f"serving/README.md python block {index} fails: {type(error).__name__}: {error}")
        assert server.requests == [("grpc", "translation", "translate")]
        check_exports(tmp_path / "runs" / "serving")
        check_requests(namespace, server)


def check_exports(export_base):
    """Section 1's tree, each model with its section 4 signatures."""
    from serving import client
    from serving.emulator.signature_defs import read_signatures

    assert sorted(p.name for p in export_base.iterdir()) == sorted(NAMES)
    for name in NAMES:
        version = export_base / name / "1"
        assert [p.name for p in (export_base / name).iterdir()] == ["1"], name
        assert (version / "saved_model.pb").is_file() and (version / "variables").is_dir(), name
        assert (version / "assets").is_dir(), name
        signatures = read_signatures(str(version))
        assert set(signatures) == {"serving_default", *client.MODEL_SIGNATURES[name]}, name
        for signature in client.MODEL_SIGNATURES[name]:
            expected = client.SIGNATURES[signature]
            for side in ("inputs", "outputs"):
                dtypes = {key: spec["dtype"] for key, spec in signatures[signature][side].items()}
                # The page's models: no class labels, one translation direction.
                wanted = {key: dtype for key, dtype in expected[side].items() if key not in client.OPTIONAL_INPUTS}
                assert dtypes == wanted, (name, signature, side)


def check_requests(namespace, server):
    """The answer the example printed, and what its `body` and `request` get
    from the same server, parsed as the page says."""
    from serving import client

    outputs = namespace["outputs"]
    assert set(outputs) == {"translation", "tokens", "score", "status"}
    assert outputs["status"].tolist() == [b""]
    assert outputs["translation"].dtype == object and isinstance(outputs["translation"][0], bytes)
    assert outputs["score"].dtype == np.float32 and outputs["tokens"].dtype == np.int32

    body, request = namespace["body"], namespace["request"]
    assert body == {"signature_name": "translate", "instances": [{"text": "Ich habe Hunger."}]}
    assert request.model_spec.name == "translation" and request.model_spec.signature_name == "translate"
    response = client.rest_predict("localhost", server.rest_port, "translation", body)
    names = client.SIGNATURES["translate"]["outputs"]
    over_rest = client.parse_rest_response(response, list(names), names)
    over_grpc = client.parse_predict_response(client.grpc_predict("localhost", server.grpc_port, request))
    for answer in (over_rest, over_grpc):
        assert set(answer) == set(outputs)
        for key, value in outputs.items():
            assert answer[key].dtype == value.dtype, key
            np.testing.assert_array_equal(answer[key], value, err_msg=key)
