//! policy-sync's compiled hot path: the per-message walk of a Pulsar batch payload
//! (`broker_shim/binary/_entries.py`, `check_entry`).
//!
//! A batch, once decompressed, is `count` times `[SIZE u32 big-endian]
//! [SingleMessageMetadata][PAYLOAD of payload_size bytes]`. The walk checks that the
//! sizes add up and that every `SingleMessageMetadata` decodes, refusing what protobuf's
//! Python runtime (upb) refuses for it: `ParseFromString`, then `IsInitialized`. Only
//! `payload_size` and `sequence_id` are kept; every other field is checked and skipped.
//! No allocation per message; no unsafe code.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// upb's words for a message that does not parse, as Python's DecodeError gives them.
const CORRUPT_TEXT: &str =
    "Error parsing message with type 'pulsar.proto.SingleMessageMetadata': Wire format was corrupt";

/// Why a `SingleMessageMetadata` is refused.
#[derive(Debug, PartialEq)]
enum Refusal {
    /// It does not parse (`ParseFromString` raises).
    Corrupt,
    /// It parses but lacks `payload_size`, or a property lacks its key or value
    /// (`IsInitialized` is false).
    Missing,
}

/// The deepest nesting (sub-messages and groups) upb's Python runtime decodes.
const MAX_DEPTH: u32 = 100;

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const START_GROUP: u32 = 3;
const END_GROUP: u32 = 4;
const FIXED32: u32 = 5;

/// What the walk needs of one `SingleMessageMetadata` (the last value of a field wins).
#[derive(Debug, PartialEq)]
struct Single {
    payload_size: i32,
    sequence_id: Option<u64>,
}

/// A cursor over one message's bytes; every read fails (None) past its end.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// A varint of at most `max_len` bytes; bits past the 64th are dropped, as upb does.
    fn varint(&mut self, max_len: usize) -> Option<u64> {
        let mut value = 0u64;
        for i in 0..max_len {
            let byte = *self.buf.get(self.pos)?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None // still continued after `max_len` bytes
    }

    /// A tag as (field number, wire type): at most 5 bytes, a 32-bit value. Inside a
    /// group upb takes any field number, 0 included.
    fn tag(&mut self) -> Option<(u32, u32)> {
        let tag = u32::try_from(self.varint(5)?).ok()?;
        Some((tag >> 3, tag & 7))
    }

    /// The tag of a message's field: field number 0 refused.
    fn field_tag(&mut self) -> Option<(u32, u32)> {
        self.tag().filter(|&(field, _)| field != 0)
    }

    /// The next `len` bytes.
    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|&end| end <= self.buf.len())?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Some(out)
    }

    /// A length-delimited field's bytes: its size is at most 5 bytes and 2^31 - 1.
    fn delimited(&mut self) -> Option<&'a [u8]> {
        let size = self.varint(5).filter(|&size| size <= i32::MAX as u64)?;
        self.take(usize::try_from(size).ok()?)
    }

    /// Skip the value of a field this walk does not keep (an unknown field for upb),
    /// `depth` being the nesting of the message it is in. A group runs until the end-group
    /// tag of its own field number.
    fn skip(&mut self, field: u32, wire_type: u32, depth: u32) -> Option<()> {
        match wire_type {
            VARINT => self.varint(10).map(drop),
            FIXED64 => self.take(8).map(drop),
            LEN => self.delimited().map(drop),
            FIXED32 => self.take(4).map(drop),
            START_GROUP if depth < MAX_DEPTH => loop {
                match self.tag()? {
                    (end, END_GROUP) => return (end == field).then_some(()),
                    (inner, wire) => self.skip(inner, wire, depth + 1)?,
                }
            },
            _ => None, // an end group outside its group, wire types 6 and 7, too deep
        }
    }
}

