"""The OpenAPI 3.1 document of the HTTP API, generated from the endpoint registry: a path per endpoint on the HTTP API
(:data:`HTTP_ENDPOINTS`: the read-only ones; ``export``, ``drain`` and the silence changes stay on NATS), its query
parameters from the endpoint's parameter model, every answer the one ``ApiResponse``.
"""

from __future__ import annotations

from typing import Any

from ranksight.aggregator.api.endpoints import ENDPOINTS
from ranksight.api.contract import Params
from ranksight.schemas.api import ApiResponse

HTTP_ENDPOINTS = {name: e for name, e in ENDPOINTS.items() if e.http}

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
    for name, endpoint in HTTP_ENDPOINTS.items():
        responses: dict[str, Any] = {"200": {"description": "answer", "content": content}}
        responses.update({code: {"description": text, "content": content} for code, text in ERRORS.items()})
        paths[f"/api/{name}"] = {"get": {"operationId": name, "summary": endpoint.summary,
                                         "parameters": _parameters(endpoint.params),
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
