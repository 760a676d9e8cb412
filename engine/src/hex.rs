//! Lowercase hex: the ids, scopes and keys sluice writes are hex, and formatting them one
//! byte at a time through `format!` was most of computing a caller's scope on every turn.

/// Each byte's two digits, so a byte costs one lookup.
const PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut pairs = [[0u8; 2]; 256];
    let mut byte = 0;
    while byte < 256 {
        pairs[byte] = [DIGITS[byte >> 4], DIGITS[byte & 0xf]];
        byte += 1;
    }
    pairs
};

/// Appends the hex of `bytes` to `out`.
pub fn extend(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() * 2);
    for &byte in bytes {
        out.extend_from_slice(&PAIRS[usize::from(byte)]);
    }
}

/// Appends the hex of `bytes` to `out`.
pub fn push(out: &mut String, bytes: &[u8]) {
    out.reserve(bytes.len() * 2);
    for &byte in bytes {
        let [high, low] = PAIRS[usize::from(byte)];
        out.push(char::from(high));
        out.push(char::from(low));
    }
}

/// The hex of `bytes`.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push(&mut out, bytes);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_is_written_as_format_writes_it() {
        let bytes: Vec<u8> = (0..=255).collect();
        let formatted: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(encode(&bytes), formatted);
        let mut raw = b"k".to_vec();
        extend(&mut raw, &bytes);
        assert_eq!(raw, format!("k{formatted}").into_bytes());
        assert_eq!(encode(&[]), "");
    }
}
