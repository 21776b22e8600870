"""Running the embedding service: [`serve`] binds the socket and runs uvicorn with the app of `app.py`.

uvicorn handles SIGTERM / Ctrl-C gracefully: it stops accepting connections, lets the requests in flight finish
(their batches are still embedded) for at most `shutdown_grace_s` seconds, then closes what is left (an idle
keep-alive connection, a client that sends half a body and stops), the app's shutdown stops the batcher, and the
process exits with 0. At most `max_connections` connections and requests are served at once (more get 503), and an
idle keep-alive connection is closed after `keep_alive_s`.
"""

from __future__ import annotations

import socket
import sys

from .app import Limits, Security, create_app
from .batching import DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_WAIT_MS


def bind(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket on `host:port` (port 0: a free port, see `sock.getsockname()`)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(encoder, *, host: str = "127.0.0.1", port: int = 8080, sock: socket.socket | None = None,
          model_id: str | None = None, limits: Limits = Limits(), max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
          max_wait_ms: float = DEFAULT_MAX_WAIT_MS, log_level: str = "info", access_log: bool = True,
          announce=None, security: Security = Security(), shutdown_grace_s: float = 60.0,
          max_connections: int = 1000, keep_alive_s: float = 30.0) -> None:
    """Serves `encoder` over HTTP on `host:port` (or the listening socket `sock`, see [`bind`]) until SIGTERM /
    SIGINT (see the module docstring). `announce(url)` is called once the socket listens (default: a line on
    stderr)."""
    import uvicorn

    app = create_app(encoder, model_id=model_id, limits=limits, max_batch_tokens=max_batch_tokens,
                     max_wait_ms=max_wait_ms, security=security)
    sock = bind(host, port) if sock is None else sock
    try:
        config = uvicorn.Config(app, log_level=log_level, access_log=access_log, lifespan="on",
                                timeout_keep_alive=keep_alive_s, timeout_graceful_shutdown=shutdown_grace_s,
                                limit_concurrency=max_connections)
        server = uvicorn.Server(config)
        url = url_of(sock)
        if announce is None:
            print(f"hf-laser serve: {app.state.service.model_id} ({encoder.dim}-d) on {url}  "
                  f"(demo page {url}/, OpenAI API {url}/v1, LASER API {url}/vectorize)", file=sys.stderr, flush=True)
        else:
            announce(url)
        server.run(sockets=[sock])
    finally:
        sock.close()
