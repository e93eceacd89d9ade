//! The protobuf wire format, both ways, as `tf.train.Example` needs it: varints and
//! length-delimited fields. The encoder writes records with the `put_*` helpers in one
//! pass of exact sizes; the columnar decoder walks records with [`fields`] without
//! building messages. (prost's own messages serve `inspect` and the tests.)

use crate::error::{Error, ErrorKind, Result, WireProblem};

/// The bytes a varint of `v` takes: 1 per 7 bits, at least 1.
#[inline]
pub(crate) fn varint_len(v: u64) -> u64 {
    // ⌈bits / 7⌉ as (9·bits + 64) / 64, exact for 1..=64 bits: a multiply and a shift
    // where a division by 7 costs several instructions on the encoder's hottest loop.
    let bits = 64 - (v | 1).leading_zeros() as u64;
    (9 * bits + 64) >> 6
}

/// The bytes a length-delimited field of `len` bytes takes, tag included.
#[inline]
pub(crate) fn wrapped(len: u64) -> u64 {
    1 + varint_len(len) + len
}

/// The length of a map entry `{1: key, 2: value}`.
#[inline]
pub(crate) fn entry_len(key_len: u64, value_len: u64) -> u64 {
    wrapped(key_len) + wrapped(value_len)
}

/// Appends a varint.
#[inline]
pub(crate) fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Appends a length-delimited field's tag (fields 1 to 15).
#[inline]
pub(crate) fn put_tag(buf: &mut Vec<u8>, field: u64) {
    buf.push(((field << 3) | 2) as u8);
}

pub(crate) fn malformed(problem: WireProblem) -> Error {
    Error::new(ErrorKind::Malformed(problem))
}

/// Reads a varint at `*pos`, moving past it.
#[inline]
pub(crate) fn varint(buf: &[u8], pos: &mut usize) -> Result<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let Some(&byte) = buf.get(*pos) else {
            return Err(malformed(WireProblem::VarintPastEnd));
        };
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Ok(value);
        }
    }
    Err(malformed(WireProblem::VarintTooLong))
}

#[inline]
fn len_delimited<'a>(buf: &'a [u8], pos: &mut usize) -> Result<&'a [u8]> {
    let len = varint(buf, pos)?;
    let end = pos
        .checked_add(usize::try_from(len).map_err(|_| malformed(WireProblem::LengthPastEnd))?)
        .filter(|&e| e <= buf.len())
        .ok_or_else(|| malformed(WireProblem::LengthPastEnd))?;
    let out = &buf[*pos..end];
    *pos = end;
    Ok(out)
}

/// Skips a field of the given wire type.
fn skip(buf: &[u8], pos: &mut usize, wire: u64) -> Result<()> {
    match wire {
        0 => {
            varint(buf, pos)?;
        }
        1 => *pos += 8,
        2 => {
            len_delimited(buf, pos)?;
        }
        5 => *pos += 4,
        _ => return Err(malformed(WireProblem::UnknownWireType)),
    }
    if *pos > buf.len() {
        return Err(malformed(WireProblem::FixedPastEnd));
    }
    Ok(())
}

/// Calls `f(field, wire, payload)` for each field; `payload` is the field's bytes for
/// length-delimited fields, the field's own bytes otherwise.
///
/// # Errors
///
/// [`ErrorKind::Malformed`] where the bytes are not a message; `f`'s error.
pub(crate) fn fields<'a>(
    buf: &'a [u8],
    mut f: impl FnMut(u64, u64, &'a [u8]) -> Result<()>,
) -> Result<()> {
    let mut pos = 0;
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let (field, wire) = (key >> 3, key & 7);
        if wire == 2 {
            let payload = len_delimited(buf, &mut pos)?;
            f(field, wire, payload)?;
        } else {
            let start = pos;
            skip(buf, &mut pos, wire)?;
            f(field, wire, &buf[start..pos])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_their_lengths() {
        for v in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            assert_eq!(buf.len() as u64, varint_len(v), "{v}");
            assert_eq!(varint(&buf, &mut 0).unwrap(), v);
        }
        assert!(varint(&[0x80], &mut 0).is_err(), "cut short");
        assert!(varint(&[0xff; 11], &mut 0).is_err(), "too long");
    }

    #[test]
    fn varint_len_is_the_written_length_at_every_bit_width() {
        for bits in 0..=64u32 {
            // The smallest and largest values of each width (0 is one byte, as 1 is).
            let low = if bits == 0 { 0 } else { 1u64 << (bits - 1) };
            let high = if bits == 64 {
                u64::MAX
            } else {
                (1u64 << bits).saturating_sub(1)
            };
            for v in [low, high] {
                let mut buf = Vec::new();
                put_varint(&mut buf, v);
                assert_eq!(varint_len(v), buf.len() as u64, "{v:#x}");
            }
        }
    }
}
