"""recipes/music_fine_tuning.py (the chorale study): four ways of adapting,
each way's learning rate chosen on validation with the first seed only,
test scored after every choice is made."""

import json

import pytest

from recipes import music_fine_tuning

pytestmark = pytest.mark.backends("tensorflow", reason="the recipes' tf.data and tf.distribute harness")


def _report(validation_nll, parameters=1000, trainable=None):
    report = {"held_out_nll_per_event": {"1x": {"nll_per_event": validation_nll}}, "model": {"parameters": parameters}}
    if trainable is not None:
        report["fine_tuning"] = {"trainable_parameters": trainable}
    return report


class FakeRun:
    def __init__(self):
        self.lines = []

    def log(self, line):
        self.lines.append(line)


def test_each_way_runs_music_py_with_its_flags_rate_and_seed(tmp_path, monkeypatch):
    args = music_fine_tuning.build_parser().parse_args(["--model_dir", str(tmp_path), "--ways", "lora16"])
    calls = []

    def run_recipe(recipe, argv):
        calls.append((recipe, argv))
        folder = argv[argv.index("--model_dir") + 1]
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "report.json").write_text(json.dumps(_report(3.0)))

    monkeypatch.setattr(music_fine_tuning, "run_recipe", run_recipe)
    music_fine_tuning.train(args, FakeRun(), tmp_path / "chorales", "lora16", 3e-3, 2)
    recipe, argv = calls[0]
    assert recipe == "music"
    flag = lambda name: argv[argv.index(name) + 1]  # noqa: E731
    assert (flag("--preset"), flag("--lora_rank"), flag("--learning_rate"), flag("--seed")) == ("maestro_small", "16", "0.003", "2")
    assert flag("--held_out") == "validation" and flag("--midi_dir") == str(tmp_path / "chorales")
    # a run whose report is there is not run again
    music_fine_tuning.train(args, FakeRun(), tmp_path / "chorales", "lora16", 3e-3, 2)
    assert len(calls) == 1


def test_the_rate_is_chosen_on_validation_by_the_first_seed_then_the_other_seeds_run_it(tmp_path, monkeypatch):
    args = music_fine_tuning.build_parser().parse_args(
        ["--model_dir", str(tmp_path), "--ways", "full", "--seeds", "5", "6", "7"]
    )
    validation = {(1e-4, 5): 3.2, (3e-4, 5): 3.1}
    trained = []

    def train(args, run, chorales, way, rate, seed):
        trained.append((way, rate, seed))
        return _report(validation.get((rate, seed), 3.0))

    monkeypatch.setattr(music_fine_tuning, "train", train)
    results = music_fine_tuning.train_all(args, FakeRun(), tmp_path)
    assert trained == [("full", 1e-4, 5), ("full", 3e-4, 5), ("full", 3e-4, 6), ("full", 3e-4, 7)]
    assert results["full"]["rate"] == 3e-4 and list(results["full"]["runs"]) == [5, 6, 7]
    assert results["full"]["grid"] == {1e-4: 3.2, 3e-4: 3.1}


def test_the_tables_give_every_seed_and_the_means():
    results = {
        "lora4": {"grid": {1e-3: 3.5, 3e-3: 3.4}, "rate": 3e-3,
                  "runs": {0: _report(3.4, 1010, 37888), 1: _report(3.6, 1010, 37888)}},
    }
    scores = {"shipped": {"chorales": 4.2, "maestro": 2.9},
              "lora4": {0: {"chorales": 3.0, "maestro": 2.95}, 1: {"chorales": 3.2, "maestro": 2.97}}}
    tables = music_fine_tuning.markdown_tables(results, scores)
    assert "| LoRA, rank 4 | 37,888 | 0.001: 3.5000, 0.003: 3.4000 | 0.003 |" in tables
    assert "| LoRA, rank 4 | 3.5000 | 3.1000 | 3.0000 / 3.2000 | 2.9600 | 2.9500 / 2.9700 |" in tables
    assert "| shipped `maestro_small`, not fine-tuned | | 4.2000 | | 2.9000 | |" in tables
