"""The REST edge: V2 over HTTP (the ASGI fast path, Starlette routes, SSE, custom routes)."""
