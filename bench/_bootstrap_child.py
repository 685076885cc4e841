"""One cold read of a topic in a fresh process: ``raw`` consume-only, or ``cache`` bootstrap.

Run as ``python -m bench._bootstrap_child MODE BOOTSTRAP TOPIC``; prints one JSON line
with seconds, records and RSS growth, so memory is measured without other runs' garbage.
"""

from __future__ import annotations

import gc
import json
import sys
import time

from confluent_kafka import Consumer, TopicPartition

# Imported (and the schemas loaded) before the clock starts, for both modes alike.
from sync import CacheConfig, Codec, PolicyCache
from sync.transport import KafkaConfig, KafkaTransport

Codec()


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


def _raw(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-raw",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.max.bytes": 16 * 1024 * 1024,
            "max.partition.fetch.bytes": 4 * 1024 * 1024,
            "queued.max.messages.kbytes": 16384,  # per partition
        }
    )
    meta = c.list_topics(topic, timeout=10).topics[topic]
    parts = sorted(meta.partitions)
    ends = {
        p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
        for p in parts
    }
    c.assign([TopicPartition(topic, p, -2) for p in parts])
    n = 0
    done = {p for p, e in ends.items() if e == 0}
    while len(done) < len(parts):
        for m in c.consume(num_messages=10000, timeout=0.5):
            offset, partition = m.offset(), m.partition()
            if m.error() is None and offset is not None and partition is not None:
                n += 1
                if offset + 1 >= ends[partition]:
                    done.add(partition)
    c.close()
    return n, n


def _cache(bootstrap: str, topic: str) -> tuple[int, int]:
    cache = PolicyCache(
        KafkaTransport(KafkaConfig(bootstrap)),
        config=CacheConfig(topic=topic, dead_letter=False, bootstrap_timeout_s=600),
    )
    cache.start()
    cache.wait_ready(620)
    return cache.stats().bootstrap_records, len(cache)


def main() -> None:
    mode, bootstrap, topic = sys.argv[1:4]
    gc.collect()
    base = _rss()
    t0 = time.perf_counter()
    records, size = (_raw if mode == "raw" else _cache)(bootstrap, topic)
    elapsed = time.perf_counter() - t0
    gc.collect()
    growth = (_rss() - base) / 2**20
    result = {"seconds": elapsed, "records": records, "size": size, "rss_growth_mb": growth}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
