"""The one HTTP client seam: a JSON endpoint over httpx with timeouts, retries and a deadline.

The embedding providers and the reranker speak through it; no other module imports httpx.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator

from ..errors import (
    EmbeddingAuthError,
    EmbeddingConfigError,
    EmbeddingResponseError,
    EmbeddingUnavailable,
)
from ..redact import redacted, scrub

log = logging.getLogger("memsync.embed")

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
MB = 1024 * 1024


class HttpService:
    """One JSON endpoint over httpx: timeouts, and retries with backoff on 429/5xx and connection
    errors. The embedding providers and the reranker speak through it."""

    provider = ""
    model = ""
    max_attempts = 5
    url_setting = ""  # the variable a user sets to point at the server, named in errors
    key_setting = "OPENAI_API_KEY"  # the variable that holds its API key, named in errors
    max_wait = 60.0
    max_body: int | None = None  # bytes an answer may hold; None: as many as it sends

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float,
        api_key: str | None = None,
        transport: object | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        import httpx

        endpoint = redacted(base_url.rstrip("/"))
        if not endpoint.certain:
            raise EmbeddingConfigError(
                f"{self.url_setting} cannot be read as one URL (it is not shown: it may hold a "
                "password): percent-encode any @ / ? # in its user name and password"
            )
        # the URL without its credentials, which go with every request instead: whatever prints
        # or logs base_url shows no secret
        self.base_url = endpoint.without_secrets
        # of the URL as configured, credentials and all: the key its vectors are recorded under
        self._fingerprint = hashlib.sha256(base_url.rstrip("/").encode()).hexdigest()[:16]
        self._sleep = sleep or pause
        self._secret = api_key
        self.total_timeout: float | None = None  # all attempts of one request together (queries)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        login = None if endpoint.password is None else (endpoint.user or "", endpoint.password)
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            headers=headers,
            auth=login,
            params=dict(endpoint.secrets),
            transport=transport,  # type: ignore[arg-type]
        )

    def _exchange(self, url: str, payload: dict[str, object]) -> object:
        """One request, retried, its JSON answer; with `total_timeout` (a query) every attempt,
        wait and byte of the answer together end by then, so a hung or trickling server costs
        a query seconds, not minutes. Redirects are not followed: an answer must come from the
        URL the user configured."""
        import httpx

        started = time.monotonic()
        for attempt in range(1, self.max_attempts + 1):
            wait = min(0.5 * 2 ** (attempt - 1), self.max_wait)
            try:
                status, retry_header, raw = self._attempt_by_deadline(url, payload, started)
            except httpx.InvalidURL as exc:
                raise EmbeddingConfigError(
                    f"{self.provider}: {self.base_url} cannot be used ({exc}): check "
                    f"{self.url_setting}"
                ) from exc
            except httpx.TransportError as exc:
                kind = (
                    "no answer from" if isinstance(exc, httpx.TimeoutException) else "cannot reach"
                )
                problem = f"{kind} {self.base_url}: {exc.__class__.__name__}"
                if attempt == self.max_attempts or self._out_of_time(started, wait):
                    raise EmbeddingUnavailable(
                        f"{problem} (is the server running? check {self.url_setting})"
                    ) from exc
                log.warning("%s; retry %d in %.1fs", problem, attempt, wait)
                self._sleep(wait)
                continue
            except httpx.HTTPError as exc:  # a body that cannot be decoded (a false gzip)
                raise EmbeddingResponseError(
                    f"{self.provider} sent an answer that cannot be read: {exc.__class__.__name__}"
                ) from exc
            if status in RETRY_STATUSES:
                problem = f"{self.provider} answered {status}"
                wait = retry_after(retry_header, wait, self.max_wait)
                if attempt == self.max_attempts or self._out_of_time(started, wait):
                    raise EmbeddingUnavailable(f"{problem} {attempt} times; giving up for now")
                log.warning("%s; retry %d in %.1fs", problem, attempt, wait)
                self._sleep(wait)
                continue
            self._refuse_unless_ok(status, url, raw)
            return parsed_json(raw, self.provider)
        raise AssertionError("unreachable")  # pragma: no cover

    def _refuse_unless_ok(self, status: int, url: str, raw: bytes) -> None:
        """The error a status other than 2xx (and those retried) stands for."""
        if status in (401, 403):
            raise EmbeddingAuthError(
                f"{self.provider} refused the request ({status}): check the API key "
                f"({self.key_setting})"
            )
        if status == 404:
            raise EmbeddingConfigError(
                f"{self.provider}: {url} or model {self.model!r} not found (404)"
            )
        if status >= 400:
            body = scrub(raw.decode("utf-8", "replace"), self._secret)[:200]
            raise EmbeddingResponseError(f"{self.provider} answered {status}: {body}")
        if status >= 300:
            raise EmbeddingResponseError(
                f"{self.provider} answered {status}, a redirect: memsync does not follow it "
                f"(check {self.url_setting})"
            )

    def _attempt_by_deadline(
        self, url: str, payload: dict[str, object], started: float
    ) -> tuple[int, str | None, bytes]:
        """`_attempt`, given up when `total_timeout` has passed even if a server sends its
        headers a byte at a time or falls silent just before the end: it runs in a thread of
        its own, which `_body`'s deadline ends soon after (a daemon: no exit waits for it)."""
        if self.total_timeout is None:
            return self._attempt(url, payload, started)
        outcome: list[tuple[int, str | None, bytes] | BaseException] = []

        def attempt() -> None:
            try:
                outcome.append(self._attempt(url, payload, started))
            except BaseException as exc:  # raised below, in the caller's thread
                outcome.append(exc)

        worker = threading.Thread(target=attempt, name="memsync-http", daemon=True)
        worker.start()
        worker.join(self._remaining(started))
        if not outcome:
            raise EmbeddingUnavailable(
                f"no answer from {self.base_url} in full within {self.total_timeout:g} s "
                f"(check {self.url_setting})"
            )
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def _attempt(
        self, url: str, payload: dict[str, object], started: float
    ) -> tuple[int, str | None, bytes]:
        """One request: its status, Retry-After and body, read by the deadline (httpx's own
        timeouts are per read, which a server sending a byte at a time never reaches)."""
        import httpx

        remaining = self._remaining(started)
        timeout = httpx.USE_CLIENT_DEFAULT if remaining is None else remaining
        with self._client.stream("POST", url, json=payload, timeout=timeout) as response:
            raw = self._body(response.iter_bytes(), started)
            return response.status_code, response.headers.get("Retry-After"), raw

    def _body(self, chunks: Iterator[bytes], started: float) -> bytes:
        """The answer's bytes, refused past `max_body` and once the deadline has passed."""
        kept: list[bytes] = []
        size = 0
        for chunk in chunks:
            size += len(chunk)
            if self.max_body is not None and size > self.max_body:
                raise EmbeddingResponseError(
                    f"{self.provider} sent an answer larger than {self.max_body // MB} MB"
                )
            kept.append(chunk)
            if self._out_of_time(started, 0.0):
                raise EmbeddingUnavailable(
                    f"{self.base_url} was still sending its answer after {self.total_timeout:g} s"
                )
        return b"".join(kept)

    def _remaining(self, started: float) -> float | None:
        if self.total_timeout is None:
            return None
        return max(self.total_timeout - (time.monotonic() - started), 0.05)

    def _out_of_time(self, started: float, wait: float) -> bool:
        return (
            self.total_timeout is not None
            and time.monotonic() - started + wait >= self.total_timeout
        )


def parsed_json(raw: bytes, provider: str) -> object:
    """The JSON document in `raw`, or EmbeddingResponseError: nesting deep enough to exhaust
    the parser's stack is no answer either."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise EmbeddingResponseError(f"{provider} sent an answer that is not JSON") from exc


def retry_after(header: str | None, default: float, cap: float) -> float:
    """Seconds to wait from a Retry-After header (seconds or an HTTP date), capped."""
    import email.utils

    if not header:
        return default
    try:
        return min(max(float(header), 0.0), cap)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return default
    return min(max(when.timestamp() - time.time(), 0.0), cap)


def pause(seconds: float) -> None:
    """How an HTTP embedder waits between attempts, unless it is given its own `sleep`."""
    time.sleep(seconds)
