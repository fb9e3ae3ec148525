//! Which characters a caller's text may hold: none that is invisible or
//! changes how the text around it reads; and which blanks at its ends are
//! trimmed: ASCII ones only.
//!
//! Ids, payment methods and connectors end up in Redis keys and hash fields,
//! and in logs, dashboards and answers. A zero-width space (U+200B) makes two
//! ids that look the same be two customers; a right-to-left override
//! (U+202E) makes an id display as another one; a line separator splits a log
//! line. None of them belongs in an id an orchestrator generates, so they are
//! refused rather than stripped: stripping would silently merge two ids.
//!
//! Refused: control characters (general category Cc, as `char::is_control`),
//! format characters (Cf: zero-width, bidirectional, tag and other invisible
//! characters), and the line and paragraph separators U+2028 and U+2029.
//! The Cf list is [`FORMAT_RANGES`], as of Unicode 16, small and explicit
//! rather than a Unicode-tables dependency. ASCII text, the usual case, pays
//! one pass over its bytes.
//!
//! Trimmed: the ASCII blanks (space, tab, CR, LF, form feed), which callers
//! pad fields with. Any other whitespace left at an end (U+2028, NEL U+0085,
//! no-break space U+00A0, the wide spaces, the vertical tab) is refused, not
//! stripped: `str::trim` would strip it, and `c1` followed by U+2028 would be
//! the customer `c1`. Inside a value such a character was never stripped,
//! and is kept unless it is refused above.

/// Unicode format characters (Cf) and the two separators (Zl, Zp), as
/// inclusive ranges. U+2065, unassigned, is refused with its block.
pub const FORMAT_RANGES: &[(char, char)] = &[
    ('\u{00AD}', '\u{00AD}'),   // soft hyphen
    ('\u{0600}', '\u{0605}'),   // Arabic number signs
    ('\u{061C}', '\u{061C}'),   // Arabic letter mark
    ('\u{06DD}', '\u{06DD}'),   // Arabic end of ayah
    ('\u{070F}', '\u{070F}'),   // Syriac abbreviation mark
    ('\u{0890}', '\u{0891}'),   // Arabic pound and piastre marks above
    ('\u{08E2}', '\u{08E2}'),   // Arabic disputed end of ayah
    ('\u{180E}', '\u{180E}'),   // Mongolian vowel separator
    ('\u{200B}', '\u{200F}'),   // zero-width space, (non-)joiner, LRM, RLM
    ('\u{2028}', '\u{2029}'),   // line and paragraph separators (Zl, Zp)
    ('\u{202A}', '\u{202E}'),   // bidi embeddings and overrides
    ('\u{2060}', '\u{206F}'),   // word joiner, invisible operators, bidi isolates
    ('\u{FEFF}', '\u{FEFF}'),   // zero-width no-break space (BOM)
    ('\u{FFF9}', '\u{FFFB}'),   // interlinear annotation
    ('\u{110BD}', '\u{110BD}'), // Kaithi number sign
    ('\u{110CD}', '\u{110CD}'), // Kaithi number sign above
    ('\u{13430}', '\u{1343F}'), // Egyptian hieroglyph format controls
    ('\u{1BCA0}', '\u{1BCA3}'), // shorthand format controls
    ('\u{1D173}', '\u{1D17A}'), // musical symbol beam and tie controls
    ('\u{E0001}', '\u{E0001}'), // language tag
    ('\u{E0020}', '\u{E007F}'), // tag characters
];

/// The first character of `value` that caller text may not hold.
pub fn first_forbidden(value: &str) -> Option<char> {
    if value.is_ascii() {
        // Only the C0 controls and DEL are forbidden in ASCII.
        return value.bytes().find(u8::is_ascii_control).map(char::from);
    }
    value.chars().find(|&ch| is_forbidden(ch))
}

