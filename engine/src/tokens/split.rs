//! The o200k pre-tokenizer, by hand for ASCII, the regex for the rest.
//!
//! A first sight of a tool output is counted on the request path, and a third of that count
//! was the pre-tokenizer: `bpe_openai` splits with a lazy DFA, one anchored search per piece,
//! and a piece is mostly one word. Over ASCII the pattern's classes are a byte table and its
//! alternation a few branches, so this walks the bytes itself and asks the regex only for a
//! piece whose extent depends on a byte over 0x7F (a letter, digit or space the table does not
//! know; a few common punctuation characters and symbols it does). Each piece is anchored where the last one ended, the regex's own pieces are too, and
//! the pattern has no look-behind, so a piece asked of the regex at any position is the piece
//! the regex's own split makes there: the pieces, and so the counts, are the same.
//!
//! o200k's pattern, the alternatives in the order they are tried (leftmost first):
//! 1. `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`
//! 2. `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`
//! 3. `\p{N}{1,3}`
//! 4. ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
//! 5. `\s*[\r\n]+`
//! 6. `\s+$`
//! 7. `\s+(?!\S)`, which `bpe_openai` runs as `\s+\s` less its last character
//! 8. `\s+`

/// What the pattern's classes make of a byte. Over ASCII, `\p{L}` is the letters (none is
/// titlecase, modifier, other or a mark), `\p{N}` the digits and `\s` the six spaces below.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Upper,
    Lower,
    Digit,
    /// `\r` or `\n`: white space that no letter's prefix may be.
    Newline,
    /// The other white space: space, tab, vertical tab, form feed.
    Space,
    /// Neither letter, digit nor white space: `[^\s\p{L}\p{N}]` over ASCII.
    Other,
    /// Over 0x7F: the table cannot say (`Bytes::known_other` knows a few characters).
    Wide,
}

const CLASSES: [Class; 256] = {
    let mut table = [Class::Other; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = match b as u8 {
            b'A'..=b'Z' => Class::Upper,
            b'a'..=b'z' => Class::Lower,
            b'0'..=b'9' => Class::Digit,
            b'\r' | b'\n' => Class::Newline,
            b' ' | b'\t' | 0x0b | 0x0c => Class::Space,
            0x80..=0xff => Class::Wide,
            _ => Class::Other,
        };
        b += 1;
    }
    table
};

/// The pieces of `text`, in order, from byte `at` (0, or the end of an earlier piece): what
/// `bpe_openai::o200k_base().split(text)` yields. Each piece is cut from the text after the
/// one before it alone, so the pieces from an earlier piece's end are the ones a split from the
/// start makes.
pub(crate) fn pieces_from(text: &str, at: usize) -> Pieces<'_> {
    Pieces { text, at }
}

impl Pieces<'_> {
    /// Where the next piece starts.
    pub(crate) fn at(&self) -> usize {
        self.at
    }
}

pub(crate) struct Pieces<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let rest = &self.text[self.at..];
        if rest.is_empty() {
            return None;
        }
        let len = match ascii_piece(rest.as_bytes()) {
            Some(len) => len,
            None => super::tokenizer()
                .split(rest)
                .next()
                .map_or(rest.len(), str::len),
        };
        let piece = &rest[..len];
        self.at += len;
        Some(piece)
    }
}

/// The length of the piece at the start of `text`, or `None` when it depends on a character
/// over 0x7F that [`Bytes::known_other`] does not know. Every byte it reads goes through
/// [`Bytes`], which answers such a character as the end of the run being read and remembers
/// that it did.
fn ascii_piece(text: &[u8]) -> Option<usize> {
    let bytes = Bytes::new(text);
    let end = piece_end(&bytes);
    (!bytes.saw_wide.get()).then_some(end)
}

/// A piece's end by the alternatives above. `bytes` is not empty.
fn piece_end(bytes: &Bytes<'_>) -> usize {
    let first = bytes.class(0);
    if first == Class::Wide {
        return 0;
    }
    // 1 and 2: letters, after one character that is not a newline, letter or digit.
    let width = bytes.width(0);
    let prefixed = matches!(first, Class::Space | Class::Other) && bytes.is_letter(width);
    if bytes.is_letter(0) || prefixed {
        return letters_end(bytes, if prefixed { width } else { 0 });
    }
    if first == Class::Digit {
        // Three at most, so a byte after them is not read.
        return (1..3)
            .find(|&i| bytes.class(i) != Class::Digit)
            .unwrap_or(3);
    }
    // 4: punctuation, after an optional space, then newlines and slashes.
    let start = usize::from(
        first == Class::Space && bytes.byte(0) == Some(b' ') && bytes.class(1) == Class::Other,
    );
    if bytes.class(start) == Class::Other {
        let end = bytes.run(start, |c| c == Class::Other);
        return bytes.run_bytes(end, |b| matches!(b, b'\r' | b'\n' | b'/'));
    }
    white_space_end(bytes, first)
}

