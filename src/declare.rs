//! How a setting is declared and read, for every module that owns settings:
//! a declaration ([`Setting`]: key, default, parse and range, help) sits
//! beside the code that uses the value, and that module reads it with the
//! [`Checker`] (e.g. `RedisSettings::from_declared`). Configuration
//! gathers every declaration into `--help`, the names the TOML file and the
//! environment may use and the problem report, and calls each owner.
//!
//! Here, below configuration and every owner, so that an owner reads its
//! own settings without importing configuration, which imports it.

mod checker;
pub mod parse;
mod raw;

pub use checker::Checker;
pub use raw::{Origin, Raw};

/// Every variable's prefix; the rest is the key upper-cased.
pub const ENV_PREFIX: &str = "STICKY_ROUTING_";

/// What a setting is, apart from its type.
#[derive(Debug, Clone, Copy)]
pub struct About {
    /// The key in the TOML file; the variable is `STICKY_ROUTING_` and the
    /// key upper-cased. For a per-merchant family, the key's prefix.
    pub key: &'static str,
    pub default: Fallback,
    /// One line for `--help`; more lines may follow, each after a `\n`.
    pub help: &'static str,
    /// Also settable as `{key}_file`: the path of a file that holds the
    /// value (the habit for Kubernetes secrets).
    pub or_file: bool,
    /// One setting per merchant: `{key}{merchant_id}`.
    pub per_merchant: bool,
}

/// What a setting is when it is not given.
#[derive(Debug, Clone, Copy)]
pub enum Fallback {
    /// This text, parsed like a given value.
    Text(&'static str),
    /// The number of CPUs.
    Cpus,
    /// This many per CPU.
    PerCpu(usize),
    /// The value of the setting with this key.
    Follows(&'static str),
    /// Not set; the text says what that means, if anything.
    Unset(&'static str),
}

/// A setting of type `T`.
pub struct Setting<T> {
    pub about: About,
    pub parse: fn(&str) -> Result<T, String>,
}

impl About {
    pub const fn new(key: &'static str, default: Fallback, help: &'static str) -> Self {
        Self {
            key,
            default,
            help,
            or_file: false,
            per_merchant: false,
        }
    }

    pub const fn or_file(self) -> Self {
        Self {
            or_file: true,
            ..self
        }
    }

    pub const fn per_merchant(self) -> Self {
        Self {
            per_merchant: true,
            ..self
        }
    }

    /// The environment variable, as `--help` and the docs write it.
    pub fn variable(&self) -> String {
        let name = format!("{ENV_PREFIX}{}", self.key.to_ascii_uppercase());
        match (self.per_merchant, self.or_file) {
            (true, _) => format!("{name}{{merchant_id}}"),
            (false, true) => format!("{name}[_FILE]"),
            (false, false) => name,
        }
    }

    /// The default as `--help` shows it.
    pub fn shown_default(&self) -> Option<String> {
        match self.default {
            Fallback::Text(text) => Some(text.to_owned()),
            Fallback::Cpus => Some("number of CPUs".to_owned()),
            Fallback::PerCpu(n) => Some(format!("{n} per CPU")),
            Fallback::Follows(key) => Some(format!("{ENV_PREFIX}{}", key.to_ascii_uppercase())),
            Fallback::Unset("") => None,
            Fallback::Unset(meaning) => Some(meaning.to_owned()),
        }
    }
}

/// Declares each setting as a constant and lists them all in the named
/// list, so a setting cannot exist without being listed (and so without
/// `--help`, the file and the environment knowing it).
macro_rules! settings {
    ($vis:vis $list:ident; $($(#[$doc:meta])* $name:ident: $ty:ty = $about:expr, $parse:expr;)*) => {
        $($(#[$doc])* $vis const $name: $crate::declare::Setting<$ty> =
            $crate::declare::Setting { about: $about, parse: $parse };)*
        /// These settings, in `--help` order.
        $vis const $list: &[$crate::declare::About] = &[$($name.about),*];
    };
}
pub(crate) use settings;
