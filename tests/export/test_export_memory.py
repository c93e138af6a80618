"""The `generate` signature of a Music Transformer with segment memory
(sliding-window caches) through TensorFlow's C API loader, the server's,
equals in-process generation row by row, past the window too."""

import numpy as np
import pytest

pytestmark = pytest.mark.backends("tensorflow", reason="SavedModels and TensorFlow's C API")

from keras_selfattn.export import check_serving_contract, export_for_serving  # noqa: E402
from keras_selfattn.generation import continue_sequence  # noqa: E402
from serving.emulator.c_api_loader import CApiSavedModel  # noqa: E402
from tests.generation.test_generation_memory import WINDOW, memory_model  # noqa: E402


def test_generate_with_memory_through_the_c_api_equals_in_process(tmp_path):
    model = memory_model()
    path = export_for_serving(model, tmp_path, name="music_memory", max_length=4 * WINDOW)
    check_serving_contract(path)
    primers = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12, 13]]
    inputs = dict(
        primer=np.array([primer + [0] * (5 - len(primer)) for primer in primers], "int32"),
        primer_length=np.array([len(primer) for primer in primers], "int32"),
        max_new_tokens=np.array([3 * WINDOW, 6, 2 * WINDOW], "int32"),
        temperature=np.array([0.0, 0.9, 1.1], "float32"),
        top_k=np.array([0, 5, 0], "int32"),
        top_p=np.array([1.0, 0.9, 0.8], "float32"),
        seed=np.array([1, 2, 3], "int32"),
    )
    with CApiSavedModel(path) as loaded:
        outputs = loaded.run("generate", inputs)
    assert outputs["status"].tolist() == [b"", b"", b""]
    for row, primer in enumerate(primers):
        count = int(inputs["max_new_tokens"][row])
        expected = continue_sequence(
            model, np.array([primer], "int32"), count, temperature=float(inputs["temperature"][row]),
            top_k=int(inputs["top_k"][row]), top_p=float(inputs["top_p"][row]), seed=int(inputs["seed"][row]),
        )
        np.testing.assert_array_equal(
            outputs["tokens"][row, : len(primer) + count], np.asarray(expected)[0], err_msg=f"row {row}"
        )
        assert not outputs["tokens"][row, len(primer) + count :].any()
