"""The Beam job: exact ids under TestPipeline, end-to-end runs, determinism, bad input, dry run.

Pipeline runs cost seconds each, so the end-to-end run is shared (module fixture) and the
slow 2-worker multi-processing run happens once.
"""

import json
import logging
import os
import re
import shutil
import socket

import apache_beam as beam
import pytest
import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from text import features, tfrecord, vocab_files, wordpiece
from data_pipelines import beam_options, make_pretrain, pretrain_transforms, sources, workfiles
from data_pipelines.objectives import base, bert
from text import vocab as text_vocab

CLS, SEP = 2, 3
# The conftest's vocabulary: [PAD] [UNK] [CLS] [SEP] [MASK], then these words from id 5.
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", ".", "a",
              "dog", "ran", "far", "away", "and", "then", "it", "slept", "sun", "was", "warm", "bird",
              "sang", "tree", "in", "park", "big", "small", "red", "blue", "day", "night", "##s", "##ed",
              "##ing"]


def token_id(word):
    return TINY_VOCAB.index(word)


def test_vocab_matches_conftest(tiny_vocab):
    assert tiny_vocab == TINY_VOCAB
SPEC_32_5 = features.bert_pretrain_spec(32, 5)


def _read_records(path):
    compression = "GZIP" if path.endswith(".gz") else ""
    return [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type=compression)]


def _unmasked(parsed):
    n = int(parsed["input_mask"].sum())
    ids = [int(x) for x in parsed["input_ids"][:n]]
    for pos, lab, w in zip(parsed["masked_lm_positions"], parsed["masked_lm_ids"], parsed["masked_lm_weights"]):
        if w:
            ids[int(pos)] = int(lab)
    return ids


# ---------------------------------------------------------------------------------------------
# The transform under TestPipeline


def _wordpiece_vocab(tokens):
    return text_vocab.make_vocab(tokens, {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                                    "mask": "[MASK]"}, word_start=lambda t: not t.startswith("##"))


