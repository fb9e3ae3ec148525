//! The bulk commands' own argument walk: `--name value`, `--name=value` and
//! bare words (a FILE, `-`), shared so every command reads flags alike; the
//! input of the commands that read rows (`import`, `replay`): FILE or `-`,
//! and its format; and `--tenant`, which every bulk command takes.

use std::path::PathBuf;

use super::Format;
use crate::domain::tenant::Tenant;

/// The flag that names a bulk command's tenant.
pub(crate) const TENANT_FLAG: &str = "--tenant";

/// `--tenant`'s value: a tenant id as the `x-tenant-id` header takes it
/// (trimmed; empty is the default tenant), or a usage error naming
/// `--tenant`.
pub(crate) fn tenant(value: &str) -> Result<Tenant, String> {
    Tenant::parse_as(value, TENANT_FLAG).map_err(|invalid| invalid.to_string())
}

/// Walks a bulk command's arguments.
pub(crate) struct Flags<'a> {
    rest: std::slice::Iter<'a, String>,
    inline: Option<&'a str>,
}

impl<'a> Flags<'a> {
    pub(crate) fn new(args: &'a [String]) -> Self {
        Self {
            rest: args.iter(),
            inline: None,
        }
    }

    /// The next flag or word; `--name=value` gives `--name`, its value kept
    /// for [`Flags::value`].
    pub(crate) fn next_word(&mut self) -> Option<&'a str> {
        let arg = self.rest.next()?.as_str();
        match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => {
                self.inline = Some(value);
                Some(name)
            }
            _ => {
                self.inline = None;
                Some(arg)
            }
        }
    }

    /// The value of `flag`, the word just read: after its `=`, else the
    /// next argument.
    pub(crate) fn value(&mut self, flag: &str) -> Result<&'a str, String> {
        self.inline
            .take()
            .or_else(|| self.rest.next().map(String::as_str))
            .ok_or_else(|| format!("{flag} needs a value"))
    }
}

/// The rows a command reads: `--format` and the FILE word, as the walk
/// meets them.
#[derive(Default)]
pub(crate) struct Input {
    format: Option<Format>,
    /// `Some(None)`: stdin (`-`).
    file: Option<Option<PathBuf>>,
}

impl Input {
    /// Takes `flag`, the word just read, when it is `--format` or the FILE
    /// (or `-`): `Ok(true)`. Other flags are the caller's.
    pub(crate) fn take(&mut self, flag: &str, flags: &mut Flags<'_>) -> Result<bool, String> {
        match flag {
            "--format" => {
                let word = flags.value(flag)?;
                let format = Format::from_flag(word)
                    .ok_or_else(|| format!("--format must be csv or jsonl, not `{word}`"))?;
                self.format = Some(format);
            }
            other if other.starts_with('-') && other != "-" => return Ok(false),
            _ if self.file.is_some() => {
                return Err(format!("one FILE only; `{flag}` is one too many"));
            }
            "-" => self.file = Some(None),
            path => self.file = Some(Some(PathBuf::from(path))),
        }
        Ok(true)
    }

    /// The file (`None`: stdin) and its format, from `--format` or else the
    /// file's name.
    pub(crate) fn finish(self) -> Result<(Option<PathBuf>, Format), String> {
        let file = self.file.ok_or("a FILE (or - for stdin) is needed")?;
        let format = match (self.format, &file) {
            (Some(format), _) => format,
            (None, Some(path)) => Format::from_path(path).ok_or_else(|| {
                format!(
                    "cannot tell the format of `{}` from its name; give --format csv|jsonl",
                    path.display()
                )
            })?,
            (None, None) => return Err("stdin (-) needs --format csv|jsonl".to_owned()),
        };
        Ok((file, format))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_come_inline_or_from_the_next_word_and_a_missing_one_is_named() {
        let args: Vec<String> = ["--a=1", "--b", "2", "file", "--c"]
            .map(String::from)
            .into();
        let mut flags = Flags::new(&args);
        assert_eq!(flags.next_word(), Some("--a"));
        assert_eq!(flags.value("--a"), Ok("1"));
        assert_eq!(flags.next_word(), Some("--b"));
        assert_eq!(flags.value("--b"), Ok("2"));
        assert_eq!(flags.next_word(), Some("file"));
        assert_eq!(flags.next_word(), Some("--c"));
        assert_eq!(flags.value("--c"), Err("--c needs a value".to_owned()));
        assert_eq!(flags.next_word(), None);
    }

    #[test]
    fn a_tenant_is_read_as_the_header_and_a_bad_one_names_the_flag() {
        assert_eq!(tenant(" acme ").unwrap().id(), Some("acme"));
        assert_eq!(tenant("Acme").unwrap().id(), Some("Acme"));
        assert!(tenant("").unwrap().is_default());
        for bad in ["a.b", "a b", &"a".repeat(65)] {
            let problem = tenant(bad).unwrap_err();
            assert!(problem.starts_with("--tenant: "), "{bad}: {problem}");
        }
    }
}
