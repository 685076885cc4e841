"""TLS for the sidecar's listeners, with Pulsar's settings.

``broker-shim run --broker-port-tls PORT --tls-cert-file CERT --tls-key-file KEY`` serves
``pulsar+ssl://`` beside ``pulsar://`` (Pulsar's ``brokerServicePortTls``,
``tlsCertificateFilePath``, ``tlsKeyFilePath``); ``--http-port-tls PORT`` serves
``https://`` beside ``http://`` (``webServicePortTls``) with the same certificate and the
same checks. ``--tls-trust-cert-file CA`` names the certificates that client certificates
are checked against (``tlsTrustCertsFilePath``); ``--tls-require-trusted-client-cert``
refuses a client without one (``tlsRequireTrustedClientCertOnConnect``). The files are
read when the sidecar starts: a missing or malformed one stops it with the reason, before
any listener opens.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sync.errors import ConfigurationError

__all__ = ["TlsSettings", "peer_common_name"]


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The server certificate and key, and how client certificates are checked."""

    cert_file: Path
    key_file: Path
    trust_cert_file: Path | None = None
    require_client_cert: bool = False

    def __post_init__(self) -> None:
        if self.require_client_cert and self.trust_cert_file is None:
            raise ConfigurationError(
                "--tls-require-trusted-client-cert needs --tls-trust-cert-file (the CA "
                "client certificates are checked against)"
            )

    def server_context(self) -> ssl.SSLContext:
        """A server-side context (TLS 1.2 or later).

        Raises:
            ConfigurationError: a file is missing, unreadable or not a matching
                certificate and key.
        """
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(
                f"cannot use --tls-cert-file {self.cert_file} with --tls-key-file "
                f"{self.key_file}: {exc}"
            ) from exc
        if self.trust_cert_file is not None:
            try:
                ctx.load_verify_locations(cafile=self.trust_cert_file)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigurationError(
                    f"cannot use --tls-trust-cert-file {self.trust_cert_file}: {exc}"
                ) from exc
            ctx.verify_mode = ssl.CERT_REQUIRED if self.require_client_cert else ssl.CERT_OPTIONAL
        return ctx


class _Transport(Protocol):
    def get_extra_info(self, name: str, default: Any = None) -> Any: ...


def peer_common_name(transport: _Transport | None) -> str | None:
    """The common name of the verified client certificate of a TLS connection (None:
    plain, or the client sent none). ``transport``: an asyncio transport or stream writer
    (anything with ``get_extra_info``)."""
    cert = None if transport is None else transport.get_extra_info("peercert")
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return str(value)
    return None
