"""`python -m garden.serve`: TensorFlow Serving's REST and gRPC APIs over the garden's exports.

    python -m garden.serve --rest_api_port=8501 --port=8500 --model_name=sentiment \\
        --model_base_path=/tmp/exports/sentiment
    curl http://localhost:8501/v1/models/sentiment
    curl -d '{"instances": [{"text_a": "a fine film"}]}' \\
        http://localhost:8501/v1/models/sentiment:predict
    # gRPC on 8500: tensorflow_serving.apis' PredictionServiceStub / ModelServiceStub, as
    # against tensorflow_model_server (garden/server/grpc_server.py)

The flags are tensorflow_model_server's (the same command line serves the same directory with
the real model server, see docs/tasks.md "Serving: garden.serve"):
    --rest_api_port=8501            0 picks a free port (the model server's 0 turns REST off;
                                    here it is always served). The log line "Exporting
                                    HTTP/REST API at:HOST:PORT" says where.
    --port=8500                     gRPC: tensorflow.serving.PredictionService (Predict,
                                    Classify, Regress, MultiInference, GetModelMetadata) and
                                    ModelService (GetModelStatus), from the same loaded models
                                    in the same process; 0 picks a free port. The log line
                                    "Running gRPC ModelServer at HOST:PORT ..." says where.
                                    Message limits INT32_MAX both ways, as the model server.
    --model_name=default --model_base_path=DIR    one model: DIR/<version>/ SavedModels
    --model_config_file=FILE        several models, version policies and labels (text proto
                                    model_config_list, garden/server/server_config.py)
    --file_system_poll_wait_seconds=1   new versions under a base path are loaded while
                                    serving (0: look once at start-up; < 0: never)
    --enable_model_warmup           replay assets.extra/tf_serving_warmup_requests on load
                                    (the default; --no-enable_model_warmup: do not)
    --tensorflow_intra_op_parallelism=0 --tensorflow_inter_op_parallelism=0
                                    TensorFlow's thread pools (0: TensorFlow's default, one
                                    thread per core each). At batch 1 on a few cores,
                                    --tensorflow_inter_op_parallelism=1 keeps the ops of a call
                                    in order, each on all intra-op threads (benchmarks/README.md,
                                    serving_latency)
Garden's own additions: --rest_api_host (default 127.0.0.1, a local server; 0.0.0.0 listens
everywhere, as the model server does; both APIs listen on it) and --verbose (log every request).

Refused at start-up, in one "error:" line: a local base path that does not exist or holds no
version directory <N>/ (the model server would wait for one; here that is taken for a typo), and
a --rest_api_port or --port in use (both ports are bound first, before any model loads; the
default --port=8500 too, as the model server refuses it: pass --port=0 or another port when
8500 is taken, e.g. by a second server).

Models are loaded before the ports open; each version once, shared by the request threads
(Werkzeug's threaded WSGI server for REST, a 16-thread pool for gRPC). What is loaded, the warmup
replay and the addresses are logged to stderr. The routes, bodies and error codes:
garden/server/server.py and server_json.py (REST), grpc_server.py (gRPC).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from typing import Iterable, Optional

from text import onednn
from text.flags import add_bool


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m garden.serve",
        description="TensorFlow Serving's REST API (status, metadata, :predict, :classify, "
                    ":regress) and gRPC API (PredictionService, ModelService) over export "
                    "directories <base_path>/<version>/, with the model server's flags.")
    p.add_argument("--rest_api_port", type=int, default=8501,
                   help="HTTP port (default 8501; 0 picks a free one and logs it)")
    p.add_argument("--rest_api_host", default="127.0.0.1",
                   help="address the REST and gRPC APIs listen on (garden's flag; default "
                        "127.0.0.1)")
    p.add_argument("--port", type=int, default=8500,
                   help="gRPC port: tensorflow.serving.PredictionService and ModelService "
                        "(default 8500, as the model server; 0 picks a free one and logs it)")
    p.add_argument("--model_name", default="default",
                   help="name of the model in the URLs (with --model_base_path)")
    p.add_argument("--model_base_path", default="",
                   help="directory holding the model's versions <base_path>/<N>/")
    p.add_argument("--model_config_file", default="",
                   help="text proto model_config_list {config {name base_path "
                        "model_version_policy version_labels}} (instead of the two above)")
    p.add_argument("--file_system_poll_wait_seconds", type=float, default=1.0,
                   help="seconds between looks for new versions (0: only at start-up)")
    add_bool(p, "enable_model_warmup", True,
             "replay assets.extra/tf_serving_warmup_requests on load")
    p.add_argument("--tensorflow_intra_op_parallelism", type=int, default=0,
                   help="threads that one op may use (0: TensorFlow's default)")
    p.add_argument("--tensorflow_inter_op_parallelism", type=int, default=0,
                   help="ops run side by side (0: TensorFlow's default)")
    add_bool(p, "verbose", False, "log every request (Werkzeug's log)")
    return p


def _has_version(base_path: str) -> bool:
    """Whether a local base path holds a version directory <N>/ (as the model server loads)."""
    return os.path.isdir(base_path) and any(
        e.isdigit() and os.path.isdir(os.path.join(base_path, e)) for e in os.listdir(base_path))


def _bind(host: str, port: int) -> socket.socket:
    """The REST API's socket, bound to (host, port) but not listening yet; OSError if taken."""
    from werkzeug.serving import get_sockaddr, select_address_family

    family = select_address_family(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Werkzeug's own bind
        sock.bind(get_sockaddr(host, port, family))
    except OSError:
        sock.close()
        raise
    return sock


def _bind_failure(host: str, port: int) -> str:
    """Why (host, port) cannot be bound, in the words of the OS ("Address already in use"), or
    "" when a plain socket can bind it (gRPC's own error names no reason)."""
    try:
        _bind(host, port).close()
    except OSError as e:
        return e.strerror or str(e)
    return ""


def _model_configs(args):
    """(the models to serve, None), or (None, why the flags are refused in one line), before
    any port is bound or model loaded."""
    from garden.server.server_config import ConfigError, model_configs

    for flag in ("intra", "inter"):
        if getattr(args, f"tensorflow_{flag}_op_parallelism") < 0:
            return None, (f"--tensorflow_{flag}_op_parallelism must be >= 0 (0: TensorFlow's "
                          f"default)")
    try:
        configs = model_configs(args.model_name, args.model_base_path, args.model_config_file)
    except ConfigError as e:
        return None, str(e)
    for c in configs:
        if "://" not in c.base_path and not _has_version(c.base_path):
            what = ("does not exist" if not os.path.exists(c.base_path) else
                    "holds no version directory <N>/ (an export is <base_path>/<N>/saved_model.pb, "
                    "written by garden.train through garden.serving.export)")
            return None, f"model {c.name}: base path {c.base_path} {what}"
    return configs, None


def main(argv: Optional[Iterable[str]] = None) -> int:
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("garden.serve")
    configs, error = _model_configs(args)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:  # bound (not yet listening) before the models load: a taken port fails in a second
        sock = _bind(args.rest_api_host, args.rest_api_port)
    except OSError as e:
        print(f"error: --rest_api_port={args.rest_api_port} on {args.rest_api_host}: "
              f"{e.strerror}", file=sys.stderr)
        return 2
    from garden.server import grpc_server  # grpc only: TensorFlow is not loaded yet

    # A plain socket's bind first: the OS's reason, without gRPC's own log line about it.
    why = _bind_failure(args.rest_api_host, args.port) if args.port else ""
    try:
        if why:
            raise grpc_server.BindError(why)
        rpc, rpc_port = grpc_server.make_server(args.rest_api_host, args.port)
    except grpc_server.BindError as e:
        sock.close()
        print(f"error: --port={args.port} (gRPC) on {args.rest_api_host}: {why or e}",
              file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the text ops the signatures run

    # Before any op runs: the pools are made once, on first use.
    tf.config.threading.set_intra_op_parallelism_threads(args.tensorflow_intra_op_parallelism)
    tf.config.threading.set_inter_op_parallelism_threads(args.tensorflow_inter_op_parallelism)
    log.info("%s", onednn.state())
    log.info("TensorFlow thread pools: intra-op %s, inter-op %s",
             *(getattr(tf.config.threading, f"get_{flag}_op_parallelism_threads")() or "default"
               for flag in ("intra", "inter")))

    from garden.server import server

    if not args.verbose:
        server.quiet_request_log()
    for c in configs:
        policy = {"latest": f"latest {c.num_versions}", "all": "all",
                  "specific": f"specific {list(c.versions)}"}[c.policy]
        log.info("Model %s: base path %s, version policy %s%s", c.name, c.base_path, policy,
                 f", labels {dict(c.labels)}" if c.labels else "")
    manager = server.ModelManager(configs, warmup=args.enable_model_warmup)
    manager.start(args.file_system_poll_wait_seconds)
    grpc_server.add_services(rpc, manager)
    rpc.start()
    log.info(grpc_server.port_line(args.rest_api_host, rpc_port))
    sock.listen(128)
    http = server.make_server(manager, args.rest_api_host, args.rest_api_port, fd=sock.fileno())
    sock.close()  # the server holds its own duplicate
    log.info(server.pid_and_port_line(args.rest_api_host, http.port))

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        http.serve_forever()  # Werkzeug's: returns on KeyboardInterrupt (Ctrl-C, SIGTERM)
    finally:
        manager.stop()
        rpc.stop(grace=1)
        http.server_close()
    log.info("Shut down")
    return 0


if __name__ == "__main__":
    code = main()
    # Skip the interpreter's teardown of TensorFlow and the loaded models (seconds, for
    # nothing a stopped server needs); the logs are flushed first.
    logging.shutdown()
    sys.stdout.flush()
    os._exit(code)
