"""`resdyn ui`'s additions to the Dagster webserver, called as ASGI apps (and over HTTP): only figures a current
manifest (or the study's figures.json) names are served, after their sha256 is checked, on disk and on S3 (a damaged
one is an HTTP error, never its bytes; a PNG nothing names is not served; nothing outside `_artefacts`), Dagster's
pages get the stylesheet with a correct content length, and the bare asset graph opens with the study's groups
expanded. The whole UI in a browser is tests/test_browser.py."""

import asyncio
import contextlib
import hashlib
import io
import json
import threading
import time
import urllib.error
import urllib.request

import numpy as np

from resdyn.dagster_project.configuration.ports import free_ports
from resdyn.dagster_project.interface.ui import (
    ARTEFACT_ROUTE,
    STYLESHEET,
    artefact_url,
    object_figure_key,
    study_groups,
    with_artefacts,
)

PAGE = b"<html><head><title>Dagster</title></head><body>graph</body></html>"


async def _dagster_page(scope, receive, send):  # stands for Dagster's app: an HTML page or a JSON answer
    html = scope["path"] != "/graphql"
    body = PAGE if html else b'{"data": {}}'
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"text/html; charset=utf-8" if html else b"application/json"),
        (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _get(app, path: str, query: bytes = b"") -> tuple[int, dict, bytes]:
    sent, requested = [], []

    async def receive():  # the request once, then a client that stays connected
        if not requested:
            requested.append(True)
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": query,
             "headers": [], "root_path": "", "scheme": "http", "server": ("127.0.0.1", 3000), "http_version": "1.1"}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode().lower(): v.decode() for k, v in start["headers"]}, body


def _png(seed: int) -> bytes:
    """A small real PNG (noise), as the figures are: the thumbnails are drawn from it."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, size=(int(rng.integers(20, 60)), int(rng.integers(20, 60)), 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _entry(data: bytes) -> dict:
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _figures_of_a_partition(put, seed: int) -> dict[str, bytes]:
    """Through ``put(key, bytes)``: partition m@local's manifest naming its published figures (run-2) and the previous
    generation's (run-1), each with its size and sha256, one named without a sha256 (an older resdyn), a leftover of
    a dead run (run-0) and a stray PNG no manifest names; the study's report figure with its figures.json. Every
    figure's key -> its bytes."""
    base = "_artefacts/figures/m/local"
    figures = {f"{base}/run-2/x.png": _png(seed), f"{base}/run-2/x.inline.png": _png(seed + 1),
               f"{base}/run-1/x.png": _png(seed + 2), f"{base}/run-2/old.png": _png(seed + 3),
               f"{base}/run-0/x.png": _png(seed + 4), f"{base}/stray/y.png": _png(seed + 5),
               "_artefacts/report/study_fdr_layers.png": _png(seed + 6)}
    for key, data in figures.items():
        put(key, data)
    put("_published/model=m/checkpoint=local.json", json.dumps({
        "model": "m", "checkpoint": "local", "generation": 2, "tables": {},
        "figures": {"x": f"{base}/run-2/x.png", "x.inline": f"{base}/run-2/x.inline.png", "old": f"{base}/run-2/old.png"},
        "figure_files": {"x": _entry(figures[f"{base}/run-2/x.png"]),
                         "x.inline": _entry(figures[f"{base}/run-2/x.inline.png"])},
        "previous_figures": {"x": f"{base}/run-1/x.png"},
        "previous_figure_files": {"x": _entry(figures[f"{base}/run-1/x.png"])}}).encode())
    put("_artefacts/report/figures.json", json.dumps({"figures": {
        "study_fdr_layers.png": _entry(figures["_artefacts/report/study_fdr_layers.png"])}}).encode())
    return figures


