"""Running the embedding service: [`serve`] binds the socket and runs uvicorn with the app of `app.py`.

uvicorn handles SIGTERM / Ctrl-C gracefully: it stops accepting connections, lets the requests in flight finish
(their batches are still embedded) for at most `shutdown_grace_s` seconds, then closes what is left (an idle
keep-alive connection, a client that sends half a body and stops), the app's shutdown stops the batcher, and the
process exits with 0.

Connections are guarded where uvicorn has no setting ([`guarded_protocol`]): at most `max_connections` are open at
once (one more closes the connection that has waited longest for a request, or, when every one has a request, is
answered 503 and closed at once: idle clients can neither use up the file descriptors nor keep others out), a
request's head (request line and headers) must arrive within `header_timeout_s` of the connection or of its first
byte (408, then closed), a request answered before its body was read (413 over `--max-body-bytes`, 401, 408) ends
its connection: the answer, then at most `--max-body-bytes` more of the body or [`LINGER_S`] seconds read and
dropped (so that a client sending the whole body before reading gets the answer), then closed (uvicorn alone reads
such a body to its end: 44 GB in 70 s from one client), an idle keep-alive connection is closed after `keep_alive_s` (uvicorn's own), a request
still sending its body at shutdown is answered 503 at once, and a failing `accept()` (out of file descriptors all
the same) is one log line per 10 s, not asyncio's traceback per attempt.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import sys
import time
import warnings

import orjson

from .app import Limits, Security, create_app
from .batching import DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_WAIT_MS

logger = logging.getLogger("hf_laser.serve")

LOG_EVERY_S = 10.0  # a repeated event (refused connections, accept() failures) is logged at most this often
LINGER_S = 5.0  # after answering a request whose body was not read, how long the rest is read (and dropped)


def _raw_error(status: str, message: str, code: str) -> bytes:
    """A whole HTTP/1.1 error response (JSON body as the app's errors, connection closed), written to a transport
    where there is no request to answer through the app."""

    body = orjson.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}})
    return (f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\nconnection: close\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode() + body


class _Throttled:
    """Logs an event the first time and then at most every LOG_EVERY_S seconds, saying how often it happened."""

    def __init__(self, message: str):
        self.message, self.count, self.last = message, 0, None

    def __call__(self, *args) -> None:
        self.count += 1
        now = time.monotonic()
        if self.last is None or now - self.last >= LOG_EVERY_S:
            since = "" if self.last is None else f" ({self.count:,} times in the last {now - self.last:.0f} s)"
            logger.warning(self.message + since, *args)
            self.count, self.last = 0, now


def guarded_protocol(max_connections: int, header_timeout_s: float, *, linger_bytes: int = 16 * 1024 * 1024,
                     linger_s: float = LINGER_S):
    """uvicorn's h11 protocol class with a connection cap, a timeout for a request's head and a bound on what is
    read of a body the app did not read (see the module docstring); the class goes to
    `uvicorn.Config(http=...)`."""
    # lazy: the serve extra
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    refused = _raw_error("503 Service Unavailable", f"the server has {max_connections:,} connections open "
                         "(--max-connections), all with requests; try again later", "too_many_connections")
    timed_out = _raw_error("408 Request Timeout", f"the request's headers did not arrive within {header_timeout_s:g} "
                           "s (--header-timeout-s)", "header_timeout")
    stopping = _raw_error("503 Service Unavailable", "the server is shutting down; the request's body had not "
                          "arrived (send it again)", "shutting_down")
    log_refused = _Throttled("refused a connection: %d open (--max-connections), all with requests")
    log_evicted = _Throttled("closed an idle connection (no request for %.1f s) to make room: %d open "
                             "(--max-connections)")
    log_timed_out = _Throttled("closed a connection whose request headers did not come within %g s")
    log_lingered = _Throttled("closed a connection still sending a body that was answered without being read "
                              "(more than %d bytes or %g s after the answer)")

    class GuardedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _idle_since = 0.0  # (loop time) since when the connection waits for a request
        _linger_left: int | None = None  # bytes of an unread body still dropped before the connection is closed
        _linger_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._idle_since = self.loop.time()
            if len(self.connections) > max_connections and not self._evict_idle():
                # closed now: its file descriptor is free again at once, not when the client gives up
                log_refused(len(self.connections) - 1)
                transport.write(refused)
                transport.close()
                return
            self._arm_head_timer()

        def _idle(self) -> bool:
            """Waiting for a request (a fresh or a keep-alive connection; a head may have begun)."""
            return not self.transport.is_closing() and self.conn.their_state is h11.IDLE and \
                (self.cycle is None or self.cycle.response_complete)

        def _evict_idle(self) -> bool:
            """Closes the connection that has waited longest for a request (not this one), making room for this
            one: idle clients cannot keep the others out. False when every other connection has a request."""
            idle = [c for c in self.connections if c is not self and isinstance(c, GuardedH11Protocol) and c._idle()]
            if not idle:
                return False
            oldest = min(idle, key=lambda c: c._idle_since)
            log_evicted(self.loop.time() - oldest._idle_since, len(self.connections) - 1)
            oldest.transport.close()  # (as a keep-alive timeout does: no answer to a request never sent)
            return True

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._idle_since = self.loop.time()
            if not self.transport.is_closing() and self.conn.their_state is h11.SEND_BODY:
                # answered (a 413, 401, 408, ...) while the client still sends a body the app did not read: uvicorn
                # would read and drop the rest however long it is (44 GB in 70 s from one client). The answer is
                # followed by the end of the connection (FIN), and what still comes is dropped for at most
                # linger_bytes / linger_s, so that a client that sends its whole body before it reads (most do)
                # gets the answer rather than a reset; then the connection is closed
                self._unset_keepalive_if_required()
                self._linger_left = linger_bytes
                self._linger_timer = self.loop.call_later(linger_s, self._end_linger)
                if self.transport.can_write_eof():
                    self.transport.write_eof()

        def _end_linger(self) -> None:
            if self._linger_timer is not None:
                self._linger_timer.cancel()
                self._linger_timer = None
            log_lingered(linger_bytes, linger_s)
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._linger_left is not None:  # the rest of a body the app did not read: discarded, up to a bound
                self._linger_left -= len(data)
                if self._linger_left < 0:
                    self._end_linger()
                return
            super().data_received(data)
            if self.transport.is_closing():
                return
            if self.conn.their_state is h11.IDLE:  # a request's head has begun and is not complete yet
                if self._head_timer is None:
                    self._arm_head_timer()
            elif self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def connection_lost(self, exc) -> None:
            if self._linger_timer is not None:
                self._linger_timer.cancel()
                self._linger_timer = None
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

        def shutdown(self) -> None:
            # a request still sending its body is not served at shutdown: answered 503 now, so that a client
            # trickling a body does not hold the exit for --body-timeout-s
            cycle = self.cycle
            if cycle is not None and not cycle.response_started and self.conn.their_state is h11.SEND_BODY:
                self.transport.write(stopping)
                self.transport.close()  # (the app's receive() then says the client disconnected)
                return
            super().shutdown()

        def _arm_head_timer(self) -> None:
            self._head_timer = self.loop.call_later(header_timeout_s, self._head_timeout)

        def _head_timeout(self) -> None:
            self._head_timer = None
            # IDLE: no request's head complete since the timer was armed (one being answered is SEND_BODY / DONE)
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                log_timed_out(header_timeout_s)
                self.transport.write(timed_out)
                self.transport.close()

    return GuardedH11Protocol


def _warnings_as_log_lines() -> None:
    """Python warnings raised while serving become one log line each (not a source line on stderr); an unknown
    language code is answered in the response's `warnings` already, so it is not logged once per code a client
    makes up."""
    warnings.filterwarnings("ignore", message="unknown language code", category=UserWarning)

    def show(message, category, filename, lineno, file=None, line=None):
        logger.warning("%s: %s", category.__name__, " ".join(str(message).split()))

    warnings.showwarning = show


def _accept_errors_throttled(loop: asyncio.AbstractEventLoop) -> None:
    """asyncio logs a traceback for every failed `accept()` (Python 3.11 tries `backlog` times per turn: 2,048
    tracebacks a second, 73 MB of log a minute when out of file descriptors); this makes it one line per 10 s."""
    log = _Throttled("cannot accept connections: %s (open files limit %d); new connections wait")
    default = loop.get_exception_handler()

    def handler(loop, context):
        if context.get("message") == "socket.accept() out of system resource":
            log(context.get("exception"), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        elif default is not None:
            default(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def raise_open_files_limit(max_connections: int, spare: int = 64) -> int:
    """Raises this process's soft limit of open files to the hard one (as servers do) and gives back how many
    connections fit under it beside the descriptors open now (the model's files, logs, the listening socket) and
    `spare` more: the smaller of that and `max_connections`."""

    try:
        open_now = len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc (macOS): a generous guess
        open_now = 256
    reserve = open_now + spare
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or hard > soft):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return max(1, min(max_connections, soft - reserve))


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
          max_connections: int = 1000, keep_alive_s: float = 30.0, header_timeout_s: float = 10.0) -> None:
    """Serves `encoder` over HTTP on `host:port` (or the listening socket `sock`, see [`bind`]) until SIGTERM /
    SIGINT (see the module docstring). `announce(url)` is called once the socket listens (default: a line on
    stderr)."""
    # lazy: the serve extra
    import uvicorn

    app = create_app(encoder, model_id=model_id, limits=limits, max_batch_tokens=max_batch_tokens,
                     max_wait_ms=max_wait_ms, security=security, on_start=_accept_errors_throttled)
    sock = bind(host, port) if sock is None else sock
    try:
        connections = raise_open_files_limit(max_connections)
        if connections < max_connections:
            print(f"hf-laser serve: --max-connections {max_connections:,} lowered to {connections:,}: the open files "
                  f"limit is {resource.getrlimit(resource.RLIMIT_NOFILE)[0]:,} (raise it with ulimit -n)",
                  file=sys.stderr, flush=True)
        # the h11 protocol in all cases (uvicorn would take httptools where installed): the guards are written for it
        config = uvicorn.Config(app, log_level=log_level, access_log=access_log, lifespan="on",
                                http=guarded_protocol(connections, header_timeout_s,
                                                      linger_bytes=limits.max_body_bytes),
                                timeout_keep_alive=keep_alive_s, timeout_graceful_shutdown=shutdown_grace_s)
        # the app's log lines (errors with their request id, refused connections) go where uvicorn's go
        uvicorn_log = logging.getLogger("uvicorn")
        logger.handlers, logger.propagate = list(uvicorn_log.handlers), False
        logger.setLevel(logging.getLogger("uvicorn.error").getEffectiveLevel())
        server = uvicorn.Server(config)
        url = url_of(sock)
        if announce is None:
            print(f"hf-laser serve: {app.state.service.model_id} ({encoder.dim}-d) on {url}  "
                  f"(demo page {url}/, OpenAI API {url}/v1, LASER API {url}/vectorize)", file=sys.stderr, flush=True)
        else:
            announce(url)
        with warnings.catch_warnings():  # (restored after: serve() may run inside another program)
            _warnings_as_log_lines()
            server.run(sockets=[sock])
    finally:
        sock.close()
