"""Pulsar's WebSocket API on the sidecar (aiohttp), over :mod:`sync.messaging`.

Endpoints (Pulsar's paths and JSON frames; ``messageId`` is standard base64 of a
serialized ``MessageIdData`` — see :class:`sync.messaging._producer.MessageId`):

``GET /ws/v2/producer/{domain}/{tenant}/{namespace}/{topic}``
    Query: ``messageRoutingMode`` (``RoundRobinPartition`` default, Pulsar's client
    default: each unkeyed message to the next partition; or ``SinglePartition``),
    ``hashingScheme`` (``JavaStringHash`` default or ``Murmur3_32Hash``),
    ``batchingEnabled`` (default false), ``batchingMaxPublishDelay`` (ms),
    ``maxPendingMessages``, ``producerName``. Other Pulsar parameters are ignored.
    Client → ``{"payload": base64, "key"?, "properties"?, "context"?, "eventTime"?,
    "sequenceId"?, "deliverAt"?, "deliverAfterMs"?}`` (``sequenceId`` with
    ``producerName``: deduplication; ``deliverAt`` epoch ms: delayed delivery);
    server → ``{"result": "ok", "messageId", "context"?}`` or
    ``{"result": "send-error:<code>", "errorMsg", "context"?}`` with Pulsar's codes
    (3 bad JSON, 7 bad payload encoding, 8 anything else, e.g. ``maxMessageSize``).
    Sends may be pipelined (up to ``maxPendingMessages``, then the connection is not read
    until answers went out); every send gets exactly one answer, in send order, and an
    ``ok`` only once Kafka acknowledged the message (``acks=all``).

``GET /ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic}/{subscription}``
    Query: ``subscriptionType`` (``Exclusive`` default, ``Failover``, ``Shared``,
    ``Key_Shared``), ``receiverQueueSize`` (capped at 1000), ``consumerName``,
    ``pullMode``, ``negativeAckRedeliveryDelay`` (ms) and, an extension,
    ``subscriptionInitialPosition`` (``Latest`` default, or ``Earliest``).
    Server → ``{"messageId", "payload", "properties", "publishTime", "redeliveryCount",
    "key"?, "eventTime"?}``; client → ``{"messageId"}`` (ack),
    ``{"type": "negativeAcknowledge", "messageId"}``, ``{"type": "permit",
    "permitMessages": N}`` (pull mode), ``{"type": "isEndOfTopic"}`` (answered
    ``{"endOfTopic": false}``: Kafka topics never end), ``{"type": "unsubscribe"}``.

``GET /ws/v2/reader/{domain}/{tenant}/{namespace}/{topic}``
    Query: ``messageId`` (``latest`` default, ``earliest``, or the base64 id of a message
    to start after), ``receiverQueueSize``, ``readerName``. The consumer's message frames,
    on a non-durable subscription (nothing committed, gone with the connection); the
    client's ``{"messageId"}`` frames only make room for more messages, as Pulsar's
    ReaderHandler; ``{"type": "isEndOfTopic"}`` is answered.

``GET /ws/pingpong``
    Answers WebSocket pings (and echoes text frames).

With an auth config, a handshake authenticates with ``Authorization: Bearer <token>`` (or
Pulsar's ``token`` query parameter) and needs the ``produce`` or ``consume`` permission
(``docs/configuration.md``, "Authorization"): 401 and 403 otherwise.

Refusals at the handshake are HTTP errors with ``{"reason": ...}``, as Pulsar's proxy
answers: 400 bad name or query parameter (``Invalid query params: …``), 404 no such topic,
409 busy (``Failed to subscribe: Exclusive consumer is already connected``,
``… Subscription reached max consumers limit``, ``… Topic reached max producers limit``,
``… Subscription is of different type``), 403 forbidden by a policy (``Topic[{…}] doesn't
support Shared sub type!``, ``Exceed the maximum number of subscriptions …``; Pulsar's
proxy says 500 here, which hides that the client must change something), 503 policies not
loaded yet, the bundle moving, Kafka failing or the sidecar shutting down (retry): the
table of :func:`broker_shim._http_errors.handshake_refusal`.

A topic owned by another sidecar is answered ``307 Temporary Redirect`` to the same path
and query on the owner (``ws://``/``wss://`` from its HTTP URL), which WebSocket clients
follow; a Pulsar client's proxy would instead connect to the owner itself.

Close codes: 1000 normal (and after ``unsubscribe``), 1001 the sidecar is shutting down,
1008 a policy change closed this connection (reason: Pulsar's refusal text), 1012 the topic
moved to another sidecar (reconnect and follow the redirect), 4003 an undecodable frame
(Pulsar's ``FailedToDeserializeFromJSON``, code 3, in the private range). Reasons are cut
to the 123 bytes a close frame allows.

Layout: :mod:`._frames` (what the endpoints share), :mod:`._producer`,
:mod:`._consumer` (consumer and reader); the routes are added here.
"""

from __future__ import annotations

import functools

from aiohttp import WSMsgType, web

from sync.messaging import MessagingEngine

from ._consumer import consumer_endpoint, reader_endpoint
from ._frames import (
    CONSUMER_PATH,
    PRODUCER_PATH,
    READER_PATH,
    AdmitProducer,
    Authorize,
    admit_any,
    allow_all,
)
from ._producer import producer_endpoint

__all__ = ["AdmitProducer", "Authorize", "add_ws_routes", "admit_any", "allow_all"]


#: Pulsar's WebSocket liveness endpoint: a client pings, the server pongs.
PINGPONG_PATH = "/ws/pingpong"


async def pingpong_endpoint(request: web.Request) -> web.StreamResponse:
    """Pulsar ``/ws/pingpong``: answers every WebSocket ping with a pong (and echoes text),
    until the client closes."""
    ws = web.WebSocketResponse(autoping=True)
    await ws.prepare(request)
    async for message in ws:
        if message.type == WSMsgType.TEXT:
            await ws.send_str(message.data)
    return ws


def add_ws_routes(
    app: web.Application,
    engine: MessagingEngine,
    authorize: Authorize = allow_all,
    admit_producer: AdmitProducer = admit_any,
) -> None:
    """Serve Pulsar's WebSocket producer, consumer and reader endpoints on ``app`` with
    ``engine`` (started and closed by whoever built it: the sidecar's composition root);
    ``authorize`` refuses a handshake whose role may not produce or consume the topic,
    ``admit_producer`` (on the topic's owner) a producer the topic's schema policies refuse."""
    producer = functools.partial(producer_endpoint, engine, authorize, admit_producer)
    app.add_routes(
        [
            web.get(PRODUCER_PATH, producer),
            web.get(CONSUMER_PATH, functools.partial(consumer_endpoint, engine, authorize)),
            web.get(READER_PATH, functools.partial(reader_endpoint, engine, authorize)),
            web.get(PINGPONG_PATH, pingpong_endpoint),
        ]
    )
