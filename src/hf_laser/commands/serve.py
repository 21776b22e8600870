"""`hf-laser serve`: a LASER model kept loaded behind HTTP (`hf_laser.serving`). The web stack (starlette, uvicorn,
orjson: the `serve` extra) and torch are imported only when the command runs."""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import UsageError
from ..models import resolve_model
from ..serving.batching import DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_WAIT_MS
from .common import add_speed_argument, load_encoder_for_cli, speed_kwargs

WHO = "hf-laser serve"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # hf_laser.serving.batching imports numpy only: `hf-laser serve --help` stays fast

    parser.add_argument("--model", default=None,
                        help="model directory (from hf-laser convert) or Hub id (default: the shipped laser-mini)")
    parser.add_argument("--model-name", default=None,
                        help="the model id the API reports (default: the model directory's name)")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default {DEFAULT_HOST}: this machine only; on other addresses "
                             "set --api-key and --allowed-hosts, or put it behind a proxy)")
    parser.add_argument("--api-key", default=None,
                        help="require 'Authorization: Bearer KEY' on every route but /health and the demo page's HTML "
                             "(default: $HF_LASER_API_KEY; unset: no key)")
    parser.add_argument("--allowed-hosts", default=None,
                        help="comma-separated Host names the server answers to (default: localhost,127.0.0.1,::1 "
                             "and the --host address; '*': any; others get 421, which stops DNS rebinding)")
    parser.add_argument("--max-input-chars", type=int, default=400_000,
                        help="characters of one input, checked before it is tokenized (default 400,000; 413 above)")
    parser.add_argument("--max-input-tokens", type=int, default=8192,
                        help="LASER tokens of one input, </s> included (default 8,192, as OpenAI's; 413 above: a "
                             "sentence is one pass of the model that holds every other request)")
    parser.add_argument("--body-timeout-s", type=float, default=30.0,
                        help="time a client has to send a request's body (default 30; 408 after it)")
    parser.add_argument("--header-timeout-s", type=float, default=10.0,
                        help="time a client has to send a request's line and headers, from the connection or from the "
                             "request's first byte (default 10; 408 and closed after it)")
    parser.add_argument("--keep-alive-s", type=float, default=30.0,
                        help="an idle keep-alive connection is closed after this (default 30)")
    parser.add_argument("--shutdown-grace-s", type=float, default=60.0,
                        help="on SIGTERM / Ctrl-C, how long requests in flight may take before the connections are "
                             "closed (default 60)")
    parser.add_argument("--max-connections", type=int, default=1000,
                        help="connections open at once (default 1000; one more closes the connection idle longest, "
                             "or is answered 503 when every one has a request; lowered to what the open files limit "
                             "allows)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: a free one)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:1 ...")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                        help="model dtype (float32: the original's numbers; the others trade fidelity for speed)")
    parser.add_argument("--int8", action="store_true", help="int8 dynamic quantisation of the LSTM (CPU only)")
    add_speed_argument(parser)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of the model (default: torch's choice less one, at least 1: a core is left "
                             "to the HTTP and tokenizer threads)")
    parser.add_argument("--max-batch-tokens", type=int, default=DEFAULT_MAX_BATCH_TOKENS,
                        help="token budget of one model call, over the requests batched together "
                             f"(default {DEFAULT_MAX_BATCH_TOKENS:,})")
    parser.add_argument("--max-wait-ms", type=float, default=DEFAULT_MAX_WAIT_MS,
                        help="how long a request may wait for others to join its batch (default "
                             f"{DEFAULT_MAX_WAIT_MS:g} ms; requests arriving while the model is busy are batched "
                             "anyway)")
    parser.add_argument("--max-inputs", type=int, default=2048, help="sentences per request (default 2048; 413 above)")
    parser.add_argument("--max-request-tokens", type=int, default=100_000,
                        help="LASER tokens per request, </s> included (default 100,000; 413 above)")
    parser.add_argument("--max-body-bytes", type=int, default=16 * 1024 * 1024,
                        help="request body size (default 16 MiB; 413 above)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                        help="the server's log level (uvicorn's; default info: start-up, errors, one line per request)")
    parser.add_argument("--no-access-log", action="store_true", help="no line per request on stdout")


