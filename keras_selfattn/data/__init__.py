"""Image data for the recipes, as numpy arrays: scikit-learn's digits offline,
tensorflow-datasets image sets otherwise (`keras_selfattn.data.images`)."""
