//! TFRecord framing: the 12-byte header and 4-byte footer around each record.
//!
//! `u64 length (LE)`, `u32 masked_crc32c(length bytes)`, `data`, `u32
//! masked_crc32c(data)`, exactly as TensorFlow's `RecordWriter` writes them. Pure
//! functions, no I/O.

/// Bytes before a record's payload: the length and its CRC.
pub const HEADER_LEN: usize = 12;
/// Bytes after a record's payload: the data CRC.
pub const FOOTER_LEN: usize = 4;
/// Framing overhead of one record (DALI's `.idx` size is payload + this).
pub const FRAME_OVERHEAD: u64 = (HEADER_LEN + FOOTER_LEN) as u64;

/// TensorFlow's mask constant (`tensorflow/core/lib/hash/crc32c.h`, `kMaskDelta`).
const MASK_DELTA: u32 = 0xa282_ead8;

/// The plain CRC32C (Castagnoli) of `data`, hardware accelerated where the CPU has it.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Continues a plain CRC32C over more bytes.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

/// The plain CRC32C of 8 bytes (a record's length field). On x86-64 with SSE4.2 it is
/// one `crc32` instruction: measured, the general-purpose path costs ~14 ns per 8-byte
/// call, which bounded small-record reading.
#[inline]
pub fn crc32c_u64(value: u64) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU has SSE4.2, checked just above.
            return unsafe { crc32c_u64_sse42(value) };
        }
    }
    crc32c(&value.to_le_bytes())
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn crc32c_u64_sse42(value: u64) -> u32 {
    // CRC32C: initial value and final xor are all ones.
    !(std::arch::x86_64::_mm_crc32_u64(u64::from(u32::MAX), value) as u32)
}

/// The CRC32C of each of three buffers, computed side by side. A `crc32` instruction
/// takes 3 cycles and the next may start after 1, so three independent chains run in
/// about the time of one; records of a few hundred bytes are too short for the crate's
/// own three-way split of one buffer.
pub fn crc32c_3(bufs: [&[u8]; 3]) -> [u32; 3] {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU has SSE4.2, checked just above.
            return unsafe { crc32c_3_sse42(bufs) };
        }
    }
    bufs.map(crc32c)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn crc32c_3_sse42([a, b, c]: [&[u8]; 3]) -> [u32; 3] {
    use std::arch::x86_64::_mm_crc32_u64;
    let word = |chunk: &[u8]| u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
    let mut state = [u64::from(u32::MAX); 3];
    let mut words = 0;
    for ((x, y), z) in a
        .chunks_exact(8)
        .zip(b.chunks_exact(8))
        .zip(c.chunks_exact(8))
    {
        state[0] = _mm_crc32_u64(state[0], word(x));
        state[1] = _mm_crc32_u64(state[1], word(y));
        state[2] = _mm_crc32_u64(state[2], word(z));
        words += 1;
    }
    // The state is the CRC before its final inversion; the rest of each buffer goes on
    // from there: a long rest through the crate (its own three-way split), a short one
    // here (a call costs more than a few bytes).
    let rest = |mut state: u64, buf: &[u8]| {
        let rest = &buf[8 * words..];
        if rest.len() >= 1024 {
            return crc32c_append(!(state as u32), rest);
        }
        let mut tail = rest.chunks_exact(8);
        for w in &mut tail {
            state = _mm_crc32_u64(state, word(w));
        }
        let mut state = state as u32;
        for &byte in tail.remainder() {
            state = std::arch::x86_64::_mm_crc32_u8(state, byte);
        }
        !state
    };
    [rest(state[0], a), rest(state[1], b), rest(state[2], c)]
}

/// CRC32C's polynomial, bit-reflected.
const POLY: u32 = 0x82f6_3b78;

/// `a·b` modulo the polynomial (reflected: bit 31 is x⁰), as zlib's `multmodp`.
const fn multmodp(a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut p = 0;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                return p;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
}

/// `X2N[k]` = x^(2^k) modulo the polynomial.
const X2N: [u32; 32] = {
    let mut table = [0u32; 32];
    let mut p = 1u32 << 30; // x¹
    table[0] = p;
    let mut k = 1;
    while k < 32 {
        p = multmodp(p, p);
        table[k] = p;
        k += 1;
    }
    table
};

/// The CRC32C of `A ‖ B` from `crc1` = CRC32C(A), `crc2` = CRC32C(B) and B's length:
/// `crc1` times x^(8·len2), plus `crc2` (zlib's `crc32_combine`, in O(log len2)
/// multiplications; the `crc32c` crate's squares 32×32 matrices, far slower).
pub fn crc32c_combine(crc1: u32, crc2: u32, mut len2: u64) -> u32 {
    let mut xp = 1u32 << 31; // x⁰
    let mut k = 3; // 2³ bits a byte
    while len2 != 0 {
        if len2 & 1 != 0 {
            xp = multmodp(X2N[k & 31], xp);
        }
        len2 >>= 1;
        k += 1;
    }
    multmodp(xp, crc1) ^ crc2
}

/// TensorFlow's masked CRC: rotate right by 15 bits, then add a constant, so that a CRC
/// stored inside CRC'd data does not make the outer CRC degenerate.
#[inline]
pub fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// Inverse of [`mask`] (the tests check the pair).
#[cfg(test)]
fn unmask(masked: u32) -> u32 {
    masked.wrapping_sub(MASK_DELTA).rotate_left(15)
}

