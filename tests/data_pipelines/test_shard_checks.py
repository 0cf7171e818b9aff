"""The trainer's check of a pipeline directory's shards (garden/data.listed_shards) and what it
builds on: shard sizes recorded by data_pipelines/output.complete (info.json ``file_sizes``)
and the one TFRecord frame walker (text/tfrecord.frame_lengths), used only for
directories written before sizes were recorded and to say where a shard breaks."""

from __future__ import annotations

import json
import os

import pytest

from text import features, tfrecord
from data_pipelines import output
from garden import data

RECORDS = [b"a" * 5, b"", b"bc" * 40, b"d" * 7]  # frames of 21, 16, 96 and 23 bytes


def _shards(tmp_path, count=2):
    """`count` uncompressed shards of RECORDS, completed by output.complete; (dir, info)."""
    files = [str(tmp_path / f"train-{i:05d}-of-{count:05d}.tfrecord") for i in range(count)]
    for f in files:
        tfrecord.write_tfrecords(f, RECORDS, compress=False)
    info = {"files": [os.path.basename(f) for f in files],
            "instances": {"total": count * len(RECORDS), "per_shard": [len(RECORDS)] * count}}
    output.complete(str(tmp_path), info, files, count * len(RECORDS))
    with open(tmp_path / "info.json") as f:
        return tmp_path, json.load(f)


def test_frame_lengths_walks_the_records_the_writer_wrote(tmp_path):
    path = str(tmp_path / "x.tfrecord")
    tfrecord.write_tfrecords(path, RECORDS, compress=False)
    assert list(tfrecord.frame_lengths(path)) == [len(r) for r in RECORDS]
    assert os.path.getsize(path) == sum(len(r) + 16 for r in RECORDS)


@pytest.mark.parametrize("cut,record,offset", [(1, 3, 133), (30, 2, 37), (150, 0, 0)])
def test_frame_lengths_names_the_record_a_truncated_file_ends_in(tmp_path, cut, record, offset):
    path = str(tmp_path / "x.tfrecord")
    tfrecord.write_tfrecords(path, RECORDS, compress=False)
    size = os.path.getsize(path) - cut  # 156 bytes in all: frames start at 0, 21, 37, 133
    os.truncate(path, size)
    with pytest.raises(tfrecord.FramingError, match=f"ends inside record {record} .* byte {offset}"):
        list(tfrecord.frame_lengths(path))


def test_complete_records_each_shard_size(tmp_path):
    data_dir, info = _shards(tmp_path)
    assert info["file_sizes"] == {n: os.path.getsize(data_dir / n) for n in info["files"]}
    assert set(info["file_sizes"].values()) == {156}


def test_recorded_sizes_are_checked_without_walking_the_frames(tmp_path, monkeypatch):
    data_dir, info = _shards(tmp_path)
    walked = []
    real = tfrecord.frame_lengths
    monkeypatch.setattr(tfrecord, "frame_lengths", lambda p: walked.append(p) or real(p))
    assert data.listed_shards(str(data_dir), info) == [str(data_dir / n) for n in info["files"]]
    assert walked == []
    del info["file_sizes"]  # a directory written before sizes were recorded: walked
    data.listed_shards(str(data_dir), info)
    assert walked == [str(data_dir / n) for n in info["files"]]


@pytest.mark.parametrize("with_sizes", [True, False])
def test_a_truncated_shard_is_named_with_its_partial_record(tmp_path, with_sizes):
    data_dir, info = _shards(tmp_path)
    if not with_sizes:
        del info["file_sizes"]
    shard = data_dir / info["files"][1]
    os.truncate(shard, 140)  # inside the fourth frame (bytes 133-155)
    with pytest.raises(data.DataDirError,
                       match=f"shard {shard} is truncated or corrupt .*3 whole records, a partial "
                             f"record at byte 133; info.json records 4"):
        data.listed_shards(str(data_dir), info)


def test_a_shard_of_another_size_but_whole_frames_is_refused_by_size(tmp_path):
    data_dir, info = _shards(tmp_path)
    shard = data_dir / info["files"][0]
    tfrecord.write_tfrecords(str(shard), RECORDS[:3], compress=False)  # a whole other file
    with pytest.raises(data.DataDirError, match=f"shard {shard} is truncated or corrupt "
                                                f"\\(3 whole records; info.json records 4\\)"):
        data.listed_shards(str(data_dir), info)
    info["instances"]["per_shard"] = None  # no counts to compare: the size still tells
    with pytest.raises(data.DataDirError, match=f"shard {shard} has 133 bytes, info.json records 156"):
        data.listed_shards(str(data_dir), info)


@pytest.mark.parametrize("with_sizes", [True, False])
def test_a_missing_shard_is_named(tmp_path, with_sizes):
    data_dir, info = _shards(tmp_path, count=3)
    if not with_sizes:
        del info["file_sizes"]
    os.remove(data_dir / info["files"][2])
    with pytest.raises(data.DataDirError, match=f"lacks 1 of the 3 shards its info.json lists: "
                                                f"{info['files'][2]}"):
        data.listed_shards(str(data_dir), info)


def test_a_directory_smaller_than_one_batch_is_announced_once(tmp_path, capsys):
    data_dir, info = _shards(tmp_path)  # 8 instances
    ddir = data.DataDir(path=str(data_dir), info=info, spec=features.classification_spec(8),
                        files=data.listed_shards(str(data_dir), info))
    data.record_dataset(ddir, batch_size=16, seed=0)
    data.record_dataset(ddir, batch_size=16, seed=0)  # a second input pipeline: no second line
    out = capsys.readouterr().out
    assert out.count(f"{data_dir} holds 8 instances, fewer than one batch of 16") == 1, out
    data.record_dataset(data.DataDir(ddir.path, info, ddir.spec, ddir.files), batch_size=8, seed=0)
    data.record_dataset(ddir, batch_size=32, seed=0, repeat=False)  # evaluation: read once
    assert "fewer than one batch" not in capsys.readouterr().out
