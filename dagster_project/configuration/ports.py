"""Free TCP ports on the loopback interface, for the local servers resdyn starts (the UI's webserver behind its
proxy, a local Ray cluster) and for the tests that start them."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now; all sockets are held until every port is drawn so that
    none is given twice (another process may still take one before its caller binds it)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for item in sockets:
            item.bind((LOOPBACK, 0))
        return [item.getsockname()[1] for item in sockets]
    finally:
        for item in sockets:
            item.close()
