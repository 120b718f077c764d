"""``lakewrap docs serve``: the generated site over HTTP, standard library only, on 127.0.0.1."""

from __future__ import annotations

import functools
import http.server
from collections.abc import Callable
from pathlib import Path

from lakewrap.errors import ConfigError


class _Quiet(http.server.SimpleHTTPRequestHandler):
    """Files of the site folder; one log line per request on stderr, as the standard handler writes."""

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")  # a regenerated site shows at once
        super().end_headers()


def server(folder: Path, port: int) -> http.server.ThreadingHTTPServer:
    """An HTTP server of ``folder`` bound to 127.0.0.1:``port`` (0: a free port); not yet serving."""
    if not (folder / "index.html").is_file():
        raise ConfigError(f"no documentation site in {folder.parent.name}/{folder.name}/",
                          hint="write it first with `lakewrap docs generate`")
    handler = functools.partial(_Quiet, directory=str(folder))
    try:
        return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        raise ConfigError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}",
                          hint="choose another --port (0 takes any free port)") from None


def serve(folder: Path, port: int, ready: Callable[[str], None]) -> None:
    """Serve until Ctrl-C (or SIGTERM's KeyboardInterrupt), then close the socket."""
    httpd = server(folder, port)
    host, bound = httpd.server_address[:2]
    ready(f"http://{host!s}:{bound}/")
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
