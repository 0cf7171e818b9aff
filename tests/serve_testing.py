"""Helpers of the garden.serve tests: start `python -m garden.serve` as a real process on a free
loopback port, and talk to it over HTTP with the standard library."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time

from garden.server.grpc_server import PORT_LINE as GRPC_PORT_LINE
from garden.server.server import PORT_LINE
from testing import REPO_ROOT


class ServerProcess:
    """`python -m garden.serve --rest_api_port=0 --port=0 ARGS`; the ports are read from its
    log (`port` REST, `grpc_port` gRPC). --port=0: the default gRPC port 8500 would clash
    between servers started side by side (ARGS may still name one)."""

    def __init__(self, args, log_path: str, timeout: float = 180):
        self.log_path = log_path
        self._log = open(log_path, "w", encoding="utf-8")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "garden.serve", "--rest_api_port=0", "--port=0", *args],
            cwd=REPO_ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            match = PORT_LINE.search(self.log())
            if match:
                self.host, self.port = match.group(1), int(match.group(2))
                grpc = GRPC_PORT_LINE.search(self.log())  # logged before the REST line
                self.grpc_port = int(grpc.group(2)) if grpc else None
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"garden.serve did not start (exit {self.proc.returncode})"
                                     f":\n{self.log()[-4000:]}")
            time.sleep(0.2)

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8") as f:
            return f.read()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def write_vocab(root, tokens) -> str:
    """tokens, one per line, as <root>/vocab.txt; its path."""
    path = os.path.join(str(root), "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    return path


def tiny_classifier(root, tokens, seed: int, max_seq_length: int, num_classes: int = 2):
    """A bert_tiny SequenceClassifier (random weights, seeded) over `tokens` written as
    <root>/vocab.txt, and its uncased WordPiece TextPacker; (model, packer, vocab path)."""
    import keras

    from text import tokenizers
    from garden.models.bert.presets import untrained_bert_backbone
    from garden.models.classification import SequenceClassifier
    from garden.serving.text import TextPacker

    vocab = write_vocab(root, tokens)
    keras.utils.set_random_seed(seed)
    model = SequenceClassifier(untrained_bert_backbone("bert_tiny", vocab_size=len(tokens)),
                               num_classes=num_classes)
    packer = TextPacker(tokenizers.load_tokenizer("wordpiece", vocab, lower_case=True),
                        max_seq_length)
    return model, packer, vocab


def example_regression():
    """A regress signature over tf.Examples (x: 2 floats, w: an int weight, 1 when missing):
    outputs = (2 * x[0] + x[1]) * w; a tf.function for a test ServingModule to export."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def regress(inputs):
        f = tf.io.parse_example(inputs, {
            "x": tf.io.FixedLenFeature([2], tf.float32),
            "w": tf.io.FixedLenFeature([], tf.int64, default_value=1)})
        return {"outputs": (f["x"][:, 0] * 2 + f["x"][:, 1]) * tf.cast(f["w"], tf.float32)}

    return regress


def served(config: str, root, poll_seconds: float):
    """A module fixture's body: garden.serve over a model_config_file, yielded, then stopped;
    it must end cleanly (SIGTERM) and no request, good or bad, may have gone down the
    INTERNAL / 500 path (which logs a traceback)."""
    process = ServerProcess([f"--model_config_file={config}",
                             f"--file_system_poll_wait_seconds={poll_seconds}",
                             "--tensorflow_inter_op_parallelism=1"],
                            os.path.join(str(root), "serve.log"))
    yield process
    code = process.stop()
    log = process.log()
    assert code == 0, log[-3000:]
    assert "Traceback" not in log, log[-6000:]


class Client:
    """One keep-alive connection; request() returns (status, content type, parsed body)."""

    def __init__(self, server: ServerProcess, timeout: float = 60):
        self.conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)

    def request(self, method: str, path: str, body=None):
        data = body if isinstance(body, (bytes, type(None))) else (
            body.encode() if isinstance(body, str) else json.dumps(body).encode())
        headers = {"Content-Type": "application/json"} if data is not None else {}
        self.conn.request(method, path, body=data, headers=headers)
        response = self.conn.getresponse()
        raw = response.read()
        return response.status, response.getheader("Content-Type"), json.loads(raw)

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body):
        return self.request("POST", path, body)

    def close(self):
        self.conn.close()
