"""Talking to a Prometheus-compatible HTTP API (Prometheus, Thanos, Mimir, VictoriaMetrics) through
prometheus-api-client: authentication, TLS, timeouts, bounded retries, a cap on the size of an answer,
and turning every failure into one GpuauditError line."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from gpuaudit.errors import GpuauditError
from gpuaudit.util.smallfile import TOKEN_MAX_BYTES, read_small_text

_TOKEN_ENV = "GPUAUDIT_PROM_TOKEN"
_PASSWORD_ENV = "GPUAUDIT_PROM_PASSWORD"
# Prometheus refuses range queries above 11,000 points per series; stay clear of it.
MAX_POINTS = 10_000
# The most one answer may hold (decompressed): a server that sends more, or never stops, must not exhaust
# memory. 256 MiB of JSON holds ~8 M points, e.g. 800 series of 10,000 points; parsed, it takes a few GB.
_MAX_RESPONSE_MB = 256


@dataclass(frozen=True)
class Transport:
    url: str
    bearer_token: str | None = None
    user: str | None = None
    password: str | None = None
    ca_file: Path | None = None
    insecure: bool = False
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5
    max_response_bytes: int = _MAX_RESPONSE_MB * 1024 * 1024


def transport(url: str, *, bearer_token_file: Path | None = None, user: str | None = None,
              password: str | None = None, ca_file: Path | None = None, insecure: bool = False,
              timeout_s: float = 30.0, retries: int = 3, backoff_s: float = 0.5,
              max_response_mb: float = _MAX_RESPONSE_MB) -> Transport:
    """Validated connection settings. The token comes from --bearer-token-file, else $GPUAUDIT_PROM_TOKEN;
    the basic-auth password from the argument, else $GPUAUDIT_PROM_PASSWORD."""
    url = url.strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+", url):
        raise GpuauditError(f"bad --url {url!r}: give the server's base URL, e.g. http://prometheus:9090")
    if url.endswith("/api/v1"):
        url = url.removesuffix("/api/v1")
    token = None
    if bearer_token_file is not None:
        # A regular file of a token's size: never /dev/zero read to the end of memory, nor a FIFO waited on.
        token = read_small_text(bearer_token_file, "--bearer-token-file", TOKEN_MAX_BYTES).strip()
        if not token:
            raise GpuauditError(f"--bearer-token-file {bearer_token_file} is empty")
    else:
        token = os.environ.get(_TOKEN_ENV, "").strip() or None
    if user is None and password:
        raise GpuauditError("a password was given without --user")
    if user is not None and password is None:
        password = os.environ.get(_PASSWORD_ENV)
    if user is not None and token:
        raise GpuauditError("give either a bearer token or --user, not both")
    if ca_file is not None and not Path(ca_file).is_file():
        raise GpuauditError(f"--ca-file {ca_file} is not a readable file")
    if ca_file is not None and insecure:
        raise GpuauditError("give either --ca-file or --insecure, not both")
    if timeout_s <= 0:
        raise GpuauditError("--timeout must be positive")
    if retries < 0:
        raise GpuauditError("--retries must be 0 or more")
    if not 0 < max_response_mb <= 1024 * 1024:  # also refuses nan
        raise GpuauditError(f"--max-response-mb must be positive (at most 1 TiB), got {max_response_mb:g}")
    return Transport(url=url, bearer_token=token, user=user, password=password or "", ca_file=ca_file,
                     insecure=insecure, timeout_s=timeout_s, retries=retries, backoff_s=backoff_s,
                     max_response_bytes=int(max_response_mb * 1024 * 1024))


class _ResponseTooLarge(Exception):
    """An answer went over Transport.max_response_bytes."""


class _CappedAdapter(HTTPAdapter):
    """Reads each answer itself, in chunks, and stops at `max_bytes` (decompressed): requests would
    otherwise load a body of any size (or an endless one) into memory."""

    def __init__(self, max_bytes: int, **kwargs: Any) -> None:
        self.max_bytes = max_bytes
        super().__init__(**kwargs)

    def send(self, request: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs["stream"] = True
        response = super().send(request, **kwargs)
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            response.close()
            raise _ResponseTooLarge(int(declared))
        chunks, total = [], 0
        for chunk in response.iter_content(1 << 16):
            total += len(chunk)
            if total > self.max_bytes:
                response.close()
                raise _ResponseTooLarge(total)
            chunks.append(chunk)
        response._content = b"".join(chunks)  # what requests itself sets when it reads the body
        response._content_consumed = True  # type: ignore[attr-defined]  # private, not in the stubs
        return response


class _DeadlinePassed(Exception):
    """The request as a whole (connect, headers, body, retries) ran past --timeout."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise _DeadlinePassed in the block once `seconds` have passed. requests' timeout bounds each socket read,
    not the request: a server sending a byte every 0.5 s never trips a 2 s read timeout (one import ran 304 s
    with --timeout 2). SIGALRM interrupts the blocked read wherever it is; only the main thread gets signals,
    elsewhere (and under another timer) the per-read timeout is all there is."""
    if threading.current_thread() is not threading.main_thread() or signal.getitimer(signal.ITIMER_REAL)[0]:
        yield
        return

    def expired(_signum: int, _frame: Any) -> None:
        raise _DeadlinePassed

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class PromClient:
    """Range queries with errors translated; use as a context manager."""

    def __init__(self, t: Transport) -> None:
        self.t = t
        session = requests.Session()
        if t.ca_file is not None:
            session.verify = str(t.ca_file)
        elif t.insecure:
            session.verify = False
        # Connection errors, read timeouts and 429/5xx are retried with backoff; a 4xx is final.
        retry = Retry(total=t.retries, connect=t.retries, read=t.retries, status=t.retries,
                      backoff_factor=t.backoff_s, status_forcelist=(429, 500, 502, 503, 504),
                      allowed_methods=None, raise_on_status=False, respect_retry_after_header=False)
        headers = {"Authorization": f"Bearer {t.bearer_token}"} if t.bearer_token else None
        auth = (t.user, t.password or "") if t.user is not None else None
        self.pc = PrometheusConnect(url=t.url, headers=headers, auth=auth, retry=retry, session=session,
                                    timeout=t.timeout_s)
        # Replaces the adapter PrometheusConnect mounted for this URL: the same retries, plus the size cap.
        session.mount(self.pc.url, _CappedAdapter(t.max_response_bytes, max_retries=retry))
        if t.insecure:
            import urllib3

            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

    def __enter__(self) -> PromClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pc.close()

    def query_range(self, query: str, start: datetime, end: datetime, step_s: int) -> list[dict[str, Any]]:
        """The server's matrix for `query` evaluated at start, start+step, ..., end (both UTC-aware,
        whole seconds), validated: each item is {"metric": {label: value}, "values": [[ts, "v"], ...]}."""
        result = self._call(lambda: self.pc.custom_query_range(query, start_time=start, end_time=end,
                                                               step=str(step_s)))
        return _validated(result, self.t.url)

    def query(self, query: str, at: datetime) -> list[dict[str, Any]]:
        """An instant query's vector at `at`: [{"metric": {...}, "value": [ts, "v"]}, ...]."""
        result = self._call(lambda: self.pc.custom_query(query, params={"time": at.timestamp()}))
        if not isinstance(result, list) or not all(isinstance(i, dict) and isinstance(i.get("metric"), dict)
                                                   for i in result):
            raise GpuauditError(f"malformed response from {self.t.url}: data.result is not a vector")
        return result

    def _call(self, fn: Any) -> Any:
        """One request, every failure turned into one GpuauditError line."""
        try:
            with _deadline(self.t.timeout_s * (self.t.retries + 1)):
                return fn()
        except _DeadlinePassed:
            raise GpuauditError(self._timeout_message()) from None
        except _ResponseTooLarge:
            limit = self.t.max_response_bytes / (1024 * 1024)
            raise GpuauditError(f"Prometheus at {self.t.url} sent an answer larger than {limit:g} MiB "
                                "(--max-response-mb): lower --max-points, narrow --selector, or raise the limit"
                                ) from None
        except PrometheusApiClientException as e:
            raise GpuauditError(self._http_error(str(e))) from None
        except requests.exceptions.SSLError as e:
            raise GpuauditError(f"TLS error talking to {self.t.url}: {_reason(e)} "
                                "(use --ca-file for a private CA, or --insecure)") from None
        except requests.exceptions.Timeout:
            raise GpuauditError(self._timeout_message()) from None
        except requests.exceptions.ConnectionError as e:
            if "timed out" in str(e):  # read timeouts that used up the retries arrive as ConnectionError
                raise GpuauditError(self._timeout_message()) from None
            raise GpuauditError(f"cannot reach Prometheus at {self.t.url} (after {self.t.retries} retries): "
                                f"{_reason(e)}") from None
        except (requests.exceptions.JSONDecodeError, json.JSONDecodeError, ValueError):
            raise GpuauditError(f"malformed response from {self.t.url}: not JSON (is --url a Prometheus "
                                "API endpoint?)") from None
        except RecursionError:  # Python's JSON parser recurses per level: [[[[...]]]] deep enough exhausts it
            raise GpuauditError(f"malformed response from {self.t.url}: JSON nested too deeply") from None
        except requests.exceptions.RequestException as e:
            raise GpuauditError(f"request to {self.t.url} failed: {_reason(e)}") from None
        except (KeyError, TypeError):
            raise GpuauditError(f"malformed response from {self.t.url}: no data.result in the JSON") from None

    def _timeout_message(self) -> str:
        return (f"Prometheus at {self.t.url} did not answer within {self.t.timeout_s:g}s "
                f"(after {self.t.retries} retries); raise --timeout, or lower --max-points")

    def _http_error(self, message: str) -> str:
        m = re.match(r"HTTP Status Code (\d+) \((.*)\)$", message, re.S)
        if not m:
            return f"Prometheus at {self.t.url}: {message[:300]}"
        code, body = int(m.group(1)), m.group(2)
        detail = _error_detail(body)
        hint = {
            401: "unauthorized: check --bearer-token-file / $GPUAUDIT_PROM_TOKEN or --user/--password",
            403: "forbidden: the credentials lack read access",
            404: "not found: give the server's base URL (e.g. http://prometheus:9090, without /api/v1)",
        }.get(code)
        if code == 422 or "too many samples" in detail:
            hint = "the server refused the query: try a larger --step or --max-points lower"
        if code in (429, 500, 502, 503, 504):
            hint = f"server error after {self.t.retries} retries"
        text = f"Prometheus at {self.t.url} answered HTTP {code}"
        if hint:
            text += f" ({hint})"
        if detail:
            text += f": {detail}"
        return text


