"""The compiled hot path (``gale.compiled``): which build a process runs, and that both agree.

``make test`` runs the whole suite on the compiled build (``GALE_REQUIRE_COMPILED=1``) and the
tests that need no cluster again on the Python source (``GALE_PURE_PYTHON=1``).
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gale import compiled

ROOT = Path(__file__).resolve().parent.parent
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def run_python(code_or_module: list[str], env_extra: dict[str, str], cwd: Path = ROOT) -> str:
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
    env.update(env_extra)
    out = subprocess.run([sys.executable, *code_or_module], capture_output=True, text=True, env=env,
                         cwd=cwd, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_this_process_runs_the_build_it_was_asked_for():
    got = compiled.status()
    assert set(got) == set(compiled.MODULES)
    if compiled.pure_requested():
        assert not any(got.values()), got
    elif os.environ.get("GALE_REQUIRE_COMPILED") == "1":  # make test: the build must have happened
        assert all(got.values()), f"not compiled: {[m for m, c in got.items() if not c]}"
    else:
        assert compiled.hot_path() in ("compiled", "python"), got


def test_gale_pure_python_runs_every_hot_module_from_its_source():
    out = run_python(["-c", "import json, gale.compiled as c; print(json.dumps(c.status()))"],
                     {compiled.PURE_ENV: "1"})
    got = json.loads(out)
    assert got == {m: False for m in compiled.MODULES}


def _package(tmp_path: Path, *, built_is_newer: bool) -> Path:
    """``pkgx/mod.py`` (``X = 1``) beside a ``mod`` extension file that is not a loadable module:
    importing the extension fails, so an import that succeeds came from the source."""
    pkg = tmp_path / "pkgx"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    source, built = pkg / "mod.py", pkg / f"mod{SUFFIX}"
    source.write_text("X = 1\n")
    built.write_bytes(b"not an ELF file")
    older, newer = (source, built) if built_is_newer else (built, source)
    os.utime(older, (1_000_000, 1_000_000))
    os.utime(newer, (2_000_000, 2_000_000))
    return pkg


IMPORT_WITH_FINDER = textwrap.dedent(
    """
    import sys, warnings
    from gale.compiled import _SourceFirst
    sys.meta_path.insert(0, _SourceFirst(pure=PURE, modules=("pkgx.mod",)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import pkgx.mod
            print("source", pkgx.mod.X, len(caught))
        except ImportError as exc:
            print("extension", type(exc).__name__)
    """
)


@pytest.mark.parametrize(
    "built_is_newer, pure, expected",
    [
        (True, False, "extension ImportError"),  # the normal import: the extension module
        (False, False, "extension ImportError"),  # mtimes are checkout_verdict's business, not the finder's
        (True, True, "source 1 0"),  # GALE_PURE_PYTHON (or a stale checkout): the source, whatever the build
    ],
)
def test_the_finder_runs_the_source_when_python_is_asked_for(tmp_path, built_is_newer, pure, expected):
    _package(tmp_path, built_is_newer=built_is_newer)
    code = IMPORT_WITH_FINDER.replace("PURE", str(pure))
    out = run_python(["-c", code], {"PYTHONPATH": str(tmp_path)}, cwd=tmp_path)
    assert out.split("\n")[0] == expected


def test_a_checkouts_builds_are_read_by_its_package_folders(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools.package-dir]\n"gx" = "core"\n"gx.w" = "work"\n')
    for folder, leaf, built, source_time in [("core/t", "a", True, 1), ("work/r", "b", True, 3), ("work", "c", False, 1)]:
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / f"{leaf}.py").write_text("")
        os.utime(tmp_path / folder / f"{leaf}.py", (source_time * 1_000_000,) * 2)
        if built:
            (tmp_path / folder / f"{leaf}{SUFFIX}").write_bytes(b"")
            os.utime(tmp_path / folder / f"{leaf}{SUFFIX}", (2_000_000, 2_000_000))
    assert compiled.checkout_builds(str(tmp_path), ("gx.t.a", "gx.w.r.b", "gx.w.c")) == {
        "gx.t.a": "current", "gx.w.r.b": "stale", "gx.w.c": "missing"}


def test_one_stale_or_missing_build_runs_every_hot_module_as_python():
    """A build older than its source never runs instead of it, and the compiled modules import each
    other's C types: a compiled ``delivery`` beside an ``outbox`` run from its edited source failed at
    its import ("TupleSender size changed"). So one stale or missing module runs them all as Python,
    with a warning naming what is off; none built at all (no C compiler) needs no warning."""
    pure, warning = compiled.checkout_verdict({"a": "current", "b": "stale", "c": "missing"})
    assert pure and "stale or missing for b, c" in warning and "make deps" in warning
    pure, warning = compiled.checkout_verdict({"a": "stale", "b": "stale"})  # every source edited since
    assert pure and "stale or missing for a, b:" in warning
    assert compiled.checkout_verdict({"a": "stale", "b": "missing"})[0]
    assert compiled.checkout_verdict({"a": "missing", "b": "missing"}) == (True, None)
    assert compiled.checkout_verdict({"a": "current", "b": "current"}) == (False, None)


def test_the_staleness_rule_applies_in_a_checkout_only():
    # the suite runs from the repository, or against an installed wheel (tests/wheel_check.py)
    from_checkout = ROOT in Path(compiled.__file__).resolve().parents
    assert compiled.in_checkout() is from_checkout
    assert compiled._finder is not None
    if from_checkout and not compiled.pure_requested():  # this checkout's builds decided
        assert compiled._finder.pure is compiled.checkout_verdict(compiled.checkout_builds(str(ROOT)))[0]
    # this checkout's own build is whole (make test builds it first): the compiled pass runs it
    if from_checkout and os.environ.get("GALE_REQUIRE_COMPILED") == "1" and not compiled.pure_requested():
        assert not compiled._finder.pure


def test_a_word_count_is_the_same_in_both_builds():
    """Counts, acked messages, lineage ids and the executed/acked statistics agree between the
    compiled build and the source (the lineage ids are hashed on the emit path, in C when compiled)."""
    runs = {}
    for name, env in (("default", {}), ("python", {compiled.PURE_ENV: "1"})):
        runs[name] = json.loads(run_python(["-m", "tests.compiled_probe", "300"], env).strip().splitlines()[-1])
    assert runs["python"]["hot_path"] == "python"
    if os.environ.get("GALE_REQUIRE_COMPILED") == "1":
        assert runs["default"]["hot_path"] == "compiled"
    default, python = runs["default"], runs["python"]
    assert default["acked"] == python["acked"] == list(range(300))
    assert sum(default["counts"].values()) == 300 * 6
    for key in ("counts", "lineages", "executed", "acked_by"):
        assert default[key] == python[key], key
    assert len(set(default["lineages"])) == 300 * 6  # every word tuple has its own lineage id


_INT64 = st.one_of(st.integers(-(2**63), 2**64 - 1), st.sampled_from([0, -1, -2, 2**61 - 1, 2**61, 2**63, 2**64 - 1]))


@settings(max_examples=2000, deadline=None)
@given(parent=_INT64, salt=_INT64, ordinal=st.integers(0, 2**31))
def test_the_lineage_of_an_anchored_emit_is_the_tuple_hash_in_either_build(parent, salt, ordinal):
    """The compiled collector hashes ``(parent, salt, ordinal)`` in C, without the tuple; it must
    give ``hash`` of the tuple (lineage.child), which the Python build and other workers compute."""
    from gale.worker.runtime import collector, lineage

    assert collector.child_lineage(parent, salt, ordinal) == lineage.child(parent, salt, ordinal)
    assert collector.child_lineage(parent, salt, ordinal) == hash((parent, salt, ordinal))


def test_the_compiled_collector_hashes_lineage_in_c_when_its_check_passes():
    from gale.worker.runtime import collector

    assert collector._hash3_agrees() == compiled.status()["gale.worker.runtime.collector"]


def test_a_one_tree_message_id_in_slots_reads_and_travels_as_the_dict():
    """``new_tracked`` keeps ``{root: edge}`` in two slots; ``message_id`` shows it as the dict,
    setting a dict replaces it, and the wire encoder and grouped decoder carry it unchanged."""
    import msgpack

    from gale.topology.tuple import Fields, new_tracked, new_tuple
    from gale.worker.sender import encode_tuple
    from gale.worker.wire import _tuples

    fields = Fields(["word"], "split:default")
    t = new_tracked(["cow"], fields, 5, 2**64 - 3, 2**63 + 7, -42)
    assert t._mid is None and t.message_id == {2**64 - 3: 2**63 + 7}
    assert t.message_id is t.message_id  # built once
    body = msgpack.unpackb(encode_tuple(msgpack.packb, t))
    assert body == [["cow"], -42, 2**64 - 3, 2**63 + 7]
    (back,) = _tuples([body], fields, 1, 5)
    assert back.message_id == {2**64 - 3: 2**63 + 7} and back.lineage == -42 and back.values == ["cow"]
    t.message_id = {1: 2, 3: 4}  # a tuple in two trees: the dict form
    assert t._root is None and t.message_id == {1: 2, 3: 4}
    assert msgpack.unpackb(encode_tuple(msgpack.packb, t))[2:] == [1, 2, 3, 4]
    assert new_tuple(["x"], fields, 5, None).message_id is None


def test_the_makefile_rebuilds_when_any_compiled_module_changes():
    """``make``'s ``.gale-compiled`` rule lists the sources it watches (``HOT_SOURCES``) apart from
    ``gale.compiled.MODULES``: every module's ``.py`` (and ``.pxd``) must be among them."""
    import fnmatch
    import re

    folders = compiled.package_folders(str(ROOT))
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    hot = re.search(r"^HOT_SOURCES := (.*)$", text, re.M).group(1)
    patterns = re.findall(r"[\w/.*-]+\.(?:py|pxd)", hot)
    for module in compiled.MODULES:
        source = compiled.source_of(module, folders)
        for suffix in (".py", ".pxd"):
            if suffix == ".py" or (ROOT / (source + suffix)).exists():
                assert any(fnmatch.fnmatch(source + suffix, p) for p in patterns), (source + suffix, patterns)


#: a C integer turned into a Python int only to be compared or combined with a literal: Cython reads
#: an integer literal past C ``int``'s range (``0xFFFFFFFF``) as a Python int, so ``v <= 0xFFFFFFFF``
#: on an ``unsigned long long`` boxes ``v`` at every call (it did in msgpack's width test, once per id)
_BOXED = re.compile(r"(__pyx_t_\d+) = __Pyx_Py(?:Long|Int)_From_\w+\(")
_WITH_LITERAL = r"(?:__Pyx_PyObject_CompareBool\w*|PyNumber_\w+|__Pyx_PyInt_\w+ObjC)\({t}, __pyx_mstate_global->__pyx_int_"


def test_no_compiled_module_boxes_a_c_integer_to_compare_it_with_a_literal():
    generated = sorted((ROOT / "build" / "cython-c").rglob("*.c"))
    if not generated:
        pytest.skip("no generated C here (the hot path was not built from this checkout)")
    names = {m.rsplit(".", 1)[1] + ".c" for m in compiled.MODULES}
    found = []
    for path in generated:
        if path.name not in names:
            continue
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            m = _BOXED.search(line)
            if m and any(re.search(_WITH_LITERAL.format(t=m.group(1)), nxt) for nxt in lines[i + 1:i + 4]):
                source = next((x for x in reversed(lines[:i]) if x.lstrip().startswith('/* "gale/')), "?")
                found.append(f"{path.name}:{i + 1} ({source.strip()})")
    assert found == []