def test_pipeline_stages_exact_ids(tmp_path, tiny_vocab_path):
    texts = {
        "a.txt": "The cat sat .\nA dog ran far away .\n\nthe sun was warm .\na bird sang in the tree .\nit slept .\n",
        "b.txt": "big red dogs ran .\nthen the cat slept on the mat .\n",
    }
    os.makedirs(tmp_path / "in")
    for name, text in texts.items():
        (tmp_path / "in" / name).write_text(text)
    docs_in = [
        ("a.txt:0", ["The cat sat .", "A dog ran far away ."]),
        ("a.txt:1", ["the sun was warm .", "a bird sang in the tree .", "it slept ."]),
        ("b.txt:0", ["big red dogs ran .", "then the cat slept on the mat ."]),
    ]
    opts = bert.BertOptions(max_seq_length=32, max_predictions_per_seq=5)
    seed, dupes, shards = 7, 6, 3

    # Expected: the same plain functions and seeds, outside Beam (one pool: 2 chunks of at
    # most 125 documents, fewer than the 8 chunks of a 1000-document pool).
    tok = wordpiece.graph_module(TINY_VOCAB, lower_case=True)
    tokenized = [(doc_id, tok.tokenize(tf.constant(s)).to_list()) for doc_id, s in docs_in]
    # Hand-checked WordPiece ids: lower-cased, "dogs" -> dog ##s.
    assert tokenized[0][1] == [[5, 6, 7, 10], [11, 12, 13, 14, 15, 10]]
    assert tokenized[2][1][0] == [token_id("big"), token_id("red"), token_id("dog"), token_id("##s"),
                                  token_id("ran"), token_id(".")]
    vocab = _wordpiece_vocab(TINY_VOCAB)
    docs = [base.Doc(doc_id, segments) for doc_id, segments in reversed(tokenized)]
    expected = []
    for d in range(dupes):
        records, _ = pretrain_transforms.pool_instances((d, 0), docs, objective=bert.OBJECTIVE, seed=seed,
                                                  vocab=vocab, options=opts, lengths_of=32, spec=SPEC_32_5)
        for key, record in records:
            expected.append((pretrain_transforms.shard_of(key, shards), (key, record)))
    assert len(expected) >= dupes * 3

    # Hand-checked layout: doc a.txt:0 is one chunk of two sentences; when B is the actual next
    # sentence the (unmasked) instance is exactly [CLS] the cat sat . [SEP] a dog ran far away . [SEP].
    layouts = [(_unmasked(p), list(p["segment_ids"][:13]), int(p["next_sentence_labels"][0]))
               for p in (features.parse_example(SPEC_32_5, rec) for _, (key, rec) in expected
                         if key.split("|")[2] == "a.txt:0")]
    assert ([2, 5, 6, 7, 10, 3, 11, 12, 13, 14, 15, 10, 3], [0] * 6 + [1] * 7, 0) in layouts

    out_dir = str(tmp_path / "shards")
    work_dir = str(tmp_path / "shards" / "_work-test")
    os.makedirs(out_dir)
    options = PipelineOptions([])
    with BeamTestPipeline(runner=beam_options.make_runner(options), options=options) as p:
        read = p | pretrain_transforms.ReadDocuments(
            str(tmp_path / "in" / "*.txt"), objective="bert", tokenizer_kind="wordpiece",
            vocab_path=tiny_vocab_path, vocab_size=vocab.size, lower_case=True, work_dir=work_dir,
            docs_per_chunk=pretrain_transforms.documents_per_chunk(1000))
        assert_that(read.chunks | beam.Map(lambda c: (c[0], c[2])), equal_to([("a.txt#000000", 2), ("b.txt#000000", 1)]),
                    label="Chunks")
        made = read.chunks | pretrain_transforms.CreateInstances(
            objective="bert", vocab=vocab, options=opts, dupe_factor=dupes, seed=seed, num_shards=shards,
            random_document_pool_size=1000, lengths_of=32, work_dir=work_dir)
        flat = made["ranges"] | beam.FlatMap(
            lambda e: [(e[0], entry) for entry in workfiles.read_entries(*e[1][:3])])
        assert_that(flat, equal_to(expected), label="ExactInstances")
        written = made["ranges"] | pretrain_transforms.WriteShards(out_dir, shards, compress=True)
        assert_that(written | beam.Map(lambda s: s.get("shards_written", 0)), equal_to([1] * shards),
                    label="EveryShardWritten")

    # Shards: gzip TFRecords, each sorted by instance key, holding exactly the expected records.
    for s in range(shards):
        path = pretrain_transforms.shard_name(out_dir, s, shards, compress=True)
        with open(path, "rb") as f:
            assert f.read(2) == b"\x1f\x8b"
        want = [rec for _, (key, rec) in sorted((k, v) for k, v in expected if k == s)]
        assert _read_records(path) == want
    assert sorted(f for f in os.listdir(out_dir) if not f.startswith("_work-")) == sorted(
        os.path.basename(pretrain_transforms.shard_name(out_dir, s, shards, True)) for s in range(shards))


def test_pool_file_ranges_round_trip_and_refuse_truncation(tmp_path):
    entries = [(f"{i:016x}|0|d:{i}", bytes([i % 256]) * (i * 37 % 300)) for i in range(500)]
    data = workfiles.encode_entries(entries)
    path = str(tmp_path / "pool.bin")
    with open(path, "wb") as f:
        f.write(b"xx" + data)
    # Small blocks: entries straddle block boundaries.
    assert list(workfiles.read_entries(path, 2, len(data), block=64)) == entries
    with open(path, "wb") as f:
        f.write(b"xx" + data[:-5])
    with pytest.raises(ValueError, match="pool.bin"):
        list(workfiles.read_entries(path, 2, len(data), block=64))