def _error_detail(body_repr: str) -> str:
    """The server's `error` field from the repr of a response body, else a short excerpt."""
    m = re.search(r'"error"\s*:\s*"((?:[^"\\]|\\.)*)"', body_repr)
    if m:
        return m.group(1)[:300]
    text = body_repr.removeprefix("b").strip("'\"").replace("\\n", " ").strip()
    return text[:200]


def _reason(e: Exception) -> str:
    text = str(e)
    for pattern in (r"\[Errno -?\d+\] ([^'\")]+)", r"(Connection refused)", r"(Name or service not known)",
                    r"(certificate verify failed[^'\")]*)", r"(Max retries exceeded)"):
        m = re.search(pattern, text)
        if m:
            return m.group(1).strip().rstrip(":")
    return text[:200]


def _validated(result: Any, url: str) -> list[dict[str, Any]]:
    if not isinstance(result, list):
        raise GpuauditError(f"malformed response from {url}: data.result is not a list (not a range query?)")
    for item in result:
        if not (isinstance(item, dict) and isinstance(item.get("metric"), dict)
                and isinstance(item.get("values"), list)):
            raise GpuauditError(f"malformed response from {url}: a series lacks metric/values")
    return result


def chunks(start: datetime, end: datetime, step_s: int, max_points: int = MAX_POINTS
           ) -> Iterator[tuple[datetime, datetime]]:
    """Evaluation windows [first, last] covering start+step ... end on the step grid, each at most
    max_points points, consecutive and not overlapping (chunk k+1 starts one step after chunk k ends)."""
    from datetime import timedelta

    if max_points < 1:
        raise GpuauditError("--max-points must be at least 1")
    span = timedelta(seconds=step_s * (max_points - 1))
    first = start + timedelta(seconds=step_s)
    while first <= end:
        last = min(first + span, end)
        yield first, last
        first = last + timedelta(seconds=step_s)
