#!/usr/bin/python3
"""A fake Kubernetes API server for devplug's tests: a JSON object store.

It serves what a node driver uses, as the real one answers it:
  GET an object or a collection (fieldSelector / labelSelector on any
  dotted field, limit + continue pages), a watch of a collection (?watch=1
  with the same selectors, from resourceVersion, ending after
  timeoutSeconds; chunked JSON lines; 410 Expired as an ERROR event for a
  version older than the last compaction), POST (uid, resourceVersion,
  creationTimestamp, generateName; 409 AlreadyExists), PUT (409 Conflict on
  a stale resourceVersion), DELETE, and DELETE on a collection (with the
  same selectors). Errors are metav1.Status objects. With --token, a request
  without "Authorization: Bearer <token>" gets 401 (the token file is read
  at each request, so a test can rotate it).
Paths are /api/v1/... and /apis/<group>/<version>/..., namespaced or not.

For the tests, under /_fake/:
  POST /_fake/conflicts?count=N   the next N PUTs answer 409 Conflict
  POST /_fake/continue?token=T    every list page from now on says
                                  "continue": T (a server that never ends)
  POST /_fake/compact             watches from a version before now get 410
  POST /_fake/end_watches         every open watch ends now (a server that
                                  restarts, or ends them early)
  POST /_fake/prune?key=K         a written object loses every field named
                                  K, at any depth (a server that does not
                                  know the field)
  GET  /_fake/requests            every request so far: method, path, query,
                                  authorization
  POST /_fake/throttle?count=N&retry_after=S
                                  the next N requests answer 429
                                  TooManyRequests with "Retry-After: S" (API
                                  Priority and Fairness rejecting them)
  POST /_fake/forbid?path=P       every write (PUT, POST, DELETE) of path P
                                  answers 403 Forbidden from now on (no
                                  RBAC for it, or an admission policy)
Usage: fake_apiserver.py --port-file F [--cert C --key K] [--token-file T]
       [--page-limit N]. It binds 127.0.0.1 on a free port and writes it to F.
"""
import argparse
import datetime
import http.server
import json
import ssl
import sys
import threading
import time
import urllib.parse
import uuid

LOCK = threading.Lock()
CHANGED = threading.Condition(LOCK)  # notified on every write, for watches
STORE = {}  # collection path -> {name: object}
EVENTS = []  # {"rv", "collection", "type", "object"}, oldest first
REQUESTS = []
STATE = {"rv": 1, "conflicts": 0, "compacted": 0, "watch_epoch": 0}


def record(collection, kind, obj):
    EVENTS.append({"rv": STATE["rv"], "collection": collection, "type": kind,
                   "object": json.loads(json.dumps(obj))})
    CHANGED.notify_all()


