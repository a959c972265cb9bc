"""``resdyn ui``: the Dagster UI (webserver + daemon) with the warehouse's figures served beside it.

Dagster's own ``dagster-webserver`` and ``dagster-daemon`` commands run as children on a loopback port;
this process serves the port the user opens, answers the additions below itself and passes everything
else to the webserver (:mod:`.ui_proxy`: Dagster has no public API to build its webserver's app here).

Dagster's UI shows a markdown metadata value inline only when it is shorter than 1,000 characters
(``MetadataEntry.tsx``: ``expandSmallValues && mdStr.length < 1000``); a base64 PNG never is, so it
sits behind "[Show Markdown]". The materialization metadata therefore links each figure by a short
same-origin URL, ``/resdyn/artefacts/<path under the warehouse's _artefacts/>``, and this module
serves those PNGs (read-only) from the same port as the Dagster webserver: only a figure that something current
names with its sha256 (a partition's manifest, published or previous generation; the ``figures.json`` beside the
study's own figures: :func:`~resdyn.dagster_project.store.artefacts.named_figure`), and only once its bytes have
that sha256 (remembered per file state: size, mtime, inode and ctime on disk, the ETag on S3). A damaged figure
answers 500 with one line saying what to rerun, never its bytes; a PNG nothing names (a leftover, a stray file)
answers 404. A plain ``dagster dev`` still works: it shows the embedded copy behind "[Show Markdown]".

Two more things a plain ``dagster dev`` gets wrong for this study, mended here without patching
Dagster: partition chips in the launch dialog are cut to 120 px (``tiny-ll…-000000``: models and
checkpoints differ in the hidden characters), so a stylesheet added to every page lets a chip take
its key's width; and the asset graph opens with every group collapsed, so ``/asset-groups`` without
a query opens with the study's groups expanded (Dagster's own ``?expanded=`` parameter).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections import OrderedDict
from pathlib import Path

from resdyn.dagster_project.configuration.config import dagster_home
from resdyn.dagster_project.configuration.ports import LOOPBACK, free_ports
from resdyn.dagster_project.store.artefacts import ARTEFACT_ROUTE, artefact_url  # noqa: F401 - artefact_url: re-exported

DEFINITIONS_MODULE = "resdyn.dagster_project.definitions"

log = logging.getLogger("resdyn")


# Dagster's TagSelector wraps each chip's key in an element with an inline 120 px max-width; class
# names carry build hashes, so select on their stable prefixes. Table cells may break a long token (a
# Parquet path has no spaces) so that a metadata table fits the page instead of scrolling sideways.
STYLESHEET = (
    "td a{overflow-wrap:anywhere}"
    '[class*="TagSelector_tagsContainer"] [class*="BaseTag"] div[style*="max-width"]'
    "{max-width:none!important;width:auto!important}"
    '[class*="TagSelector_tagsContainer"] [class*="BaseTag"] [class*="MiddleTruncate_container"]'
    "{width:max-content!important}"
)


def study_groups() -> list[str]:
    from resdyn.dagster_project.launch.assets_index import ALL_ASSETS, STUDY_ASSETS

    return sorted({spec.group_name for asset in [*ALL_ASSETS, *STUDY_ASSETS] for spec in asset.specs})


def expanded_graph_url(groups: list[str]) -> str:
    """The global asset graph with ``groups`` open (group ids as Dagster's ``groupIdForNode`` builds them)."""
    return "/asset-groups?expanded=" + ",".join(f"global@global:{group}" for group in groups)


def _with_stylesheet(send):
    """An ASGI ``send`` that adds STYLESHEET to HTML pages (buffered: Dagster's index page is a few kB)."""
    state = {"start": None, "body": []}

    async def wrapped(message):
        if message["type"] == "http.response.start":
            content_type = dict(message.get("headers", [])).get(b"content-type", b"")
            if not content_type.startswith(b"text/html"):
                await send(message)
                return
            state["start"] = message
            return
        if message["type"] != "http.response.body" or state["start"] is None:
            await send(message)
            return
        state["body"].append(message.get("body", b""))
        if message.get("more_body"):
            return
        body = b"".join(state["body"]).replace(b"</head>", f"<style>{STYLESHEET}</style></head>".encode(), 1)
        start = state["start"]
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return wrapped


MAXIMUM_KEY_LENGTH = 1024  # bytes of an S3 key, the warehouse's prefix included (AWS's limit)
# each part of a figure's name below _artefacts/: what every writer's names fit (model and checkpoint names:
# resdyn.models.registry.NAME_PATTERN; run ids; figure stems), so `.`, `..`, empty parts, backslashes, spaces and NUL
# bytes are refused by name before any request: an object store has no `..` to resolve
FIGURE_NAME_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def object_figure_key(relative: str, location=None) -> str | None:
    """The key (below the warehouse's prefix) of the figure ``relative`` names under ``_artefacts/``, or None: not a
    PNG, a part that is not a name (:data:`FIGURE_NAME_PART`), or a key over :data:`MAXIMUM_KEY_LENGTH` with
    ``location``'s prefix."""
    key = "_artefacts/" + relative
    full = location.key(key) if location is not None else key
    if (not relative.endswith(".png") or len(full.encode()) > MAXIMUM_KEY_LENGTH
            or not all(FIGURE_NAME_PART.fullmatch(part) for part in relative.split("/"))):
        return None
    return key


class FigureRefused(Exception):
    """A figure something names that is not served: ``status`` (404 missing or unverifiable, 500 damaged) and one
    line saying what happened and what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _FolderFigures:
    """The keys of a warehouse folder: ``read`` a manifest or index, ``fetch`` a figure with its file's state."""

    def __init__(self, root: Path) -> None:
        from resdyn.dagster_project.store.manifests import FolderPlaces

        self.root, self.location = Path(root).resolve(), None
        self.places = FolderPlaces(self.root)

    def where(self, key: str) -> str:
        return str(self.root / key)

    def fetch(self, key: str) -> tuple[bytes, tuple] | None:
        try:
            target = (self.root / key).resolve()
            if not target.is_relative_to(self.root):
                return None
            with open(target, "rb") as stream:
                status = os.fstat(stream.fileno())
                data = stream.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError):
            return None  # removed since it was named (a forget): as missing
        return data, (status.st_size, status.st_mtime_ns, status.st_ino, status.st_ctime_ns)

    def read(self, key: str) -> bytes | None:
        fetched = self.fetch(key)
        return None if fetched is None else fetched[0]


