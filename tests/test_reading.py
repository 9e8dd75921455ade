"""files/reading.py: the one reader of every file read back (reports, baselines)."""

from __future__ import annotations

import os

import pytest

from pytest_gpucomm.files.reading import read_regular_file


class Refused(ValueError):
    pass


def _read(path, limit=100):
    return read_regular_file(path, what="report", limit=limit, limit_name="LIMIT", error=Refused)


def test_a_regular_file_at_the_limit_is_read_whole(tmp_path):
    p = tmp_path / "r.json"
    p.write_bytes(b"x" * 100)
    assert _read(p) == b"x" * 100


def test_a_file_over_the_limit_is_refused_from_its_size_naming_the_limit_and_its_setting(tmp_path):
    p = tmp_path / "r.json"
    p.write_bytes(b"x" * 101)
    with pytest.raises(Refused) as info:
        _read(p)
    assert str(info.value) == (f"{p}: is larger than 100 bytes (101 bytes), the most a report file may hold (LIMIT): "
                               "not a report file")


def test_a_file_that_grows_past_the_limit_while_read_is_refused(tmp_path, monkeypatch):
    p = tmp_path / "r.json"
    p.write_bytes(b"x" * 500)
    q = tmp_path / "small"
    q.write_bytes(b"x")
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: real_stat(q) if str(path) == str(p) else real_stat(path))
    with pytest.raises(Refused, match=r"is larger than 100 bytes, the most a report file may hold \(LIMIT\)"):
        _read(p)


def test_a_missing_file_and_a_directory_are_named_as_such(tmp_path):
    with pytest.raises(Refused) as info:
        _read(tmp_path / "gone.json")
    assert str(info.value) == f"{tmp_path / 'gone.json'}: report file does not exist"
    with pytest.raises(Refused) as info:
        _read(tmp_path)
    assert str(info.value) == f"{tmp_path}: is a directory, not a report file"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_being_opened(tmp_path, monkeypatch):
    p = tmp_path / "r.json"
    os.mkfifo(p)
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(str(path)) or real_open(path, *a, **k))
    with pytest.raises(Refused) as info:
        _read(p)
    assert str(info.value) == f"{p}: is a FIFO, not a regular file: not a report file"
    assert opened == []
