"""The HTTP API (FastAPI): thin routes over the application service, JSON problem documents."""

from .app import create_app

__all__ = ["create_app"]
