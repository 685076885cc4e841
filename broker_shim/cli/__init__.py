"""Command-line entry points: ``policyctl``, ``broker-shim``, ``policy-audit``."""

__all__: list[str] = []
