//! Reading a compressed upstream reply.
//!
//! sluice asks for `Accept-Encoding: identity` on every request whose reply it may read (the
//! expand loop, the provider's cache report), whatever the agent asked for: the reply is small
//! beside the request, and reading it must never fail. An upstream (or a hop in front of it)
//! that compresses all the same is decoded here as the bytes stream past, and the agent gets
//! the identity bytes, with `Content-Encoding` and `Content-Length` dropped.

use std::io::Write;

use bytes::Bytes;
use http::HeaderMap;
use http::header::{CONTENT_ENCODING, CONTENT_LENGTH};

/// Where a decoder writes: refuses to grow past [`MAX_DECODED_PER_CHUNK`], so a few bytes of
/// input can never become gigabytes before the bound is checked (brotli can turn one copy
/// command into megabytes, and its writer decodes all its input before returning).
#[derive(Debug, Default)]
pub struct Capped {
    buf: Vec<u8>,
}

impl Write for Capped {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > MAX_DECODED_PER_CHUNK {
            return Err(too_large());
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn too_large() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::FileTooLarge,
        "a compressed chunk expands past sluice's bound",
    )
}

/// A streaming decoder for one `Content-Encoding`.
pub enum Decoder {
    Gzip(flate2::write::GzDecoder<Capped>),
    /// HTTP `deflate` is the zlib format.
    Deflate(flate2::write::ZlibDecoder<Capped>),
    Brotli(Box<brotli_decompressor::DecompressorWriter<Capped>>),
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Decoder::Gzip(_) => "Decoder(gzip)",
            Decoder::Deflate(_) => "Decoder(deflate)",
            Decoder::Brotli(_) => "Decoder(br)",
        })
    }
}

/// What a reply's `Content-Encoding` asks of a reader.
#[derive(Debug)]
pub enum Encoding {
    /// Nothing, or `identity`: read as it is.
    Identity,
    /// One encoding sluice decodes.
    Decode(Box<Decoder>),
    /// Several, or one sluice does not know: the reply cannot be read and is relayed untouched.
    Unknown,
}

impl Encoding {
    /// Reads `headers`; when the reply will be decoded, drops the headers that describe the
    /// encoded bytes, since the agent gets the decoded ones.
    pub fn take(headers: &mut HeaderMap) -> Encoding {
        let Some(value) = headers.get(CONTENT_ENCODING) else {
            return Encoding::Identity;
        };
        let name = value.to_str().unwrap_or("").trim().to_ascii_lowercase();
        let decoder = match name.as_str() {
            "" | "identity" => return Encoding::Identity,
            "gzip" | "x-gzip" => Decoder::Gzip(flate2::write::GzDecoder::new(Capped::default())),
            "deflate" => Decoder::Deflate(flate2::write::ZlibDecoder::new(Capped::default())),
            "br" => Decoder::Brotli(Box::new(brotli_decompressor::DecompressorWriter::new(
                Capped::default(),
                4096,
            ))),
            _ => return Encoding::Unknown,
        };
        headers.remove(CONTENT_ENCODING);
        headers.remove(CONTENT_LENGTH);
        Encoding::Decode(Box::new(decoder))
    }
}

/// Decoded bytes one chunk may yield. Compression can multiply a chunk a thousandfold (a
/// "bomb"), so a chunk is decoded a slice at a time and given up past this: memory per reply
/// stays near this bound whatever arrives.
pub const MAX_DECODED_PER_CHUNK: usize = 16 << 20;

/// Compressed bytes decoded at a time: deflate's worst ratio (about 1,032:1) turns this into at
/// most 4 MiB before the bound is checked again.
const SLICE: usize = 4 << 10;

impl Decoder {
    /// Decodes one chunk; returns what it yielded (possibly nothing yet).
    ///
    /// # Errors
    /// A corrupt stream, or (`ErrorKind::FileTooLarge`) a chunk that decodes to more than
    /// [`MAX_DECODED_PER_CHUNK`].
    pub fn feed(&mut self, chunk: &[u8]) -> std::io::Result<Bytes> {
        let mut out = Vec::new();
        for slice in chunk.chunks(SLICE) {
            out.extend_from_slice(&self.feed_slice(slice)?);
            if out.len() > MAX_DECODED_PER_CHUNK {
                return Err(too_large());
            }
        }
        Ok(Bytes::from(out))
    }

