"""`hf-laser serve`: a LASER model kept loaded behind HTTP (needs the `serve` extra: starlette, uvicorn, orjson).

- `app.py`: the ASGI app (OpenAI `POST /v1/embeddings`, the original LASER server's `/vectorize`, `/health`,
  `/v1/models`, the demo page at `/`);
- `batching.py`: dynamic batching of concurrent requests (asyncio task + one model thread);
- `server.py`: [`serve`], which runs it with uvicorn.

Python::

    from hf_laser import LaserEncoder
    from hf_laser.serving import serve
    serve(LaserEncoder.from_pretrained(), host="127.0.0.1", port=8080)
"""

from __future__ import annotations

__all__ = ["serve", "create_app", "Limits", "DynamicBatcher"]


def __getattr__(name: str):
    if name in ("serve",):
        # lazy: serving.server imports this module
        from .server import serve

        return serve
    if name in ("create_app", "Limits"):
        # lazy: serving.app imports this module
        from . import app

        return getattr(app, name)
    if name == "DynamicBatcher":
        # lazy: serving.batching imports this module
        from .batching import DynamicBatcher

        return DynamicBatcher
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
