"""An HTTP proxy in front of evictd that loses answers on purpose: it
forwards every request, and for the chosen ones closes the engine's
connection instead of passing the answer back, after the daemon applied the
request. That is the lost answer a resend must survive (evictd answers the
resent step, commit or truncate with its first answer, "replayed").
Loopback only; one thread per engine connection."""

import http.client
import socket
import threading
from typing import Callable, List, Tuple


class LosingProxy:
    """Listens on 127.0.0.1:0 (self.url) and forwards to `upstream`
    (host, port). `lose(method, path, n)` says whether to lose the answer
    of the n-th request (from 1) with that method and path."""

    def __init__(self, upstream: Tuple[str, int],
                 lose: Callable[[str, str, int], bool]) -> None:
        self.upstream, self.lose = upstream, lose
        self.counts: dict = {}
        self.lost: List[str] = []
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,),
                             daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        up = http.client.HTTPConnection(*self.upstream, timeout=30)
        f = conn.makefile("rb")
        try:
            while True:
                line = f.readline()
                if not line:
                    return
                method, path, _ = line.decode("latin-1").split(" ", 2)
                headers, length = {}, 0
                while True:
                    h = f.readline().decode("latin-1")
                    if h in ("\r\n", "\n", ""):
                        break
                    k, v = h.split(":", 1)
                    headers[k.strip()] = v.strip()
                    if k.strip().lower() == "content-length":
                        length = int(v)
                body = f.read(length) if length else None
                up.request(method, path, body, {
                    k: v for k, v in headers.items()
                    if k.lower() not in ("connection", "host")})
                resp = up.getresponse()
                data = resp.read()
                key = (method, path.split("?")[0])
                with self.lock:
                    self.counts[key] = self.counts.get(key, 0) + 1
                    n = self.counts[key]
                if self.lose(method, key[1], n):
                    with self.lock:
                        self.lost.append("%s %s" % key)
                    return  # the answer is lost with the connection
                head = ["HTTP/1.1 %d %s" % (resp.status, resp.reason)]
                head += ["%s: %s" % (k, v) for k, v in resp.getheaders()
                         if k.lower() not in ("connection",
                                              "transfer-encoding",
                                              "content-length")]
                head += ["Content-Length: %d" % len(data), "", ""]
                conn.sendall("\r\n".join(head).encode("latin-1") + data)
        except (OSError, ValueError):
            return
        finally:
            f.close()
            conn.close()
            up.close()
