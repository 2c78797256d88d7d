"""The tests' class archive for Spark's JVM (tests.jvm_archive): what names it, when it is used."""

from __future__ import annotations

import fcntl
import os
import threading

import pytest

from tests import jvm_archive

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


@pytest.fixture
def fake_java(tmp_path, monkeypatch):
    """A Java home and Spark jars under tmp_path, and the cache there too."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "lib" / "server").mkdir(parents=True)
    (home / "bin" / "java").write_text("")
    (home / "lib" / "server" / "libjvm.so").write_bytes(b"jvm")
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"core")
    monkeypatch.setattr(jvm_archive.shutil, "which", lambda name: str(home / "bin" / "java"))
    monkeypatch.setattr(jvm_archive, "_spark_jars", lambda: jars)
    monkeypatch.setenv("GALE_JVM_ARCHIVE_DIR", str(tmp_path / "cache"))
    return home, jars


def test_the_key_changes_with_the_java_runtime_and_sparks_jars(fake_java):
    home, jars = fake_java
    key = jvm_archive.archive_key()
    assert key == jvm_archive.archive_key()
    (jars / "extra.jar").write_bytes(b"x")
    with_jar = jvm_archive.archive_key()
    assert with_jar != key
    (home / "lib" / "server" / "libjvm.so").write_bytes(b"a newer jvm")
    assert jvm_archive.archive_key() not in (key, with_jar)


def test_options_name_the_archive_only_when_it_exists(fake_java, tmp_path):
    assert jvm_archive.archive_options() == ""
    path = jvm_archive.archive_path(jvm_archive.archive_key())
    assert path.parent == tmp_path / "cache"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    opts = jvm_archive.archive_options()
    assert opts.startswith(" ") and f"-XX:SharedArchiveFile={path}" in opts and "-Xlog:cds*=off" in opts


def test_no_java_or_no_spark_means_no_key(monkeypatch):
    monkeypatch.setattr(jvm_archive.shutil, "which", lambda name: None)
    assert jvm_archive.archive_key() is None and jvm_archive.archive_options() == ""


def test_a_failed_archiving_run_leaves_no_file_and_the_main_does_not_fail(fake_java, monkeypatch, capsys):
    monkeypatch.setattr(jvm_archive.sys, "executable", "/bin/false")  # the archiving run exits 1
    assert jvm_archive.main() == 0
    assert "run without one" in capsys.readouterr().out
    assert not any(jvm_archive.cache_dir().glob("*.jsa*")), os.listdir(jvm_archive.cache_dir())


def test_the_tests_jvms_use_the_archive_once_it_is_made(fake_java, monkeypatch):
    key = jvm_archive.archive_key()
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", jvm_archive.TEST_JVM_OPTIONS)
    jvm_archive.use_archive(key)
    assert os.environ["JAVA_TOOL_OPTIONS"] == jvm_archive.TEST_JVM_OPTIONS  # none yet
    path = jvm_archive.archive_path(key)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    jvm_archive.use_archive(key)
    assert os.environ["JAVA_TOOL_OPTIONS"] == jvm_archive.TEST_JVM_OPTIONS + jvm_archive.archive_options(key)
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Xmx1g")  # set outside the tests: left as it is
    jvm_archive.use_archive(key)
    assert os.environ["JAVA_TOOL_OPTIONS"] == "-Xmx1g"


def test_a_wait_ends_when_the_archive_being_made_is_there(fake_java, monkeypatch):
    key = jvm_archive.archive_key()
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", jvm_archive.TEST_JVM_OPTIONS)
    path = jvm_archive.archive_path(key)
    path.parent.mkdir(parents=True)
    maker = open(path.parent / ".making", "a")
    fcntl.flock(maker, fcntl.LOCK_EX)  # as make_archive holds it while the JVM runs

    def made():
        path.write_bytes(b"archive")
        maker.close()  # releases the lock

    timer = threading.Timer(0.5, made)
    timer.start()
    try:
        jvm_archive.use_archive(key, wait=True)
    finally:
        timer.join()
    assert "SharedArchiveFile" in os.environ["JAVA_TOOL_OPTIONS"]