def split(path):
    """(collection, name) for an API path; name is None for a collection."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        base = 2  # api, v1
    elif parts[:1] == ["apis"]:
        base = 3  # apis, group, version
    else:
        return None, None
    rest = parts[base:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        head, rest = parts[:base + 2], rest[2:]
    else:
        head = parts[:base]
    if len(rest) == 1:
        return "/" + "/".join(head + rest), None
    if len(rest) == 2:
        return "/" + "/".join(head + rest[:1]), rest[1]
    return None, None


def subresource(path):
    """(the object's path, "status") for a status subresource path, else
    (path, None)."""
    if path.endswith("/status") and split(path[:-len("/status")])[1] is not None:
        return path[:-len("/status")], "status"
    return path, None


def prune(obj, keys):
    """`obj` without the fields named in `keys`, at any depth."""
    if isinstance(obj, dict):
        return {k: prune(v, keys) for k, v in obj.items() if k not in keys}
    if isinstance(obj, list):
        return [prune(v, keys) for v in obj]
    return obj


def field(obj, dotted):
    for key in dotted.split("."):
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def matches(obj, query):
    for sel in query.get("fieldSelector", []):
        for term in filter(None, sel.split(",")):
            key, _, want = term.partition("=")
            if str(field(obj, key)) != want:
                return False
    for sel in query.get("labelSelector", []):
        labels = field(obj, "metadata.labels") or {}
        for term in filter(None, sel.split(",")):
            key, _, want = term.partition("=")
            if labels.get(key) != want:
                return False
    return True


def status(code, reason, message):
    return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                  "message": message, "reason": reason, "code": code}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as one answer, not 40 ms apart
    token_file = None
    page_limit = 0

    def log_message(self, *args):
        pass

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"null") if n else None

    def answer(self, code, obj, retry_after=None):
        data = json.dumps(obj).encode()
        self.send_response(code)
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def handle_any(self, method):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        body = self.body() if method in ("POST", "PUT") else None
        with LOCK:
            REQUESTS.append({"method": method, "path": url.path, "query": url.query,
                             "authorization": self.headers.get("Authorization", "")})
            watch = method == "GET" and query.get("watch", [""])[0] in ("1", "true")
            if STATE.get("throttle", 0) > 0 and not url.path.startswith("/_fake/"):
                STATE["throttle"] -= 1
                code, obj = status(429, "TooManyRequests", "Too many requests, please try again "
                                   "later.")
                retry_after = STATE["retry_after"]
            elif method != "GET" and url.path in STATE.get("forbid", set()):
                code, obj = status(403, "Forbidden", f"{method} {url.path} is forbidden")
                retry_after = None
            elif watch:
                code, obj = self.check_token() or (None, None)
                retry_after = None
            else:
                code, obj = self.route(method, url.path, query, body)
                retry_after = None
        if code is None:
            self.serve_watch(url.path, query)
            return
        self.answer(code, obj, retry_after)

    def check_token(self):
        if not self.token_file:
            return None
        with open(self.token_file) as f:
            want = "Bearer " + f.read().strip()
        if self.headers.get("Authorization") != want:
            return status(401, "Unauthorized", "Unauthorized")
        return None

    def serve_watch(self, path, query):
        collection, name = split(path)
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        deadline = time.monotonic() + float(query.get("timeoutSeconds", ["1800"])[0])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(event):
            data = json.dumps(event).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        try:
            with LOCK:
                epoch = STATE["watch_epoch"]
                if since and since < STATE["compacted"]:
                    batch = [{"type": "ERROR", "object": status(
                        410, "Expired", f"too old resource version: {since} "
                        f"({STATE['compacted']})")[1]}]
                    done = True
                elif not since:  # the current state first, as ADDED
                    items = STORE.get(collection, {})
                    batch = [{"type": "ADDED", "object": items[k]} for k in sorted(items)
                             if matches(items[k], query)]
                    done = False
                else:
                    batch, done = [], False
                at = len(EVENTS) if not since else next(
                    (i for i, e in enumerate(EVENTS) if e["rv"] > since), len(EVENTS))
            for event in batch:
                send(event)
            while not done:
                with CHANGED:
                    while (at == len(EVENTS) and STATE["watch_epoch"] == epoch
                           and time.monotonic() < deadline):
                        CHANGED.wait(max(0.0, deadline - time.monotonic()))
                    batch = [{"type": e["type"], "object": e["object"]} for e in EVENTS[at:]
                             if e["collection"] == collection and matches(e["object"], query)]
                    at = len(EVENTS)
                    done = STATE["watch_epoch"] != epoch or time.monotonic() >= deadline
                for event in batch:
                    send(event)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def route(self, method, path, query, body):
        if path == "/_fake/conflicts":
            STATE["conflicts"] = int(query["count"][0])
            return 200, {}
        if path == "/_fake/continue":
            STATE["continue"] = query["token"][0]
            return 200, {}
        if path == "/_fake/prune":
            STATE.setdefault("prune", set()).add(query["key"][0])
            return 200, {}
        if path == "/_fake/throttle":
            STATE["throttle"] = int(query["count"][0])
            STATE["retry_after"] = query["retry_after"][0]
            return 200, {}
        if path == "/_fake/forbid":
            STATE.setdefault("forbid", set()).add(query["path"][0])
            return 200, {}
        if path == "/_fake/compact":
            STATE["compacted"] = STATE["rv"]
            return 200, {}
        if path == "/_fake/end_watches":
            STATE["watch_epoch"] += 1
            CHANGED.notify_all()
            return 200, {}
        if path == "/_fake/requests":
            return 200, {"items": REQUESTS[:-1]}
        if (denied := self.check_token()) is not None:
            return denied
        if body is not None and STATE.get("prune"):
            body = prune(body, STATE["prune"])
        path, sub = subresource(path)
        collection, name = split(path)
        if collection is None:
            return status(404, "NotFound", "the server could not find the requested resource")
        items = STORE.setdefault(collection, {})
        kind = collection.rsplit("/", 1)[1]
        if method == "GET" and name is None:
            found = [items[k] for k in sorted(items) if matches(items[k], query)]
            start = int(query.get("continue", ["0"])[0])
            limit = int(query.get("limit", ["0"])[0]) or len(found)
            if self.page_limit:
                limit = min(limit, self.page_limit)
            page = found[start:start + limit]
            meta = {"resourceVersion": str(STATE["rv"])}
            if start + limit < len(found):
                meta["continue"] = str(start + limit)
            if STATE.get("continue"):
                meta["continue"] = STATE["continue"]
            return 200, {"kind": "List", "items": page, "metadata": meta}
        if method == "GET":
            if name not in items:
                return status(404, "NotFound", f'{kind} "{name}" not found')
            return 200, items[name]
        if method == "POST" and name is None:
            meta = body.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            if meta.get("name") in items:
                return status(409, "AlreadyExists", f'{kind} "{meta["name"]}" already exists')
            STATE["rv"] += 1
            meta.update(resourceVersion=str(STATE["rv"]), uid=str(uuid.uuid4()),
                        creationTimestamp=datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"))
            items[meta["name"]] = body
            record(collection, "ADDED", body)
            return 201, body
        if method == "PUT" and name is not None:
            if name not in items:
                return status(404, "NotFound", f'{kind} "{name}" not found')
            have = items[name]["metadata"]["resourceVersion"]
            if STATE["conflicts"] > 0 or body.get("metadata", {}).get("resourceVersion") != have:
                STATE["conflicts"] = max(0, STATE["conflicts"] - 1)
                return status(409, "Conflict",
                              f'Operation cannot be fulfilled on {kind} "{name}": the object has '
                              'been modified; please apply your changes to the latest version '
                              'and try again')
            STATE["rv"] += 1
            if sub == "status":  # the status alone changes, as the real one does
                body = dict(items[name], status=body.get("status"))
                body["metadata"] = dict(items[name]["metadata"])
            body["metadata"]["resourceVersion"] = str(STATE["rv"])
            body["metadata"]["uid"] = items[name]["metadata"]["uid"]
            items[name] = body
            record(collection, "MODIFIED", body)
            return 200, body
        if method == "DELETE" and name is not None:
            if name not in items:
                return status(404, "NotFound", f'{kind} "{name}" not found')
            STATE["rv"] += 1
            gone = items.pop(name)
            gone["metadata"]["resourceVersion"] = str(STATE["rv"])
            record(collection, "DELETED", gone)
            return 200, gone
        if method == "DELETE":
            gone = [k for k in items if matches(items[k], query)]
            for k in gone:
                STATE["rv"] += 1
                obj = items.pop(k)
                obj["metadata"]["resourceVersion"] = str(STATE["rv"])
                record(collection, "DELETED", obj)
            return 200, {"kind": "Status", "status": "Success"}
        return status(405, "MethodNotAllowed", f"{method} is not allowed on {path}")

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_DELETE(self):
        self.handle_any("DELETE")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--token-file")
    ap.add_argument("--page-limit", type=int, default=0)
    args = ap.parse_args()
    Handler.token_file = args.token_file
    Handler.page_limit = args.page_limit
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if args.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.cert, args.key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.rename(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