# ---------------------------------------------------------------------------------------------
# End to end


def _argv(corpus, vocab, out, *extra):
    return ["--objective=bert", f"--input={corpus['pattern']}", f"--output_dir={out}", f"--vocab={vocab}",
            "--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=3", "--num_shards=3",
            "--max_line_bytes=200", "--seed=3", "--random_document_pool_size=4", *extra]


def _shard_bytes(out):
    return {f: open(os.path.join(out, f), "rb").read() for f in sorted(os.listdir(out)) if ".tfrecord" in f}


@pytest.fixture(scope="module")
def e2e(tiny_corpus, tiny_vocab_path, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("e2e") / "out")
    stats = make_pretrain.run(_argv(tiny_corpus, tiny_vocab_path, out, "--direct_num_workers=1"))
    return {"out": out, "stats": stats, "bytes": _shard_bytes(out),
            "mtimes": {f: os.stat(os.path.join(out, f)).st_mtime_ns for f in os.listdir(out)}}


def test_output_directory_contents(e2e, tiny_vocab_path):
    out = e2e["out"]
    shards = [f"train-{s:05d}-of-00003.tfrecord" for s in range(3)]
    assert sorted(os.listdir(out)) == sorted(shards + ["info.json", "stats.json", "COMPLETED"])
    # COMPLETED is written last.
    assert e2e["mtimes"]["COMPLETED"] == max(e2e["mtimes"].values())

    info = json.load(open(os.path.join(out, "info.json")))
    assert info["objective"] == "bert" and info["tokenizer"] == "wordpiece" and info["lower_case"] is True
    assert info["vocab"] == tiny_vocab_path and info["vocab_size"] == len(TINY_VOCAB)
    assert info["vocab_fingerprint"] == vocab_files.vocab_fingerprint(tiny_vocab_path)
    assert info["feature_spec"] == features.spec_to_json(SPEC_32_5)
    assert info["max_seq_length"] == 32 and info["max_predictions_per_seq"] == 5
    assert info["arguments"]["dupe_factor"] == 3 and info["format_version"] == features.FORMAT_VERSION

    records = {f: _read_records(os.path.join(out, f)) for f in shards}
    assert info["instances"]["per_shard"] == [len(records[f]) for f in shards]
    total = sum(len(r) for r in records.values())
    assert info["instances"]["total"] == total == e2e["stats"]["instances"] > 0

    cat_run = 0
    for recs in records.values():
        for rec in recs:
            parsed = features.parse_example(SPEC_32_5, rec)
            ids = _unmasked(parsed)
            assert ids[0] == CLS and ids[-1] == SEP and ids.count(SEP) == 2 and len(ids) <= 32
            cat_run = max(cat_run, ids.count(token_id("cat")))
    # The 40-token sentence (longer than max_seq_length) was truncated into valid instances.
    assert cat_run >= 20


def test_stats_count_bad_input(e2e):
    stats = json.load(open(os.path.join(e2e["out"], "stats.json")))
    assert stats["files_read"] == 3
    assert stats["files_skipped"] == {"empty_file": 1}
    assert stats["lines_skipped"] == {"invalid_utf8": 2, "line_too_long": 1, "nul_byte": 1}
    assert stats["documents_dropped"] == {"empty_document": 1}
    assert stats["documents_read"] == 11
    assert sum(stats["sequence_length_histogram"].values()) == stats["instances"]
    assert sum(stats["instances_per_shard"]) == stats["instances"]
    assert 0.1 < stats["masked_token_rate"] < 0.2
    assert 0.4 < stats["nsp_random_fraction"] <= 1.0


def test_trainer_reader_accepts_output(e2e, tiny_vocab_path):
    from garden import data

    d = data.open_data_dir(e2e["out"], objective="bert", vocab_fingerprint=vocab_files.vocab_fingerprint(
        tiny_vocab_path), vocab_size=len(TINY_VOCAB), max_seq_length=32)
    assert len(d.files) == 3


