"""policy-sync's compiled hot path (native/src/lib.rs)."""

def walk_batch(data: bytes, count: int, /) -> tuple[int, int | None]:
    """Walk a decompressed Pulsar batch of ``count`` messages: ``(count, the last
    message's sequence_id or None)``.

    Raises:
        ValueError: its sizes do not add up or a message's metadata does not decode
            (check_entry's words).
    """
