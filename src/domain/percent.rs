//! A percentage from 1 % to 100 %, as the settings that take one write it
//! (`80%`, `87.5%`): one parser, so every share reads the same way.

/// A percentage from 1 to 100, decimals allowed.
#[derive(Debug, Clone, Copy)]
pub struct Percent(f64);

impl Percent {
    /// `None` outside 1 to 100 (NaN included).
    pub fn new(value: f64) -> Option<Self> {
        (1.0..=100.0).contains(&value).then_some(Self(value))
    }

    /// A whole percentage, for defaults written in code; held to 1 to 100.
    pub const fn whole(value: u8) -> Self {
        let value = if value < 1 {
            1
        } else if value > 100 {
            100
        } else {
            value
        };
        Self(value as f64)
    }

    /// Reads `80%` or `87.5%`: digits, optionally a point and more digits,
    /// then `%`, which is required, so that `0.8` is never read as 0.8 %.
    pub fn parse(text: &str) -> Result<Self, String> {
        text.strip_suffix('%')
            .and_then(decimal)
            .and_then(Self::new)
            .ok_or_else(|| {
                format!("`{text}` is not a percentage from 1% to 100% (such as 80% or 12.5%)")
            })
    }

    pub fn get(self) -> f64 {
        self.0
    }

    /// This share of `whole`, rounded down: 80 % of 9 is 7.
    pub fn of_rounded_down(self, whole: usize) -> usize {
        // 33.3 % of 1000 is 332.99999999999994 in f64: the nudge, far above
        // f64's error at these sizes (the settings stop at a million), keeps
        // a whole result whole.
        (whole as f64 * self.0 / 100.0 + 1e-6).floor() as usize
    }
}

/// Equal when the same number: a `Percent` is never NaN.
impl PartialEq for Percent {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Percent {}

impl PartialOrd for Percent {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Percent {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl std::fmt::Display for Percent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}%", self.0)
    }
}

/// A decimal number: digits, optionally a point and more digits.
fn decimal(text: &str) -> Option<f64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(whole) && digits(fraction))
        .then(|| text.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> f64 {
        Percent::parse(text).unwrap().get()
    }

    #[test]
    fn percentages_run_from_one_to_a_hundred_with_decimals() {
        assert_eq!(parsed("80%"), 80.0);
        assert_eq!(parsed("1%"), 1.0);
        assert_eq!(parsed("100%"), 100.0);
        assert_eq!(parsed("87.5%"), 87.5);
        assert_eq!(parsed("100.000%"), 100.0);
    }

    #[test]
    fn anything_else_is_refused_with_the_text() {
        for bad in [
            "", "%", "80", "0.8", "0%", "0.5%", "100.1%", "101%", "-5%", "+5%", "5 %", "5.%",
            ".5%", "1e2%", "NaN%", "inf%", "80%%", "eighty%",
        ] {
            let why = Percent::parse(bad).unwrap_err();
            assert!(why.contains(&format!("`{bad}`")), "{bad}: {why}");
        }
    }

    #[test]
    fn shares_round_down() {
        let p = |v| Percent::new(v).unwrap();
        assert_eq!(p(80.0).of_rounded_down(100), 80);
        assert_eq!(p(80.0).of_rounded_down(9), 7);
        assert_eq!(p(10.0).of_rounded_down(9), 0);
        assert_eq!(p(100.0).of_rounded_down(1_000_000), 1_000_000);
        assert_eq!(p(12.5).of_rounded_down(8), 1);
        assert_eq!(p(33.3).of_rounded_down(1000), 333);
        for share in 1..=100 {
            for whole in [0, 1, 7, 100, 1000, 999_999, 1_000_000] {
                let exact = whole * share / 100;
                assert_eq!(
                    p(share as f64).of_rounded_down(whole),
                    exact,
                    "{share}% of {whole}"
                );
            }
        }
        assert!(p(10.0) < p(80.0));
        assert_eq!(Percent::whole(80), p(80.0));
        assert_eq!(Percent::whole(0), p(1.0));
        assert_eq!(Percent::whole(200), p(100.0));
    }
}