def test_deterministic_across_reruns_and_worker_counts(e2e, tiny_corpus, tiny_vocab_path, tmp_path):
    # Same seed again over a completed directory (so --overwrite) gives the same bytes. On a
    # copy: e2e["out"] is shared by the module's later tests, which must see the fixture's run.
    again = str(tmp_path / "again")
    shutil.copytree(e2e["out"], again)
    make_pretrain.run(_argv(tiny_corpus, tiny_vocab_path, again, "--overwrite"))
    assert _shard_bytes(again) == e2e["bytes"]
    assert os.stat(os.path.join(again, "COMPLETED")).st_mtime_ns > e2e["mtimes"]["COMPLETED"]  # rewritten
    # Two worker processes: byte-identical shards.
    out2 = str(tmp_path / "w2")
    make_pretrain.run(_argv(tiny_corpus, tiny_vocab_path, out2, "--direct_num_workers=2",
                            "--direct_running_mode=multi_processing"))
    assert _shard_bytes(out2) == e2e["bytes"]
    assert json.load(open(os.path.join(out2, "stats.json")))["instances"] == e2e["stats"]["instances"]


def test_in_graph_tokenizer_writes_the_same_shards(e2e, tiny_corpus, tiny_vocab_path, tmp_path):
    """--in_graph_tokenizer (the graph module in the workers) and the default
    (text.wordpiece, no TensorFlow) give the same ids, so the same bytes."""
    out = str(tmp_path / "in_graph")
    make_pretrain.run(_argv(tiny_corpus, tiny_vocab_path, out, "--in_graph_tokenizer"))
    assert _shard_bytes(out) == e2e["bytes"]
    assert json.load(open(os.path.join(out, "info.json")))["arguments"]["in_graph_tokenizer"] is True


def test_refuses_completed_directory_without_overwrite(e2e, tiny_corpus, tiny_vocab_path):
    with pytest.raises(SystemExit, match="COMPLETED.*--overwrite"):
        make_pretrain.run(_argv(tiny_corpus, tiny_vocab_path, e2e["out"]))
    assert os.path.exists(os.path.join(e2e["out"], "COMPLETED"))


def test_failed_run_leaves_no_completed(e2e, tiny_corpus, tiny_vocab_path, tmp_path, monkeypatch):
    out = str(tmp_path / "copy")
    shutil.copytree(e2e["out"], out)

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(pretrain_transforms.WriteShardFn, "process", broken)
    with pytest.raises(Exception, match="disk full"):
        make_pretrain.run(_argv(tiny_corpus, tiny_vocab_path, out, "--overwrite"))
    assert not os.path.exists(os.path.join(out, "COMPLETED"))
    assert not any(f.endswith(".tfrecord") for f in os.listdir(out)), "stale shards must be removed"


def test_clear_errors(tmp_path, tiny_corpus, tiny_vocab_path, capsys):
    with pytest.raises(SystemExit, match="matches no files"):
        make_pretrain.run(_argv({"pattern": str(tmp_path / "nothing-*.txt")}, tiny_vocab_path, str(tmp_path / "o")))
    # A directory matches itself; it must be refused at launch, not fail inside a worker.
    folder = tmp_path / "corpus_dir"
    folder.mkdir()
    (folder / "a.txt").write_text("the cat sat .\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"names a directory .*corpus_dir/\*\.txt"):
        make_pretrain.run(_argv({"pattern": str(folder)}, tiny_vocab_path, str(tmp_path / "o")))
    assert not os.path.exists(tmp_path / "o" / "COMPLETED")
    missing = str(tmp_path / "missing_vocab.txt")
    with pytest.raises(vocab_files.VocabularyError, match="missing_vocab.txt"):
        make_pretrain.run(_argv(tiny_corpus, missing, str(tmp_path / "o")))
    with pytest.raises(SystemExit, match="^2$"):
        make_pretrain.run(["--objective=albart"] + _argv(tiny_corpus, tiny_vocab_path, str(tmp_path / "o"))[1:])
    assert "invalid choice: 'albart'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="^2$"):  # the objective's own checks, as a usage error
        make_pretrain.run(_argv(tiny_corpus, tiny_vocab_path, str(tmp_path / "o"), "--max_seq_length=4"))
    assert "max_seq_length must be >= 5" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="^2$"):  # a typo is neither ours nor Beam's: refused, not ignored
        make_pretrain.run(_argv(tiny_corpus, tiny_vocab_path, str(tmp_path / "o"), "--dupe_facter=2"))
    assert "--dupe_facter" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "o" / "COMPLETED")


