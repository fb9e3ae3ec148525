//! The raw layers: the TOML file, then `STICKY_ROUTING_*` variables.
//!
//! Both layers use the same names. In the file a setting may be written as
//! `key_ttl`, `KEY_TTL` or `STICKY_ROUTING_KEY_TTL`; per-merchant budgets as a
//! `[max_customers_overrides]` table or as `STICKY_ROUTING_MAX_CUSTOMERS_{id}`
//! keys. Merchant ids keep their case. A key the file does not know is an
//! error, so a typo never silently changes nothing.

use std::collections::HashMap;
use std::path::Path;

use super::declarations::all;
use crate::declare::{ENV_PREFIX, Origin, Raw};

/// The TOML table that lists a per-merchant family's values by merchant id:
/// `[max_customers_overrides]` for `max_customers_{merchant_id}`.
fn family_table(family: &str) -> String {
    format!("{family}overrides")
}

/// The layered raw values, later layers already winning.
#[derive(Debug, Default)]
pub(super) struct RawValues {
    /// By key; a file form under `{key}_file`.
    pub values: HashMap<String, Raw>,
    /// By family key, then merchant id.
    pub per_merchant: HashMap<&'static str, HashMap<String, Raw>>,
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
            Some(Named::Setting(key)) => {
                self.values.insert(key.to_owned(), value);
            }
            Some(Named::File(key)) => {
                self.values.insert(format!("{key}_file"), value);
            }
            Some(Named::Member { family, merchant }) => {
                self.per_merchant
                    .entry(family)
                    .or_default()
                    .insert(merchant.to_owned(), value);
            }
            None => return false,
        }
        true
    }
}

/// What a setting's name (with or without the `STICKY_ROUTING_` prefix, in
/// any case) stands for, by the declarations.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Named<'k> {
    /// The setting with this key.
    Setting(&'static str),
    /// The `_FILE` form of the setting with this key.
    File(&'static str),
    /// A member of a per-merchant family; the merchant id keeps its case.
    Member {
        family: &'static str,
        merchant: &'k str,
    },
}

pub(super) fn setting_named(name: &str) -> Option<Named<'_>> {
    let name = strip_prefix_ignoring_case(name, ENV_PREFIX).unwrap_or(name);
    let lower = name.to_ascii_lowercase();
    for about in all().filter(|about| !about.per_merchant) {
        if lower == about.key {
            return Some(Named::Setting(about.key));
        }
        if about.or_file && lower.strip_prefix(about.key) == Some("_file") {
            return Some(Named::File(about.key));
        }
    }
    all().filter(|about| about.per_merchant).find_map(|about| {
        let merchant = strip_prefix_ignoring_case(name, about.key)?;
        Some(Named::Member {
            family: about.key,
            merchant,
        })
    })
}

fn strip_prefix_ignoring_case<'k>(key: &'k str, prefix: &str) -> Option<&'k str> {
    let head = key.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &key[prefix.len()..])
}

/// Reads the TOML file as flat `(key, text)` pairs, expanding a family's
/// table (`[max_customers_overrides]`) into `max_customers_{merchant}` keys.
fn read_file(path: &Path) -> Result<Vec<(String, String)>, String> {
    let table: HashMap<String, config::Value> = config::Config::builder()
        .add_source(config::File::from(path).format(config::FileFormat::Toml))
        .build()
        .and_then(config::Config::try_deserialize)
        .map_err(|e| e.to_string())?;
    let mut entries = Vec::new();
    for (key, value) in table {
        let family = all()
            .filter(|about| about.per_merchant)
            .find(|about| key.eq_ignore_ascii_case(&family_table(about.key)));
        if let Some(family) = family {
            let values = value.into_table().map_err(|e| format!("{key}: {e}"))?;
            for (merchant, value) in values {
                let text = value
                    .into_string()
                    .map_err(|e| format!("{key}.{merchant}: {e}"))?;
                entries.push((format!("{}{merchant}", family.key), text));
            }
        } else {
            let text = value.into_string().map_err(|e| format!("{key}: {e}"))?;
            entries.push((key, text));
        }
    }
    Ok(entries)
}
