"""The one copy of each helper the tests share (issue #25). One module a subject:

- :mod:`tests.support.waits`: polling waits (``wait_for``).
- :mod:`tests.support.http`: HTTP requests to a sidecar (``http``, ``request_json``,
  ``create_topic``).
- :mod:`tests.support.events`: change events of the policy topic (``change_event``).
- :mod:`tests.support.kafka`: where the tests' real Kafka comes from (``kafka_for_tests``,
  ``jar_broker``, ``free_port``, ``ROOT``), fresh topics (``make_topic``) and what Kafka
  holds of a subscription's acknowledgements (``not_durable``, ``wait_acks_durable``).
- :mod:`tests.support.sidecars`: sidecars, in a thread (``ThreadSidecar``,
  ``BinarySidecar`` with its ``pulsar://`` listener) or as processes (``ProcessSidecar``,
  ``Sidecar``), the command-line programs (``run_cli``) and what a sidecar applies
  (``applied``, ``cached``).
- :mod:`tests.support.ws`: WebSocket clients (``connect``, ``produce``, ``receive``, ...).

Fixtures stay in conftest files: ``tests/conftest.py`` for all tests,
``tests/integration/conftest.py`` for Kafka, and a package's own conftest for what several
of its files share (e.g. ``tests/integration/broker_shim/binary/conftest.py``). This
package imports nothing at import time, so ``bench`` may use :mod:`tests.support.kafka`.
"""
