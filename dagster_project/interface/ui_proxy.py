"""An ASGI reverse proxy to a Dagster webserver on a loopback port: HTTP and websockets.

``resdyn ui`` runs Dagster's own, public ``dagster-webserver`` command and serves its additions (the
warehouse's figures, a stylesheet, the expanded graph: :mod:`.ui`) in front of it. Dagster has no public
API that builds its webserver's app in a process of ours (``dagster_webserver.app`` takes a workspace
context that only Dagster's private modules make), so the UI is reached through this proxy instead.
aiohttp is the client (it speaks both HTTP and websockets); the UI's GraphQL subscriptions (run logs,
location status) travel over the websocket leg.
"""

from __future__ import annotations

import asyncio

# RFC 9110 section 7.6.1: connection-specific fields are not forwarded; ``host`` is the upstream's own;
# ``accept-encoding``: pages come back uncompressed so that ui.py can add its stylesheet (GZip is applied
# again in front, after it)
HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer",
              b"transfer-encoding", b"upgrade", b"host", b"accept-encoding"}
WEBSOCKET_HEADERS = {b"sec-websocket-key", b"sec-websocket-version", b"sec-websocket-extensions",
                     b"sec-websocket-protocol"}


# uvicorn, which serves dagster-webserver, closes a connection idle for 5 s (its timeout_keep_alive); aiohttp's pool
# keeps one 15 s by default, so a request sent on it just as the upstream closed it failed (ServerDisconnectedError,
# a 502 to the browser: seen once in a full test run under load). The pool lets go of a connection well before.
UPSTREAM_IDLE_SECONDS = 2.0


def _forwarded(headers: list[tuple[bytes, bytes]], drop: set[bytes] = frozenset()) -> list[tuple[str, str]]:
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in headers
            if name.lower() not in HOP_BY_HOP and name.lower() not in drop]


def reverse_proxy(upstream: str):
    """An ASGI app forwarding every request to ``upstream`` (``http://127.0.0.1:PORT``) and streaming the answer
    back; websockets are joined end to end (text and binary frames both ways, either side's close closes both)."""
    import aiohttp

    sessions: list[aiohttp.ClientSession] = []

    def session() -> aiohttp.ClientSession:
        if not sessions:  # made inside the server's event loop, on first use
            sessions.append(aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(keepalive_timeout=UPSTREAM_IDLE_SECONDS), auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30)))
        return sessions[0]

    def target(scope) -> str:  # raw_path: the path as the client encoded it (ASGI keeps the query apart)
        query = scope.get("query_string", b"").decode("latin-1")
        path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        return upstream + path + (f"?{query}" if query else "")

    async def http(scope, receive, send) -> None:
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            response = await session().request(scope["method"], target(scope), headers=_forwarded(scope["headers"]),
                                               data=bytes(body) or None, allow_redirects=False)
        except aiohttp.ClientError as error:
            text = f"the Dagster webserver behind resdyn ui did not answer: {error}".encode()
            await send({"type": "http.response.start", "status": 502,
                        "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(text)).encode())]})
            await send({"type": "http.response.body", "body": text})
            return
        async with response:
            headers = [(name, value) for name, value in response.raw_headers if name.lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": response.status, "headers": headers})
            async for chunk in response.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

    async def websocket(scope, receive, send) -> None:
        from starlette.websockets import WebSocket, WebSocketDisconnect

        client = WebSocket(scope, receive, send)
        url = "ws" + target(scope)[len("http"):]
        try:
            joined = await session().ws_connect(url, protocols=scope.get("subprotocols") or (), max_msg_size=0,
                                                headers=_forwarded(scope["headers"], WEBSOCKET_HEADERS))
        except aiohttp.ClientError:
            await client.close(code=1011)
            return
        await client.accept(subprotocol=joined.protocol)

        async def to_upstream() -> None:
            try:
                while True:
                    message = await client.receive()
                    if message["type"] == "websocket.disconnect":
                        return
                    if message.get("text") is not None:
                        await joined.send_str(message["text"])
                    elif message.get("bytes") is not None:
                        await joined.send_bytes(message["bytes"])
            except WebSocketDisconnect:
                return

        async def to_client() -> None:
            async for message in joined:
                if message.type == aiohttp.WSMsgType.TEXT:
                    await client.send_text(message.data)
                elif message.type == aiohttp.WSMsgType.BINARY:
                    await client.send_bytes(message.data)
                else:
                    return

        tasks = [asyncio.ensure_future(to_upstream()), asyncio.ensure_future(to_client())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await joined.close()
            try:
                await client.close()
            except RuntimeError:  # the client had gone already
                pass

    async def app(scope, receive, send) -> None:
        if scope["type"] == "http":
            await http(scope, receive, send)
        elif scope["type"] == "websocket":
            await websocket(scope, receive, send)
        elif scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    if sessions:
                        await sessions.pop().close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    return app
