"""Packaging for keras-selfattn: self-attention layers for Keras 3 and TensorFlow."""

from pathlib import Path

from setuptools import find_packages, setup

TEXT = ["tensorflow-text==2.20.*", "sentencepiece", "sacrebleu"]
MUSIC = ["note-seq"]
RECIPES = [
    "tensorflow-datasets",
    "tf-models-official==2.20.*",
    "scikit-learn",
    "scikit-image",
    "matplotlib",
]
SERVING = ["tensorflow-serving-api==2.20.*"]
JAX = ["jax"]
TEST = ["pytest", "numpy", "scikit-learn"]

setup(
    name="keras-selfattn",
    version="0.1.0",
    description=(
        "Self-attention layers for Keras 3: multi-head with a static KV cache, "
        "relative (Shaw, Music Transformer skew) and local 1D/2D attention."
    ),
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    packages=find_packages(include=["keras_selfattn", "keras_selfattn.*"]),
    python_requires=">=3.10",
    install_requires=["tensorflow==2.20.*", "keras>=3.10,<4"],
    extras_require={
        "text": TEXT,
        "music": MUSIC,
        "recipes": RECIPES,
        "serving": SERVING,
        "jax": JAX,
        "test": TEST,
        "all": TEXT + MUSIC + RECIPES + SERVING + JAX + TEST,
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Framework :: Keras",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
