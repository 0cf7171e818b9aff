"""The TFRecord schema helpers: our Example encoder writes exactly protobuf's deterministic bytes."""

import numpy as np
import pytest
import tensorflow as tf

from text import features


def _proto_bytes(spec, values):
    feature = {}
    for name, f in spec.items():
        vals = list(values[name]) + [0] * (f.length - len(values[name]))
        if f.dtype == "int64":
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in vals]))
        else:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(v) for v in vals]))
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)


def test_encoder_matches_protobuf_deterministic_serialisation():
    rng = np.random.default_rng(0)
    spec = {**features.bert_pretrain_spec(64, 10), "zz_big": features.Feature("int64", 7),
            "a_wide": features.Feature("int64", 300), "perm": features.Feature("float32", 40)}
    for trial in range(50):
        values = {}
        for name, f in spec.items():
            n = int(rng.integers(0, f.length + 1))
            if f.dtype == "float32":
                values[name] = rng.normal(size=n).astype(np.float32).tolist()
            elif name == "zz_big":  # every varint width, negatives (10 bytes) and the extremes
                values[name] = [0, 127, 128, 2 ** 35 + 3, -1, -(2 ** 63), 2 ** 63 - 1][:n]
            else:
                values[name] = rng.integers(0, [2, 200, 70000][trial % 3], size=n).tolist()
        got = features.serialize_example(spec, values)
        assert got == _proto_bytes(spec, values)
        parsed = features.parse_example(spec, got)
        assert list(parsed["zz_big"][:len(values["zz_big"])]) == values["zz_big"]


def test_encoder_refuses_bad_instances():
    spec = features.bert_pretrain_spec(8, 2)
    good = {k: [1] * f.length for k, f in spec.items()}
    with pytest.raises(ValueError, match="spec allows 2"):
        features.serialize_example(spec, {**good, "masked_lm_ids": [1, 2, 3]})
    with pytest.raises(ValueError, match="unknown=\\['extra'\\]"):
        features.serialize_example(spec, {**good, "extra": [1]})
    with pytest.raises(ValueError, match="missing=\\['input_ids'\\]"):
        features.serialize_example(spec, {k: v for k, v in good.items() if k != "input_ids"})


def test_batch_encoder_writes_the_same_bytes_as_the_single_one():
    rng = np.random.default_rng(1)
    spec = {**features.bert_pretrain_spec(64, 10), "zz_big": features.Feature("int64", 7),
            "perm": features.Feature("float32", 40), "one_byte": features.Feature("int64", 9)}
    instances = []
    for trial in range(600):  # more rows than one encoding pass (256)
        values = {}
        for name, f in spec.items():
            n = int(rng.integers(0, f.length + 1))
            if f.dtype == "float32":
                values[name] = rng.normal(size=n).astype(np.float32).tolist()
            elif name == "zz_big":
                values[name] = [0, 127, 128, 2 ** 35 + 3, -1, -(2 ** 63), 2 ** 63 - 1][:n]
            elif name == "one_byte":  # every value of the column < 128: encoded as the values
                values[name] = rng.integers(0, 128, size=n).tolist()
            else:
                values[name] = rng.integers(0, [2, 200, 70000][trial % 3], size=n).tolist()
        instances.append(values)
    got = features.serialize_examples(spec, instances)
    assert got == [features.serialize_example(spec, v) for v in instances]
    assert got[:20] == [_proto_bytes(spec, v) for v in instances[:20]]
    assert features.serialize_examples(spec, []) == []


def test_batch_encoder_refuses_bad_instances():
    spec = features.bert_pretrain_spec(8, 2)
    good = {k: [1] * f.length for k, f in spec.items()}
    with pytest.raises(ValueError, match="spec allows 2"):
        features.serialize_examples(spec, [good, {**good, "masked_lm_ids": [1, 2, 3]}])
    with pytest.raises(ValueError, match="missing=\\['input_ids'\\]"):
        features.serialize_examples(spec, [good, {k: v for k, v in good.items() if k != "input_ids"}])
