//! Rollout as pure rules (contract v1.2 §4): each merchant's mode (`on`,
//! `shadow`, `off`), the holdout share and who falls in it, what GetPin
//! answers and why, and the experiment cell a RecordOutcome counts in.
//!
//! Nothing here reads Redis or the configuration: the engine reads the
//! customer's hash (or not, in mode `off`), asks [`in_holdout`], and hands
//! both to [`answer`]; RecordOutcome asks [`cell`].

use std::collections::HashMap;

use ring::digest;

use super::ids::{Connector, CustomerId, MerchantId};
use super::pin::{Candidate, PinChoice};

/// What GetPin does for a merchant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Pins as in v1.1 (holdout customers excepted).
    On,
    /// Decides as `on` but pins nobody: says what it would have pinned.
    Shadow,
    /// Reads nothing and pins nobody; RecordOutcome still records.
    Off,
}

impl Mode {
    /// Reads `on`, `shadow` or `off`, in any case (as the other on/off
    /// settings are read).
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "on" => Ok(Self::On),
            "shadow" => Ok(Self::Shadow),
            "off" => Ok(Self::Off),
            _ => Err(format!("`{text}` is not a mode: `on`, `shadow` or `off`")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::On => "on",
            Self::Shadow => "shadow",
            Self::Off => "off",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The share of a merchant's customers held out of pinning, in basis points
/// (hundredths of a percent): 0 to 5000, i.e. 0 % to 50 %.
///
/// Kept as an integer because membership compares it with an integer
/// (`hash mod 10000`): a float would put a customer on the wrong side of a
/// boundary such as 12.34 % (1233.9999…).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HoldoutShare(u16);

/// The largest holdout: half the customers, so the treated group is never
/// the smaller one.
const MAX_HOLDOUT_BP: u16 = 5000;

impl HoldoutShare {
    /// No holdout (the default): every customer is treated.
    pub const ZERO: Self = Self(0);

    /// `None` above 5000 basis points (50 %).
    pub const fn from_basis_points(bp: u16) -> Option<Self> {
        if bp <= MAX_HOLDOUT_BP {
            Some(Self(bp))
        } else {
            None
        }
    }

    pub const fn basis_points(self) -> u16 {
        self.0
    }

    /// Reads `0%` to `50%`, with at most two decimals (`12.34%`; trailing
    /// zeros beyond are fine, `12.340%`). The `%` is required, as for every
    /// percentage setting, so `0.1` is never read as 0.1 %. A finer share
    /// (`12.345%`) is refused rather than rounded: who is held out must be
    /// exactly what the operator wrote.
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::parse_exact(text).ok_or_else(|| {
            format!("`{text}` is not a holdout from 0% to 50%, to 0.01% (such as 5% or 12.34%)")
        })
    }

    fn parse_exact(text: &str) -> Option<Self> {
        let number = text.strip_suffix('%')?;
        let (whole, fraction) = match number.split_once('.') {
            Some((whole, fraction)) => (whole, Some(fraction)),
            None => (number, None),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || fraction.is_some_and(|f| !digits(f)) {
            return None;
        }
        // Leading zeros are harmless; anything with more significant digits
        // than 50 is out of range anyway, and stripping them keeps the
        // integer parse from overflowing.
        let whole = whole.trim_start_matches('0');
        if whole.len() > 2 {
            return None;
        }
        let whole: u16 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        let fraction = fraction.unwrap_or("");
        let (hundredths, rest) = fraction.split_at(fraction.len().min(2));
        if rest.bytes().any(|b| b != b'0') {
            return None;
        }
        let hundredths: u16 = match hundredths.len() {
            0 => 0,
            1 => hundredths.parse::<u16>().ok()? * 10,
            _ => hundredths.parse().ok()?,
        };
        Self::from_basis_points(whole * 100 + hundredths)
    }
}

/// `12.34%`, `5%`, `0.5%`: reads back as the same share.
impl std::fmt::Display for HoldoutShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (whole, hundredths) = (self.0 / 100, self.0 % 100);
        match hundredths {
            0 => write!(f, "{whole}%"),
            h if h % 10 == 0 => write!(f, "{whole}.{}%", h / 10),
            h => write!(f, "{whole}.{h:02}%"),
        }
    }
}

/// The rollout settings: a default mode and holdout, per-merchant overrides
/// of each (`STICKY_ROUTING_MODE_{merchant}`, `STICKY_ROUTING_HOLDOUT_{merchant}`),
/// and the salt of the holdout hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    pub mode: Mode,
    pub mode_for: HashMap<String, Mode>,
    pub holdout: HoldoutShare,
    pub holdout_for: HashMap<String, HoldoutShare>,
    /// `STICKY_ROUTING_EXPERIMENT_SALT`'s bytes (empty by default).
    pub salt: Vec<u8>,
}

impl Rollout {
    /// The default mode: v1.1's behaviour.
    pub const DEFAULT_MODE: Mode = Mode::On;
    /// The default holdout: none.
    pub const DEFAULT_HOLDOUT: HoldoutShare = HoldoutShare::ZERO;

    pub fn mode_of(&self, merchant: &MerchantId) -> Mode {
        self.mode_for
            .get(merchant.as_str())
            .copied()
            .unwrap_or(self.mode)
    }

    pub fn holdout_of(&self, merchant: &MerchantId) -> HoldoutShare {
        self.holdout_for
            .get(merchant.as_str())
            .copied()
            .unwrap_or(self.holdout)
    }

    /// Whether this customer is in its merchant's holdout, with the
    /// merchant's share and the configured salt.
    pub fn in_holdout(&self, merchant: &MerchantId, customer: &CustomerId) -> bool {
        in_holdout(&self.salt, merchant, customer, self.holdout_of(merchant))
    }
}

