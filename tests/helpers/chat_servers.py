"""OpenAI-compatible chat servers on loopback for the tests of the ``openai:`` path.

:class:`LocalChatServer`: a small server backed by any :class:`Responder`, standard library only
(``http.server``): ``POST /v1/chat/completions`` and ``GET /v1/models``. Fault injection: the
first ``fail_first`` requests answer HTTP ``fail_status``; ``delay`` seconds before every answer
simulate a slow server.

:class:`LlamaCppServer`: a real third-party server, llama-cpp-python's own
(``python -m llama_cpp.server``, extra ``llamacpp``), on a GGUF file in a child process (a
native crash ends the child, not the test run).
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dpmv_lib.core.errors import GenerationError
from dpmv_lib.generate.responders.base import Prompt, Responder, parse_messages


class LocalChatServer:
    """Context manager: starts the server in a daemon thread; ``base_url`` ends in ``/v1``."""

    def __init__(self, responder: Responder, host: str = "127.0.0.1", port: int = 0, *,
                 fail_first: int = 0, fail_status: int = 500, delay: float = 0.0) -> None:
        self.responder = responder
        self.fail_first, self.fail_status, self.delay = int(fail_first), int(fail_status), float(delay)
        self.requests = 0
        self.failures = 0
        self._lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), self._handler())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        if isinstance(host, bytes):
            host = host.decode()
        return f"http://{host}:{port}/v1"

    def start(self) -> "LocalChatServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "LocalChatServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests += 1
            fail = self.failures < self.fail_first
            if fail:
                self.failures += 1
        if self.delay:
            time.sleep(self.delay)
        if fail:
            return self.fail_status, {"error": {"message": "injected failure", "type": "server_error"}}
        if not isinstance(body, dict) or "messages" not in body:
            return 400, {"error": {"message": "request needs 'messages'", "type": "invalid_request_error"}}
        try:
            query, conditioning = parse_messages(body["messages"])
        except Exception as exc:  # noqa: BLE001 - reported to the client as a 400
            return 400, {"error": {"message": str(exc), "type": "invalid_request_error"}}
        seed = body.get("seed")
        prompt = Prompt(query, conditioning, ("server", 0, int(seed) if isinstance(seed, int) else -1))
        with self._model_lock:  # one generation at a time: backends need not be thread-safe
            text = self.responder.respond([prompt])[0]
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, int) and max_tokens > 0:
            text = " ".join(text.split()[:max_tokens])
        return 200, {"id": f"chatcmpl-{self.requests}", "object": "chat.completion",
                     "model": body.get("model", self.responder.name),
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": text}}]}

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def _send(self, status: int, obj: dict[str, Any]) -> None:
                data = json.dumps(obj).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": server.responder.name, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                status, obj = server._complete(body)
                self._send(status, obj)

        return Handler


class LlamaCppServer:
    """Context manager: ``python -m llama_cpp.server`` serving ``gguf`` as model ``alias`` on
    127.0.0.1 (a free port), in a child process; ``base_url`` ends in ``/v1``. Waits until
    ``/v1/models`` answers (GenerationError with the server's log tail after ``start_timeout`` s
    or if the child exits); on exit the child is terminated (killed after 10 s).

    ``threads`` (default 1) sets both llama.cpp thread counts (decode and prompt batches; the
    server's own default for the batch count is every core). llama.cpp's threads meet at a barrier
    at every step and spin while they wait, so beside another CPU-bound job on shared cores two
    threads can be many times slower than one."""

    def __init__(self, gguf: str | Path, *, alias: str = "smollm2", n_ctx: int = 2048, threads: int = 1,
                 start_timeout: float = 300.0) -> None:
        self.gguf, self.alias, self.n_ctx = Path(gguf), alias, int(n_ctx)
        self.threads = int(threads)
        self.start_timeout = float(start_timeout)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: subprocess.Popen | None = None
        self._log: Any = None   # the server's log file once started (log_tail reads it)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def log_tail(self, n: int = 3000) -> str:
        try:
            self._log.flush()
            return Path(self._log.name).read_text(errors="replace")[-n:]
        except (OSError, AttributeError, ValueError):
            return ""

    def start(self) -> "LlamaCppServer":
        import tempfile
        if not self.gguf.is_file():
            raise GenerationError(f"no GGUF model at {self.gguf}")
        self._log = tempfile.NamedTemporaryFile("w+", prefix="llama-server-", suffix=".log", delete=False)
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.gguf), "--model_alias", self.alias,
               "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
               "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads), "--verbose", "False"]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise GenerationError(f"llama_cpp.server exited with code {self.proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise GenerationError(f"llama_cpp.server did not answer within {self.start_timeout:.0f} s:\n{tail}")
            time.sleep(0.25)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            Path(self._log.name).unlink(missing_ok=True)
            self._log = None

    def __enter__(self) -> "LlamaCppServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

