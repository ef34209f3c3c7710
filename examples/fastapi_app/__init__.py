"""A FastAPI app that enqueues with ``await Worker.aperform_async`` and mounts the lowkiq
dashboard (see ``app.py``; docs/guides/asyncio-fastapi.md)."""
