"""The translation page of `mtkit serve` at `/`: plain HTML, CSS and JavaScript files (page/) that
use the server's own API, with no build step and nothing loaded from another host."""

from pathlib import Path

PAGE_DIR = Path(__file__).with_name("page")
FILES = {"page.css": "text/css; charset=utf-8", "page.js": "text/javascript; charset=utf-8"}


def add_page(app) -> None:
    """GET / (the page) and GET /page/NAME (its style sheet and script) on a FastAPI app."""
    from fastapi.responses import HTMLResponse, Response

    from mtkit.serving.service import RequestError

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page():
        return HTMLResponse((PAGE_DIR / "index.html").read_text(encoding="utf-8"))

    @app.get("/page/{name}", include_in_schema=False)
    async def page_file(name: str):
        if name not in FILES:
            raise RequestError(404, f"/page/{name}: no such file")
        return Response((PAGE_DIR / name).read_bytes(), media_type=FILES[name])
