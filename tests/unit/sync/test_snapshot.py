from __future__ import annotations

from pathlib import Path

from sync.policy._policy_snapshot import Snapshot, load_snapshot, save_snapshot


def test_round_trip(tmp_path: Path) -> None:
    snap = Snapshot(
        "t", "id", 123, {0: 5, 1: 7}, {b"p/": {b"k": b"v", b"k2": b"v2"}}, b"\xc3\x01" + bytes(8)
    )
    save_snapshot(tmp_path / "s", snap)
    loaded, why = load_snapshot(tmp_path / "s")
    assert why == "ok" and loaded == snap


def test_missing_corrupt_and_foreign_files_are_refused(tmp_path: Path) -> None:
    assert load_snapshot(tmp_path / "none") == (None, "no snapshot")
    save_snapshot(tmp_path / "s", Snapshot("t", "id", 1, {0: 1}, {b"": {b"k": b"v"}}, bytes(10)))
    data = bytearray((tmp_path / "s").read_bytes())
    data[-1] ^= 0xFF
    (tmp_path / "s").write_bytes(bytes(data))
    assert load_snapshot(tmp_path / "s")[1] == "snapshot is corrupt (digest mismatch)"
    (tmp_path / "x").write_bytes(b"hello")
    assert load_snapshot(tmp_path / "x")[1] == "snapshot has an unknown format"


def test_large_prefixes_are_written_in_pieces_and_read_back_whole(tmp_path: Path) -> None:
    import marshal

    from sync.policy import _policy_snapshot as _snapshot

    big = {f"t{i}".encode(): bytes([i % 256]) * 3 for i in range(2 * _snapshot._PIECE + 5)}
    store = {b"persistent://a/b/": big, b"__NS__a/": {b"b": b"x"}, b"": {}}
    snap = Snapshot("t", "id", 1, {0: 1, 1: 2}, store, bytes(10))
    save_snapshot(tmp_path / "s", snap)
    payload = (tmp_path / "s").read_bytes()[40:]
    assert payload.count(marshal.dumps(b"persistent://a/b/")) == 3  # three pieces
    loaded, why = load_snapshot(tmp_path / "s")
    assert why == "ok" and loaded == Snapshot("t", "id", 1, {0: 1, 1: 2}, store, bytes(10))
