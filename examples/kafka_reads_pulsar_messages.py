"""A Kafka-native application reading what Pulsar clients wrote, with a plain
confluent-kafka consumer and the library's decoder (``broker_shim.binary.decode_record``),
whichever way the sidecar stored it (``--entry-format message`` or ``entry``).

    python -m examples.kafka_reads_pulsar_messages BOOTSTRAP persistent://public/default/t

prints each message of partition 0 from the start: its place, key, properties, payload.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from confluent_kafka import Consumer, TopicPartition

from broker_shim.binary import DecodedMessage, decode_record
from sync import TopicName, kafka_topic_of

__all__ = ["read_messages"]


def read_messages(
    bootstrap: str, topic: str, partition: int = 0, idle_s: float = 5.0
) -> Iterator[tuple[int, DecodedMessage]]:
    """Each Pulsar message of one partition from its start, with its record's offset,
    until nothing new arrives for ``idle_s``."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "kafka-reader", "enable.auto.commit": False}
    )
    try:
        consumer.assign(
            [TopicPartition(kafka_topic_of(TopicName.parse(topic)), partition, 0)]
        )
        while True:
            record = consumer.poll(idle_s)
            if record is None:
                return
            if record.error():
                raise RuntimeError(str(record.error()))
            messages = decode_record(
                record.value(), record.headers(), record.key(), record.timestamp()[1]
            )
            for message in messages:
                yield int(record.offset() or 0), message
    finally:
        consumer.close()


def main() -> None:
    bootstrap, topic = sys.argv[1], sys.argv[2]
    for offset, m in read_messages(bootstrap, topic):
        print(f"{offset}/{m.batch_index}: key={m.key!r} properties={m.properties} {m.payload!r}")


if __name__ == "__main__":
    main()
