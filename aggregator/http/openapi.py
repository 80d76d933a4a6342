"""The HTTP API's endpoints, their parameter models, and the OpenAPI 3.1 document generated from those models.

Read-only endpoints of :data:`aggregator.api.queries.ENDPOINTS` (``export`` writes files, so it stays on NATS). The
models that live in ``queries`` are reused; the endpoints that check their parameters by hand get a model here, used
to coerce query-string values and to document them.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ranksight.aggregator.api import alerting, queries, views
from ranksight.aggregator.api.markers import MAX_LIMIT
from ranksight.aggregator.api.queries import Params
from ranksight.schemas.api import ApiResponse


class ClusterParams(Params):
    cluster: str | None = None


class JobParams(Params):
    cluster: str | None = None
    job: str | None = None


class DeviceParams(Params):
    cluster: str | None = None
    node: str | None = None


class MarkerParams(Params):
    cluster: str | None = None
    job: str | None = None
    limit: int = Field(1000, ge=1, le=MAX_LIMIT)


PARAMS: dict[str, type[Params]] = {
    "status": queries.StatusParams,
    "nodes": queries.NodesParams,
    "alerts": queries.AlertsParams,
    "sql": queries.SqlParams,
    "jobs": JobParams,
    "comms": JobParams,
    "stragglers": ClusterParams,
    "links": ClusterParams,
    "gpus": DeviceParams,
    "nics": DeviceParams,
    "gpu_probes": DeviceParams,
    "markers": MarkerParams,
    "cluster_map": views.ClusterMapParams,
    "series": views.SeriesParams,
    "drains": alerting.DrainsParams,
    "silences": alerting.SilencesParams,
    "incidents": alerting.IncidentsParams,
}
HTTP_ENDPOINTS = {name: queries.ENDPOINTS[name] for name in PARAMS}

ERRORS = {
    "400": "bad request: unknown or invalid parameter",
    "401": "missing or wrong bearer token",
    "403": "SQL refused by the sandbox",
    "422": "query failed or timed out",
    "500": "internal error",
}


def _parameters(model: type[Params]) -> list[dict[str, Any]]:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    required = set(schema.get("required", []))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": prop,
         **({"description": prop["description"]} if "description" in prop else {})}
        for name, prop in schema["properties"].items()
    ]  # fmt: skip


def openapi_document(version: str, secured: bool) -> dict[str, Any]:
    response_ref = {"$ref": "#/components/schemas/ApiResponse"}
    content = {"application/json": {"schema": response_ref}}
    paths: dict[str, Any] = {}
    for name, model in PARAMS.items():
        doc = (HTTP_ENDPOINTS[name].__doc__ or f"the {name} query").strip().splitlines()[0]
        responses: dict[str, Any] = {"200": {"description": "answer", "content": content}}
        responses.update({code: {"description": text, "content": content} for code, text in ERRORS.items()})
        paths[f"/api/{name}"] = {"get": {"operationId": name, "summary": doc, "parameters": _parameters(model),
                                         "responses": responses}}  # fmt: skip
    api_schema = ApiResponse.model_json_schema(ref_template="#/components/schemas/{model}")
    components: dict[str, Any] = {"schemas": {"ApiResponse": api_schema, **api_schema.pop("$defs", {})}}
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "ranksight aggregator", "version": version,
                 "description": "Read-only queries; the same endpoints and response shape as the NATS service."},
        "paths": paths,
        "components": components,
    }  # fmt: skip
    if secured:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        document["security"] = [{"bearer": []}]
    return document