def test_boolean_flags():
    args, rest = make_pretrain.parse_args(["--objective=bert", "--input=x", "--output_dir=o", "--vocab=v",
                                           "--no-lower_case", "--whole_word_mask", "--runner=X"])
    assert args.do_lower_case is False and args.whole_word_mask is True and rest == ["--runner=X"]
    args, _ = make_pretrain.parse_args(["--objective=bert", "--input=x", "--output_dir=o", "--vocab=v",
                                        "--lower_case", "--compress"])
    assert args.do_lower_case is True and args.compress is True
    args, _ = make_pretrain.parse_args(["--objective=bert", "--input=x", "--output_dir=o", "--vocab=v"])
    assert args.do_lower_case is True and args.compress is False


# ---------------------------------------------------------------------------------------------
# Dataflow


def test_dataflow_dry_run_builds_job_offline(tmp_path, tiny_vocab_path, monkeypatch):
    def no_network(*a, **k):
        raise AssertionError(f"network access during dry run: {a}")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    out = str(tmp_path / "dry")
    result = make_pretrain.run([
        "--objective=bert", "--input=gs://my-bucket/corpus/*.txt", f"--output_dir={out}",
        f"--vocab={tiny_vocab_path}", "--runner=DataflowRunner", "--dry_run=True", "--project=my-project",
        "--region=us-central1", "--temp_location=gs://my-bucket/tmp"])
    assert result["dry_run"] == os.path.join(out, "dataflow_job.json")
    job = json.load(open(result["dry_run"]))
    assert job["job"]["type"] == "JOB_TYPE_BATCH" and job["job"]["name"].startswith("beamapp-")
    names = {t["uniqueName"] for t in job["pipeline"]["components"]["transforms"].values()}
    for stage in ("ReadDocuments", "CreateInstances", "WriteShards", "SumStats"):
        assert stage in names
    assert not os.path.exists(os.path.join(out, "COMPLETED"))


def test_pool_serializes_instance_dicts_a_bounded_number_at_a_time(monkeypatch):
    """Objectives that yield one feature dict per instance (here BERT with whole-word masking)
    have them serialized at most pretrain_transforms._SERIALIZE_EVERY at a time, not a whole pool's
    at once (as Python lists they take ~8x their bytes), with the same
    records as one call over all of them."""
    import numpy as np

    vocab = _wordpiece_vocab(TINY_VOCAB)
    rng = np.random.default_rng(0)
    docs = [base.Doc(f"d{i}", [rng.integers(5, len(TINY_VOCAB), 8).tolist() for _ in range(12)])
            for i in range(150)]
    opts = bert.BertOptions(max_seq_length=32, max_predictions_per_seq=5, whole_word_mask=True)
    real = features.serialize_examples
    sizes = []

    def counting(spec, instances):
        sizes.append(len(instances))
        return real(spec, instances)

    def run():
        records, _ = pretrain_transforms.pool_instances((0, 0), docs, objective=bert.OBJECTIVE, seed=3,
                                                  vocab=vocab, options=opts, lengths_of=32, spec=SPEC_32_5)
        return records

    monkeypatch.setattr(features, "serialize_examples", counting)
    bounded = run()
    assert len(bounded) > 2 * pretrain_transforms._SERIALIZE_EVERY  # the pool is big enough to split
    assert max(sizes) <= pretrain_transforms._SERIALIZE_EVERY and sum(sizes) == len(bounded)
    sizes.clear()
    monkeypatch.setattr(pretrain_transforms, "_SERIALIZE_EVERY", 10 ** 9)
    whole = run()
    assert sizes[0] == len(whole)  # one call over the whole pool
    assert bounded == whole


