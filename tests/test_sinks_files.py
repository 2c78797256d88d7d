"""The file sink against a real file system: the store contract (tests/sink_contract.py) in JSON
lines and Parquet, what a reader sees while a checkpoint is pending, and an exactly-once word count
through failures (each word's records committed once)."""

from __future__ import annotations

from collections import Counter

import pytest

from gale.topology.sink import SinkError
from gale.worker.local import LocalCluster
from gale.worker.sinks.files import FileSink, FileStore, part_files, read_parts
from gale.worker.sinks.protocol import SinkName
from tests.sink_contract import EXACTLY_ONCE, SinkContract, expected_words, summed, word_count_into
from tests.waiting import eventually


class TestJsonLines(SinkContract):
    topology = "jsonl"
    format = "jsonl"

    @pytest.fixture(autouse=True)
    def _dir(self, tmp_path):
        self.path = tmp_path / "parts"

    def make_store(self, name):
        return FileStore(str(self.path), self.format, name)

    def visible(self):
        return summed(read_parts(self.path))


class TestParquet(TestJsonLines):
    topology = "parquet"
    format = "parquet"


def test_readers_never_see_a_pending_part_and_parts_sort_by_checkpoint(tmp_path):
    name = SinkName("wc", "files", 1, 2)
    store = FileStore(str(tmp_path), "jsonl", name)
    for txid in (9, 10):
        batch = store.new_batch()
        batch.add({"txid": txid})
        store.prepare(name.txn(txid), txid, batch, None)
    assert read_parts(tmp_path) == [] and part_files(tmp_path) == []
    assert sorted(p.name for p in (tmp_path / "_pending").iterdir()) == ["gale:wc:files:1:10.jsonl",
                                                                          "gale:wc:files:1:9.jsonl"]
    store.commit(name.txn(10))
    store.commit(name.txn(9))
    assert [p.name for p in part_files(tmp_path)] == ["part-wc-files-1-000000000009.jsonl",
                                                      "part-wc-files-1-000000000010.jsonl"]
    assert read_parts(tmp_path) == [{"txid": 9}, {"txid": 10}]


def test_a_committed_part_is_never_overwritten(tmp_path):
    name = SinkName("wc", "files", 0, 1)
    store = FileStore(str(tmp_path), "jsonl", name)
    for value in ("old", "new"):
        batch = store.new_batch()
        batch.add(value)
        store.prepare(name.txn(1), 1, batch, None)
        if value == "old":
            store.commit(name.txn(1))
    with pytest.raises(SinkError, match=r"part-wc-files-0-000000000001.jsonl already exists"):
        store.commit(name.txn(1))
    assert read_parts(tmp_path) == ["old"]


def test_an_unwritable_directory_is_named(tmp_path):
    (tmp_path / "file").write_text("x")
    store = FileStore(str(tmp_path / "file" / "parts"), "jsonl", SinkName("wc", "files", 0, 1))
    with pytest.raises(SinkError, match=r"file sink 'files' at .*/file/parts: listing pending parts"):
        store.prepared()


class WordsToFiles(FileSink):
    def records(self, tup):
        return ({"word": tup["word"], "count": tup["count"]},)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_exactly_once_word_count_into_parts(tmp_path, fmt):
    n = 300
    expected = expected_words(n)
    topo = word_count_into(WordsToFiles, {"path": str(tmp_path / "out"), "format": fmt},
                           {**EXACTLY_ONCE, "test.sentences": n}, name=f"files-{fmt}")
    with LocalCluster() as cluster:
        cluster.submit_topology(f"files-{fmt}", {}, topo)

        def exact():
            seen = Counter(r["word"] for r in read_parts(tmp_path / "out"))
            assert dict(seen) == expected  # each (word, count) output committed once: no gaps, no repeats
            counts = {}
            for r in read_parts(tmp_path / "out"):
                counts[r["word"]] = max(counts.get(r["word"], 0), r["count"])
            assert counts == expected

        eventually(exact, timeout=90)