/// `value` less the ASCII blanks at its ends; `Err` holds the character
/// left at an end that is whitespace all the same (see the module's
/// documentation), for the caller to refuse. The one trimming rule for
/// every text field a caller sends.
pub fn trim_blanks(value: &str) -> Result<&str, char> {
    let trimmed = value.trim_ascii();
    // Only the two end characters can be blanks that were not trimmed.
    let ends = [trimmed.chars().next(), trimmed.chars().next_back()];
    match ends.into_iter().flatten().find(|ch| ch.is_whitespace()) {
        Some(blank) => Err(blank),
        None => Ok(trimmed),
    }
}

/// Whether `ch` is a control, format or line/paragraph separator character.
pub fn is_forbidden(ch: char) -> bool {
    ch.is_control()
        || (ch >= '\u{00AD}'
            && FORMAT_RANGES
                .iter()
                .any(|&(low, high)| (low..=high).contains(&ch)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn invisible_and_bidi_characters_are_forbidden() {
        for ch in [
            '\u{200B}',
            '\u{200C}',
            '\u{200D}',
            '\u{200E}',
            '\u{200F}',
            '\u{202A}',
            '\u{202E}',
            '\u{2066}',
            '\u{2069}',
            '\u{FEFF}',
            '\u{2028}',
            '\u{2029}',
            '\u{00AD}',
            '\u{E0041}',
        ] {
            assert!(is_forbidden(ch), "U+{:04X}", ch as u32);
            assert_eq!(first_forbidden(&format!("ab{ch}c")), Some(ch));
        }
    }

    #[test]
    fn controls_are_forbidden_in_ascii_and_beyond() {
        assert_eq!(first_forbidden("a\u{0}b"), Some('\u{0}'));
        assert_eq!(first_forbidden("a\u{7f}"), Some('\u{7f}'));
        assert_eq!(first_forbidden("é\u{85}"), Some('\u{85}'));
    }

    #[test]
    fn visible_text_is_allowed() {
        for text in [
            "merchant_1",
            "Cus AB-9%{}:",
            "é€日🦀",
            "Ωmega",
            "\u{00AC}\u{00AE}",
        ] {
            assert_eq!(first_forbidden(text), None, "{text:?}");
        }
    }

    #[test]
    fn the_ranges_are_sorted_and_disjoint() {
        for pair in FORMAT_RANGES.windows(2) {
            assert!(pair[0].0 <= pair[0].1 && pair[0].1 < pair[1].0, "{pair:?}");
        }
    }

    /// Every character, at either end: an ASCII blank is trimmed, any other
    /// whitespace (all that `str::trim` strips beyond ASCII) is refused,
    /// and anything else is kept as it is.
    #[test]
    fn only_ascii_blanks_are_trimmed_and_no_other_character_is_stripped() {
        let mut refused = 0;
        for ch in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
            for value in [format!("a{ch}"), format!("{ch}a"), format!(" {ch}a\t")] {
                let expected = if ch.is_ascii_whitespace() {
                    Ok("a")
                } else if ch.is_whitespace() {
                    Err(ch)
                } else {
                    Ok(value.trim_ascii())
                };
                assert_eq!(trim_blanks(&value), expected, "U+{:04X}", u32::from(ch));
            }
            refused += usize::from(!ch.is_ascii_whitespace() && ch.is_whitespace());
        }
        // U+000B, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029,
        // U+202F, U+205F and U+3000: Unicode 16's White_Space less ASCII's.
        assert_eq!(refused, 20);
        assert_eq!(trim_blanks(" \t\r\n\x0C"), Ok(""));
        assert_eq!(trim_blanks("c\u{A0}1"), Ok("c\u{A0}1"));
    }

    proptest! {
        /// The ASCII fast path agrees with the character-by-character rule.
        #[test]
        fn the_fast_path_agrees_with_the_rule(
            text in prop_oneof!["[\\x00-\\x7f]{0,20}", any::<String>()]
        ) {
            prop_assert_eq!(first_forbidden(&text), text.chars().find(|&c| is_forbidden(c)));
        }
    }
}
