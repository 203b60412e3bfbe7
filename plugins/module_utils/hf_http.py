# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""HTTP for the download workers (``hf_transfer``): one keep-alive connection per host per worker, redirects followed
by hand so that ``Authorization`` goes only to the endpoint's host (never to the storage host a redirect points to)
and the final URL of a file can be reused for its other byte ranges, errors as ``HubError`` with ``Retry-After``."""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import http.client
import urllib.parse

from ansible_collections.llmops.sglang.plugins.module_utils.hf_hub import HubError

MAX_REDIRECTS = 5
ERROR_BODY = 64 * 1024


class Fetcher:
    """One worker's HTTP: keep-alive connections per host, redirects followed by hand (Authorization only to the
    endpoint's scheme and host: never to a storage host, never over plain HTTP from an https endpoint), the final
    location of each URL remembered so later ranges skip the redirect. ``auth_origin`` is the endpoint's
    ``scheme://host[:port]``."""

    def __init__(self, auth_origin, token, timeout, ssl_context=None, user_agent="llmops", *, peer=None):
        o = urllib.parse.urlsplit(auth_origin)
        self.auth_origin = (o.scheme, o.netloc)
        self.token = token
        self.peer = peer  # (netloc, token) of the fleet's seed share: its own secret goes only to it
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.user_agent = user_agent
        self.conns = {}
        self.requests = 0

    def close(self):
        for c in self.conns.values():
            c.close()
        self.conns = {}

    def _conn(self, scheme, netloc):
        key = (scheme, netloc)
        c = self.conns.get(key)
        if c is None:
            if scheme == "https":
                c = http.client.HTTPSConnection(netloc, timeout=self.timeout, context=self.ssl_context)
            else:
                c = http.client.HTTPConnection(netloc, timeout=self.timeout)
            self.conns[key] = c
        return c

    def _drop(self, scheme, netloc):
        c = self.conns.pop((scheme, netloc), None)
        if c is not None:
            c.close()

    def get(self, url, headers):
        """(response, final_url) for a GET; raises HubError for HTTP >= 400 (with Retry-After) and network errors."""
        for _hop in range(MAX_REDIRECTS + 1):
            u = urllib.parse.urlsplit(url)
            if u.scheme not in ("http", "https") or not u.netloc:
                raise HubError("cannot fetch %s: not an http(s) URL" % url)
            h = {"User-Agent": self.user_agent, "Accept-Encoding": "identity"}
            h.update(headers)
            if self.peer and u.netloc == self.peer[0]:
                h["Authorization"] = "Bearer " + self.peer[1]
            elif self.token and (u.scheme, u.netloc) == self.auth_origin:
                h["Authorization"] = "Bearer " + self.token
            target = u.path + ("?" + u.query if u.query else "")
            resp = None
            for fresh in (False, True):  # a kept-alive connection the server closed: one immediate reconnect
                c = self._conn(u.scheme, u.netloc)
                try:
                    self.requests += 1
                    c.request("GET", target or "/", headers=h)
                    resp = c.getresponse()
                    break
                except (http.client.HTTPException, OSError) as exc:
                    self._drop(u.scheme, u.netloc)
                    if fresh:
                        raise HubError("cannot reach %s: %s" % (url, exc)) from None
            if resp.status in (301, 302, 303, 307, 308) and resp.getheader("Location"):
                resp.read()
                url = urllib.parse.urljoin(url, resp.getheader("Location"))
                continue
            if resp.status >= 400:
                code = resp.getheader("X-Error-Code")
                message = resp.getheader("X-Error-Message")
                retry_after = resp.getheader("Retry-After")
                try:
                    resp.read(ERROR_BODY)
                finally:
                    self._drop(u.scheme, u.netloc)
                raise HubError(
                    "%s answered HTTP %d%s%s"
                    % (url, resp.status, " (%s)" % code if code else "", ": %s" % message if message else ""),
                    status=resp.status,
                    code=code,
                    retry_after=retry_after,
                )
            return resp, url
        raise HubError("%s: more than %d redirects" % (url, MAX_REDIRECTS))
