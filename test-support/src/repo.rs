//! The repository's own files, for the tests that hold them to the code
//! (deploy/, the Dockerfile, the monitoring, the load-test recipes).

use std::path::PathBuf;

/// The repository's root: this crate's parent folder.
pub fn root() -> PathBuf {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .parent()
        .expect("test-support sits in the repository's root")
        .to_path_buf()
}

/// A file of the repository, by its path from the root.
pub fn repo_file(relative: &str) -> String {
    let path = root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {relative}: {e}"))
}

/// The value `deploy/config.env` gives a setting, if it sets it (a
/// commented-out line does not).
pub fn deploy_setting(name: &str) -> Option<String> {
    repo_file("deploy/config.env").lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key == name).then(|| value.to_owned())
    })
}
