"""A Hub-protocol server on 127.0.0.1 for the Hub round-trip tests: the part of the Hugging Face Hub's HTTP API that
`huggingface_hub` uses to create a model repository, commit files to it, read its information and download its files
by revision (`create_repo`, `create_commit` / `upload_folder` with regular, base64 uploads, `model_info`,
`hf_hub_download`, `snapshot_download`), with git-like commits (every commit a new revision id, `main` moving on,
older commits still readable by their id). Nothing is written to disk; it stops with the test.

Point a client at it with `HF_ENDPOINT=http://127.0.0.1:PORT`. Written for the tests from the requests
`huggingface_hub` sends (its `_commit_api.py`, `file_download.py`, `hf_api.py`), not a copy of any server.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

MAX_BODY = 512 << 20  # a request body larger than this is refused


class HubState:
    """Repositories: `id -> {"commits": {sha: {path: bytes}}, "refs": {"main": sha}, "order": [sha, ...]}`."""

    def __init__(self):
        self.repos: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        self.hide_sizes: set[str] = set()  # repositories whose model info gives no file sizes

    def files(self, repo_id: str, revision: str) -> tuple[str, dict[str, bytes]] | None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return None
        sha = repo["refs"].get(revision, revision if revision in repo["commits"] else None)
        if sha is None:
            return None
        return sha, repo["commits"][sha]


def _blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubHandler(BaseHTTPRequestHandler):
    state: HubState
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    # ------------------------------------------------------------------------------------------------ replies
    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, status: int, obj, headers: dict | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _error(self, status: int, code: str, message: str, head: bool = False) -> None:
        self._send(status, json.dumps({"error": message}).encode(),
                   {"Content-Type": "application/json", "X-Error-Code": code, "X-Error-Message": message}, head)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ValueError("body too large")
        return self.rfile.read(length)

    # ------------------------------------------------------------------------------------------------ routes
    def do_HEAD(self):
        self._route("HEAD")

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def _route(self, method: str) -> None:
        path = unquote(urlsplit(self.path).path)
        self.state.requests.append((method, path))
        if method == "POST" and path == "/api/repos/create":
            return self._create_repo()
        if method == "POST" and path == "/api/validate-yaml":
            return self._validate_yaml()
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/(preupload|commit)/(.+)", path)
        if method == "POST" and m:
            return self._preupload(m.group(1)) if m.group(2) == "preupload" else self._commit(m.group(1), m.group(3))
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?", path)
        if method == "GET" and m:
            return self._tree(m.group(1), m.group(2), m.group(3) or "")
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/(.+))?", path)
        if method == "GET" and m:
            return self._info(m.group(1), m.group(2) or "main")
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if method in ("GET", "HEAD") and m:
            return self._resolve(m.group(1), m.group(2), m.group(3), head=method == "HEAD")
        self._error(404, "EntryNotFound", f"no route {method} {path}", head=method == "HEAD")

    def _create_repo(self) -> None:
        payload = json.loads(self._body() or b"{}")
        repo_id = f"{payload.get('organization') or 'user'}/{payload['name']}"
        with self.state.lock:
            if repo_id in self.state.repos:  # (the Hub's answer carries the repository's address too)
                return self._send(409, json.dumps({"error": "You already created this model repo", "url":
                                                   f"http://{self.headers['Host']}/{repo_id}"}).encode(),
                                  {"Content-Type": "application/json", "X-Error-Code": "RepoExists"})
            self.state.repos[repo_id] = {"commits": {}, "refs": {}, "order": []}
        self._json(200, {"url": f"http://{self.headers['Host']}/{repo_id}", "name": repo_id})

    def _validate_yaml(self) -> None:
        """The model card's metadata (the README's front matter) must be a YAML mapping, as the Hub checks."""
        import yaml

        content = json.loads(self._body()).get("content", "")
        match = re.match(r"^---\n(.*?)\n---", content, re.S)
        try:
            metadata = yaml.safe_load(match.group(1)) if match else {}
        except yaml.YAMLError as err:
            return self._json(400, {"errors": [{"message": f"invalid YAML: {err}"}]})
        if not isinstance(metadata, dict):
            return self._json(400, {"errors": [{"message": "the metadata is not a mapping"}]})
        self._json(200, {"errors": [], "warnings": []})

    def _preupload(self, repo_id: str) -> None:
        payload = json.loads(self._body())
        if repo_id not in self.state.repos:
            return self._error(404, "RepoNotFound", f"Repository Not Found: {repo_id}")
        self._json(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                   for f in payload["files"]]})

    def _commit(self, repo_id: str, revision: str) -> None:
        body = self._body()
        with self.state.lock:
            repo = self.state.repos.get(repo_id)
            if repo is None:
                return self._error(404, "RepoNotFound", f"Repository Not Found: {repo_id}")
            parent = repo["refs"].get(revision)
            files = dict(repo["commits"][parent]) if parent else {}
            summary = ""
            for line in body.splitlines():
                if not line.strip():
                    continue
                item = json.loads(line)
                key, value = item["key"], item["value"]
                if key == "header":
                    summary = value.get("summary", "")
                elif key == "file":
                    if value.get("encoding") != "base64":
                        return self._error(400, "BadRequest", "only base64 file contents")
                    files[value["path"]] = base64.b64decode(value["content"])
                elif key == "deletedFile":
                    files.pop(value["path"], None)
                elif key == "deletedFolder":
                    files = {p: d for p, d in files.items() if not p.startswith(value["path"].rstrip("/") + "/")}
                else:
                    return self._error(400, "BadRequest", f"unsupported commit entry {key!r}")
            sha = hashlib.sha1(f"{repo_id} {parent} {summary} {time.time_ns()}".encode()
                               + b"".join(sorted(p.encode() + _blob_sha1(d).encode() for p, d in files.items()))
                               ).hexdigest()
            repo["commits"][sha] = files
            repo["refs"][revision] = sha
            repo["order"].append(sha)
        self._json(200, {"commitUrl": f"http://{self.headers['Host']}/{repo_id}/commit/{sha}", "commitOid": sha,
                         "pullRequestUrl": None})

    def _info(self, repo_id: str, revision: str) -> None:
        found = self.state.files(repo_id, revision)
        if found is None:
            code = "RepoNotFound" if repo_id not in self.state.repos else "RevisionNotFound"
            return self._error(404, code, f"{code}: {repo_id}@{revision}")
        sha, files = found
        self._json(200, {"id": repo_id, "modelId": repo_id, "sha": sha, "private": False, "disabled": False,
                         "gated": False, "downloads": 0, "likes": 0, "tags": [], "lastModified":
                         "2026-12-07T00:00:00.000Z", "createdAt": "2026-12-07T00:00:00.000Z",
                         "siblings": [{"rfilename": p, **({} if repo_id in self.state.hide_sizes else {"size": len(d)})}
                                      for p, d in sorted(files.items())]})

    def _tree(self, repo_id: str, revision: str, prefix: str) -> None:
        """The files (and folders) under `prefix`, recursively (`list_repo_tree(recursive=True)`: one page)."""
        found = self.state.files(repo_id, revision)
        if found is None:
            code = "RepoNotFound" if repo_id not in self.state.repos else "RevisionNotFound"
            return self._error(404, code, f"{code}: {repo_id}@{revision}")
        _, files = found
        prefix = prefix.strip("/")
        entries, folders = [], set()
        for path, data in sorted(files.items()):
            if prefix and not path.startswith(prefix + "/"):
                continue
            parts = path.split("/")
            for i in range(1, len(parts)):
                folders.add("/".join(parts[:i]))
            entries.append({"type": "file", "path": path, "size": len(data), "oid": _blob_sha1(data)})
        entries += [{"type": "directory", "path": f, "oid": hashlib.sha1(f.encode()).hexdigest()}
                    for f in sorted(folders) if not prefix or f.startswith(prefix + "/")]
        self._json(200, entries)

    def _resolve(self, repo_id: str, revision: str, path: str, head: bool) -> None:
        found = self.state.files(repo_id, revision)
        if found is None:
            code = "RepoNotFound" if repo_id not in self.state.repos else "RevisionNotFound"
            return self._error(404, code, f"{code}: {repo_id}@{revision}", head=head)
        sha, files = found
        if path not in files:
            return self._error(404, "EntryNotFound", f"Entry not found: {path}", head=head)
        data = files[path]
        self._send(200, data, {"X-Repo-Commit": sha, "ETag": f'"{_blob_sha1(data)}"',
                               "Content-Type": "application/octet-stream"}, head=head)


class LocalHub:
    """`with LocalHub() as hub:` a server on a free port of 127.0.0.1; `hub.endpoint` is its address."""

    def __init__(self):
        self.state = HubState()
        handler = type("Handler", (HubHandler,), {"state": self.state})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LocalHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
