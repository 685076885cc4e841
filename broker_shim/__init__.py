"""The policy-sync sidecar: runs beside each broker, hosts the policy cache and serves
Pulsar-compatible admin APIs over HTTP. Depends on :mod:`sync`, never the reverse."""

__all__: list[str] = []
