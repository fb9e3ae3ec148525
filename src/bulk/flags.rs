//! The bulk commands' own argument walk: `--name value`, `--name=value` and
//! bare words (a FILE, `-`), shared so both commands read flags alike.

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
}
