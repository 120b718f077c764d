"""The operations page of ``lakewrap serve`` at ``/ui``: one HTML page, a script and a stylesheet
packaged in ``lakewrap/service_assets/`` (no network: no CDN, no web fonts). The page reads the API
(``GET /runs``, ``/runs/{id}``, ``/runs/{id}/logs``, ``/models``, ``/models/{target}``) and queues
backfills through ``POST /runs``, polling ``GET /jobs/{id}``; with a token set on the server it
asks for the token once and sends it as ``Authorization: Bearer`` (kept in the tab's sessionStorage).
"""

from __future__ import annotations

from importlib import resources
from typing import Any

ASSETS = {"ui.js": "text/javascript; charset=utf-8", "ui.css": "text/css; charset=utf-8"}
# The page's only sources are this server: no inline script, nothing from the network.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def asset(name: str) -> bytes:
    return (resources.files("lakewrap") / "service_assets" / name).read_bytes()


def mount(app: Any) -> None:
    """``GET /ui`` (the page) and ``GET /ui/assets/{name}`` (its script and stylesheet) on ``app``."""
    from fastapi.responses import RedirectResponse, Response
    from starlette.exceptions import HTTPException

    headers = {"Content-Security-Policy": CSP, "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}

    @app.get("/ui", include_in_schema=False)
    def page() -> Response:
        return Response(asset("index.html"), media_type="text/html; charset=utf-8", headers=headers)

    @app.get("/ui/", include_in_schema=False)
    def page_slash() -> Response:
        return RedirectResponse("/ui")

    @app.get("/ui/assets/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in ASSETS:
            raise HTTPException(404, f"no asset {name}")
        return Response(asset(name), media_type=ASSETS[name], headers=headers)
