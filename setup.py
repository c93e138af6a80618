"""Packaging for keras-selfattn: self-attention layers for Keras 3 and TensorFlow."""

from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

# The trained weights' folder: each file's licence (LICENSE.md) and, copied in
# at build time, each trained preset's model card from docs/models/.
WEIGHTS = "keras_selfattn/models/weights"


class BuildWithModelCards(build_py):
    """Copies the model cards (`docs/models/*.md`) beside the weights they
    describe, so that the wheel carries them with the weights' licence."""

    def run(self):
        super().run()
        target = Path(self.build_lib, WEIGHTS)
        self.mkpath(str(target))
        for card in sorted(Path(__file__).with_name("docs").joinpath("models").glob("*.md")):
            self.copy_file(str(card), str(target / card.name))

# `keras_selfattn.generation`'s beam search (`beam_size` > 1).
BEAM = ["tf-models-official==2.20.*"]
# The JAX backend (`KERAS_BACKEND=jax`).
JAX = ["jax"]
# `keras_selfattn.data.music`: performance encodings, MIDI in and out, WAV out through
# midirenderer's SoundFont synthesizer (matplotlib for the music recipe's plots), and
# music21 for the scores of its corpus (`keras_selfattn.data.music.scores`).
MUSIC = ["note-seq==0.0.5", "matplotlib", "midirenderer==0.1.*", "music21==10.5.*"]
# `keras_selfattn.data.text`: SentencePiece, in-graph tokenization, WMT14 through
# tensorflow-datasets; BLEU (`keras_selfattn.models.metrics.translation_scores`).
TEXT = ["tensorflow-text==2.20.*", "sentencepiece", "sacrebleu", "tensorflow-datasets"]
# `keras_selfattn.export` and `serving/`: in-graph SentencePiece, beam search for `translate`,
# PredictRequests and images for the client (whose music command also needs MUSIC).
SERVING = ["tensorflow-text==2.20.*", "tensorflow-serving-api==2.20.*", "sentencepiece", "pillow"] + BEAM
# The recipes: `keras_selfattn.data.images` (scikit-learn's digits offline, tensorflow-datasets
# otherwise), the image metrics, plots, and what the music and translation recipes and the
# export need.
RECIPES = (
    ["tensorflow-datasets", "scikit-learn", "scikit-image==0.26.*", "pillow", "matplotlib"]
    + BEAM + MUSIC + TEXT + SERVING
)
# `model.export(path, format="onnx" or "litert")` and onnxruntime, the LiteRT interpreter to run them.
EXPORT = ["onnx==1.23.2", "onnxruntime==1.32.0", "tf2onnx==1.17.0", "ai-edge-litert==2.3.0"]
# The tests' TF Serving emulator (serving/emulator) also needs gcc. `make test` runs the
# tests on the JAX and PyTorch backends too.
# torch==2.13.0 is the version the torch run of `make test` is tested with. On Linux, PyPI's wheel of
# it is the CUDA build (several GB); for CPU-only torch, install it from PyTorch's CPU index first:
# `pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu`.
TORCH = ["torch==2.13.0"]
TEST = ["pytest", "numpy", "scikit-learn", "pyyaml"] + TORCH + RECIPES + JAX + EXPORT

setup(
    name="keras-selfattn",
    version="0.1.0",
    description=(
        "Self-attention layers for Keras 3: multi-head with a static KV cache, "
        "relative (Shaw, Music Transformer skew) and local 1D/2D attention."
    ),
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    # The code; the trained weights are CC BY-NC-SA 4.0, as the data they were
    # trained on (keras_selfattn/models/weights/LICENSE.md, in the wheel beside them).
    license="Apache-2.0 (code); CC-BY-NC-SA-4.0 (trained weights in keras_selfattn/models/weights)",
    license_files=["LICENSE", f"{WEIGHTS}/LICENSE.md"],
    # The programs people run, `python recipes/music.py` or `python -m recipes.music`
    # (`serving/client.py` likewise), import `recipes` and `serving` as installed packages.
    packages=find_packages(
        include=["keras_selfattn", "keras_selfattn.*", "recipes", "recipes.*", "serving", "serving.*"]
    ),
    # The trained presets' weights (keras_selfattn.models.presets) and their licence.
    package_data={"keras_selfattn.models": ["weights/*.weights.h5", "weights/LICENSE.md"]},
    cmdclass={"build_py": BuildWithModelCards},
    python_requires=">=3.10",
    install_requires=["tensorflow==2.20.*", "keras>=3.15,<4"],
    extras_require={
        "recipes": RECIPES,
        "beam": BEAM,
        "jax": JAX,
        "torch": TORCH,
        "music": MUSIC,
        "text": TEXT,
        "serving": SERVING,
        "export": EXPORT,
        "test": TEST,
        "all": RECIPES + BEAM + JAX + TORCH + MUSIC + TEXT + SERVING + EXPORT + TEST,
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Framework :: Keras",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
