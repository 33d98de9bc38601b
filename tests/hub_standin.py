"""A STAND-IN for the Hugging Face Hub, which this machine cannot reach.

It serves, on 127.0.0.1, only the endpoints `kernels` 0.17 and `huggingface_hub` 2.4 call to find,
check and download a kernel repository: organization overview (publisher trust), refs (the `v<N>`
branches), tree listings, repo info, and file resolution. Repositories are published from local
folders, each branch pointing at one immutable commit, as the Hub stores them.

Why not an existing server: `olah` (the offline-capable Hub mirror) only knows the model, dataset
and space repository types, not `kernel`, and would add a web framework to the test dependencies.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class _Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha -> {path: content}
    branches: dict[str, str] = field(default_factory=dict)  # branch -> sha


class HubStandIn:
    """Publish folders as kernel repositories and serve them; `url` goes into `HF_ENDPOINT`."""

    def __init__(self) -> None:
        self.repos: dict[str, _Repo] = {}
        self.trusted_orgs: set[str] = set()
        self.requests: Counter[str] = Counter()  # "METHOD kind" -> count, for assertions
        self.delay = 0.0  # seconds each API answer waits: a slow Hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def publish_model(self, repo_id: str, folder: Path) -> str:
        """Publish a model folder (`save_pretrained`) as a model repository on branch `main`.

        Model repositories live apart from kernel ones (the Hub keeps the two types apart too).
        """
        return self.publish(f"model:{repo_id}", folder, branch="main")

    def publish(self, repo_id: str, folder: Path, *, branch: str = "v1") -> str:
        """Commit every file under `folder` (bytecode excluded) and point `branch` at it."""
        files = {
            str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts
        }
        digest = hashlib.sha1()
        for name, content in files.items():
            digest.update(name.encode() + b"\0" + hashlib.sha1(content).digest())
        sha = digest.hexdigest()
        repo = self.repos.setdefault(repo_id, _Repo())
        repo.commits[sha] = files
        repo.branches[branch] = sha
        return sha

    # -- HTTP ------------------------------------------------------------------------------------

    def _resolve(self, repo_id: str, revision: str) -> tuple[_Repo, str] | None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return None
        sha = repo.branches.get(revision, revision)
        return (repo, sha) if sha in repo.commits else None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _json(self, payload: object) -> None:
                self._send(200, json.dumps(payload).encode(), {"Content-Type": "application/json"})

            def _not_found(self, what: str, code: str = "RepoNotFound") -> None:
                body = json.dumps({"error": what}).encode()
                self._send(404, body, {"Content-Type": "application/json", "X-Error-Code": code})

            def do_HEAD(self) -> None:
                self.do_GET()

            def do_GET(self) -> None:
                time.sleep(hub.delay)
                url = urlparse(self.path)
                parts = [unquote(p) for p in url.path.strip("/").split("/")]
                query = parse_qs(url.query)
                if parts[:2] == ["api", "organizations"] and parts[3:] == ["overview"]:
                    hub.requests[f"{self.command} overview"] += 1
                    org = parts[2]
                    return self._json(
                        {
                            "name": org,
                            "fullname": org,
                            "avatarUrl": "",
                            "trustedKernelPublisher": org in hub.trusted_orgs,
                        }
                    )
                if parts[:2] == ["api", "kernels"] and len(parts) >= 5:
                    repo_id, action, rest = f"{parts[2]}/{parts[3]}", parts[4], parts[5:]
                    hub.requests[f"{self.command} {action}"] += 1
                    if action == "refs":
                        repo = hub.repos.get(repo_id)
                        if repo is None:
                            return self._not_found(repo_id)
                        branches = [
                            {"name": b, "ref": f"refs/heads/{b}", "targetCommit": sha}
                            for b, sha in repo.branches.items()
                        ]
                        return self._json({"branches": branches, "tags": [], "converts": []})
                    found = hub._resolve(repo_id, rest[0]) if rest else None
                    if found is None:
                        return self._not_found(f"{repo_id}@{rest[:1]}", "RevisionNotFound")
                    repo, sha = found
                    files = repo.commits[sha]
                    if action == "revision":
                        siblings = [{"rfilename": name} for name in files]
                        return self._json({"id": repo_id, "sha": sha, "siblings": siblings, "private": False})
                    if action == "tree":
                        return self._json(_tree(files, "/".join(rest[1:]), "recursive" in query))
                if parts[:2] == ["api", "models"] and len(parts) >= 4:  # model info (from_pretrained)
                    repo_id = f"model:{parts[2]}/{parts[3]}"
                    hub.requests[f"{self.command} model info"] += 1
                    found = hub._resolve(repo_id, parts[5] if len(parts) > 5 else "main")
                    if found is None:
                        return self._not_found(repo_id[6:])
                    siblings = [{"rfilename": name} for name in found[0].commits[found[1]]]
                    return self._json({"id": repo_id[6:], "sha": found[1], "siblings": siblings})
                if len(parts) >= 5 and parts[2] == "resolve" and parts[0] not in ("api", "kernels"):
                    hub.requests[f"{self.command} model resolve"] += 1
                    found = hub._resolve(f"model:{parts[0]}/{parts[1]}", parts[3])
                    name = "/".join(parts[4:])
                    if found is None:
                        return self._not_found(f"{parts[0]}/{parts[1]}")
                    if name not in found[0].commits[found[1]]:
                        return self._not_found(name, "EntryNotFound")
                    content = found[0].commits[found[1]][name]
                    headers = {"X-Repo-Commit": found[1], "ETag": f'"{_blob_id(content)}"'}
                    return self._send(200, content, headers)
                if len(parts) >= 5 and parts[0] == "kernels" and parts[3] == "resolve":
                    hub.requests[f"{self.command} resolve"] += 1
                    found = hub._resolve(f"{parts[1]}/{parts[2]}", parts[4])
                    name = "/".join(parts[5:])
                    if found is None or name not in found[0].commits[found[1]]:
                        return self._not_found(name, "EntryNotFound")
                    repo, sha = found
                    content = repo.commits[sha][name]
                    etag = f'"{_blob_id(content)}"'
                    return self._send(200, content, {"X-Repo-Commit": sha, "ETag": etag})
                hub.requests[f"{self.command} unknown {url.path}"] += 1
                return self._not_found(url.path)

        return Handler


def _blob_id(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def _tree(files: dict[str, bytes], prefix: str, recursive: bool) -> list[dict[str, object]]:
    """Entries under `prefix` the way the Hub lists them (folders as "directory")."""
    base = prefix.rstrip("/") + "/" if prefix else ""
    entries: dict[str, dict[str, object]] = {}
    for name, content in files.items():
        if not name.startswith(base):
            continue
        rest = name[len(base) :].split("/")
        if recursive:
            for depth in range(1, len(rest)):
                folder = base + "/".join(rest[:depth])
                entries.setdefault(
                    folder, {"type": "directory", "oid": _blob_id(folder.encode()), "size": 0, "path": folder}
                )
            entries[name] = {"type": "file", "oid": _blob_id(content), "size": len(content), "path": name}
        elif len(rest) == 1:
            entries[name] = {"type": "file", "oid": _blob_id(content), "size": len(content), "path": name}
        else:
            folder = base + rest[0]
            entries.setdefault(
                folder, {"type": "directory", "oid": _blob_id(folder.encode()), "size": 0, "path": folder}
            )
    return list(entries.values())