/// The masked CRC32C of `data`, as stored in a frame.
#[inline]
pub fn masked_crc32c(data: &[u8]) -> u32 {
    mask(crc32c(data))
}

/// The 12-byte header of a record of `len` payload bytes.
#[inline]
pub fn encode_header(len: u64) -> [u8; HEADER_LEN] {
    let mut header = [0u8; HEADER_LEN];
    header[..8].copy_from_slice(&len.to_le_bytes());
    let crc = mask(crc32c_u64(len));
    header[8..].copy_from_slice(&crc.to_le_bytes());
    header
}

/// The 4-byte footer of `data`.
#[inline]
pub fn encode_footer(data: &[u8]) -> [u8; FOOTER_LEN] {
    masked_crc32c(data).to_le_bytes()
}

/// Appends one whole framed record to `out`.
pub fn append_record(out: &mut Vec<u8>, data: &[u8]) {
    out.reserve(data.len() + HEADER_LEN + FOOTER_LEN);
    out.extend_from_slice(&encode_header(data.len() as u64));
    out.extend_from_slice(data);
    out.extend_from_slice(&encode_footer(data));
}

/// Asks the CPU to bring `value`'s first cache line in (a hint; does nothing where there
/// is no such instruction).
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing the program sees and cannot fault.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Reads a header. `Err(())` means the length CRC does not match; the payload length
/// cannot then be trusted.
#[inline]
#[allow(clippy::result_unit_err)]
pub fn decode_header(header: &[u8; HEADER_LEN]) -> Result<u64, ()> {
    let len_bytes: [u8; 8] = header[..8]
        .try_into()
        .expect("a header holds 8 length bytes");
    let stored: [u8; 4] = header[8..].try_into().expect("a header holds 4 CRC bytes");
    let len = u64::from_le_bytes(len_bytes);
    if mask(crc32c_u64(len)) == u32::from_le_bytes(stored) {
        Ok(len)
    } else {
        Err(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_crcs_side_by_side_agree_with_one_at_a_time() {
        let data: Vec<u8> = (0..3000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for (x, y, z) in [
            (0, 0, 0),
            (1, 7, 8),
            (9, 200, 17),
            (3000, 1, 64),
            (250, 251, 2999),
        ] {
            let bufs = [&data[..x], &data[3000 - y..], &data[100..100 + z.min(2900)]];
            assert_eq!(crc32c_3(bufs), bufs.map(crc32c), "{x} {y} {z}");
        }
    }

    /// The combine agrees with the `crc32c` crate's for lengths of every magnitude.
    #[test]
    fn combine_agrees_with_the_crate() {
        let data: Vec<u8> = (0..300_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for split in [0, 1, 7, 8, 12, 255, 4096, 100_000, 299_999, 300_000] {
            let (a, b) = data.split_at(split);
            let (ca, cb) = (crc32c(a), crc32c(b));
            assert_eq!(crc32c_combine(ca, cb, b.len() as u64), crc32c(&data));
            assert_eq!(
                crc32c_combine(ca, cb, b.len() as u64),
                ::crc32c::crc32c_combine(ca, cb, b.len()),
                "{split}"
            );
        }
    }

    #[test]
    fn crc32c_check_value() {
        // The CRC-32C check value from the Castagnoli catalogue.
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
        // RFC 3720, B.4: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
    }

    #[test]
    fn eight_byte_path_equals_the_general_one() {
        for v in [0u64, 1, 0xff, 1 << 63, u64::MAX, 0x0123_4567_89ab_cdef] {
            assert_eq!(crc32c_u64(v), crc32c(&v.to_le_bytes()), "{v:#x}");
        }
    }

    #[test]
    fn mask_matches_tensorflow() {
        // Values computed with TensorFlow's crc32c::Mask.
        assert_eq!(mask(0), 0xa282_ead8);
        assert_eq!(
            mask(0xe306_9283),
            0xe306_9283u32.rotate_right(15).wrapping_add(0xa282_ead8)
        );
        for crc in [0u32, 1, 0xdead_beef, u32::MAX] {
            assert_eq!(unmask(mask(crc)), crc);
        }
    }

    #[test]
    fn header_of_empty_record_matches_tensorflow() {
        // The first 12 bytes TensorFlow writes for a 0-byte record
        // (testdata/golden/zero_length.tfrecord).
        let header = encode_header(0);
        assert_eq!(&header[..8], &[0u8; 8]);
        assert_eq!(
            u32::from_le_bytes(header[8..].try_into().unwrap()),
            mask(crc32c(&[0u8; 8]))
        );
        assert_eq!(decode_header(&header), Ok(0));
        assert_eq!(encode_footer(b""), mask(0).to_le_bytes());
    }

    #[test]
    fn corrupt_header_is_rejected() {
        let mut header = encode_header(1234);
        assert_eq!(decode_header(&header), Ok(1234));
        for i in 0..HEADER_LEN {
            header[i] ^= 0x01;
            assert_eq!(decode_header(&header), Err(()), "flip in byte {i}");
            header[i] ^= 0x01;
        }
    }
}
