//! A decompression bomb made at test time: a valid FLAC stream of silence, every frame a 65535-sample
//! block of one CONSTANT subframe (15 bytes for 65535 samples), so an hour of 48 kHz audio
//! (691 MB as f32) takes 40 KB. Written bit by bit from the FLAC format specification (RFC 9639):
//! STREAMINFO, then frames with their CRC-8 header and CRC-16 footer.

/// Samples per frame: FLAC's largest block.
const BLOCK: u64 = 65535;

/// `seconds` of mono 16-bit silence at `rate` Hz as a FLAC file (rounded up to whole blocks).
pub fn silent_flac(seconds: u64, rate: u32) -> Vec<u8> {
    let frames = (seconds * rate as u64).div_ceil(BLOCK);
    let total = frames * BLOCK;
    let mut out = b"fLaC".to_vec();
    // The last (and only) metadata block: STREAMINFO, 34 bytes.
    out.extend([0x80, 0, 0, 34]);
    out.extend((BLOCK as u16).to_be_bytes()); // min block size
    out.extend((BLOCK as u16).to_be_bytes()); // max block size
    out.extend([0; 6]); // min / max frame size: unknown
                        // rate (20 bits), channels - 1 (3 bits, 0: mono), bits per sample - 1 (5), total samples (36).
    let packed = (rate as u64) << 44 | 15 << 36 | total;
    out.extend(packed.to_be_bytes());
    out.extend([0; 16]); // MD5 of the samples: unknown
    for n in 0..frames {
        let start = out.len();
        // Sync code, fixed block size; block size from a 16-bit field, rate from STREAMINFO;
        // mono, 16 bits per sample.
        out.extend([0xff, 0xf8, 0x70, 0x08]);
        out.extend(utf8_number(n));
        out.extend(((BLOCK - 1) as u16).to_be_bytes());
        out.push(crc8(&out[start..]));
        // Subframe: CONSTANT, no wasted bits, the value 0 in 16 bits.
        out.extend([0x00, 0x00, 0x00]);
        let crc = crc16(&out[start..]);
        out.extend(crc.to_be_bytes());
    }
    out
}

/// A frame number in FLAC's UTF-8-like coding.
fn utf8_number(n: u64) -> Vec<u8> {
    match n {
        0..0x80 => vec![n as u8],
        0x80..0x800 => vec![0xc0 | (n >> 6) as u8, 0x80 | (n & 0x3f) as u8],
        0x800..0x10000 => vec![0xe0 | (n >> 12) as u8, 0x80 | ((n >> 6) & 0x3f) as u8, 0x80 | (n & 0x3f) as u8],
        _ => panic!("frame number {n} needs more bytes than this bomb writes"),
    }
}

/// CRC-8, polynomial x^8 + x^2 + x + 1, initial 0 (the frame header's).
fn crc8(bytes: &[u8]) -> u8 {
    let mut crc = 0u8;
    for &b in bytes {
        crc ^= b;
        for _ in 0..8 {
            crc = if crc & 0x80 != 0 { (crc << 1) ^ 0x07 } else { crc << 1 };
        }
    }
    crc
}

/// CRC-16, polynomial x^16 + x^15 + x^2 + 1, initial 0 (the frame's footer).
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc = 0u16;
    for &b in bytes {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x8005 } else { crc << 1 };
        }
    }
    crc
}
