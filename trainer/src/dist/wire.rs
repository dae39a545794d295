//! Framing of the all-reduce protocol: every message is a 1-byte tag, a little-endian `u64`
//! payload length, then the payload. Floats travel as little-endian IEEE-754 `f32`.

use std::io::{self, Read, Write};

/// Kinds of frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    /// Worker → rank 0, and ring predecessor → successor: the handshake (`super::hello`).
    Hello = 1,
    /// Rank 0 → worker: handshake accepted; payload: the ring successor's `ip:port` to connect
    /// to, or empty.
    Welcome = 2,
    /// Rank 0 → worker: handshake refused; payload is the UTF-8 reason.
    Reject = 3,
    /// A vector of `f32`.
    Floats = 4,
    /// The job is failing: rank 0 → workers (star), or rank → successor (ring); payload from
    /// [`abort_payload`].
    Abort = 5,
}

impl Tag {
    fn from_byte(b: u8) -> Option<Self> {
        [
            Self::Hello,
            Self::Welcome,
            Self::Reject,
            Self::Floats,
            Self::Abort,
        ]
        .into_iter()
        .find(|t| *t as u8 == b)
    }
}

/// Largest payload accepted, so a corrupt or foreign length cannot make us allocate wildly:
/// 1 GiB is 256 M parameters, far above any model this trainer builds.
pub const MAX_PAYLOAD: u64 = 1 << 30;

/// One frame's bytes, header included, ready to be written.
pub fn frame(tag: Tag, payload: &[u8]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(9 + payload.len());
    buf.push(tag as u8);
    buf.extend((payload.len() as u64).to_le_bytes());
    buf.extend(payload);
    buf
}

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, tag: Tag, payload: &[u8]) -> io::Result<()> {
    w.write_all(&frame(tag, payload))?;
    w.flush()
}

/// A [`Tag::Floats`] frame of `values`, ready to be written.
pub fn floats_frame(values: &[f32]) -> Vec<u8> {
    if cfg!(target_endian = "little") {
        // The wire's little-endian bytes are the memory: no per-value conversion (this runs
        // twice per rank per training step, and tests run it unoptimised).
        frame(Tag::Floats, bytemuck::cast_slice(values))
    } else {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        frame(Tag::Floats, &bytes)
    }
}

/// Writes a frame of floats.
pub fn write_floats(w: &mut impl Write, values: &[f32]) -> io::Result<()> {
    w.write_all(&floats_frame(values))?;
    w.flush()
}

/// An [`Tag::Abort`] payload: the rank that found the failure (`u32`), whether retrying cannot
/// help (`u8`, 1: a configuration error, 0: transient), then the UTF-8 reason.
pub fn abort_payload(origin: usize, permanent: bool, reason: &str) -> Vec<u8> {
    let mut out = (origin as u32).to_le_bytes().to_vec();
    out.push(u8::from(permanent));
    out.extend(reason.as_bytes());
    out
}

/// Splits an [`Tag::Abort`] payload into the rank that found the failure, whether it is
/// permanent, and the reason. A payload too short to hold the first two reads as rank 0's
/// transient failure, all of it the reason.
pub fn parse_abort(payload: &[u8]) -> (usize, bool, String) {
    match payload.split_first_chunk::<5>() {
        Some(([o0, o1, o2, o3, permanent], reason)) => (
            u32::from_le_bytes([*o0, *o1, *o2, *o3]) as usize,
            *permanent == 1,
            String::from_utf8_lossy(reason).into_owned(),
        ),
        None => (0, false, String::from_utf8_lossy(payload).into_owned()),
    }
}

/// Adds a [`Tag::Floats`] payload element-wise into `out` (`out[i] += payload[i]`, in that
/// operand order), which must have exactly its length.
pub fn add_floats(payload: &[u8], out: &mut [f32]) -> Result<(), String> {
    if payload.len() != out.len() * 4 {
        return Err(format!(
            "expected {} floats, received {} bytes",
            out.len(),
            payload.len()
        ));
    }
    for (v, b) in out.iter_mut().zip(payload.chunks_exact(4)) {
        *v += f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    Ok(())
}

/// Reads one frame. An unknown tag or a payload above [`MAX_PAYLOAD`] is `InvalidData`.
pub fn read_frame(r: &mut impl Read) -> io::Result<(Tag, Vec<u8>)> {
    let mut header = [0u8; 9];
    r.read_exact(&mut header)?;
    let tag = Tag::from_byte(header[0]).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unknown frame tag {}", header[0]),
        )
    })?;
    let len = u64::from_le_bytes(header[1..].try_into().expect("8 bytes"));
    if len > MAX_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes exceeds {MAX_PAYLOAD}"),
        ));
    }
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload)?;
    Ok((tag, payload))
}

/// Decodes a [`Tag::Floats`] payload into `out`, which must have exactly its length.
pub fn decode_floats(payload: &[u8], out: &mut [f32]) -> Result<(), String> {
    if payload.len() != out.len() * 4 {
        return Err(format!(
            "expected {} floats, received {} bytes",
            out.len(),
            payload.len()
        ));
    }
    if cfg!(target_endian = "little") {
        bytemuck::cast_slice_mut::<f32, u8>(out).copy_from_slice(payload);
    } else {
        for (v, b) in out.iter_mut().zip(payload.chunks_exact(4)) {
            *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abort_carries_its_origin_whether_it_is_permanent_and_its_reason() {
        for permanent in [true, false] {
            let payload = abort_payload(3, permanent, "rank 2 closed its connection");
            assert_eq!(
                parse_abort(&payload),
                (3, permanent, "rank 2 closed its connection".to_string())
            );
        }
        assert_eq!(parse_abort(b"abc"), (0, false, "abc".to_string()));
    }

    #[test]
    fn floats_round_trip_bit_exactly() {
        let values = [0.0, -1.5, f32::MIN_POSITIVE, 3.0e38, f32::EPSILON];
        let mut buf = Vec::new();
        write_floats(&mut buf, &values).unwrap();
        let (tag, payload) = read_frame(&mut &buf[..]).unwrap();
        assert_eq!(tag, Tag::Floats);
        let mut out = [0f32; 5];
        decode_floats(&payload, &mut out).unwrap();
        assert_eq!(out.map(f32::to_bits), values.map(f32::to_bits));
        assert!(decode_floats(&payload, &mut [0f32; 4]).is_err());
    }

    #[test]
    fn rejects_unknown_tag_and_oversized_length() {
        let mut bad = vec![99u8];
        bad.extend(0u64.to_le_bytes());
        assert_eq!(
            read_frame(&mut &bad[..]).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        let mut huge = vec![Tag::Floats as u8];
        huge.extend((MAX_PAYLOAD + 1).to_le_bytes());
        assert_eq!(
            read_frame(&mut &huge[..]).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }
}