    /// Decodes one slice of a chunk.
    fn feed_slice(&mut self, chunk: &[u8]) -> std::io::Result<Bytes> {
        match self {
            Decoder::Gzip(d) => {
                d.write_all(chunk)?;
                Ok(Bytes::from(std::mem::take(&mut d.get_mut().buf)))
            }
            Decoder::Deflate(d) => {
                d.write_all(chunk)?;
                Ok(Bytes::from(std::mem::take(&mut d.get_mut().buf)))
            }
            Decoder::Brotli(d) => {
                d.write_all(chunk)?;
                Ok(Bytes::from(std::mem::take(&mut d.get_mut().buf)))
            }
        }
    }

    /// Flushes what the decoder still holds at the end of the body.
    ///
    /// # Errors
    /// A truncated or corrupt stream.
    pub fn finish(&mut self) -> std::io::Result<Bytes> {
        match self {
            Decoder::Gzip(d) => {
                d.try_finish()?;
                Ok(Bytes::from(std::mem::take(&mut d.get_mut().buf)))
            }
            Decoder::Deflate(d) => {
                d.try_finish()?;
                Ok(Bytes::from(std::mem::take(&mut d.get_mut().buf)))
            }
            Decoder::Brotli(d) => {
                d.flush()?;
                Ok(Bytes::from(std::mem::take(&mut d.get_mut().buf)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::{GzEncoder, ZlibEncoder};

    fn decode_in_chunks(headers: &mut HeaderMap, encoded: &[u8]) -> Vec<u8> {
        let Encoding::Decode(mut decoder) = Encoding::take(headers) else {
            panic!("not decodable");
        };
        let mut out = Vec::new();
        // Seven-byte chunks: a header or a block split anywhere still decodes.
        for chunk in encoded.chunks(7) {
            out.extend_from_slice(&decoder.feed(chunk).unwrap());
        }
        out.extend_from_slice(&decoder.finish().unwrap());
        out
    }

    #[test]
    fn a_compression_bomb_is_refused_within_its_bound() {
        // 32 MiB of zeros gzip to about 32 KiB: one chunk of that is twice the bound.
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..32 {
            gz.write_all(&zeros).unwrap();
        }
        let bomb = gz.finish().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_ENCODING, "gzip".parse().unwrap());
        let Encoding::Decode(mut decoder) = Encoding::take(&mut headers) else {
            panic!("not decodable");
        };
        let err = decoder.feed(&bomb).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::FileTooLarge, "{err}");
    }

    #[test]
    fn gzip_and_deflate_replies_decode_chunk_by_chunk() {
        let reply = br#"{"content":[{"type":"tool_use","name":"context_guru_expand"}]}"#.repeat(20);
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&reply).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_ENCODING, "gzip".parse().unwrap());
        headers.insert(CONTENT_LENGTH, "12".parse().unwrap());
        assert_eq!(decode_in_chunks(&mut headers, &gz.finish().unwrap()), reply);
        assert!(headers.get(CONTENT_ENCODING).is_none() && headers.get(CONTENT_LENGTH).is_none());
        let mut zlib = ZlibEncoder::new(Vec::new(), Compression::default());
        zlib.write_all(&reply).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_ENCODING, "Deflate".parse().unwrap());
        assert_eq!(
            decode_in_chunks(&mut headers, &zlib.finish().unwrap()),
            reply
        );
    }

    #[test]
    fn identity_and_unknown_encodings_are_left_alone() {
        let mut headers = HeaderMap::new();
        assert!(matches!(Encoding::take(&mut headers), Encoding::Identity));
        headers.insert(CONTENT_ENCODING, "zstd".parse().unwrap());
        assert!(matches!(Encoding::take(&mut headers), Encoding::Unknown));
        assert!(
            headers.get(CONTENT_ENCODING).is_some(),
            "kept for the agent to decode"
        );
    }

    #[test]
    fn a_corrupt_stream_is_an_error_not_a_panic() {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_ENCODING, "gzip".parse().unwrap());
        let Encoding::Decode(mut decoder) = Encoding::take(&mut headers) else {
            panic!("not decodable");
        };
        let fed = decoder.feed(b"\x1f\x8b\x08\x00garbage that is not deflate");
        assert!(fed.is_err() || decoder.finish().is_err());
    }
}
