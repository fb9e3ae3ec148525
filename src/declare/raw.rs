//! One value as given, and where it was given, so that a problem can point
//! at it.

use std::path::PathBuf;

use super::ENV_PREFIX;

/// Where a raw value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Env,
    File(PathBuf),
}

/// One unparsed value.
#[derive(Debug, Clone)]
pub struct Raw {
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

    /// The same for a per-merchant setting, whose merchant id keeps its case.
    pub fn describe_member(&self, family: &str, merchant: &str) -> String {
        let key = format!("{family}{merchant}");
        let var = format!("{ENV_PREFIX}{}{merchant}", family.to_ascii_uppercase());
        self.describe_var(&var, &key)
    }

    fn describe_var(&self, var: &str, key: &str) -> String {
        match &self.origin {
            Origin::Env => var.to_owned(),
            Origin::File(path) => format!("{var} ({key} in {})", path.display()),
        }
    }
}
