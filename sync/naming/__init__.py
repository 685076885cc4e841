"""Names, as Pulsar's ``common/naming``: topics and namespaces, their Kafka topics, bundles.

* :mod:`sync.naming._names` — :class:`TopicName`, :class:`NamespaceName`: parsed exactly
  as Pulsar parses them.
* :mod:`sync.naming._kafka_names` — :func:`kafka_topic_of`: the reversible mapping from a
  Pulsar topic name to the Kafka topic that holds it.
* :mod:`sync.naming._bundles` — namespace bundles: how a namespace's topics are sharded by
  hash range (Pulsar's ``NamespaceBundles``).
"""

from ._kafka_names import kafka_topic_of
from ._names import NamespaceName, TopicDomain, TopicName

__all__ = ["NamespaceName", "TopicDomain", "TopicName", "kafka_topic_of"]
