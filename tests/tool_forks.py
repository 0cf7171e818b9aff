"""Runs `python -m TOOL ARGS...` (or `python -c CODE ARGS...`) in processes forked from one that
has imported TensorFlow: a command-line test that starts many tools
(tests/test_bad_input_matrix.py) pays TensorFlow's import (~3.5 CPU-s of a tool's ~5) once per
server instead of once per run.

Each run is still a process of its own, started as `python -m` starts one: the child redirects
stdin from /dev/null and stdout / stderr to the run's own files, takes the run's environment,
working directory (the repository root, first on sys.path, as `-m` puts it) and argv, imports
the tool afresh and runs it as `__main__` (runpy, as `-m` does); its exit status is the tool's
(an uncaught exception prints its traceback and exits 1, a SystemExit exits with its code, at
the interpreter's usual shutdown). What the child shares with its server is the imported
TensorFlow (and Keras and NumPy under it), imported with the environment the server started
with (tests/testing.py python_env(): TF_CPP_MIN_LOG_LEVEL=2); the server records what that
import printed (`ForkServer.import_output`) so that a test can hold it to the rules a tool's
own output is held to.

A run may also be `python -c CODE ARGS...` (`code` given, `tool` None): the child runs the code
in an empty `__main__` with sys.argv ['-c', *args], as `python -c` does; a test that asks
whether a fresh process with TensorFlow alone (no garden module imported) can load an export
forks it from a server, which has imported nothing else.

Protocol (one JSON object a line): the client writes {"tool", "code", "args", "env", "stdout",
"stderr", "timeout"} to the server's stdin; the server forks, waits and answers on its stdout
{"status": os.wait4's exit status, "cpu_seconds": the child's user + system time}. A child
that runs past `timeout` seconds is killed (SIGKILL). One run at a time per server.

Set TOOL_FORKS=0 in the environment to run every tool in a fresh interpreter instead
(`run_tool` then starts `python -m` itself), e.g. to rule the server out when a row fails.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENABLED = os.environ.get("TOOL_FORKS", "1") != "0"


def run_tool(tool, args, env: dict, timeout: float, server: "ForkServer | None" = None,
             code: "str | None" = None):
    """(exit code as subprocess reports it, stdout, stderr, CPU seconds) of `python -m tool
    args` (`python -c code args` when code is given) with environment `env` from the
    repository root: forked from `server` when given (and TOOL_FORKS is not 0), else in a
    fresh interpreter."""
    if server is not None and ENABLED:
        return server.run(tool, args, env, timeout, code=code)
    command = ["-c", code] if code is not None else ["-m", tool]
    with subprocess.Popen([sys.executable, *command, *args], cwd=REPO_ROOT, env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as child:
        streams = {}
        readers = [threading.Thread(target=lambda name, f: streams.__setitem__(name, f.read()),
                                    args=item) for item in (("out", child.stdout),
                                                            ("err", child.stderr))]
        for reader in readers:
            reader.start()
        timer = threading.Timer(timeout, child.kill)
        timer.start()
        _, status, usage = os.wait4(child.pid, 0)  # wait4: the child's CPU time
        child.returncode = os.waitstatus_to_exitcode(status)
        timer.cancel()
        for reader in readers:
            reader.join()
    return (child.returncode, streams["out"].decode("utf-8", "replace"),
            streams["err"].decode("utf-8", "replace"), usage.ru_utime + usage.ru_stime)


class ForkServer:
    """A server process (this file run as a script); `run` is for one thread at a time."""

    def __init__(self, env: dict):
        self._dir = tempfile.mkdtemp(prefix="tool_forks-")
        self._import_log = os.path.join(self._dir, "import.txt")
        with open(self._import_log, "wb") as log:
            self._proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)],
                                          cwd=REPO_ROOT, env=env, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=log, text=True)
        ready = self._proc.stdout.readline()
        if ready.strip() != "ready":
            raise RuntimeError(f"the fork server did not start: {ready!r}\n"
                               f"{self.import_output}")
        self.cpu_seconds = float(self._proc.stdout.readline())  # its TensorFlow import
        self._runs = 0

    @property
    def import_output(self) -> str:
        """What the server printed to stderr while importing TensorFlow."""
        with open(self._import_log, encoding="utf-8", errors="replace") as f:
            return f.read()

    def run(self, tool, args, env: dict, timeout: float, code: "str | None" = None):
        self._runs += 1
        out = os.path.join(self._dir, f"{self._runs}.out")
        err = os.path.join(self._dir, f"{self._runs}.err")
        request = dict(tool=tool, code=code, args=list(args), env=dict(env), stdout=out,
                       stderr=err, timeout=int(timeout))
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        answer = self._proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"the fork server exited {self._proc.wait()}")
        answer = json.loads(answer)
        texts = []
        for path in (out, err):
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
            os.unlink(path)
        return (os.waitstatus_to_exitcode(answer["status"]), texts[0], texts[1],
                answer["cpu_seconds"])

    def close(self):
        self._proc.stdin.close()
        self._proc.wait(timeout=60)
        self._proc.stdout.close()
        for name in os.listdir(self._dir):
            os.unlink(os.path.join(self._dir, name))
        os.rmdir(self._dir)


class ForkPool:
    """Fork servers for threads that run tools side by side: `run` takes a free server,
    starting one (up to `size`) when none is free, and waits for one otherwise. Servers start
    on first use and stop at `close`. With TOOL_FORKS=0 every run is a fresh interpreter."""

    def __init__(self, env: dict, size: int = 2):
        self._env, self._size = dict(env), size
        self._free: "queue.Queue[ForkServer]" = queue.Queue()
        self._all: list = []
        self._lock = threading.Lock()

    def _take(self) -> "ForkServer":
        try:
            return self._free.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            start = len(self._all) < self._size
            if start:
                self._all.append(None)  # the slot, claimed before the slow start
        if not start:
            return self._free.get()
        try:
            server = ForkServer(self._env)
        except BaseException:
            with self._lock:  # give the slot back: a later run starts another, not waits forever
                self._all.remove(None)
            raise
        with self._lock:
            self._all[self._all.index(None)] = server
        return server

    def run(self, tool, args, env: dict, timeout: float, code: "str | None" = None):
        """run_tool's (exit code, stdout, stderr, CPU seconds), forked from a free server
        (`python -c code args` when code is given)."""
        if not ENABLED:
            return run_tool(tool, args, env, timeout, code=code)
        server = self._take()
        try:
            return server.run(tool, args, env, timeout, code=code)
        finally:
            self._free.put(server)

    def start_all(self) -> list:
        """Starts the servers up to `size` side by side (a row's first run then waits on none)
        and returns every server of the pool; [] with TOOL_FORKS=0."""
        if not ENABLED:
            return []
        with self._lock:
            missing = self._size - len(self._all)
        if missing > 0:
            import concurrent.futures

            with concurrent.futures.ThreadPoolExecutor(missing) as pool:
                taken = list(pool.map(lambda _: self._take(), range(missing)))
            for server in taken:
                self._free.put(server)
        with self._lock:
            return [s for s in self._all if s is not None]

    def close(self):
        with self._lock:
            servers, self._all = [s for s in self._all if s is not None], []
        for server in servers:
            server.close()


def _serve():
    """The server's loop; returns the request a forked child is to run (None in the server)."""
    import gc
    import signal
    import time

    start = time.process_time()
    import tensorflow  # noqa: F401 - the point of the server (Keras and NumPy come with it)

    # The children's garbage collections leave what the server imported alone: without this,
    # a child's first full collection touches every object and copies its pages (gc.freeze's
    # purpose; a forked make_vocab took 2.5 CPU-s instead of a fresh one's 1.7).
    gc.freeze()
    print("ready", time.process_time() - start, sep="\n", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return request
        # Polled, so that a child past its deadline is killed whatever it does with signals
        # (as the fresh-interpreter path's timer kills it).
        deadline, pause = time.monotonic() + request["timeout"], 0.005
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                _, status, usage = os.wait4(pid, 0)
                break
            time.sleep(pause)
            pause = min(2 * pause, 0.05)
        print(json.dumps({"status": status, "cpu_seconds": usage.ru_utime + usage.ru_stime}),
              flush=True)
    return None


def _become(request):
    """In the forked child: the process `python -m tool args` would be, short of running it."""
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                            (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdin = open(0, closefd=False)  # not the server's, with its read-ahead
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(REPO_ROOT)
    sys.path[0] = REPO_ROOT  # -m puts the working directory first; a script its own directory
    if request.get("code") is not None:
        sys.argv = ["-c", *request["args"]]  # as `python -c` sets it
    else:
        sys.argv = [request["tool"], *request["args"]]  # runpy sets argv[0] to the module's file


if __name__ == "__main__":
    _request = _serve()
    if _request is not None:
        import runpy
        import types

        _become(_request)
        _code = _request["code"]
        del _request
        # `python -m` runs the tool in an empty __main__ module; runpy uses the current one's
        # namespace, which here is this script's. `python -c` runs its code in one too.
        sys.modules["__main__"] = _main = types.ModuleType("__main__")
        if _code is not None:
            _main.__builtins__ = __builtins__
            exec(compile(_code, "<string>", "exec"), _main.__dict__)
        else:
            runpy._run_module_as_main(sys.argv[0])  # what `python -m` calls
