"""`resdyn ui`'s additions to the Dagster webserver, called as ASGI apps: only warehouse figures are
served (no other file, nothing outside `_artefacts`), Dagster's pages get the stylesheet with a correct
content length, and the bare asset graph opens with the study's groups expanded. The whole UI in a
browser is tests/test_browser.py."""

import asyncio

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


def test_only_warehouse_figures_are_served(tmp_path, fresh_seed):
    figures = tmp_path / "_artefacts" / "figures" / "m" / "local"
    figures.mkdir(parents=True)
    png = np.random.default_rng(fresh_seed).bytes(257)  # the route serves bytes; it does not decode them
    (figures / "x.png").write_bytes(png)
    (figures / "notes.txt").write_text("not a figure")
    (tmp_path / "secret.png").write_bytes(b"outside _artefacts")
    app = with_artefacts(_dagster_page, tmp_path, ["spectra"])

    url = artefact_url(figures / "x.png")
    assert url == f"{ARTEFACT_ROUTE}/figures/m/local/x.png"
    status, headers, body = _get(app, url)
    assert status == 200 and body == png and headers["content-type"] == "image/png"
    for refused in (f"{ARTEFACT_ROUTE}/figures/m/local/notes.txt", f"{ARTEFACT_ROUTE}/../secret.png",
                    f"{ARTEFACT_ROUTE}/figures/m/local/missing.png", f"{ARTEFACT_ROUTE}/figures/../../secret.png",
                    f"{ARTEFACT_ROUTE}/figures/m/local/x\x00.png",  # a NUL byte: ValueError from the file system
                    f"{ARTEFACT_ROUTE}/figures/{'a' * 300}.png",  # a name over NAME_MAX: ENAMETOOLONG
                    f"{ARTEFACT_ROUTE}/{'/'.join(['b' * 250] * 20)}.png"):  # a path over PATH_MAX
        assert _get(app, refused)[0] == 404, refused
    assert artefact_url(tmp_path / "secret.png") is None


def test_only_warehouse_figures_are_served_from_an_object_store(s3_warehouse, fresh_seed, monkeypatch):
    from resdyn.dagster_project.store.object_store import ObjectStore

    store = ObjectStore(s3_warehouse)
    png = np.random.default_rng(fresh_seed).bytes(257)
    store.put("_artefacts/figures/m/local/run-1/x.png", png)
    store.put("_artefacts/figures/m/local/run-1/notes.txt", b"not a figure")
    store.put("secret.png", b"outside _artefacts")
    asked = []  # every key the UI asks the store for: a refused name never reaches it
    get = ObjectStore.get
    monkeypatch.setattr(ObjectStore, "get", lambda self, key: asked.append(key) or get(self, key))
    app = with_artefacts(_dagster_page, s3_warehouse, ["spectra"])

    status, headers, body = _get(app, f"{ARTEFACT_ROUTE}/figures/m/local/run-1/x.png")
    assert status == 200 and body == png and headers["content-type"] == "image/png"
    assert headers["cache-control"] == "no-store" and asked == ["_artefacts/figures/m/local/run-1/x.png"]
    assert _get(app, f"{ARTEFACT_ROUTE}/figures/m/local/run-1/missing.png")[0] == 404
    asked.clear()
    # each names the figure above (or a key outside _artefacts/) to a store or a proxy that normalizes a path
    for refused in ("figures/m/local/run-1/notes.txt", "../secret.png", "figures/m/./local/run-1/x.png",
                    "figures/m/local//run-1/x.png", "figures/m/local/run-1/../run-1/x.png", "figures/../../secret.png",
                    "figures/m/local/run-1\\x.png", "figures/m/local/ ../run-1/x.png", "figures/m/local/x\x00.png",
                    ".hidden.png", f"figures/{'/'.join(['b' * 250] * 4)}.png"):  # over S3's 1,024-byte key
        assert _get(app, f"{ARTEFACT_ROUTE}/{refused}")[0] == 404, refused
        assert object_figure_key(refused, s3_warehouse) is None, refused
    assert asked == [], f"refused names reached the store: {asked}"
    # a key at the limit with the warehouse's prefix counted
    room = 1024 - len(s3_warehouse.key("_artefacts/figures/.png").encode())
    assert object_figure_key("figures/" + "c" * room + ".png", s3_warehouse) is not None
    assert object_figure_key("figures/" + "c" * (room + 1) + ".png", s3_warehouse) is None


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