def run(args: argparse.Namespace) -> int:
    for name in ("max_batch_tokens", "max_inputs", "max_request_tokens", "max_body_bytes", "threads",
                 "max_connections", "max_input_chars", "max_input_tokens"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {value}")
    for name in ("body_timeout_s", "header_timeout_s", "keep_alive_s"):
        if getattr(args, name) <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.shutdown_grace_s < 0:
        raise UsageError(f"--shutdown-grace-s must be >= 0, got {args.shutdown_grace_s}")
    if args.max_wait_ms < 0:
        raise UsageError(f"--max-wait-ms must be >= 0, got {args.max_wait_ms}")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be in 0..65535, got {args.port}")
    try:
        # lazy: the serve extra
        import orjson  # noqa: F401
        import starlette  # noqa: F401

        # lazy: the serve extra
        import uvicorn  # noqa: F401
    except ImportError as err:
        raise ImportError(f"hf-laser serve needs the 'serve' extra ({err.name} is missing): "
                          "pip install 'hf-laser[serve]'") from err
    # lazy: serving.server imports numpy, orjson, starlette
    from ..serving.server import bind

    try:  # before the model is loaded: a port in use is reported at once
        sock = bind(args.host, args.port)
    except OSError as err:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {err.strerror or err}") from err
    try:
        # lazy: torch (the NumPy engine and the command line's start run without it)
        import torch

        # lazy: serving.app imports numpy, orjson, starlette
        from ..serving.app import Limits, model_name

        # lazy: serving.server imports numpy, orjson, starlette
        from ..serving.server import serve

        torch.set_num_threads(args.threads or max(1, torch.get_num_threads() - 1))
        if args.device.startswith("cuda") and not torch.cuda.is_available():
            raise UsageError(f"--device {args.device} but no CUDA device is available")
        model = resolve_model(args.model, who=WHO)
        loading = speed_kwargs(args, dtype=args.dtype, int8=args.int8)
        if "dtype" in loading:
            loading["dtype"] = getattr(torch, args.dtype)
        encoder = load_encoder_for_cli(model, WHO, device=args.device, **loading)
        limits = Limits(max_inputs=args.max_inputs, max_request_tokens=args.max_request_tokens,
                        max_body_bytes=args.max_body_bytes, body_timeout_s=args.body_timeout_s,
                        max_input_chars=args.max_input_chars, max_input_tokens=args.max_input_tokens)
        try:
            serve(encoder, sock=sock, model_id=args.model_name or model_name(model), limits=limits,
                  max_batch_tokens=args.max_batch_tokens, max_wait_ms=args.max_wait_ms, log_level=args.log_level,
                  access_log=not args.no_access_log, security=security_of(args),
                  shutdown_grace_s=args.shutdown_grace_s, max_connections=args.max_connections,
                  header_timeout_s=args.header_timeout_s, keep_alive_s=args.keep_alive_s)
        except KeyboardInterrupt:  # Ctrl-C: uvicorn has shut down gracefully, then raised it again
            print(f"{WHO}: stopped (Ctrl-C)", file=sys.stderr)
            return 130
    finally:
        sock.close()
    return 0


def security_of(args: argparse.Namespace):
    """The server's [`~hf_laser.serving.app.Security`] from `--api-key` / `$HF_LASER_API_KEY` and `--allowed-hosts`
    (default: the loopback names and the `--host` address)."""

    # lazy: serving.app imports numpy, orjson, starlette
    from ..serving.app import LOOPBACK_HOSTS, Security

    key = args.api_key if args.api_key is not None else os.environ.get("HF_LASER_API_KEY") or None
    if args.allowed_hosts is not None:
        hosts = tuple(h.strip() for h in args.allowed_hosts.split(",") if h.strip())
        if not hosts:
            raise UsageError("--allowed-hosts is empty: give host names, or '*' for any")
    else:
        hosts = LOOPBACK_HOSTS + ((args.host,) if args.host not in ("0.0.0.0", "::", "") else ())
    return Security(api_key=key, allowed_hosts=hosts)
