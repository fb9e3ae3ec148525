//! Holds the Dockerfile to the workspace, since no Docker engine runs in CI:
//! the package and binary it builds exist, what it copies exists and is not
//! excluded by .dockerignore, base images are pinned by digest, and the
//! image carries its OCI labels and runs as the Deployment's non-root user.

use crate::deploy_files::{repo_file, repo_yaml};

/// One instruction: its keyword (upper case) and its arguments, with line
/// continuations joined and comments dropped.
struct Instruction {
    keyword: String,
    args: String,
}

fn instructions() -> Vec<Instruction> {
    let text = repo_file("Dockerfile");
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(continued) => {
                current.push_str(continued);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                let (keyword, args) = current.split_once(' ').unwrap_or((&current, ""));
                out.push(Instruction {
                    keyword: keyword.to_ascii_uppercase(),
                    args: args.trim().to_owned(),
                });
                current.clear();
            }
        }
    }
    assert!(current.is_empty(), "the Dockerfile ends in a continuation");
    out
}

fn all<'a>(instructions: &'a [Instruction], keyword: &str) -> Vec<&'a str> {
    instructions
        .iter()
        .filter(|i| i.keyword == keyword)
        .map(|i| i.args.as_str())
        .collect()
}

/// A manifest's `name` in `[package]` and the names of its `[[bin]]`s.
fn package_and_bins(manifest: &str) -> (String, Vec<String>) {
    let (mut section, mut package, mut bins) = ("", String::new(), Vec::new());
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if let Some(value) = line.strip_prefix("name = ") {
            let value = value.trim_matches('"').to_owned();
            match section {
                "[package]" => package = value,
                "[[bin]]" => bins.push(value),
                _ => {}
            }
        }
    }
    (package, bins)
}

fn flag<'a>(command: &'a str, name: &str) -> Option<&'a str> {
    let mut words = command.split_whitespace();
    words.find(|word| *word == name)?;
    words.next()
}

#[test]
fn it_builds_a_binary_of_a_workspace_package() {
    let instructions = instructions();
    let builds: Vec<&str> = all(&instructions, "RUN")
        .into_iter()
        .filter(|run| run.contains("cargo build"))
        .collect();
    assert_eq!(builds.len(), 1, "one cargo build, found {builds:?}");
    let build = builds[0];
    assert!(build.contains("--locked"), "the build ignores Cargo.lock");
    let package = flag(build, "--package").expect("the build names its --package");
    let bin = flag(build, "--bin").expect("the build names its --bin");

    let manifests = [repo_file("Cargo.toml"), repo_file("bench/Cargo.toml")];
    let (_, bins) = manifests
        .iter()
        .map(|manifest| package_and_bins(manifest))
        .find(|(name, _)| name == package)
        .unwrap_or_else(|| panic!("the workspace has no package {package}"));
    assert!(
        bins.iter().any(|b| b == bin),
        "{package} has no binary {bin}"
    );
    assert!(
        build.contains(&format!("target/release/{bin} ")),
        "the build does not copy out target/release/{bin}"
    );

    let entrypoint = all(&instructions, "ENTRYPOINT");
    let entrypoint = entrypoint.last().expect("an ENTRYPOINT");
    let program = entrypoint
        .trim_start_matches(['[', '"'])
        .split('"')
        .next()
        .unwrap_or("");
    assert!(
        program.ends_with(&format!("/{bin}")),
        "the ENTRYPOINT runs {program}, not the {bin} built"
    );
    assert!(
        all(&instructions, "COPY")
            .iter()
            .any(|copy| copy.starts_with("--from=") && copy.ends_with(&format!(" {program}"))),
        "no stage copies the binary to {program}"
    );
}

