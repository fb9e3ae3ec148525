//! PLACEHOLDER for the rollout's pure domain (rdomain owns the real one,
//! with its tests): the names and signatures of /work/notes/rollout-design.md,
//! so that configuration and transport build against them until it lands.

use std::collections::HashMap;

use super::ids::{CustomerId, MerchantId};
use super::pin::{Candidate, PinChoice};

/// What GetPin does for a merchant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    On,
    Shadow,
    Off,
}

impl Mode {
    /// `on`, `shadow` or `off`, in any case.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_lowercase().as_str() {
            "on" => Ok(Self::On),
            "shadow" => Ok(Self::Shadow),
            "off" => Ok(Self::Off),
            _ => Err(format!("`{text}` is not `on`, `shadow` or `off`")),
        }
    }
}

/// The holdout's share of a merchant's customers, in basis points: 0 to
/// 5000 (0 % to 50 %, to 0.01 %).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HoldoutShare(u16);

impl HoldoutShare {
    pub const ZERO: Self = Self(0);

    /// Reads `12.5%`: 0 % to 50 %, the `%` required.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("`{text}` is not a percentage from 0% to 50% (such as 5% or 12.5%)");
        let number = text.strip_suffix('%').ok_or_else(bad)?;
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(fraction) || number.ends_with('.') {
            return Err(bad());
        }
        let value: f64 = number.parse().map_err(|_| bad())?;
        let bp = (value * 100.0).round();
        if !(0.0..=5000.0).contains(&bp) || (value * 100.0 - bp).abs() > 1e-6 {
            return Err(bad());
        }
        Ok(Self(bp as u16))
    }

    pub fn basis_points(self) -> u16 {
        self.0
    }
}

/// The rollout's settings: the mode and holdout, each with per-merchant
/// overrides, and the experiment's salt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    pub mode: Mode,
    pub mode_for: HashMap<String, Mode>,
    pub holdout: HoldoutShare,
    pub holdout_for: HashMap<String, HoldoutShare>,
    pub salt: Vec<u8>,
}

impl Default for Rollout {
    fn default() -> Self {
        Self {
            mode: Mode::On,
            mode_for: HashMap::new(),
            holdout: HoldoutShare::ZERO,
            holdout_for: HashMap::new(),
            salt: Vec::new(),
        }
    }
}

impl Rollout {
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
}

/// `u64_be(first 8 bytes of SHA-256(salt ‖ merchant ‖ 0x00 ‖ customer)) mod
/// 10000 < basis points`; share 0 hashes nothing.
pub fn in_holdout(
    salt: &[u8],
    merchant: &MerchantId,
    customer: &CustomerId,
    share: HoldoutShare,
) -> bool {
    if share.0 == 0 {
        return false;
    }
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(salt);
    ctx.update(merchant.as_str().as_bytes());
    ctx.update(&[0]);
    ctx.update(customer.as_str().as_bytes());
    let digest = ctx.finish();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest.as_ref()[..8]);
    u64::from_be_bytes(first) % 10_000 < u64::from(share.0)
}

/// Why GetPin answered as it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinReason {
    Pinned,
    NoHabit,
    AllVetoed,
    Holdout,
    Shadow,
    Disabled,
}

/// GetPin's answer after the mode and the holdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinAnswer {
    pub pinned: bool,
    /// The pin, when pinned.
    pub connector: Option<Candidate>,
    /// The connector the rules pick, whatever the mode.
    pub would_pin: Option<String>,
    pub reason: PinReason,
}

/// The answer for `mode`; `choice` is `None` in mode Off (nothing read).
pub fn answer(mode: Mode, in_holdout: bool, choice: Option<&PinChoice>) -> PinAnswer {
    let none = |reason| PinAnswer {
        pinned: false,
        connector: None,
        would_pin: None,
        reason,
    };
    let Some(choice) = choice.filter(|_| mode != Mode::Off) else {
        return none(PinReason::Disabled);
    };
    let Some(pin) = &choice.pin else {
        return none(match choice.candidates.is_empty() {
            true => PinReason::NoHabit,
            false => PinReason::AllVetoed,
        });
    };
    let would_pin = Some(pin.connector.clone());
    match (mode, in_holdout) {
        (Mode::Shadow, _) => PinAnswer {
            would_pin,
            ..none(PinReason::Shadow)
        },
        (_, true) => PinAnswer {
            would_pin,
            ..none(PinReason::Holdout)
        },
        _ => PinAnswer {
            pinned: true,
            connector: Some(pin.clone()),
            would_pin,
            reason: PinReason::Pinned,
        },
    }
}