def _served_only_when_named_and_intact(app, figures: dict[str, bytes], damage) -> None:
    """The named figures are served as published; a thumbnail of a study figure is drawn from it; what nothing names
    is 404, a figure named without a sha256 too; a damaged one (``damage(key)``) is a 500 saying what to rerun."""
    from PIL import Image

    base = "figures/m/local"
    for relative in (f"{base}/run-2/x.png", f"{base}/run-2/x.inline.png", f"{base}/run-1/x.png",
                     "report/study_fdr_layers.png"):
        status, headers, body = _get(app, f"{ARTEFACT_ROUTE}/{relative}")
        assert status == 200 and body == figures["_artefacts/" + relative], relative
        assert headers["content-type"] == "image/png" and headers["cache-control"] == "no-store"
    status, _, thumbnail = _get(app, f"{ARTEFACT_ROUTE}/report/study_fdr_layers.inline.png")
    with Image.open(io.BytesIO(thumbnail)) as small, \
            Image.open(io.BytesIO(figures["_artefacts/report/study_fdr_layers.png"])) as full:
        assert status == 200 and small.size == full.size  # below the thumbnail width: drawn as large
    for relative in (f"{base}/run-0/x.png", f"{base}/stray/y.png", "report/other.png", f"{base}/run-2/missing.png",
                     "figures/n/local/run-2/x.png", "claims/m/claims.png"):
        status, _, body = _get(app, f"{ARTEFACT_ROUTE}/{relative}")
        assert status == 404 and b"not a figure" in body, relative
    status, _, body = _get(app, f"{ARTEFACT_ROUTE}/{base}/run-2/old.png")
    assert status == 404 and b"without a sha256" in body and b"resdyn run --model m --checkpoint local" in body
    for key in (f"_artefacts/{base}/run-2/x.png", "_artefacts/report/study_fdr_layers.png"):
        damage(key)
        status, headers, body = _get(app, f"{ARTEFACT_ROUTE}/{key.removeprefix('_artefacts/')}")
        assert status == 500 and b"is damaged" in body and body.count(b"\n") == 0, body
        assert figures[key][:8] not in body and headers["content-type"].startswith("text/plain")
    status, _, body = _get(app, f"{ARTEFACT_ROUTE}/report/study_fdr_layers.inline.png")  # nor a thumbnail of it
    assert status == 500 and b"resdyn report" in body


def _flip_a_byte(data: bytes, seed: int) -> bytes:
    position = int(np.random.default_rng(seed).integers(8, len(data)))
    return data[:position] + bytes([data[position] ^ 1]) + data[position + 1:]  # the same size: only sha256 tells


def test_only_figures_a_current_manifest_names_are_served_and_only_intact(tmp_path, fresh_seed):
    def put(key, data):
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(data)

    figures = _figures_of_a_partition(put, fresh_seed)
    (tmp_path / "secret.png").write_bytes(b"outside _artefacts")
    app = with_artefacts(_dagster_page, tmp_path, ["spectra"])
    assert artefact_url(tmp_path / "_artefacts/figures/m/local/run-2/x.png") == \
        f"{ARTEFACT_ROUTE}/figures/m/local/run-2/x.png"
    _served_only_when_named_and_intact(app, figures, lambda key: put(key, _flip_a_byte(figures[key], fresh_seed)))
    for refused in (f"{ARTEFACT_ROUTE}/figures/m/local/run-2/x.txt", f"{ARTEFACT_ROUTE}/../secret.png",
                    f"{ARTEFACT_ROUTE}/figures/../../secret.png", f"{ARTEFACT_ROUTE}/figures/m/local/x\x00.png",
                    f"{ARTEFACT_ROUTE}/figures/{'a' * 300}.png",  # a name over NAME_MAX
                    f"{ARTEFACT_ROUTE}/{'/'.join(['b' * 250] * 20)}.png"):  # a path over PATH_MAX
        assert _get(app, refused)[0] == 404, refused
    assert artefact_url(tmp_path / "secret.png") is None


def test_only_figures_a_current_manifest_names_are_served_from_an_object_store(s3_warehouse, fresh_seed,
                                                                               monkeypatch):
    from resdyn.dagster_project.store.object_store import ObjectStore

    store = ObjectStore(s3_warehouse)
    figures = _figures_of_a_partition(store.put, fresh_seed)
    store.put("secret.png", b"outside _artefacts")
    asked = []  # every key the UI asks the store for: a refused name never reaches it
    get = ObjectStore.get
    monkeypatch.setattr(ObjectStore, "get", lambda self, key: asked.append(key) or get(self, key))
    app = with_artefacts(_dagster_page, s3_warehouse, ["spectra"])
    _served_only_when_named_and_intact(app, figures,
                                       lambda key: store.put(key, _flip_a_byte(figures[key], fresh_seed)))
    asked.clear()
    # each names a figure above (or a key outside _artefacts/) to a store or a proxy that normalizes a path
    for refused in ("figures/m/local/run-2/notes.txt", "../secret.png", "figures/m/./local/run-2/x.png",
                    "figures/m/local//run-2/x.png", "figures/m/local/run-2/../run-2/x.png", "figures/../../secret.png",
                    "figures/m/local/run-2\\x.png", "figures/m/local/ ../run-2/x.png", "figures/m/local/x\x00.png",
                    ".hidden.png", f"figures/{'/'.join(['b' * 250] * 4)}.png"):  # over S3's 1,024-byte key
        assert _get(app, f"{ARTEFACT_ROUTE}/{refused}")[0] == 404, refused
        assert object_figure_key(refused, s3_warehouse) is None, refused
    assert asked == [], f"refused names reached the store: {asked}"
    # a key at the limit with the warehouse's prefix counted
    room = 1024 - len(s3_warehouse.key("_artefacts/figures/.png").encode())
    assert object_figure_key("figures/" + "c" * room + ".png", s3_warehouse) is not None
    assert object_figure_key("figures/" + "c" * (room + 1) + ".png", s3_warehouse) is None