/// One `KeyValue` of `properties` (depth 1): whether it has both its required fields
/// (None: it does not parse).
fn key_value(buf: &[u8]) -> Option<bool> {
    let mut reader = Reader::new(buf);
    let (mut key, mut value) = (false, false);
    while !reader.at_end() {
        match reader.field_tag()? {
            // strings: their size is checked, not their UTF-8 (proto2, as upb)
            (1, LEN) => {
                reader.delimited()?;
                key = true;
            }
            (2, LEN) => {
                reader.delimited()?;
                value = true;
            }
            (field, wire) => reader.skip(field, wire, 1)?,
        }
    }
    Some(key && value)
}

/// What the walk keeps of one `SingleMessageMetadata`, or why it is refused.
fn single(buf: &[u8]) -> Result<Single, Refusal> {
    let mut reader = Reader::new(buf);
    let mut payload_size = None;
    let mut sequence_id = None;
    let mut complete = true; // every property has its key and value
    while !reader.at_end() {
        // A known field with another wire type than its own is an unknown field to upb.
        match reader.field_tag().ok_or(Refusal::Corrupt)? {
            (1, LEN) => {
                let kv = reader.delimited().ok_or(Refusal::Corrupt)?;
                complete &= key_value(kv).ok_or(Refusal::Corrupt)?;
            }
            // int32: the low 32 bits of the varint (a negative size is 10 bytes long)
            (3, VARINT) => payload_size = Some(reader.varint(10).ok_or(Refusal::Corrupt)? as i32),
            (8, VARINT) => sequence_id = Some(reader.varint(10).ok_or(Refusal::Corrupt)?),
            (field, wire) => reader.skip(field, wire, 0).ok_or(Refusal::Corrupt)?,
        }
    }
    match payload_size {
        Some(payload_size) if complete => Ok(Single {
            payload_size,
            sequence_id,
        }),
        _ => Err(Refusal::Missing),
    }
}

/// Walk a batch of `count` messages: (`count`, the last message's `sequence_id` if it
/// has one), or the reason it is refused, worded as `check_entry` words it.
fn walk(data: &[u8], count: u32) -> Result<(u32, Option<u64>), String> {
    let total = data.len();
    let mut pos = 0usize;
    let mut last = None;
    for index in 0..count {
        let Some(&[a, b, c, d]) = data.get(pos..pos + 4) else {
            return Err(format!("batch truncated at message {index} of {count}"));
        };
        let size = u32::from_be_bytes([a, b, c, d]);
        pos += 4;
        let end = pos.saturating_add(size as usize);
        if size == 0 || end > total {
            return Err(format!(
                "batch message {index}: metadata size {size} does not fit"
            ));
        }
        // unpack_messages' words, and check_entry's
        let meta = single(&data[pos..end]).map_err(|why| match why {
            Refusal::Missing => format!("batch message {index}: metadata lacks required fields"),
            Refusal::Corrupt => {
                format!("batch message {index}: undecodable metadata: {CORRUPT_TEXT}")
            }
        })?;
        // negative, or past the batch
        match usize::try_from(meta.payload_size) {
            Ok(payload) if payload <= total - end => pos = end + payload,
            _ => {
                let size = meta.payload_size;
                return Err(format!(
                    "batch message {index}: payload size {size} does not fit"
                ));
            }
        }
        last = meta.sequence_id;
    }
    if pos != total {
        return Err(format!(
            "batch has {} bytes after its {count} messages",
            total - pos
        ));
    }
    Ok((count, last))
}

/// Walk a decompressed Pulsar batch of `count` messages: (count, the last message's
/// sequence_id or None). Raises ValueError with check_entry's words when it does not add up.
#[pyfunction]
fn walk_batch(data: &[u8], count: u32) -> PyResult<(u32, Option<u64>)> {
    walk(data, count).map_err(PyValueError::new_err)
}

