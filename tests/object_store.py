"""Local servers for the object-storage tests: moto's S3 server in a subprocess, and a plain HTTP
server with Range support (read-only access as over https://).  Both listen on 127.0.0.1 only.
And the tests' spies on object storage: `s3_calls` (every s3fs request, by method and key) and
`refused_reads` (the reader's reads again after a refused conditional GET, `ReadPins._again`)."""

import contextlib
import http.server
import os
import socket
import threading
import urllib.request

from blzarr.bench.s3 import MotoS3


@contextlib.contextmanager
def s3_calls():
    """Inside, every request s3fs makes is recorded: yields the list of (method, key or prefix)."""
    import s3fs
    real = s3fs.S3FileSystem._call_s3
    calls = []

    async def recording(fs, method, *args, **kwargs):
        calls.append((method, kwargs.get("Key") or kwargs.get("Prefix") or ""))
        return await real(fs, method, *args, **kwargs)
    s3fs.S3FileSystem._call_s3 = recording
    try:
        yield calls
    finally:
        s3fs.S3FileSystem._call_s3 = real


def refused_reads(monkeypatch):
    """The keys a reader reads again after a refused conditional GET (`ReadPins._again`), recorded
    from now on into the list returned."""
    from blzarr.storage import readpins
    again = []
    real = readpins.ReadPins._again

    def recording(self, key, rng):
        again.append(key)
        return real(self, key, rng)
    monkeypatch.setattr(readpins.ReadPins, "_again", recording)
    return again


class MotoServer(MotoS3):
    """moto's S3 server on a free port (`python -m moto.server`, started as the harness starts it),
    stopped by `stop()`; `reset()` empties it between tests."""

    def reset(self):
        req = urllib.request.Request(self.endpoint + "/moto-api/reset", method="POST")
        urllib.request.urlopen(req, timeout=10).read()


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files with Range support; the server's `fail_next` drops that many responses midway,
    `deny` (a path prefix) answers 403, `no_listing` answers 404 for directories, `requests` counts
    the GETs."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        srv = self.server
        srv.requests += 1
        path = self.translate_path(self.path)
        if srv.no_listing and os.path.isdir(path):
            self.send_error(404, "Not found")       # as static hosting that lists no directory
            return
        if srv.deny and self.path.startswith(srv.deny):
            self.send_error(403, "Forbidden")
            return
        if os.path.isdir(path) or "Range" not in self.headers:
            return super().do_GET()
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            self.send_error(404, "Not found")
            return
        spec = self.headers["Range"].split("=", 1)[1]
        a, _, b = spec.partition("-")
        a = int(a) if a else max(0, len(data) - int(b))
        b = min(int(b) if b and spec[0] != "-" else len(data) - 1, len(data) - 1)
        body = data[a:b + 1]
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {a}-{b}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if srv.fail_next > 0:
            srv.fail_next -= 1
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)


class RangeServer:
    def __init__(self, root):
        self.root = root

        def handler(*args, **kw):
            return RangeHandler(*args, directory=root, **kw)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.fail_next = 0
        self.httpd.deny = None
        self.httpd.no_listing = False
        self.httpd.requests = 0
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