@contextlib.contextmanager
def _serving(app):
    """``app`` served over HTTP by uvicorn on a free loopback port (in a thread), stopped at the end."""
    import uvicorn

    (port,) = free_ports(1)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _http(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_over_http_a_damaged_figure_is_an_error_and_a_figure_no_manifest_names_is_not_served(tmp_path, s3_warehouse,
                                                                                             fresh_seed):
    """The route as a browser reaches it (uvicorn, HTTP), on disk and on S3: the published figure, then the same
    figure damaged in place (500 and one line, not its bytes), and a PNG no manifest names (404)."""
    from resdyn.dagster_project.store.object_store import ObjectStore

    def put_on_disk(key, data):
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(data)

    store = ObjectStore(s3_warehouse)
    for warehouse, put in ((tmp_path, put_on_disk), (s3_warehouse, store.put)):
        figures = _figures_of_a_partition(put, fresh_seed)
        figure = "figures/m/local/run-2/x.png"
        with _serving(with_artefacts(_dagster_page, warehouse, ["spectra"])) as port:
            assert _http(port, f"{ARTEFACT_ROUTE}/{figure}") == (200, figures[f"_artefacts/{figure}"])
            put(f"_artefacts/{figure}", _flip_a_byte(figures[f"_artefacts/{figure}"], fresh_seed))
            status, body = _http(port, f"{ARTEFACT_ROUTE}/{figure}")
            assert status == 500 and body.startswith(str(warehouse).encode()) and b"is damaged" in body, body
            assert _http(port, f"{ARTEFACT_ROUTE}/figures/m/local/stray/y.png")[0] == 404
            assert _http(port, "/runs")[0] == 200  # the UI itself keeps serving


def test_a_store_that_does_not_answer_is_a_502_and_the_ui_keeps_serving(monkeypatch):
    from resdyn.dagster_project.configuration.locations import parse_location

    (port,) = free_ports(1)  # nothing listens there
    for name, value in {"AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "k",
                        "AWS_SECRET_ACCESS_KEY": "s"}.items():
        monkeypatch.setenv(name, value)
    app = with_artefacts(_dagster_page, parse_location("s3://bucket/prefix"), ["spectra"])
    status, _, body = _get(app, f"{ARTEFACT_ROUTE}/figures/m/local/run-1/x.png")
    assert status == 502 and b"could not be read" in body
    assert _get(app, "/runs")[0] == 200


def test_pages_get_the_stylesheet_and_the_graph_opens_expanded(tmp_path):
    groups = study_groups()
    assert {"inputs", "measurements", "spectra", "study"} <= set(groups)
    app = with_artefacts(_dagster_page, tmp_path, groups)

    status, headers, body = _get(app, "/runs")
    assert status == 200 and f"<style>{STYLESHEET}</style></head>".encode() in body
    assert int(headers["content-length"]) == len(body)
    status, headers, body = _get(app, "/graphql")
    assert body == b'{"data": {}}' and int(headers["content-length"]) == len(body)  # JSON untouched

    status, headers, _ = _get(app, "/asset-groups")
    assert status == 307 and headers["location"] == "/asset-groups?expanded=" + ",".join(
        f"global@global:{group}" for group in groups)
    assert _get(app, "/asset-groups", b"expanded=global@global:inputs")[0] == 200  # the user's choice stays


def test_materialize_from_the_graph_runs_on_resdyns_executor():
    """UI finding 4: the graph's "Materialize" launches Dagster's implicit asset job, which used the
    multiprocess executor (a subprocess per step: 10.6 min for 281 s of steps); it takes resdyn's."""
    import dagster as dg

    from resdyn.dagster_project.configuration.config import StudyConfig
    from resdyn.dagster_project.definitions import defs
    from resdyn.dagster_project.launch.executors import executor_definition

    implicit = defs.resolve_implicit_global_asset_job_def()
    assert implicit.executor_def.name == executor_definition(StudyConfig.resolve().executor).name  # in_process default
    assert implicit.executor_def is not dg.multi_or_in_process_executor  # Dagster's default for the graph


def _serve_in_thread(app):
    """``app`` under uvicorn on a free loopback port, in a thread; returns (base URL, stop)."""
    import threading
    import time

    import uvicorn

    (port,) = free_ports(1)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        assert time.time() < deadline, "uvicorn did not start"
        time.sleep(0.05)

    def stop():
        server.should_exit = True
        thread.join(timeout=30)

    return f"http://127.0.0.1:{port}", stop


def test_the_proxy_forwards_http_and_websockets_both_ways(fresh_seed):
    """`resdyn ui` reaches Dagster's own webserver through ui_proxy: a real upstream server (uvicorn) and a real
    client; what comes back through the proxy equals what the upstream sent (status, headers, a 3 MB body,
    websocket frames both ways with the negotiated subprotocol)."""
    import json
    import urllib.request

    import aiohttp
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route, WebSocketRoute

    from resdyn.dagster_project.interface.ui_proxy import reverse_proxy

    payload = np.random.default_rng(fresh_seed).bytes(3 * 2 ** 20)

    async def echo(request):
        return JSONResponse({"method": request.method, "query": str(request.query_params),
                             "probe": request.headers.get("x-probe"), "body": (await request.body()).decode()},
                            status_code=201, headers={"x-upstream": "yes"})

    async def big(request):
        return Response(payload, media_type="application/octet-stream")

    async def websocket(socket):
        await socket.accept(subprotocol="graphql-transport-ws")
        while True:
            message = await socket.receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("text") == "bye":
                await socket.close()
                return
            if message.get("text") is not None:
                await socket.send_text(message["text"][::-1])
            else:
                await socket.send_bytes(message["bytes"][::-1])

    upstream, stop_upstream = _serve_in_thread(Starlette(routes=[
        Route("/echo", echo, methods=["GET", "POST"]), Route("/big", big), WebSocketRoute("/ws", websocket)]))
    proxied, stop_proxy = _serve_in_thread(reverse_proxy(upstream))
    try:
        request = urllib.request.Request(f"{proxied}/echo?a=1&b=two", data=b"posted body", method="POST",
                                         headers={"x-probe": "p"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 201 and response.headers["x-upstream"] == "yes"
            assert json.loads(response.read()) == {"method": "POST", "query": "a=1&b=two", "probe": "p",
                                                   "body": "posted body"}
        with urllib.request.urlopen(f"{proxied}/big", timeout=30) as response:
            assert response.read() == payload
        text, binary = payload[:64].hex(), payload[64:4096]

        async def talk():
            async with aiohttp.ClientSession() as session:
                async with session.ws_connect(f"{proxied.replace('http', 'ws')}/ws",
                                              protocols=["graphql-transport-ws"]) as socket:
                    assert socket.protocol == "graphql-transport-ws"
                    await socket.send_str(text)
                    assert (await socket.receive()).data == text[::-1]
                    await socket.send_bytes(binary)
                    assert (await socket.receive()).data == binary[::-1]
                    await socket.send_str("bye")
                    assert (await socket.receive()).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)

        asyncio.run(talk())
    finally:
        stop_proxy()
        stop_upstream()


def test_the_proxy_never_reuses_a_connection_the_webserver_may_be_closing():
    """uvicorn (dagster-webserver's server) closes a connection idle for timeout_keep_alive seconds; a pooled
    connection reused at that moment fails the request (a 502 from the proxy). Through a real uvicorn upstream at
    its default keep-alive: back-to-back requests share one upstream connection (the pool works), and a request
    after an idle pause longer than the proxy's limit, still shorter than the upstream's, comes on a new one."""
    import json
    import time
    import urllib.request

    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from resdyn.dagster_project.interface.ui_proxy import UPSTREAM_IDLE_SECONDS, reverse_proxy

    upstream_keep_alive = uvicorn.Config(None).timeout_keep_alive  # what dagster-webserver runs with
    assert UPSTREAM_IDLE_SECONDS < upstream_keep_alive - 2  # margin for a busy event loop

    async def peer(request):  # the proxy's side of the upstream connection that carried this request
        return JSONResponse({"port": request.scope["client"][1]})

    upstream, stop_upstream = _serve_in_thread(Starlette(routes=[Route("/peer", peer)]))
    proxied, stop_proxy = _serve_in_thread(reverse_proxy(upstream))

    def port() -> int:
        with urllib.request.urlopen(f"{proxied}/peer", timeout=30) as response:
            return json.loads(response.read())["port"]

    try:
        first, second = port(), port()
        assert first == second  # a connection kept in the pool is reused while fresh
        time.sleep(UPSTREAM_IDLE_SECONDS + 1.0)  # idle past the proxy's limit, short of the upstream's
        assert port() != second
    finally:
        stop_proxy()
        stop_upstream()
