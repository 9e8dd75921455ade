"""The one wording of a broken JSON file (pytest_gpucomm.files.jsontext), as reports and baseline files get it."""

from __future__ import annotations

import pytest

from pytest_gpucomm.files.jsontext import parse_json_bytes


class Broken(Exception):
    pass


@pytest.mark.parametrize("raw, said", [
    (b"\xff{}", "f.json: not a UTF-8 text file (byte 0): not a report"),
    (b"  \n", "f.json: the file is empty (truncated?): not a report"),
    (b'{"rows": [{"test": "a', "f.json: the file is cut short (truncated): the string that starts at line 1 column 20 "
                              "never ends"),
    (b'{"rows": [1, 2', "f.json: the file is cut short (truncated): the JSON ends unexpectedly at line 1 column 15"),
    (b'{"rows": x}', "f.json: invalid JSON at line 1 column 10: Expecting value"),
    (b"1" * 5000, "f.json: invalid JSON: Exceeds the limit"),
    (b"[" * 100000 + b"]" * 100000, "f.json: invalid JSON: nested deeper than Python's json can read"),
])
def test_each_way_a_file_is_broken_is_said_naming_the_file(raw, said):
    with pytest.raises(Broken) as e:
        parse_json_bytes(raw, "f.json", "report", Broken)
    assert str(e.value).startswith(said)


def test_a_reader_with_a_nesting_limit_of_its_own_gets_its_own_error_for_a_file_too_deep_to_parse():
    with pytest.raises(KeyError, match="mine"):
        parse_json_bytes(b"[" * 100000 + b"]" * 100000, "f.json", "report", Broken, too_deep=lambda: KeyError("mine"))
    assert parse_json_bytes(b'{"a": [1]}', "f.json", "report", Broken) == {"a": [1]}