@pytest.mark.parametrize("compress", [False, True])
def test_tfrecords_written_without_tensorflow_read_back_with_tf_data(tmp_path, compress, monkeypatch):
    records = [b"", b"x", bytes(range(256)) * 40] + [os.urandom(int(n)) for n in (3, 17, 1000, 70000)]
    monkeypatch.setattr(tfrecord, "_WRITE_BLOCK", 1000)  # several blocks per file
    path = str(tmp_path / ("r.tfrecord.gz" if compress else "r.tfrecord"))
    assert tfrecord.write_tfrecords(path, iter(records), compress) == len(records)
    assert _read_records(path) == records
    if not compress:  # byte for byte what TensorFlow's own writer writes
        theirs = str(tmp_path / "tf.tfrecord")
        with tf.io.TFRecordWriter(theirs) as w:
            for r in records:
                w.write(r)
        assert open(path, "rb").read() == open(theirs, "rb").read()


def test_a_run_never_loads_tensorflow(tiny_corpus, tiny_vocab_path, tmp_path):
    """Reading, wordpiece tokenizing (text.wordpiece), making instances and writing
    shards need no TensorFlow: each Beam worker saves its import (~4 CPU-s, 0.7 GB)."""
    import subprocess
    import sys

    out = str(tmp_path / "out")
    script = (
        "import json, sys\n"
        "from data_pipelines import make_pretrain\n"
        "stats = make_pretrain.run(json.loads(sys.argv[1]))\n"
        "assert stats['instances'] > 0\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tensorflow_text', 'keras'))\n"
        "assert not loaded, loaded[:5]\n")
    argv = _argv(tiny_corpus, tiny_vocab_path, out, "--direct_num_workers=1", "--direct_running_mode=in_memory")
    done = subprocess.run([sys.executable, "-c", script, json.dumps(argv)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(_read_records(pretrain_transforms.shard_name(out, 0, 3, False))) > 0


# ---------------------------------------------------------------------------------------------
# What a long or messy run tells its user (issue 13, item 9)


def _messages(caplog, text):
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_skipped_lines_are_named_for_the_first_few_then_counted(tmp_path, tiny_vocab_path, caplog):
    """300 invalid UTF-8 lines and 40 NUL lines once gave 340 warnings, one per line: now the
    first SHOWN of each reason are named (file and line), then one line per reason says the rest
    are counted, and the end of the run gives the count per reason (stats.json keeps them)."""
    good = "".join(f"the cat sat on the mat .\na dog ran far away .\n\n" for _ in range(30)).encode()
    corpus = tmp_path / "in" / "broken.txt"
    corpus.parent.mkdir()
    corpus.write_bytes(good + b"the \xff cat .\n" * 300 + b"\nthe \x00 dog .\n" * 40 + b"\n" + good)
    caplog.set_level(logging.INFO)
    out = str(tmp_path / "out")
    stats = make_pretrain.run(_argv({"pattern": str(corpus)}, tiny_vocab_path, out, "--direct_num_workers=1"))
    assert stats["lines_skipped"] == {"invalid_utf8": 300, "nul_byte": 40}
    shown = sources.SkipLog.SHOWN
    named = _messages(caplog, "skipping line")
    assert len(named) == 2 * shown, named[:12]
    assert [m for m in named if m.endswith("invalid_utf8")] == [
        f"skipping line {91 + k} of {corpus}: invalid_utf8" for k in range(shown)]  # after 90 good lines
    assert len([m for m in named if m.endswith("nul_byte")]) == shown
    assert len(_messages(caplog, "further invalid_utf8 lines are counted")) == 1
    assert len(_messages(caplog, "further nul_byte lines are counted")) == 1
    assert _messages(caplog, "skipped lines per reason:") == [
        f"skipped lines per reason: invalid_utf8 300, nul_byte 40 (the first {shown} of each reason per "
        f"worker are named above; stats.json keeps the counts)"]


def test_progress_lines_while_the_pipeline_runs(e2e, tiny_corpus, tiny_vocab_path, tmp_path, caplog):
    """The job used to be silent from "running" to "wrote": now a line every --progress_seconds
    counts the chunks tokenized, pools made and shards written so far, read from the work files
    (so the shards are the same bytes)."""
    caplog.set_level(logging.INFO)
    out = str(tmp_path / "progress")
    make_pretrain.run(_argv(tiny_corpus, tiny_vocab_path, out, "--direct_num_workers=1", "--progress_seconds=0.02"))
    assert _shard_bytes(out) == e2e["bytes"]
    lines = _messages(caplog, "progress after")
    assert lines, "no progress line"
    counts = [tuple(int(n) for n in re.findall(r"(\d+) (?:chunks|pools|of 3 shards)", line)) for line in lines]
    assert all(len(c) == 3 for c in counts), lines[:3]
    assert max(c[0] for c in counts) > 0, lines  # the tokenized chunks were seen
    # Each line ends with the reading stage's ETA, estimated from the input's size.
    assert all(re.search(r" \| reading (\d+% of [\d.]+ [kM]B, ETA (\d+:\d\d:\d\d|\?)|[\d.]+ [kM]B: done"
                         r"( \(estimated\))?)$", line) for line in lines), lines[:3]
    # Work files only appear while the pipeline runs: no count ever goes down.
    assert all(a[i] <= b[i] for a, b in zip(counts, counts[1:]) for i in range(3)), lines
    # Off: not one line.
    caplog.clear()
    make_pretrain.run(_argv(tiny_corpus, tiny_vocab_path, str(tmp_path / "quiet"), "--direct_num_workers=1",
                            "--progress_seconds=0"))
    assert not _messages(caplog, "progress after")


def test_cased_vocabulary_with_lower_casing_on_gets_one_warning(tiny_corpus, tmp_path, caplog):
    """A vocabulary with capitals used with --lower_case (the default) makes data whose
    capitalised pieces never occur: one warning names the vocabulary and the flag to pass; the
    run goes on (ALBERT-style lower-casing before a cased model can be meant)."""
    cased = tmp_path / "cased.txt"
    cased.write_text("".join(t + "\n" for t in TINY_VOCAB + ["The", "Cat", "Dog", "##S"]), encoding="utf-8")
    caplog.set_level(logging.INFO)
    stats = make_pretrain.run(_argv(tiny_corpus, str(cased), str(tmp_path / "out"), "--direct_num_workers=1"))
    assert stats["instances"] > 0
    warned = _messages(caplog, "is a cased vocabulary")
    assert len(warned) == 1
    # Pieces with letters: the 31 of the tiny vocabulary ("." has none) and the 4 with capitals.
    assert warned[0].startswith(f"{cased} is a cased vocabulary (4 of 35 pieces hold an upper-case letter, "
                                f"e.g. 'The', 'Cat', 'Dog', '##S')") and "--no-lower_case" in warned[0]
    # Lower-casing off with the same vocabulary: nothing to say.
    caplog.clear()
    make_pretrain.run(_argv(tiny_corpus, str(cased), str(tmp_path / "cased_run"), "--direct_num_workers=1",
                            "--no-lower_case"))
    assert not _messages(caplog, "cased vocabulary") and not _messages(caplog, "looks uncased")