class _ObjectFigures:
    """The keys of an object-store warehouse, read by GET (figures are kilobytes); an object's state is its ETag."""

    def __init__(self, location) -> None:
        from resdyn.dagster_project.store.manifests import KeyPlaces
        from resdyn.dagster_project.store.object_store import ObjectStore

        # a person waits on the answer: two attempts and a 5 s connect timeout, not a batch job's patience
        self.location, self.places = location, KeyPlaces()
        self.store = ObjectStore(location, attempts=2, connect_timeout=5.0)

    def where(self, key: str) -> str:
        return f"{self.location}/{key}"

    def fetch(self, key: str) -> tuple[bytes, str] | None:
        found = self.store.get(key)
        return None if found is None else (found.data, found.etag)

    def read(self, key: str) -> bytes | None:
        fetched = self.fetch(key)
        return None if fetched is None else fetched[0]


REMEMBERED = 4096  # checked (key, state) -> sha256 entries, and thumbnails, kept by a running UI (least recent out)


class _Remembered(OrderedDict):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size, self.lock = size, threading.Lock()

    def get_or(self, key, make):
        with self.lock:
            if key in self:
                self.move_to_end(key)
                return self[key]
        value = make()
        with self.lock:
            self[key] = value
            while len(self) > self.size:
                self.popitem(last=False)
        return value


def _what_to_rerun(key: str) -> str:
    parts = key.split("/")
    if parts[1] == "figures":
        return f"rematerialize it: `resdyn run --model {parts[2]} --checkpoint {parts[3]}`"
    if parts[1] == "claims":
        return f"draw it again: `resdyn claims {parts[2]}` (or `resdyn report`)"
    return "draw it again: `resdyn report` (or materialize the study's assets)"


