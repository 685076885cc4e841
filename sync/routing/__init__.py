"""Client-side partition routing, bit-for-bit compatible with Pulsar's Java client and Kafka.

A producer writing to a partitioned topic asks a *message router* which partition a
message goes to. This module reproduces the Java client's routers and hash functions so
that a key routed here lands on the same partition a Java producer would pick:

* ``java_string_hash`` -- ``JavaStringHash.makeHash``: ``String.hashCode() & MAX_VALUE``;
* ``murmur3_32_hash`` -- ``Murmur3Hash32.makeHash``: MurmurHash3 x86_32, seed 0, UTF-8;
* ``sign_safe_mod`` -- ``org.apache.pulsar.client.util.MathUtils.signSafeMod``;
* ``RoundRobinPartitionRouter`` -- ``RoundRobinPartitionMessageRouterImpl`` (default mode);
* ``SinglePartitionRouter`` -- ``SinglePartitionMessageRouterImpl``;
* ``CustomPartitionRouter`` / ``checked_choose`` -- a user router, with the range check
  ``PartitionedProducerImpl`` applies to every router's answer;
* ``make_router`` -- ``PartitionedProducerImpl.getMessageRouter`` plus the mode checks of
  ``ProducerBuilderImpl.setMessageRoutingMode``;
* ``kafka_murmur2`` / ``kafka_partition`` -- Kafka ``Utils.murmur2`` and
  ``BuiltInPartitioner.partitionForKey``.

Sources (apache/pulsar): ``pulsar-client/.../impl/JavaStringHash.java``,
``Murmur3Hash32.java``, ``MessageRouterBase.java``,
``RoundRobinPartitionMessageRouterImpl.java``, ``SinglePartitionMessageRouterImpl.java``,
``PartitionedProducerImpl.getMessageRouter``, ``conf/ProducerConfigurationData.java``,
``pulsar-client-api/.../api/{MessageRouter,TopicMetadata,HashingScheme,
MessageRoutingMode}.java``; (apache/kafka): ``clients/.../common/utils/Utils.java``,
``clients/.../producer/internals/BuiltInPartitioner.java``.

Routing looks at the message *key* only. Pulsar's built-in routers never consult the
ordering key (it drives Key_Shared dispatch and key-based batching, not partitioning), so
:class:`RoutedMessage` carries it for custom routers but the built-ins ignore it.

Errors: a router answer outside ``[0, num_partitions)`` raises :class:`RoutingError`
(an :class:`~sync._errors.InvalidInputError`); it is never wrapped modulo. Invalid
arguments (partition counts, delays, unknown modes) raise
:class:`~sync._errors.ConfigurationError`.
"""

from __future__ import annotations

from ._hashes import (
    java_string_hash,
    kafka_murmur2,
    kafka_partition,
    murmur3_32_hash,
    sign_safe_mod,
)
from ._routers import (
    CustomPartitionRouter,
    HashingScheme,
    MessageRouter,
    MessageRoutingMode,
    RoundRobinPartitionRouter,
    RoutedMessage,
    RoutingError,
    SinglePartitionRouter,
    TopicMetadata,
    checked_choose,
    make_router,
)

__all__ = [
    "CustomPartitionRouter",
    "HashingScheme",
    "MessageRouter",
    "MessageRoutingMode",
    "RoundRobinPartitionRouter",
    "RoutedMessage",
    "RoutingError",
    "SinglePartitionRouter",
    "TopicMetadata",
    "checked_choose",
    "java_string_hash",
    "kafka_murmur2",
    "kafka_partition",
    "make_router",
    "murmur3_32_hash",
    "sign_safe_mod",
]
