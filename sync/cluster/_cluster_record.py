"""A registered Pulsar cluster: the ``cluster/<name>`` registry record and Pulsar's checks
(:mod:`._clusters_admin` writes it).

Pulsar's ``PUT/POST/GET/DELETE /admin/v2/clusters/{cluster}`` (``ClustersBase``) store a
``ClusterData`` per cluster in the configuration store; here it is one registry record per
cluster, written by the one fenced metadata writer. Pulsar's checks, in its order
(``ClustersBase.createCluster``, ``ClusterDataImpl.checkPropertiesIfPresent``,
``NamedEntity.checkName``):

* a name outside ``^[-=:.\\w]*$`` -> 412 "Cluster name is not valid";
* no body -> 400 "cluster data is required"; a URL of the wrong scheme -> 400 with Pulsar's
  text ("Illegal service url, example: …");
* an existing cluster -> 409 "Cluster already exists"; update/get/delete of an unknown one
  -> 404 "Cluster does not exist"; deleting one a tenant still allows -> 412 "Cluster not
  empty" (``isClusterUsedAsync``).

The sidecar's own cluster is always known (Pulsar registers it at initialisation), registered
or not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sync._constants import REGISTRY_KEY_CLUSTER
from sync._errors import BadRequestError, CodecError, InvalidInputError

from ._records import decode_json, encode_json

__all__ = ["ClusterRecord", "check_cluster_name", "cluster_key"]

#: Pulsar's NamedEntity rule (Java's ``\w`` is ASCII-only).
_CLUSTER_NAME = re.compile(r"^[-=:.\w]*$", re.ASCII)
#: ClusterData's URL fields: accepted schemes and Pulsar's refusal text.
_URLS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("serviceUrl", ("http",), "Illegal service url, example: http://pulsar.example.com:8080"),
    (
        "serviceUrlTls",
        ("https",),
        "Illegal service tls url, example: https://pulsar.example.com:8443",
    ),
    (
        "brokerServiceUrl",
        ("pulsar",),
        "Illegal broker service url, example: pulsar://pulsar.example.com:6650",
    ),
    (
        "brokerServiceUrlTls",
        ("pulsar+ssl",),
        "Illegal broker service tls url, example: pulsar+ssl://pulsar.example.com:6651",
    ),
    (
        "proxyServiceUrl",
        ("pulsar", "pulsar+ssl"),
        "Illegal proxy service url, example: pulsar+ssl://ats-proxy.example.com:4443 "
        "or pulsar://ats-proxy.example.com:4080",
    ),
)


def cluster_key(name: str) -> str:
    """The registry key of cluster ``name``."""
    return f"{REGISTRY_KEY_CLUSTER}{name}"


def check_cluster_name(name: str) -> None:
    """Raises InvalidInputError (412) "Cluster name is not valid" (Pulsar's NamedEntity)."""
    if not name or not _CLUSTER_NAME.match(name):
        raise InvalidInputError("Cluster name is not valid")


@dataclass(frozen=True, slots=True)
class ClusterRecord:
    """A registered cluster: its name and its ClusterData (canonical JSON, as given)."""

    name: str
    data: str

    @classmethod
    def of(cls, name: str, body: object) -> ClusterRecord:
        """The record for ``PUT``/``POST`` body ``body``, checked as Pulsar checks it.

        Raises:
            BadRequestError: no body, not an object, or a URL of the wrong scheme.
        """
        if body is None:
            raise BadRequestError("cluster data is required")
        if not isinstance(body, Mapping):
            raise BadRequestError("ClusterData must be a JSON object")
        for field, schemes, message in _URLS:
            value = body.get(field)
            if value is None or value == "":
                continue
            if not isinstance(value, str) or urlsplit(value).scheme not in schemes:
                raise BadRequestError(message)
        return cls(name, json.dumps(dict(body), sort_keys=True, separators=(",", ":")))

    def to_rest(self) -> dict[str, Any]:
        """Pulsar's ClusterData JSON."""
        value: dict[str, Any] = json.loads(self.data)
        return value

    def to_json(self) -> bytes:
        """The record's value in the registry topic."""
        return encode_json({"cluster": self.name, "data": self.to_rest()})

    @classmethod
    def from_json(cls, raw: bytes) -> ClusterRecord:
        """Decode a value written by :meth:`to_json`.

        Raises:
            CodecError: the value is not a cluster record.
        """
        d = decode_json(raw, "cluster record")
        name, data = d.get("cluster"), d.get("data")
        if not isinstance(name, str) or not isinstance(data, dict):
            raise CodecError("cluster record: needs a 'cluster' name and a 'data' object")
        return cls(name, json.dumps(data, sort_keys=True, separators=(",", ":")))