#[pymodule]
fn policy_sync_native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(walk_batch, module)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A varint's bytes.
    fn varint(mut value: u64) -> Vec<u8> {
        let mut out = Vec::new();
        while value >= 0x80 {
            out.push((value as u8) | 0x80);
            value >>= 7;
        }
        out.push(value as u8);
        out
    }

    /// `[SIZE][metadata][payload]` of one message.
    fn message(meta: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut out = (meta.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(meta);
        out.extend_from_slice(payload);
        out
    }

    /// A metadata with `payload_size` and, if given, `sequence_id`.
    fn meta(payload_size: i32, sequence_id: Option<u64>) -> Vec<u8> {
        let mut out = vec![0x18];
        out.extend(varint(payload_size as i64 as u64));
        if let Some(id) = sequence_id {
            out.push(0x40);
            out.extend(varint(id));
        }
        out
    }

    #[test]
    fn a_batch_gives_its_count_and_last_sequence_id() {
        let mut data = message(&meta(3, Some(5)), b"abc");
        data.extend(message(&meta(0, Some(9)), b""));
        assert_eq!(walk(&data, 2), Ok((2, Some(9))));
        assert_eq!(walk(&message(&meta(1, None), b"x"), 1), Ok((1, None)));
    }

    #[test]
    fn sizes_that_do_not_add_up_are_refused_in_check_entry_s_words() {
        let one = message(&meta(3, None), b"abc");
        assert_eq!(
            walk(&one, 2).unwrap_err(),
            "batch truncated at message 1 of 2"
        );
        let mut trailing = one.clone();
        trailing.push(0);
        assert_eq!(
            walk(&trailing, 1).unwrap_err(),
            "batch has 1 bytes after its 1 messages"
        );
        assert_eq!(
            walk(&one[..one.len() - 1], 1).unwrap_err(),
            "batch message 0: payload size 3 does not fit"
        );
        assert_eq!(
            walk(&[0, 0, 0, 99, 1], 1).unwrap_err(),
            "batch message 0: metadata size 99 does not fit"
        );
        assert_eq!(
            walk(&[0, 0, 0, 0], 1).unwrap_err(),
            "batch message 0: metadata size 0 does not fit"
        );
        assert_eq!(
            walk(&message(&meta(-1, None), b""), 1).unwrap_err(),
            "batch message 0: payload size -1 does not fit"
        );
    }

    #[test]
    fn refused_metadata_is_named_in_unpack_messages_words() {
        assert_eq!(
            walk(&message(&[0x40, 5], b""), 1).unwrap_err(),
            "batch message 0: metadata lacks required fields"
        );
        assert_eq!(
            walk(&message(&[0x00, 0x01], b""), 1).unwrap_err(),
            "batch message 0: undecodable metadata: Error parsing message with type \
             'pulsar.proto.SingleMessageMetadata': Wire format was corrupt"
        );
    }

    #[test]
    fn undecodable_metadata_is_refused() {
        let refused = |meta: &[u8]| single(meta).unwrap_err();
        assert_eq!(refused(&[0x00, 0x01]), Refusal::Corrupt); // field number 0
        assert_eq!(refused(&[0x18]), Refusal::Corrupt); // truncated varint
        assert_eq!(refused(&[0x18, 0x80]), Refusal::Corrupt);
        assert_eq!(refused(&[0x18, 1, 0x3a, 2, 0xff]), Refusal::Corrupt); // bytes past the end
        assert_eq!(refused(&[0x18, 1, 0x69, 1, 2]), Refusal::Corrupt); // truncated fixed64
        assert_eq!(refused(&[0x18, 1, 0x5e]), Refusal::Corrupt); // wire type 6
        assert_eq!(refused(&[0x18, 1, 0x5f]), Refusal::Corrupt); // wire type 7
        assert_eq!(refused(&[0x18, 1, 0x5c]), Refusal::Corrupt); // end group without a group
        assert_eq!(refused(&[0x18, 1, 0x5b, 0x64]), Refusal::Corrupt); // another field's end group
        assert_eq!(refused(&[0x18, 1, 0x5b]), Refusal::Corrupt); // unterminated group
        let eleven = [
            0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
        ];
        assert_eq!(
            refused(&[[0x18].as_slice(), &eleven].concat()),
            Refusal::Corrupt
        );
        // a size or a tag longer than 5 bytes
        assert_eq!(
            refused(&[0x18, 1, 0x3a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),
            Refusal::Corrupt
        );
        assert_eq!(
            refused(&[0x18, 1, 0xf8, 0xff, 0xff, 0xff, 0x8f, 0x00, 0x01]),
            Refusal::Corrupt
        );
    }

    #[test]
    fn required_fields_are_required() {
        assert_eq!(single(&[]).unwrap_err(), Refusal::Missing);
        assert_eq!(single(&[0x40, 5]).unwrap_err(), Refusal::Missing);
        // payload_size as fixed32 is an unknown field: payload_size is missing
        assert_eq!(single(&[0x1d, 1, 0, 0, 0]).unwrap_err(), Refusal::Missing);
        // a property without its value, or without anything
        assert_eq!(
            single(&[0x18, 1, 0x0a, 3, 0x0a, 1, b'k']).unwrap_err(),
            Refusal::Missing
        );
        assert_eq!(single(&[0x18, 1, 0x0a, 0]).unwrap_err(), Refusal::Missing);
        let full = [0x18, 1, 0x0a, 6, 0x0a, 1, b'k', 0x12, 1, b'v'];
        assert_eq!(
            single(&full),
            Ok(Single {
                payload_size: 1,
                sequence_id: None
            })
        );
    }

    #[test]
    fn what_upb_accepts_is_accepted() {
        let ok = |meta: &[u8]| single(meta).unwrap();
        // int32 keeps the low 32 bits; the last value wins
        assert_eq!(ok(&[0x18, 0x80, 0x80, 0x80, 0x80, 0x10]).payload_size, 0);
        assert_eq!(ok(&[0x18, 1, 0x18, 2]).payload_size, 2);
        // a 10-byte varint with high bits in its last byte: the bits past 64 are dropped
        let mut max = vec![0x18, 1, 0x40];
        max.extend([0xff; 9]);
        max.push(0x7f);
        assert_eq!(ok(&max).sequence_id, Some(u64::MAX));
        // field number 0 inside a group, a group of field 0 inside a group
        assert_eq!(
            ok(&[0x18, 1, 0x5b, 0x00, 1, 0x03, 0x04, 0x5c]).payload_size,
            1
        );
        // unknown fields of every wire type, matched groups, strings that are not UTF-8
        assert_eq!(
            ok(&[0x18, 1, 0x0b, 0x0c, 0x12, 2, 0xff, 0xfe]).payload_size,
            1
        );
        assert_eq!(
            ok(&[0x18, 1, 0x69, 0, 0, 0, 0, 0, 0, 0, 0, 0x6d, 0, 0, 0, 0]).payload_size,
            1
        );
        assert_eq!(
            ok(&[0x18, 1, 0x3a, 0x80, 0x80, 0x80, 0x80, 0x00]).payload_size,
            1
        );
    }

    #[test]
    fn groups_nest_as_deep_as_upb_lets_them() {
        let nested = |prefix: &[u8], depth: usize| {
            let mut out = prefix.to_vec();
            out.extend(std::iter::repeat_n(0x5b, depth));
            out.extend(std::iter::repeat_n(0x5c, depth));
            out
        };
        assert!(single(&nested(&[0x18, 1], 100)).is_ok());
        assert_eq!(
            single(&nested(&[0x18, 1], 101)).unwrap_err(),
            Refusal::Corrupt
        );
        // inside a property (one level down already)
        let in_property = |depth: usize| {
            let kv = nested(&[0x0a, 1, b'k', 0x12, 1, b'v'], depth);
            let mut out = vec![0x18, 1, 0x0a];
            out.extend(varint(kv.len() as u64));
            out.extend(kv);
            out
        };
        assert!(single(&in_property(99)).is_ok());
        assert_eq!(single(&in_property(100)).unwrap_err(), Refusal::Corrupt);
    }
}
