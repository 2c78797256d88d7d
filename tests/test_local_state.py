import os

import pytest

from gale.local_state import LocalState

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


def _files(d):
    return sorted(n for n in os.listdir(d) if n.endswith(".state"))


def test_put_get_and_versions(tmp_path):
    ls = LocalState(tmp_path / "ls", keep=3)
    assert ls.snapshot() == {}
    for i in range(6):
        ls.put("worker-heartbeat", {"time_secs": i})
    ls.put("other", [1, 2])
    assert ls.get("worker-heartbeat") == {"time_secs": 5}
    assert ls.get("other") == [1, 2]
    assert len(_files(tmp_path / "ls")) == 3
    ls.remove("other")
    assert ls.get("other") is None
    # a second instance (another process) sees the same data
    assert LocalState(tmp_path / "ls").snapshot() == {"worker-heartbeat": {"time_secs": 5}}


def test_versions_monotonic_even_when_clock_repeats(tmp_path):
    ls = LocalState(tmp_path, keep=100)
    for i in range(50):
        ls.put("k", i)
    versions = ls.versions()
    assert versions == sorted(set(versions), reverse=True) and len(versions) == 50


@pytest.mark.parametrize(
    "damage",
    ["truncate", "empty", "garbage", "delete", "flip", "header-only"],
)
def test_bad_newest_version_falls_back_to_previous_good(tmp_path, damage, caplog):
    d = tmp_path / "ls"
    ls = LocalState(d, keep=4)
    ls.put("supervisor-id", "sup-a")
    ls.put("supervisor-id", "sup-b")
    newest = d / _files(d)[-1]
    raw = newest.read_bytes()
    if damage == "truncate":
        newest.write_bytes(raw[: len(raw) - 5])
    elif damage == "empty":
        newest.write_bytes(b"")
    elif damage == "garbage":
        newest.write_bytes(os.urandom(200))
    elif damage == "delete":
        newest.unlink()
    elif damage == "flip":
        newest.write_bytes(raw.replace(b"sup-b", b"sup-c"))
    elif damage == "header-only":
        newest.write_bytes(raw.split(b"\n")[0])
    reader = LocalState(d)
    assert reader.get("supervisor-id") == "sup-a"
    # writing again builds on the last good version and becomes the newest
    reader.put("approved-workers", {"w1": 6700})
    assert LocalState(d).snapshot() == {"supervisor-id": "sup-a", "approved-workers": {"w1": 6700}}


def test_all_versions_bad_means_empty_not_crash(tmp_path):
    d = tmp_path / "ls"
    d.mkdir()
    (d / "00000000000000000001.state").write_bytes(b"\x00" * 64)
    (d / "00000000000000000002.state").write_bytes(b"")
    (d / "junk.txt").write_text("ignored")
    ls = LocalState(d)
    assert ls.snapshot() == {}
    ls.put("k", 1)
    assert LocalState(d).get("k") == 1


def test_missing_directory_is_created(tmp_path):
    ls = LocalState(tmp_path / "a" / "b")
    assert ls.snapshot() == {}
    assert (tmp_path / "a" / "b").is_dir()


def test_stale_temp_files_cleaned(tmp_path):
    d = tmp_path / "ls"
    ls = LocalState(d)
    tmp = d / ".tmp-crashed"
    tmp.write_bytes(b"partial")
    os.utime(tmp, (1, 1))
    ls.put("k", 1)
    assert not tmp.exists()
    assert ls.get("k") == 1


def test_cleanup_keep(tmp_path):
    ls = LocalState(tmp_path, keep=100)
    for i in range(10):
        ls.put("k", i)
    ls.cleanup(keep=2)
    assert len(ls.versions()) == 2 and ls.get("k") == 9
