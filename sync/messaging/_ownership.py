"""Who serves a topic: the seam to bundle ownership (implemented elsewhere).

The messaging engine only asks :meth:`TopicOwnership.owner_of`. The default,
:class:`LocalOwnership`, serves every topic here (a single sidecar, or before ownership is
wired in). A real implementation answers from the namespace-bundle ownership of the
topic. When a topic is not local, the WebSocket endpoints answer the handshake with
``307 Temporary Redirect`` to the same path on the owner (``ws://`` or ``wss://`` from
its ``http_url``); a live topic found not local any more is unloaded: its acknowledgements
are committed and its connections closed (cause UNLOADED) so that clients reconnect and
are redirected to the new owner, which resumes from the committed positions. The same
happens when the topic stays local but its ownership term (:attr:`OwnerInfo.claim`)
changed: the bundle was unloaded and claimed again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sync.naming._names import TopicName

__all__ = ["LocalOwnership", "OwnerInfo", "TopicOwnership"]


@dataclass(frozen=True, slots=True)
class OwnerInfo:
    """Where a topic is served: here (``local``) or at ``http_url`` (``http(s)://host:port``).

    ``bundle`` and ``claim`` name the ownership term when known (the topic's bundle and its
    ownership record's version): a live topic whose claim on the *same* bundle changed
    while it stayed local was unloaded and claimed again, so its clients are closed exactly
    as on a move (Pulsar's unload always closes the topic, even when the same broker takes
    the bundle again). A new bundle (a split) with the topic still local closes nothing,
    as Pulsar keeps topics loaded across a split that does not unload.
    """

    local: bool
    http_url: str | None = None
    bundle: str | None = None
    claim: str | None = None


@runtime_checkable
class TopicOwnership(Protocol):
    """Answers which sidecar serves a topic (the name as the client addressed it)."""

    async def owner_of(self, topic: TopicName) -> OwnerInfo:
        """The owner of ``topic``; must not block the event loop."""
        ...


class LocalOwnership:
    """Every topic is served by this sidecar."""

    async def owner_of(self, topic: TopicName) -> OwnerInfo:
        """Always local."""
        return OwnerInfo(local=True)
