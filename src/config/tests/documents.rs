//! Tests that the repository's markdown stands on its own: every relative
//! link names a file of the repository (and a heading of it, when it names
//! one), and nothing points at `../shared`, which only the maintainers have.
//!
//! A user reads these files from a clone or on the forge; a link that works
//! on a maintainer's machine and nowhere else is the bug issue 15 found.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use super::read_doc;

/// Directories that hold no documentation of ours.
const SKIPPED_DIRS: &[&str] = &["target", "node_modules"];

/// Every `*.md` file of the repository, as a path relative to its root.
fn markdown_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(root.join(&dir)).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let relative = dir.join(&name);
            if entry.file_type().unwrap().is_dir() {
                if !name.starts_with('.') && !SKIPPED_DIRS.contains(&name.as_str()) {
                    pending.push(relative);
                }
            } else if name.ends_with(".md") {
                found.push(relative);
            }
        }
    }
    found.sort();
    found
}

/// The lines of `text` outside fenced code blocks, numbered from 1.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut in_fence = false;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence {
            lines.push((index + 1, line));
        }
    }
    lines
}

/// The targets of the inline links `[text](target)` on a line, without an
/// optional `"title"`.
fn link_targets(line: &str) -> Vec<&str> {
    line.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &line[at + 2..];
            let end = rest.find(')')?;
            rest[..end].split_whitespace().next()
        })
        .collect()
}

/// The anchor a heading gets on the forge: lower case, without punctuation
/// but `-` and `_`, spaces as `-`.
fn heading_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a markdown file's headings make, repeats numbered `-1`, `-2`.
fn anchors_of(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let base = heading_anchor(heading.trim_start_matches('#'));
        let mut anchor = base.clone();
        let mut repeat = 0;
        while !anchors.insert(anchor.clone()) {
            repeat += 1;
            anchor = format!("{base}-{repeat}");
        }
    }
    anchors
}

/// `path` with `.` and `..` resolved, or `None` when it climbs out of the
/// repository.
fn normalised(path: &Path) -> Option<PathBuf> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

/// What is wrong with the link `target` in the file `from`, if anything.
fn link_problem(from: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, anchor) = match target.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (target, None),
    };
    let resolved = if file.is_empty() {
        from.to_path_buf()
    } else {
        let joined = from.parent().unwrap_or(Path::new("")).join(file);
        match normalised(&joined) {
            Some(path) => path,
            None => return Some(format!("{target} leaves the repository")),
        }
    };
    let on_disk = Path::new(env!("CARGO_MANIFEST_DIR")).join(&resolved);
    if !on_disk.exists() {
        return Some(format!("{target}: no file {}", resolved.display()));
    }
    let anchor = anchor.filter(|anchor| !anchor.is_empty())?;
    if resolved.extension().is_some_and(|ext| ext == "md")
        && !anchors_of(&read_doc(&resolved.to_string_lossy())).contains(anchor)
    {
        return Some(format!(
            "{target}: {} has no heading #{anchor}",
            resolved.display()
        ));
    }
    None
}

/// Every broken relative link and every mention of `../shared` in `text`,
/// the markdown file at `from`.
fn problems_in(from: &Path, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.contains("../shared") {
            problems.push(format!(
                "{}:{}: names ../shared, outside the repository",
                from.display(),
                number + 1
            ));
        }
    }
    for (number, line) in prose_lines(text) {
        for target in link_targets(line) {
            if let Some(problem) = link_problem(from, target) {
                problems.push(format!("{}:{number}: {problem}", from.display()));
            }
        }
    }
    problems
}

#[test]
fn every_relative_link_in_the_markdown_reaches_a_file_of_the_repository() {
    let files = markdown_files();
    for expected in ["README.md", "docs/contract.md", "docs/operations.md"] {
        assert!(files.contains(&PathBuf::from(expected)), "{files:?}");
    }
    let problems: Vec<String> = files
        .iter()
        .flat_map(|file| problems_in(file, &read_doc(&file.to_string_lossy())))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_link_check_finds_each_kind_of_broken_link() {
    let from = Path::new("docs/contract.md");
    let text = "\
Fine: [ops](operations.md#memory-guard), [top](../README.md), [web](https://example.com/x).
[spec](../shared/spec/sticky-routing-v1.md)
[gone](operations-old.md) and [heading](operations.md#no-such-heading)
[out](../../etc/passwd)
```
[in a code block](nowhere.md)
```
";
    let problems = problems_in(from, text);
    let expected = [
        "docs/contract.md:2: names ../shared",
        "docs/contract.md:2: ../shared/spec/sticky-routing-v1.md: no file shared/spec",
        "docs/contract.md:3: operations-old.md: no file docs/operations-old.md",
        "docs/contract.md:3: operations.md#no-such-heading: docs/operations.md has no heading",
        "docs/contract.md:4: ../../etc/passwd leaves the repository",
    ];
    assert_eq!(problems.len(), expected.len(), "{problems:#?}");
    for (problem, start) in problems.iter().zip(expected) {
        assert!(
            problem.starts_with(start),
            "{problem} should start with {start}"
        );
    }
}

#[test]
fn headings_make_the_forges_anchors() {
    let text = "# Who may call: TLS, mTLS, admin RPCs\n## Telemetry (traces, issue 13)\n\
                ```sh\n# a shell comment\n```\n### Logs\n### Logs\n";
    let anchors: Vec<String> = anchors_of(text).into_iter().collect();
    assert_eq!(
        anchors,
        [
            "logs",
            "logs-1",
            "telemetry-traces-issue-13",
            "who-may-call-tls-mtls-admin-rpcs"
        ]
    );
}
