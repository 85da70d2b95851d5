"""A real S3-compatible server for tests: moto in server mode on 127.0.0.1 (a free port), plus the AWS
environment that points clients at it. Started once per test module (see the fixtures in test_collection.py)."""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class S3Server:
    endpoint: str
    env: dict[str, str]
    server: Any
    puts: list[str] = field(default_factory=list)  # "PUT /bucket/key" requests the server answered

    def new_bucket(self) -> str:
        import s3fs

        name = f"b-{uuid.uuid4().hex[:12]}"
        s3fs.S3FileSystem(endpoint_url=self.endpoint, skip_instance_cache=True).mkdir(name)
        return name

    def keys(self, url: str) -> list[str]:
        """Every object key under s3://bucket/prefix, relative to it, sorted."""
        import s3fs

        base = url.removeprefix("s3://").rstrip("/")
        fs = s3fs.S3FileSystem(endpoint_url=self.endpoint, skip_instance_cache=True, use_listings_cache=False)
        return sorted(k[len(base) + 1:] for k in fs.find(base))


class _RequestLog(logging.Handler):
    """Counts the object PUTs the server answered (werkzeug logs one line per request it served)."""

    def __init__(self, server: S3Server) -> None:
        super().__init__(logging.INFO)
        self.s3 = server

    def emit(self, record: logging.LogRecord) -> None:
        parts = record.getMessage().split('"')  # ... "PUT /bucket/key HTTP/1.1" 200 -
        method, _, rest = parts[1].partition(" ") if len(parts) > 2 else ("", "", "")
        path = rest.rsplit(" ", 1)[0]
        if method == "PUT" and "?" not in path and path.count("/") >= 2:  # an object, not a bucket
            self.s3.puts.append(path)


@contextlib.contextmanager
def moto_s3() -> Iterator[S3Server]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint,
        # Never a developer's own AWS config or the instance metadata service.
        "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    s3 = S3Server(endpoint, env, server)
    wlog = logging.getLogger("werkzeug")
    handler = _RequestLog(s3)
    old_level, old_propagate = wlog.level, wlog.propagate
    wlog.setLevel(logging.INFO)
    wlog.propagate = False  # the request lines are counted, not printed
    wlog.addHandler(handler)
    try:
        yield s3
    finally:
        wlog.removeHandler(handler)
        wlog.setLevel(old_level)
        wlog.propagate = old_propagate
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
