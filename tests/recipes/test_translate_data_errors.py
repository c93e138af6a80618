"""recipes/translate.py: a damaged cached Ding dictionary is a usage error
(the file named, and how to fetch it again), not a traceback."""

import pytest

from keras_selfattn.data import text
from keras_selfattn.data.text import ding as text_ding
from recipes import translate


@pytest.mark.parametrize("content", [b"\xff\xfe\x00\x81 binary", b""], ids=["binary", "empty"])
def test_a_damaged_cached_ding_dictionary_is_a_usage_error_naming_it(tmp_path, capsys, content):
    dictionary = tmp_path / "data" / "text" / text.DING_PACKAGE / text_ding.DING_MEMBER
    dictionary.parent.mkdir(parents=True)
    dictionary.write_bytes(content)
    argv = ["--model_dir", str(tmp_path / "run"), "--data_dir", str(tmp_path / "data"), "--verbose", "0"]
    with pytest.raises(SystemExit) as raised:
        translate.harness.run_cli(translate.main, argv)
    assert raised.value.code == 2
    error = capsys.readouterr().err
    assert f"The cached Ding dictionary {dictionary} is damaged" in error
    assert f"rm -r {tmp_path / 'data' / 'text' / text.DING_PACKAGE}" in error
    assert "Traceback" not in error
