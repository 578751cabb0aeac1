"""The translation page of `mtkit serve` at `/`: plain HTML, CSS and JavaScript files (static/) that
use the server's own API, with no build step and nothing loaded from another host."""

from pathlib import Path

PAGE_DIR = Path(__file__).with_name("static")
FILES = {"page.css": "text/css; charset=utf-8", "page.js": "text/javascript; charset=utf-8"}


def add_page(app) -> None:
    """GET / (the page) and GET /page/NAME (its style sheet and script) on a FastAPI app."""
    from fastapi.responses import HTMLResponse, Response

    from mtkit.serving.service import RequestError

    html = (PAGE_DIR / "index.html").read_text(encoding="utf-8")  # read once, when the app is made
    files = {name: (PAGE_DIR / name).read_bytes() for name in FILES}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page():
        return HTMLResponse(html)

    @app.get("/page/{name}", include_in_schema=False)
    async def page_file(name: str):
        if name not in files:
            raise RequestError(404, f"/page/{name}: no such file")
        return Response(files[name], media_type=FILES[name])
