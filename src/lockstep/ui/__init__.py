"""The operations web UI: server-rendered Jinja2 pages under /ui, session login, CSRF on every form."""

from .routes import mount

__all__ = ["mount"]
