# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Serve the seed host's model directory read-only over HTTP to the other hosts of a fleet (model role, fan-out).

Usage: python3 model_share.py DIRECTORY ADDRESS PORT    (PORT 0: any free port; the first line on stdout names it)

What `python3 -m http.server --directory DIRECTORY --bind ADDRESS PORT` does, with three differences:
- no reverse DNS lookup of ADDRESS at start (http.server calls socket.getfqdn, which waits for the resolver's
  timeouts, 10 s and more, on a host whose name server does not answer; the other hosts copy nothing meanwhile);
- byte ranges (`Range: bytes=A-B`, one range, answered 206 with `Content-Range`), so a copy interrupted mid-file
  resumes where it stopped;
- files only: no directory listings and nothing under .llmops-partial (files not verified yet answer 404).
Bodies go out with sendfile(2). Standard library only (Python 3.7+), run as a transient systemd unit.
"""

import functools
import http.server
import os
import re
import socketserver
import sys
import urllib.parse

PARTIAL_DIR = ".llmops-partial"
RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class ShareServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self):
        socketserver.TCPServer.server_bind(self)  # not HTTPServer's: it resolves the bind address's name
        self.server_name, self.server_port = self.server_address[0], self.server_address[1]


class ShareHandler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a peer's connection serves its next file
    timeout = 300  # a peer that stopped reading releases its thread

    def list_directory(self, path):
        self.send_error(404, "no directory listings")

    def send_head(self):
        rel = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        if PARTIAL_DIR in rel.split("/"):
            self.send_error(404, "not verified yet")
            return None
        path = self.translate_path(self.path)
        if os.path.isdir(path):
            self.send_error(404, "no directory listings")
            return None
        try:
            f = open(path, "rb")
        except OSError:
            self.send_error(404, "file not found")
            return None
        try:
            size = os.fstat(f.fileno()).st_size
            start, end = 0, size
            m = RANGE.match((self.headers.get("Range") or "").strip())
            if m:
                start = int(m.group(1))
                end = min(size, int(m.group(2)) + 1) if m.group(2) else size
                if start >= size or end <= start:
                    f.close()
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            else:
                self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - start))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
        except Exception:
            f.close()
            raise
        self.body = (start, end - start)
        return f

    def copyfile(self, source, outputfile):
        offset, count = self.body
        if count:
            self.connection.sendfile(source, offset, count)


def main(argv):
    if len(argv) != 4 or not argv[3].isdigit():
        sys.exit("usage: model_share.py DIRECTORY ADDRESS PORT")
    handler = functools.partial(ShareHandler, directory=argv[1])
    with ShareServer((argv[2], int(argv[3])), handler) as srv:
        print(f"Serving {argv[1]} on {srv.server_name} port {srv.server_port}", flush=True)
        srv.serve_forever()


if __name__ == "__main__":
    main(sys.argv)
