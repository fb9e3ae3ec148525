//! Typing the raw values by their declarations: each bad value becomes a
//! problem that names its variable, and every problem is kept, so that all
//! are reported together.

use std::collections::HashMap;

use super::{Fallback, Raw, Setting};

/// The raw values by key (a file form under `{key}_file`) and the problems
/// found so far. Each settings owner reads its declarations through it.
pub struct Checker {
    values: HashMap<String, Raw>,
    problems: Vec<String>,
}

impl Checker {
    /// Checks `values`, after the `problems` found while collecting them.
    pub fn new(values: HashMap<String, Raw>, problems: Vec<String>) -> Self {
        Self { values, problems }
    }

    /// Every problem found.
    pub fn into_problems(self) -> Vec<String> {
        self.problems
    }

    pub fn has_problems(&self) -> bool {
        !self.problems.is_empty()
    }

    /// Records a problem; it should start with the setting's [`Self::name`].
    pub fn problem(&mut self, problem: String) {
        self.problems.push(problem);
    }

    /// Whether the setting `key` was given (its file form aside).
    pub fn given(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    /// The setting's value, given or by its default; `None` after
    /// recording a problem that names the variable.
    pub fn value<T>(&mut self, setting: &Setting<T>) -> Option<T> {
        let key = setting.about.key;
        if self.values.contains_key(key) {
            return self.optional(setting);
        }
        match setting.about.default {
            Fallback::Text(text) => self.parse(setting, key, text),
            Fallback::Cpus => self.parse(setting, key, &cpus().to_string()),
            Fallback::PerCpu(n) => {
                let value = n.saturating_mul(cpus());
                self.parse(setting, key, &value.to_string())
            }
            Fallback::Follows(_) | Fallback::Unset(_) => {
                self.problems.push(format!(
                    "{}: has no default; this is a bug, please report it",
                    Raw::env_name(key)
                ));
                None
            }
        }
    }

    /// For a setting whose default follows another: its own value when
    /// given, else `other`.
    pub fn value_or<T>(&mut self, setting: &Setting<T>, other: Option<T>) -> Option<T> {
        match self.values.contains_key(setting.about.key) {
            true => self.optional(setting),
            false => other,
        }
    }

    /// An optional setting: `None` when not given (or bad, with a problem).
    pub fn optional<T>(&mut self, setting: &Setting<T>) -> Option<T> {
        let key = setting.about.key;
        let text = self.values.get(key)?.text.trim().to_owned();
        self.parse(setting, key, &text)
    }

    /// A value given directly (`STICKY_ROUTING_REDIS_PASSWORD`), verbatim,
    /// or as the path of a file holding it (`..._FILE`, the Kubernetes
    /// secret habit). One trailing newline of the file is dropped.
    pub fn optional_or_file(&mut self, setting: &Setting<String>) -> Option<String> {
        let key = setting.about.key;
        let file_key = format!("{key}_file");
        match (self.values.get(key), self.values.get(&file_key)) {
            (Some(direct), Some(file)) => {
                self.problems.push(format!(
                    "{} and {}: both are set; give one",
                    direct.describe(key),
                    file.describe(&file_key)
                ));
                None
            }
            (Some(direct), None) => Some(direct.text.clone()),
            (None, Some(file)) => {
                let (name, path) = (file.describe(&file_key), file.text.trim().to_owned());
                let text = match std::fs::read_to_string(&path) {
                    Ok(text) => text,
                    Err(e) => {
                        self.problems
                            .push(format!("{name}: cannot read {path}: {e}"));
                        return None;
                    }
                };
                let text = text.strip_suffix('\n').unwrap_or(&text);
                let text = text.strip_suffix('\r').unwrap_or(text);
                if text.is_empty() {
                    self.problems.push(format!("{name}: {path} is empty"));
                    return None;
                }
                Some(text.to_owned())
            }
            (None, None) => None,
        }
    }

    fn parse<T>(&mut self, setting: &Setting<T>, key: &str, text: &str) -> Option<T> {
        (setting.parse)(text)
            .map_err(|why| {
                let name = self.name(key);
                self.problems.push(format!("{name}: {why}"));
            })
            .ok()
    }

    /// How a problem names the setting `key`: as [`Raw::describe`] when it
    /// was given, else just its variable.
    pub fn name(&self, key: &str) -> String {
        self.values
            .get(key)
            .map_or_else(|| Raw::env_name(key), |raw| raw.describe(key))
    }

    /// How a problem names a setting that may be given as `{key}_file`: by
    /// the form that was given.
    pub fn name_or_file(&self, key: &str) -> String {
        let file_key = format!("{key}_file");
        match self.values.contains_key(&file_key) && !self.values.contains_key(key) {
            true => self.name(&file_key),
            false => self.name(key),
        }
    }
}

/// The CPUs this process may run on (its affinity, on Linux).
fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}
