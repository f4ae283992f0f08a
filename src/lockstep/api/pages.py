"""The API's own pages: the problem types (`type` URIs of every error) and the API explorer at /docs.

The explorer is Swagger UI served from the package (src/lockstep/api/static/swagger-ui, see its
README.md): nothing is loaded from another origin, and its init script runs under the page's CSP nonce.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from ..errors import NotFound
from . import html
from .codes import known_codes

__all__ = ["install"]

ASSETS = "/docs/static"


def install(app: FastAPI) -> None:
    app.mount(ASSETS, StaticFiles(directory=str(Path(__file__).parent / "static")), name="api-static")

    @app.get("/problems", include_in_schema=False)
    def problem_types() -> HTMLResponse:
        return html.render("problems.html", {"codes": known_codes()})

    @app.get("/problems/{name}", include_in_schema=False)
    def problem_type(name: str) -> HTMLResponse:
        code = known_codes().get(name)
        if code is None:
            # Never echo the name: it is whatever a link's author put there.
            raise NotFound("there is no such problem type; the list of them is at /problems")
        return html.render("problem.html", {"slug": name, "code": code})

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return html.render(
            "docs.html",
            {"title": app.title, "openapi_url": app.openapi_url, "assets": f"{ASSETS}/swagger-ui"},
        )
