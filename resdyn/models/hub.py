"""Is the Hugging Face hub reachable? Asked once per process.

``HF_HUB_OFFLINE`` (or ``HF_DATASETS_OFFLINE`` for data) set to a true value means no: nothing
is tried. Otherwise one TCP connection to the hub's host is attempted with a short timeout and
the answer is kept for the life of the process, so an offline machine pays at most one timeout
instead of the libraries' retries (about 45 s per call, measured) at every stage.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
from urllib.parse import urlparse

log = logging.getLogger(__name__)

PROBE_TIMEOUT_SECONDS = 3.0
TRUE_VALUES = {"1", "true", "yes", "on"}


def offline_by_setting(variable: str = "HF_HUB_OFFLINE") -> bool:
    return os.environ.get(variable, "").strip().lower() in TRUE_VALUES


@functools.lru_cache(maxsize=1)
def _probe(endpoint: str) -> bool:
    parsed = urlparse(endpoint)
    host, port = parsed.hostname or "huggingface.co", parsed.port or (443 if parsed.scheme != "http" else 80)
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_SECONDS):
            return True
    except OSError as error:
        log.warning("the Hugging Face hub (%s) is not reachable (%s); using local files and caches only", host, error)
        return False


def hub_is_reachable() -> bool:
    """False when HF_HUB_OFFLINE is set or one probe of the hub failed (cached per process)."""
    if offline_by_setting("HF_HUB_OFFLINE"):
        return False
    return _probe(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))


def datasets_hub_is_reachable() -> bool:
    return not offline_by_setting("HF_DATASETS_OFFLINE") and hub_is_reachable()
