"""OpenAI-compatible chat-completions backend (vLLM, TGI, llama.cpp's server, hosted APIs).

Standard library only (``urllib`` + a thread pool): bounded concurrency, per-request timeouts,
retries with exponential backoff (and jitter) on connection errors, timeouts, HTTP 429 and 5xx,
and clear errors naming the URL, HTTP status and an excerpt of the response body. Client errors
(other 4xx) fail at once. With sampling, each request carries the integer ``seed`` derived from
the prompt key (vLLM honours per-request seeds).
"""
from __future__ import annotations

import json
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from ...core.errors import GenerationError
from .base import DecodingConfig, Prompt, Responder, key_seed

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class OpenAIResponder(Responder):
    """Chat completions at ``{base_url}/chat/completions`` (``base_url`` usually ends in ``/v1``).

    The cache identity is (backend, served model name, ``revision``, decoding), not the URL, so
    the same model served elsewhere reuses cached generations; set ``revision`` to tell apart
    different weights served under one name."""

    backend = "openai"

    def __init__(self, base_url: str, model: str, decoding: DecodingConfig | None = None, *,
                 api_key: str | None = None, concurrency: int = 8, timeout: float = 120.0,
                 max_retries: int = 4, backoff: float = 0.5, max_backoff: float = 30.0,
                 revision: str = "", name: str | None = None) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise GenerationError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not model:
            raise GenerationError("an OpenAI-compatible backend needs a served model name")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise GenerationError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if not (timeout > 0) or max_retries < 0 or backoff < 0:
            raise GenerationError("timeout must be > 0, max_retries and backoff >= 0")
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model_id = model
        self.name = name or model
        self.revision = revision
        self.decoding = decoding or DecodingConfig()
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.concurrency, self.timeout = concurrency, float(timeout)
        self.max_retries, self.backoff, self.max_backoff = int(max_retries), float(backoff), float(max_backoff)
        self.attempts = 0  # total HTTP attempts (for diagnostics and tests)
        self._count_lock = threading.Lock()

    def payload(self, prompt: Prompt) -> dict[str, Any]:
        d = self.decoding
        body: dict[str, Any] = {"model": self.model_id, "messages": self.messages(prompt),
                                "max_tokens": d.max_new_tokens, "temperature": float(d.temperature),
                                "top_p": float(d.top_p)}
        if not d.greedy:
            body["seed"] = key_seed(prompt.key)
        # repetition control: frequency_penalty is an OpenAI field; repetition_penalty and
        # no_repeat_ngram_size are vLLM's extra sampling fields (a server that rejects them answers 400)
        if d.repetition_penalty != 1:
            body["repetition_penalty"] = float(d.repetition_penalty)
        if d.no_repeat_ngram_size > 0:
            body["no_repeat_ngram_size"] = int(d.no_repeat_ngram_size)
        if d.frequency_penalty != 0:
            body["frequency_penalty"] = float(d.frequency_penalty)
        return body

    def _post(self, body: dict[str, Any]) -> str:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.max_retries + 1):
            with self._count_lock:
                self.attempts += 1
            req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    raw = resp.read().decode("utf-8", "replace")
                return _content(raw, self.url)
            except urllib.error.HTTPError as exc:
                body_txt = _excerpt(exc.read())
                last = f"HTTP {exc.code} from {self.url}: {body_txt}"
                if exc.code not in RETRYABLE_STATUS:
                    raise GenerationError(f"request failed (not retried): {last}") from None
            except TimeoutError as exc:
                last = f"timeout after {self.timeout:g}s from {self.url} ({exc})"
            except urllib.error.URLError as exc:
                if isinstance(exc.reason, (socket.timeout, TimeoutError)):
                    last = f"timeout after {self.timeout:g}s from {self.url} ({exc.reason})"
                else:
                    last = f"connection error to {self.url}: {exc.reason}"
            except (ConnectionError, OSError) as exc:
                last = f"connection error to {self.url}: {exc}"
            if attempt < self.max_retries:
                delay = min(self.max_backoff, self.backoff * 2 ** attempt)
                time.sleep(delay * (0.5 + random.random() / 2))
        raise GenerationError(f"request failed after {self.max_retries + 1} attempts; last error: {last}")

    def respond(self, prompts: Sequence[Prompt]) -> list[str]:
        bodies = [self.payload(p) for p in prompts]
        if len(bodies) <= 1 or self.concurrency == 1:
            return [self._post(b) for b in bodies]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(bodies))) as pool:
            return list(pool.map(self._post, bodies))


def _excerpt(raw: bytes | str, n: int = 300) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = " ".join(text.split())
    return text[:n] + ("..." if len(text) > n else "")


def _content(raw: str, url: str) -> str:
    try:
        data = json.loads(raw)
        content = data["choices"][0]["message"]["content"]
    except (json.JSONDecodeError, KeyError, IndexError, TypeError):
        raise GenerationError(f"malformed chat-completions response from {url}: {_excerpt(raw)}") from None
    if not isinstance(content, str):
        raise GenerationError(f"chat-completions response from {url} has no text content: {_excerpt(raw)}")
    return content.strip()
