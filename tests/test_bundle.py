"""Code bundles: round trip, checksums, and crafted bundles that must not escape their directory."""

import io
import json
import os
import tarfile

import pytest

from gale.bundle import BundleError, checksum, extract_bundle, make_bundle, read_bundle

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


def _tar(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            elif kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = data
                tar.addfile(info)
            elif kind == "hardlink":
                info.type = tarfile.LNKTYPE
                info.linkname = data
                tar.addfile(info)
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
                tar.addfile(info)
    return buf.getvalue()


BASE = [("topology.json", "file", b"{}"), ("conf.json", "file", b"{}")]


def test_round_trip_skips_caches(tmp_path):
    code = tmp_path / "code"
    (code / "pkg" / "__pycache__").mkdir(parents=True)
    (code / "topo.py").write_text("x = 1\n")
    (code / "pkg" / "mod.py").write_text("y = 2\n")
    (code / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"junk")
    (code / ".git").mkdir()
    (code / ".git" / "HEAD").write_text("ref")
    os.symlink("/etc/passwd", code / "link.py")
    data = make_bundle(code, '{"components": {}}', {"a": 1})
    assert read_bundle(data) == ('{"components": {}}', {"a": 1})
    dest = extract_bundle(data, tmp_path / "out" / "t1")
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert files == ["CHECKSUM", "code/pkg/mod.py", "code/topo.py", "conf.json", "topology.json"]
    assert (dest / "CHECKSUM").read_text() == checksum(data)
    # extracting again replaces atomically
    extract_bundle(data, tmp_path / "out" / "t1")


@pytest.mark.parametrize(
    "entries,problem",
    [
        (BASE + [("../escape.py", "file", b"x")], "outside the bundle directory"),
        (BASE + [("code/../../escape.py", "file", b"x")], "outside the bundle directory"),
        (BASE + [("/etc/evil", "file", b"x")], "outside the bundle directory"),
        (BASE + [("code/link", "symlink", "/etc/passwd")], "link or special file"),
        (BASE + [("code/hard", "hardlink", "topology.json")], "link or special file"),
        (BASE + [("code/fifo", "fifo", None)], "link or special file"),
        ([("conf.json", "file", b"{}")], "no topology.json"),
    ],
)
def test_crafted_bundles_are_refused_and_write_nothing(tmp_path, entries, problem):
    data = _tar(entries)
    dest = tmp_path / "out" / "t1"
    with pytest.raises(BundleError, match=problem):
        extract_bundle(data, dest)
    assert not dest.exists()
    assert not (tmp_path / "escape.py").exists() and not (tmp_path / "out" / "escape.py").exists()
    assert [p.name for p in (tmp_path / "out").iterdir()] == []


def test_truncated_and_garbage_bundles(tmp_path):
    good = make_bundle(None, "{}", {})
    for bad in (good[: len(good) // 2], b"not a tarball", b""):
        with pytest.raises(BundleError):
            extract_bundle(bad, tmp_path / "x")
        with pytest.raises(BundleError):
            read_bundle(bad)
    assert checksum(good[:-1]) != checksum(good)


def test_size_limit(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "big.bin").write_bytes(b"0" * 2048)
    with pytest.raises(BundleError, match="exceeds"):
        make_bundle(code, "{}", {}, max_bytes=1024)
    data = make_bundle(code, "{}", {})
    with pytest.raises(BundleError, match="unpacks to more than"):
        extract_bundle(data, tmp_path / "x", max_bytes=1024)


def test_localizer_discards_truncated_download_and_retries(tmp_path, monkeypatch):
    """A truncated (or tampered) download never lands: the checksum refuses it, the next try does."""
    from gale.supervisor import localizer as loc
    from tests.waiting import eventually

    monkeypatch.setattr(loc, "RETRY_SECS", 0.05)
    good = make_bundle(None, '{"components": {}}', {})
    digest = checksum(good)
    attempts = []

    def fetch(topology_id):
        def truncated():
            attempts.append("truncated")
            return good[: len(good) // 2]

        def full():
            attempts.append("full")
            return good

        def stored_conf():
            return {"topology.name": "t", "topology.secret": "s" * 64}

        if len(attempts) < 2:
            return [loc.CodeSource("nimbus-a", truncated, stored_conf)]
        return [loc.CodeSource("nimbus-b", full, stored_conf)]

    ready = []
    lz = loc.Localizer(tmp_path, fetch, on_ready=lambda: ready.append(1))
    try:
        def localized():
            lz.request("t-1-1", digest)  # what the supervisor's loop does each round until the code is ready
            assert lz.ready("t-1-1", digest), f"attempts {attempts}, failures {lz.failures}"

        eventually(localized, 10, interval=0.02)
        assert attempts[:2] == ["truncated", "truncated"] and attempts[-1] == "full"
        assert ready
        assert "checksum" in " ".join(lz.failures.values()) or lz.failures == {}
        assert (lz.dir("t-1-1") / "topology.json").read_text() == '{"components": {}}'
        # the stored configuration with the topology secret lands beside the code, for this user only
        stormconf = lz.dir("t-1-1") / "stormconf.json"
        assert json.loads(stormconf.read_text())["topology.secret"] == "s" * 64
        assert stormconf.stat().st_mode & 0o777 == 0o600
    finally:
        lz.close()