def figure_reader(warehouse):
    """``read(relative) -> bytes | None``: the figure ``relative`` names under the warehouse's ``_artefacts/`` (a
    folder, a ``Path``; or an object store, an :class:`~resdyn.dagster_project.configuration.locations.ObjectLocation`)
    once it is checked: None where nothing current names it (or the name is refused); :class:`FigureRefused` where
    it is named but missing, named without a sha256, or damaged (its bytes are not those named). A study figure's
    thumbnail is drawn from its checked figure."""
    from resdyn.dagster_project.asset_layer.metadata import draw_thumbnail
    from resdyn.dagster_project.configuration.locations import ObjectLocation
    from resdyn.dagster_project.store.artefacts import named_figure

    source = _ObjectFigures(warehouse) if isinstance(warehouse, ObjectLocation) else _FolderFigures(warehouse)
    hashes, thumbnails = _Remembered(REMEMBERED), _Remembered(256)

    def read(relative: str) -> bytes | None:
        if object_figure_key(relative, source.location) is None:
            return None
        named = named_figure(relative, source.read, source.places)
        if named is None:
            return None
        fix = _what_to_rerun(named.key)
        if named.sha256 is None:
            raise FigureRefused(404, f"{source.where(named.key)} is named by {named.named_by} without a sha256 (an "
                                     f"older resdyn published it), so it cannot be checked: {fix}")
        fetched = source.fetch(named.key)
        if fetched is None:
            raise FigureRefused(404, f"{source.where(named.key)}, named by {named.named_by}, is missing; {fix}")
        data, state = fetched
        actual = hashes.get_or((named.key, state), lambda: hashlib.sha256(data).hexdigest())
        if len(data) != named.size or actual != named.sha256:
            log.warning("resdyn ui: %s is damaged (not the sha256 %s records); not served", source.where(named.key),
                        named.named_by)
            raise FigureRefused(500, f"{source.where(named.key)} is damaged (its sha256 is not the one "
                                     f"{named.named_by} records); {fix}")
        return thumbnails.get_or(actual, lambda: draw_thumbnail(data)) if named.thumbnail else data

    return read


def with_artefacts(dagster_app, warehouse, groups: list[str] | None = None):
    """An ASGI app: GET ``/resdyn/artefacts/...png`` from the warehouse's ``_artefacts`` (a folder's files, or an
    object store's keys), checked by :func:`figure_reader`; everything else to Dagster, with STYLESHEET in its pages
    and ``/asset-groups`` opening on expanded ``groups``."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import PlainTextResponse, RedirectResponse, Response

    read = figure_reader(warehouse)

    async def app(scope, receive, send):
        path = scope.get("path", "")
        if scope["type"] != "http":
            await dagster_app(scope, receive, send)
            return
        if path == "/asset-groups" and not scope.get("query_string") and groups:
            await RedirectResponse(expanded_graph_url(groups), status_code=307)(scope, receive, send)
            return
        if not path.startswith(ARTEFACT_ROUTE + "/"):
            await dagster_app(scope, receive, _with_stylesheet(send))
            return
        try:  # a blocking read (a file, or a GET to the store) off the event loop that serves Dagster's pages
            data = await run_in_threadpool(read, path[len(ARTEFACT_ROUTE) + 1:])
        except FigureRefused as refused:  # named, but missing or damaged: said, never its bytes
            response = PlainTextResponse(str(refused), status_code=refused.status, headers={"Cache-Control": "no-store"})
        except Exception as error:  # the store did not answer: say so (here and in the log), keep serving the UI
            log.warning("resdyn ui: the figure %s could not be read from %s: %s", path, warehouse, error)
            response = PlainTextResponse(f"the warehouse's figure could not be read: {error}", status_code=502)
        else:
            if data is None:
                response = PlainTextResponse("not a figure that a current manifest of the warehouse names",
                                             status_code=404)
            else:  # figures are rewritten in place by a rerun: never cache them
                response = Response(data, media_type="image/png", headers={"Cache-Control": "no-store"})
        await response(scope, receive, send)

    return app


def build_app(warehouse, upstream: str):
    """The app ``resdyn ui`` serves: figures, stylesheet and expanded graph (:func:`with_artefacts`) in front of
    the Dagster webserver at ``upstream``, compressed again after the stylesheet is added."""
    from starlette.middleware.gzip import GZipMiddleware

    from resdyn.dagster_project.interface.ui_proxy import reverse_proxy

    return GZipMiddleware(with_artefacts(reverse_proxy(upstream), warehouse, study_groups()), minimum_size=1024)


def _console_script(name: str) -> str:
    """A command this environment installed (beside its python, else on PATH)."""
    import shutil

    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if not found:
        raise ValueError(f"{name} is not installed in this environment: install the project (`make install`)")
    return found


def _wait_until_serving(upstream: str, process: subprocess.Popen, timeout: float = 300.0) -> None:
    """Return once the webserver answers ``/server_info``; a clear error if it exits or never answers."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(upstream + "/server_info", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"dagster-webserver exited with code {process.returncode} before serving (its output "
                               "is above)")
        if time.monotonic() > deadline:
            raise RuntimeError(f"dagster-webserver did not answer at {upstream} within {timeout:.0f} s")
        time.sleep(0.5)