/// Mode `on` everywhere, no holdout, empty salt: v1.1's behaviour. (A
/// `const` cannot hold a `HashMap`, so the default is this impl plus
/// [`Rollout::DEFAULT_MODE`] and [`Rollout::DEFAULT_HOLDOUT`].)
impl Default for Rollout {
    fn default() -> Self {
        Self {
            mode: Self::DEFAULT_MODE,
            mode_for: HashMap::new(),
            holdout: Self::DEFAULT_HOLDOUT,
            holdout_for: HashMap::new(),
            salt: Vec::new(),
        }
    }
}

/// The customer's bucket in 0..10000:
/// `u64_be(first 8 bytes of SHA-256(salt ‖ merchant ‖ 0x00 ‖ customer)) mod 10000`,
/// over the trimmed ids' UTF-8 bytes (the ids are trimmed when parsed).
/// The 0x00 separates the ids: no id holds a control character, so
/// (`ab`, `c`) and (`a`, `bc`) never hash alike.
pub fn holdout_bucket(salt: &[u8], merchant: &MerchantId, customer: &CustomerId) -> u16 {
    let mut context = digest::Context::new(&digest::SHA256);
    context.update(salt);
    context.update(merchant.as_str().as_bytes());
    context.update(&[0x00]);
    context.update(customer.as_str().as_bytes());
    let sha = context.finish();
    // SHA-256 always gives 32 bytes; the fallback is never taken.
    let head = sha.as_ref().first_chunk::<8>().copied().unwrap_or([0; 8]);
    // Below 10000 after the modulo, so the cast is exact.
    (u64::from_be_bytes(head) % 10_000) as u16
}

/// Whether the customer is in the holdout: its bucket is below the share's
/// basis points. Stable across calls, instances and restarts; a share of 0
/// holds nobody out and hashes nothing.
pub fn in_holdout(
    salt: &[u8],
    merchant: &MerchantId,
    customer: &CustomerId,
    share: HoldoutShare,
) -> bool {
    share.basis_points() > 0 && holdout_bucket(salt, merchant, customer) < share.basis_points()
}

/// Why GetPin answered as it did (the proto's `PinReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PinReason {
    Pinned,
    NoHabit,
    AllVetoed,
    Holdout,
    Shadow,
    Disabled,
}

/// GetPin's answer after the rollout: `connector` is the pin only when
/// `pinned`; `would_pin` is the connector the rules picked, whatever the
/// mode did with it (empty for `NoHabit`, `AllVetoed` and `Disabled`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinAnswer {
    pub pinned: bool,
    pub connector: Option<Candidate>,
    pub would_pin: Option<String>,
    pub reason: PinReason,
}

impl PinAnswer {
    fn unpinned(would_pin: Option<String>, reason: PinReason) -> Self {
        Self {
            pinned: false,
            connector: None,
            would_pin,
            reason,
        }
    }
}

/// What GetPin answers in `mode`, for a customer in the holdout or not,
/// given what the rules chose from its hash (`None` when nothing was read:
/// mode `off`, or a customer without a hash in the other modes).
///
/// The holdout applies in mode `on` only. Without a pin the reason is
/// `NoHabit` (no candidate) or `AllVetoed` in every mode but `off`, so
/// `Holdout` and `Shadow` always come with a `would_pin`.
pub fn answer(mode: Mode, in_holdout: bool, choice: Option<&PinChoice>) -> PinAnswer {
    if mode == Mode::Off {
        return PinAnswer::unpinned(None, PinReason::Disabled);
    }
    let Some(pin) = choice.and_then(|c| c.pin.as_ref()) else {
        let reason = match choice {
            Some(c) if !c.candidates.is_empty() => PinReason::AllVetoed,
            _ => PinReason::NoHabit,
        };
        return PinAnswer::unpinned(None, reason);
    };
    let would_pin = Some(pin.connector.clone());
    match (mode, in_holdout) {
        (Mode::On, false) => PinAnswer {
            pinned: true,
            connector: Some(pin.clone()),
            would_pin,
            reason: PinReason::Pinned,
        },
        (Mode::On, true) => PinAnswer::unpinned(would_pin, PinReason::Holdout),
        // The holdout does not apply in shadow mode; `Off` returned above.
        (Mode::Shadow | Mode::Off, _) => PinAnswer::unpinned(would_pin, PinReason::Shadow),
    }
}

/// The experiment's groups (contract v1.2 §4, "Experiment counts").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Group {
    /// Mode `on`, not in the holdout.
    Treated,
    /// Mode `on`, in the holdout.
    Holdout,
    /// Mode `shadow`.
    Shadow,
}

/// Whether the call went to the connector GetPin named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    Followed,
    Overridden,
}

/// Which experiment cell a RecordOutcome counts in: `None` in mode `off` or
/// without `pin_connector`. Treated and shadow outcomes are split by whether
/// the call's `connector` is the one GetPin named; holdout ones are not
/// (GetPin pinned nothing there, so there is nothing to follow).
pub fn cell(
    mode: Mode,
    in_holdout: bool,
    connector: &Connector,
    pin_connector: Option<&Connector>,
) -> Option<(Group, Option<Split>)> {
    let pin_connector = pin_connector?;
    let split = if connector == pin_connector {
        Split::Followed
    } else {
        Split::Overridden
    };
    match (mode, in_holdout) {
        (Mode::Off, _) => None,
        (Mode::On, false) => Some((Group::Treated, Some(split))),
        (Mode::On, true) => Some((Group::Holdout, None)),
        (Mode::Shadow, _) => Some((Group::Shadow, Some(split))),
    }
}

#[cfg(test)]
mod tests;
