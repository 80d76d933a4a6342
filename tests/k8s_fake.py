"""A stand-in Kubernetes API server for the Node endpoints the cordon action uses, over real HTTP (aiohttp).

Why a fake: no kube-apiserver installs from the package registries here (Debian has kubectl and etcd, not the API
server; PyPI has only clients), so the tests cannot start a real one. What it does is what the API server does for
these requests (Kubernetes API conventions and the exchanges ``kubectl cordon`` / ``kubectl taint`` make):

- ``GET /api/v1/nodes/{name}``: the Node object (``kind``, ``apiVersion``, ``metadata.name``,
  ``metadata.resourceVersion`` as a string, ``spec``); 404 with a ``Status`` object (``reason: NotFound``) if absent.
- ``PATCH /api/v1/nodes/{name}`` with ``Content-Type: application/merge-patch+json``: RFC 7386 JSON merge patch (null
  removes a field, lists replace whole); a ``metadata.resourceVersion`` in the patch that is not the current one is a
  409 ``Conflict``; each change bumps ``resourceVersion``; the answer is the updated Node. Another content type is 415.
- A bearer token other than the one configured: 401 ``Unauthorized``; ``forbidden`` nodes answer 403 ``Forbidden``
  (RBAC denies ``patch`` on them).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from aiohttp import web


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip
    return web.json_response(body, status=code)


class FakeApiServer:
    def __init__(self, token: str, nodes: list[str]) -> None:
        self.token = token
        self.version = 100
        self.nodes: dict[str, dict[str, Any]] = {n: self._node(n) for n in nodes}
        self.forbidden: set[str] = set()
        self.patches: list[dict[str, Any]] = []
        self.conflicts_left = 0  # answer this many PATCHes with 409 (another writer got there first)

    def _node(self, name: str) -> dict[str, Any]:
        self.version += 1
        return {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name, "resourceVersion": str(self.version)},
                "spec": {"podCIDR": "10.0.0.0/24"}}  # fmt: skip

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/nodes/{name}", self.get)
        app.router.add_patch("/api/v1/nodes/{name}", self.patch)
        return app

    def _auth(self, request: web.Request) -> web.Response | None:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _status(401, "Unauthorized", "Unauthorized")
        return None

    async def get(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if (denied := self._auth(request)) is not None:
            return denied
        if name not in self.nodes:
            return _status(404, "NotFound", f'nodes "{name}" not found')
        return web.json_response(self.nodes[name])

    async def patch(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if (denied := self._auth(request)) is not None:
            return denied
        if name in self.forbidden:
            return _status(403, "Forbidden", f'nodes "{name}" is forbidden: cannot patch resource "nodes"')
        if name not in self.nodes:
            return _status(404, "NotFound", f'nodes "{name}" not found')
        if request.content_type != "application/merge-patch+json":
            return _status(
                415, "UnsupportedMediaType", f"the media type {request.content_type} is not supported"
            )
        patch = json.loads(await request.read())
        self.patches.append(patch)
        current = self.nodes[name]
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if self.conflicts_left or (wanted is not None and wanted != current["metadata"]["resourceVersion"]):
            self.conflicts_left = max(0, self.conflicts_left - 1)
            return _status(409, "Conflict", "the object has been modified; please apply your changes to the latest "
                                            "version and try again")  # fmt: skip
        updated = merge_patch(copy.deepcopy(current), patch)
        self.version += 1
        updated["metadata"]["resourceVersion"] = str(self.version)
        self.nodes[name] = updated
        return web.json_response(updated)