def _create_instance_storage() -> None:
    """Create (or migrate) the instance's SQLite storages in this process, before the daemon, its code server
    and the webserver open them at once: racing on a fresh DAGSTER_HOME they can stamp two alembic heads
    ("Version table 'alembic_version' has more than one head present"), and the code location never loads."""
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        instance.get_runs(limit=1)
        instance.all_instigator_state()
        instance.get_dynamic_partitions("resdyn_storage_check")
        instance.event_log_storage.get_concurrency_keys()


def serve(warehouse, host: str, port: int, daemon: bool = True, module: str = DEFINITIONS_MODULE) -> int:
    """Run the UI until Ctrl-C. The webserver and the daemon (schedules, sensors, the run queue) are children,
    each in a process group of its own, stopped by PID when this process ends."""
    import uvicorn

    if not dagster_home():
        raise ValueError("DAGSTER_HOME is not set: `make ui` sets it to dagster_home/ (or export it yourself)")
    _create_instance_storage()
    children: list[subprocess.Popen] = []
    # uvicorn re-raises the SIGTERM it caught once it has shut down: make that (and a closed terminal's
    # SIGHUP) an exit that runs `finally`, which stops the children's process groups
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
    try:
        (internal_port,) = free_ports(1)
        upstream = f"http://{LOOPBACK}:{internal_port}"
        webserver = subprocess.Popen([_console_script("dagster-webserver"), "-m", module, "-h", LOOPBACK, "-p",
                                      str(internal_port), "--log-level", "warning"], start_new_session=True)
        children.append(webserver)
        log.warning("dagster-webserver started (pid %d) at %s", webserver.pid, upstream)
        if daemon:
            children.append(subprocess.Popen([_console_script("dagster-daemon"), "run", "-m", module],
                                             start_new_session=True))
            log.warning("dagster-daemon started (pid %d)", children[-1].pid)
        _wait_until_serving(upstream, webserver)
        print(f"resdyn ui: http://{host}:{port}/asset-groups  (warehouse {warehouse}; figures under "
              f"{ARTEFACT_ROUTE})", flush=True)
        uvicorn.run(build_app(warehouse, upstream), host=host, port=port, log_level="warning")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        _stop_groups(children)
    return 0


def _stop_groups(processes: list[subprocess.Popen], grace: float = 30.0) -> None:
    """SIGTERM the process groups ``processes`` lead (the webserver, the daemon, and their code servers) at once,
    then SIGKILL the groups still there after ``grace`` seconds (one wait for all, not one per child)."""
    import time

    def signal_group(process: subprocess.Popen, sent: int) -> None:
        try:
            os.killpg(process.pid, sent)
        except ProcessLookupError:
            pass

    for process in processes:
        signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            signal_group(process, signal.SIGKILL)
            process.wait()
        signal_group(process, signal.SIGTERM)  # a code server the leader left behind
