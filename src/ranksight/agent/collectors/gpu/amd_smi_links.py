"""Parser of AMD GPU link state: ``amd-smi topology --json`` -> :class:`GpuLink` per GPU index.

Faithful to the vendor examples captured from the amdsmi CHANGELOG: ``topology --json`` as a list of
``{"gpu", "link_accessibility": {"gpu_N": "ENABLED"|"DISABLED"}, "link_type": {"gpu_N": "SELF"|"PCIE"|"XGMI"}}``
(ROCm 6.1) or, with ``-a -t``, ``{"gpu", "bdf", "links": [{"gpu", "bdf", "link_status", "link_type"}]}``. A GPU's
link to itself is not a link and is left out. Link names are ``"<type>/gpu<peer index>"`` (``"xgmi/gpu3"``), as NVML's
NVLink names are ``"nvlink/<n>"``.
"""

from __future__ import annotations

import re
from typing import Any

from ranksight.agent.collectors.gpu.amd_smi import GpuToolParseError, json_documents
from ranksight.schemas.records import GpuLink

_PEER_KEY = re.compile(r"^gpu_(\d+)$")


def _link(link_type: str, peer: int, status: str | None, bdf: str | None = None) -> GpuLink:
    up = None if status is None else status.upper() == "ENABLED"
    return GpuLink(name=f"{link_type.lower()}/gpu{peer}", up=up, peer=bdf)


def _topology_gpu(entry: dict[str, Any]) -> list[GpuLink]:
    if isinstance(entry.get("links"), list):  # -a -t shape
        return [_link(str(link.get("link_type", "?")), int(link["gpu"]), link.get("link_status"), link.get("bdf"))
                for link in entry["links"] if link.get("link_type") != "SELF" and link.get("gpu") != entry["gpu"]]  # fmt: skip
    types, access = entry.get("link_type") or {}, entry.get("link_accessibility") or {}
    links = []
    for key, link_type in types.items():
        match = _PEER_KEY.match(key)
        if match and link_type != "SELF" and int(match.group(1)) != entry["gpu"]:
            links.append(_link(str(link_type), int(match.group(1)), access.get(key)))
    return links


def parse_amd_smi_topology(data: bytes) -> dict[int, list[GpuLink]]:
    """``amd-smi topology [-a -t] --json`` -> links of each GPU index (text around the JSON is skipped)."""
    out: dict[int, list[GpuLink]] = {}
    for document in json_documents(data.decode("utf-8", "replace")):
        if isinstance(document, dict) and isinstance(document.get("gpu_data"), list):
            document = document["gpu_data"]
        for entry in document if isinstance(document, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("gpu"), int):
                out[entry["gpu"]] = _topology_gpu(entry)
    if not out:
        raise GpuToolParseError("amd-smi topology: no per-GPU objects with link information")
    return out