#[test]
fn it_copies_only_paths_that_exist_and_reach_the_build_context() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let ignored: Vec<String> = repo_file(".dockerignore")
        .lines()
        .map(|line| line.trim().trim_end_matches('/').to_owned())
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    let mut copied = 0;
    for copy in all(&instructions(), "COPY") {
        if copy.starts_with("--from=") {
            continue;
        }
        let words: Vec<&str> = copy.split_whitespace().collect();
        let (_, sources) = words.split_last().expect("COPY has a destination");
        for source in sources {
            let source = source.trim_start_matches("./").trim_end_matches('/');
            assert!(root.join(source).exists(), "COPY {source}: no such path");
            let top = source.split('/').next().unwrap_or(source);
            assert!(
                !ignored
                    .iter()
                    .any(|pattern| pattern == top || pattern == source),
                "COPY {source}: .dockerignore keeps it out of the build context"
            );
            copied += 1;
        }
    }
    assert!(copied > 0, "the Dockerfile copies no sources");
}

/// `name:tag@sha256:<64 hex>`: the tag for people, the digest for the bytes.
#[test]
fn every_base_image_is_pinned_by_digest() {
    let mut stages: Vec<String> = Vec::new();
    for from in all(&instructions(), "FROM") {
        let mut words = from.split_whitespace();
        let image = words.next().expect("FROM names an image");
        if !stages.iter().any(|stage| stage == image) {
            let (reference, digest) = image
                .split_once("@sha256:")
                .unwrap_or_else(|| panic!("FROM {image} is not pinned by digest"));
            assert!(
                digest.len() == 64
                    && digest
                        .chars()
                        .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
                "FROM {image}: the digest is not 64 lowercase hex digits"
            );
            assert!(reference.contains(':'), "FROM {image}: name the tag too");
        }
        if let (Some(keyword), Some(stage)) = (words.next(), words.next()) {
            assert!(keyword.eq_ignore_ascii_case("AS"), "FROM {from}");
            stages.push(stage.to_owned());
        }
    }
    assert!(
        !stages.is_empty(),
        "no build stage: the image would carry a toolchain"
    );
}

/// The builder's Rust is at least the workspace's `rust-version`.
#[test]
fn the_builder_toolchain_meets_the_rust_version() {
    let floor = repo_file("Cargo.toml")
        .lines()
        .find_map(|line| line.strip_prefix("rust-version = "))
        .map(|value| version(value.trim_matches('"')))
        .expect("Cargo.toml has a rust-version");
    let instructions = instructions();
    let froms = all(&instructions, "FROM");
    let rust = froms
        .iter()
        .find_map(|from| from.strip_prefix("rust:"))
        .expect("a rust: build stage");
    let tag = rust.split(['-', '@']).next().unwrap_or("");
    assert!(
        version(tag) >= floor,
        "rust:{tag} is older than rust-version"
    );
}

fn version(text: &str) -> Vec<u32> {
    text.split('.')
        .map(|part| {
            part.parse()
                .unwrap_or_else(|_| panic!("{text} is not a version"))
        })
        .collect()
}

#[test]
fn the_image_is_labelled_and_runs_as_the_deployments_non_root_user() {
    let instructions = instructions();
    let labels = all(&instructions, "LABEL").join(" ");
    let label = |key: &str| -> String {
        let at = labels
            .find(&format!("org.opencontainers.image.{key}="))
            .unwrap_or_else(|| panic!("no OCI label {key}"));
        labels[at..].split('"').nth(1).unwrap_or("").to_owned()
    };
    let manifest = repo_file("Cargo.toml");
    let (package, _) = package_and_bins(&manifest);
    assert_eq!(label("title"), package);
    let license = manifest
        .lines()
        .find_map(|line| line.strip_prefix("license = "))
        .map(|value| value.trim_matches('"').to_owned());
    assert_eq!(Some(label("licenses")), license);
    for key in ["description", "version", "revision"] {
        assert!(!label(key).is_empty(), "the OCI label {key} is empty");
    }

    let users = all(&instructions, "USER");
    let user = users.last().expect("a USER: the image would run as root");
    let (uid, gid) = user.split_once(':').unwrap_or((user, user));
    let uid: u64 = uid.parse().expect("a numeric USER, for runAsNonRoot");
    assert!(uid != 0 && gid.parse::<u64>().is_ok_and(|gid| gid != 0));
    let pod = &repo_yaml("deploy/deployment.yaml")["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsUser"].as_u64(), Some(uid));
}
