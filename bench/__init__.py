"""Benchmarks (``make bench``): policy-sync measured side by side with raw confluent-kafka."""