/// Alternatives 1 and 2 from the first letter at `from`: capitals, then small letters (1, when
/// there are any; 2 otherwise), then a contraction.
fn letters_end(bytes: &Bytes<'_>, from: usize) -> usize {
    let capitals = bytes.run(from, |c| c == Class::Upper);
    let small = bytes.run(capitals, |c| c == Class::Lower);
    contraction_end(bytes, small)
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)?` at `at`.
fn contraction_end(bytes: &Bytes<'_>, at: usize) -> usize {
    if bytes.byte(at) != Some(b'\'') {
        return at;
    }
    let lower = |i| bytes.byte(i).map(|b: u8| b.to_ascii_lowercase());
    match (lower(at + 1), lower(at + 2)) {
        (Some(b's' | b't' | b'm' | b'd'), _) => at + 2,
        (Some(b'r' | b'v'), Some(b'e')) | (Some(b'l'), Some(b'l')) => at + 3,
        _ => at,
    }
}

/// Alternatives 5 to 8 over the white space at the start (`first` is its class).
fn white_space_end(bytes: &Bytes<'_>, first: Class) -> usize {
    debug_assert!(matches!(first, Class::Space | Class::Newline));
    let end = bytes.run(0, |c| matches!(c, Class::Space | Class::Newline));
    // 5: through the last newline of the run.
    if let Some(last) = (0..end).rev().find(|&i| bytes.class(i) == Class::Newline) {
        return last + 1;
    }
    // 6: the run ends the text; 7: all of it but the space the next piece may start with.
    if bytes.at_end(end) || end == 1 {
        end
    } else {
        end - 1
    }
}

/// The text's bytes as the pattern's classes, noting whether a byte over 0x7F was read. Past
/// the end is the end of the text (this is the rest of it), where every run stops.
struct Bytes<'a> {
    text: &'a [u8],
    saw_wide: std::cell::Cell<bool>,
}

impl<'a> Bytes<'a> {
    fn new(text: &'a [u8]) -> Bytes<'a> {
        Bytes {
            text,
            saw_wide: std::cell::Cell::new(false),
        }
    }

    /// The byte at `i` if it is ASCII; `None` past the end or, noted, over 0x7F.
    fn byte(&self, i: usize) -> Option<u8> {
        let b = *self.text.get(i)?;
        if b.is_ascii() {
            Some(b)
        } else {
            self.saw_wide.set(true);
            None
        }
    }

    /// The class of the character at `i` (a character boundary); past the end, `Wide` without
    /// noting it: a class no branch continues on.
    fn class(&self, i: usize) -> Class {
        match self.text.get(i) {
            Some(&b) => {
                let class = CLASSES[usize::from(b)];
                if class == Class::Wide {
                    if self.known_other(i) {
                        return Class::Other;
                    }
                    self.saw_wide.set(true);
                }
                class
            }
            None => Class::Wide,
        }
    }

    /// The length of the character at `i`: 1, or 3 for one [`Bytes::known_other`] knows.
    fn width(&self, i: usize) -> usize {
        if self.known_other(i) { 3 } else { 1 }
    }

    /// Whether the character at `i` is one of the few over 0x7F common in tool output that are
    /// neither letter, mark, digit nor white space, so `[^\s\p{L}\p{N}]` and the prefix class take
    /// them as they take ASCII punctuation: the general punctuation of U+2010-U+2027 and
    /// U+2030-U+205E (dashes, quotes, bullets, ellipsis), arrows (Claude Code numbers every line
    /// of a file it reads with `→`), box drawing, block elements, geometric shapes, and the
    /// dingbats before the circled digits. A test checks each of them against the regex.
    fn known_other(&self, i: usize) -> bool {
        let Some(&[0xE2, second, third]) = self.text.get(i..i + 3) else {
            return false;
        };
        let point = 0x2000 | (u32::from(second & 0x3F) << 6) | u32::from(third & 0x3F);
        matches!(
            point,
            0x2010..=0x2027 | 0x2030..=0x205E | 0x2190..=0x21FF | 0x2500..=0x25FF | 0x2700..=0x2775
        )
    }

    fn is_letter(&self, i: usize) -> bool {
        matches!(self.class(i), Class::Upper | Class::Lower)
    }

    /// Where the run of characters of a class `keep` takes, from `from`, ends.
    fn run(&self, from: usize, keep: impl Fn(Class) -> bool) -> usize {
        let mut i = from;
        while keep(self.class(i)) {
            i += self.width(i);
        }
        i
    }

    /// [`Bytes::run`] by byte.
    fn run_bytes(&self, from: usize, keep: impl Fn(u8) -> bool) -> usize {
        let mut i = from;
        while self.byte(i).is_some_and(&keep) {
            i += 1;
        }
        i
    }

    fn at_end(&self, i: usize) -> bool {
        i >= self.text.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regex_pieces(text: &str) -> Vec<&str> {
        bpe_openai::o200k_base().split(text).collect()
    }

    #[track_caller]
    fn same_pieces(text: &str) {
        let ours: Vec<&str> = pieces_from(text, 0).collect();
        assert_eq!(ours, regex_pieces(text), "{text:?}");
    }

    #[test]
    fn each_alternative_splits_as_the_regex_does() {
        for text in [
            "",
            "hello world",
            "HTTPServer camelCase ALLCAPS I'm DON'T we'RE they'Ll x'd 'sx",
            "  leading and trailing  ",
            "a   Hello\tWorld\x0bv\x0cf",
            "line one\n\nline two\r\n  indented\n\t\ttabbed",
            "((foo)) -123 12345678 x=1/2 !\n/next a//b ://\r\n/x",
            " .dot ,comma \"quoted\" 'single' ' s",
            "end with spaces   ",
            "end with newline \n ",
            "\n",
            " ",
            "  ",
            "x \n",
            "\0\x01control\x7fchars",
        ] {
            same_pieces(text);
        }
    }

    #[test]
    fn bytes_over_0x7f_are_left_to_the_regex() {
        for text in [
            "café naïve Ünïcode",
            "     1→import os\n     2→\n",
            "nbsp\u{a0}between  \u{3000}ideographic",
            "superscript x² arabic ٣٤٥ digits123٣",
            "e\u{301}combining Ǆtitlecase ʰmodifier",
            "日本語のテキスト、絵文字 🚀🚀 and ASCII",
            "don’t curly’s I'ſ long s",
            " \u{85}next line \u{2028}separator",
        ] {
            same_pieces(text);
        }
    }

    /// Every character `known_other` takes for punctuation, in the contexts where its class
    /// decides a piece: alone, in a run, as a letter's or a space's prefix, between digits,
    /// before a newline or a slash, after an apostrophe; and the characters around its ranges.
    #[test]
    fn the_characters_read_as_punctuation_split_as_the_regex_does() {
        let ranges = [
            0x2000..=0x2030,
            0x2030..=0x2060,
            0x2180..=0x2200,
            0x24f0..=0x2600,
            0x26f0..=0x2780,
        ];
        let mut checked = 0;
        for c in ranges.into_iter().flatten().filter_map(char::from_u32) {
            for text in [
                format!("{c}"),
                format!("{c}{c}{c}x"),
                format!("{c}import os"),
                format!(" {c}Word"),
                format!("x {c}\n\n"),
                format!("1{c}2{c}"),
                format!("{c}/\n/a"),
                format!("a'{c}s"),
                format!("    {c}  "),
            ] {
                same_pieces(&text);
                checked += 1;
            }
        }
        assert!(checked > 5_000, "{checked}");
    }

    /// Random texts over an alphabet that holds every class and the bytes that end a run,
    /// ASCII and not: each must split as the regex splits it.
    #[test]
    fn random_texts_split_as_the_regex_does() {
        const ALPHABET: &[&str] = &[
            "a", "z", "Q", "S", "e", "l", "r", "v", "0", "7", " ", " ", "\t", "\n", "\r", "\x0b",
            "\x0c", "'", "/", "-", "(", ".", "\0", "é", "É", "²", "٣", "\u{a0}", "\u{3000}", "→",
            "🚀", "\u{301}", "ſ", "\u{85}", "─", "…", "“", "✓", "❶", "\u{2028}", "\u{205f}",
        ];
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 24) as usize;
            let ascii_only = next() % 2 == 0;
            let text: String = (0..len)
                .map(|_| {
                    let pick = (next() % ALPHABET.len() as u64) as usize;
                    let pick = if ascii_only { pick % 23 } else { pick };
                    ALPHABET[pick]
                })
                .collect();
            same_pieces(&text);
        }
    }
}
