"""HTTP as the suites speak it to evictd and serve: a connection to an
address as the processes print it (host:port, or unix:PATH for a Unix
socket), one request and its whole answer, and a whole event stream's
events. Standard library only."""

import http.client
import json
import socket
from typing import Dict, List, Optional, Tuple


class UnixConnection(http.client.HTTPConnection):
    """http.client over a Unix socket (--listen unix:PATH)."""

    def __init__(self, path: str, timeout: float = 60) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def connect(addr: str, timeout: float = 60) -> http.client.HTTPConnection:
    """A connection (not yet opened) to host:port or unix:PATH; an
    http:// in front is allowed."""
    if addr.startswith("http://"):
        addr = addr[len("http://"):]
    if addr.startswith("unix:"):
        return UnixConnection(addr[5:], timeout)
    host, port = addr.rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=timeout)


def request(addr: str, method: str, path: str, body=None,
            raw: Optional[bytes] = None,
            headers: Optional[Dict[str, str]] = None,
            timeout: float = 60) -> Tuple[int, Dict[str, str], bytes]:
    """One request on a connection of its own (body as JSON, or raw
    bytes): (status, headers, the whole body)."""
    c = connect(addr, timeout)
    data = raw if raw is not None else (
        None if body is None else json.dumps(body).encode())
    c.request(method, path, body=data, headers=headers or {})
    r = c.getresponse()
    out = (r.status, dict(r.getheaders()), r.read())
    c.close()
    return out


def events(resp) -> List[dict]:
    """Reads a whole event stream (data: lines of JSON, blank-line
    separated); AssertionError on a block that is not one."""
    out = []
    for block in resp.read().decode().split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            out.append(json.loads(block[6:]))
    return out
