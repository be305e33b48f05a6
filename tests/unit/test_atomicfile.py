"""dracni.atomicfile's reads: a file's bytes whatever its size, or what its fstat said.

``read_if_exists`` reads with one ``os.read`` of the size ``fstat`` gives (the state dir's
files are replaced whole, never written in place); these hold it to what
``open(path, "rb").read()`` returns, also where the size is not the content's.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dracni.atomicfile import read_if_exists, write_atomic


class Refused(Exception):
    pass


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 65536, 65537, 1 << 20])
def test_a_file_is_read_whole_whatever_its_size(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    path = tmp_path / "record.json"
    write_atomic(str(path), data)
    assert read_if_exists(str(path), Refused) == data


def test_a_missing_file_is_none_and_an_unreadable_one_is_the_callers_error_naming_it(tmp_path: Path) -> None:
    assert read_if_exists(str(tmp_path / "absent.json"), Refused) is None
    assert read_if_exists(str(tmp_path / "no-dir" / "absent.json"), Refused) is None
    with pytest.raises(Refused, match=f"cannot read {tmp_path}: Is a directory"):
        read_if_exists(str(tmp_path), Refused)


def test_a_file_whose_size_says_less_than_it_holds_is_read_to_its_end() -> None:
    """/proc's files have st_size 0 and content: the first read (of the size plus one byte)
    returns as much as it asked for, and the reads after it bring the rest."""
    path = "/proc/self/cmdline"
    assert os.stat(path).st_size == 0
    with open(path, "rb") as f:
        expected = f.read()
    assert len(expected) > 1
    assert read_if_exists(path, Refused) == expected
