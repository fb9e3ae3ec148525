//! The raw layers: the TOML file, then `STICKY_ROUTING_*` variables.
//!
//! Both layers use the same names. In the file a setting may be written as
//! `key_ttl`, `KEY_TTL` or `STICKY_ROUTING_KEY_TTL`; per-merchant budgets as a
//! `[max_customers_overrides]` table or as `STICKY_ROUTING_MAX_CUSTOMERS_{id}`
//! keys. Merchant ids keep their case. A key the file does not know is an
//! error, so a typo never silently changes nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{ENV_PREFIX, KNOWN_KEYS};

const OVERRIDE_KEY_PREFIX: &str = "max_customers_";
const OVERRIDE_TABLE: &str = "max_customers_overrides";

/// Where a raw value came from, so a problem can point at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Origin {
    Env,
    File(PathBuf),
}

/// One unparsed value.
#[derive(Debug, Clone)]
pub(super) struct Raw {
    pub text: String,
    pub origin: Origin,
}

impl Raw {
    /// How a problem names the setting: always the variable, plus the file
    /// when the value came from one.
    pub fn describe(&self, key: &str) -> String {
        self.describe_var(&Self::env_name(key), key)
    }

    /// The variable that sets `key`.
    pub fn env_name(key: &str) -> String {
        format!("{ENV_PREFIX}{}", key.to_ascii_uppercase())
    }

    /// The same for a per-merchant budget, whose merchant id keeps its case.
    pub fn describe_override(&self, merchant: &str) -> String {
        let key = format!("{OVERRIDE_KEY_PREFIX}{merchant}");
        self.describe_var(&format!("{ENV_PREFIX}MAX_CUSTOMERS_{merchant}"), &key)
    }

    fn describe_var(&self, var: &str, key: &str) -> String {
        match &self.origin {
            Origin::Env => var.to_owned(),
            Origin::File(path) => format!("{var} ({key} in {})", path.display()),
        }
    }
}

/// The layered raw values, later layers already winning.
#[derive(Debug, Default)]
pub(super) struct RawValues {
    pub values: HashMap<&'static str, Raw>,
    /// Merchant id → budget text.
    pub overrides: HashMap<String, Raw>,
    pub problems: Vec<String>,
}

impl RawValues {
    pub fn collect(file: Option<&Path>, env: &HashMap<String, String>) -> Self {
        let mut raw = Self::default();
        if let Some(path) = file {
            match read_file(path) {
                Ok(entries) => {
                    for (key, text) in entries {
                        let origin = Origin::File(path.to_path_buf());
                        if !raw.absorb(&key, Raw { text, origin }) {
                            raw.problems.push(format!(
                                "{}: unknown setting `{key}` (see --help)",
                                path.display()
                            ));
                        }
                    }
                }
                Err(why) => raw.problems.push(format!("{}: {why}", path.display())),
            }
        }
        for (name, text) in env {
            if let Some(key) = name.strip_prefix(ENV_PREFIX) {
                // Unknown variables are only warned about (see main.rs).
                raw.absorb(
                    key,
                    Raw {
                        text: text.clone(),
                        origin: Origin::Env,
                    },
                );
            }
        }
        raw
    }

    /// Files `value` under its canonical key; false when the key is unknown.
    fn absorb(&mut self, key: &str, value: Raw) -> bool {
        match setting_named(key) {
            Some(Setting::Known(known)) => {
                self.values.insert(known, value);
            }
            Some(Setting::Override(merchant)) => {
                self.overrides.insert(merchant.to_owned(), value);
            }
            None => return false,
        }
        true
    }
}

/// What a setting's name (with or without the `STICKY_ROUTING_` prefix, in
/// any case) stands for.
pub(super) enum Setting<'k> {
    Known(&'static str),
    /// A per-merchant budget; the merchant id keeps its case.
    Override(&'k str),
}

pub(super) fn setting_named(key: &str) -> Option<Setting<'_>> {
    let key = strip_prefix_ignoring_case(key, ENV_PREFIX).unwrap_or(key);
    let lower = key.to_ascii_lowercase();
    if let Some(known) = KNOWN_KEYS.iter().find(|k| **k == lower) {
        return Some(Setting::Known(known));
    }
    strip_prefix_ignoring_case(key, OVERRIDE_KEY_PREFIX).map(Setting::Override)
}

fn strip_prefix_ignoring_case<'k>(key: &'k str, prefix: &str) -> Option<&'k str> {
    let head = key.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &key[prefix.len()..])
}

/// Reads the TOML file as flat `(key, text)` pairs, expanding the overrides
/// table into `max_customers_{merchant}` keys.
fn read_file(path: &Path) -> Result<Vec<(String, String)>, String> {
    let table: HashMap<String, config::Value> = config::Config::builder()
        .add_source(config::File::from(path).format(config::FileFormat::Toml))
        .build()
        .and_then(config::Config::try_deserialize)
        .map_err(|e| e.to_string())?;
    let mut entries = Vec::new();
    for (key, value) in table {
        if key.eq_ignore_ascii_case(OVERRIDE_TABLE) {
            let budgets = value.into_table().map_err(|e| format!("{key}: {e}"))?;
            for (merchant, budget) in budgets {
                let text = budget
                    .into_string()
                    .map_err(|e| format!("{key}.{merchant}: {e}"))?;
                entries.push((format!("{OVERRIDE_KEY_PREFIX}{merchant}"), text));
            }
        } else {
            let text = value.into_string().map_err(|e| format!("{key}: {e}"))?;
            entries.push((key, text));
        }
    }
    Ok(entries)
}
