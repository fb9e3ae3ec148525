//! Checks `deploy/` as a Kustomize base without a cluster or kustomize:
//! the settings file the ConfigMap is generated from, the pods' own
//! ServiceAccount, and that every manifest is reachable from the base or a
//! component. `make check-deploy` renders and validates the result.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
pub use test_support::repo::{deploy_setting, repo_file};

/// A YAML file of the repository, as JSON values (several documents: the first).
pub fn repo_yaml(relative: &str) -> Value {
    serde_yaml_ng::from_str(&repo_file(relative))
        .unwrap_or_else(|e| panic!("{relative} is not YAML: {e}"))
}

/// kustomize reads `KEY=value` lines and `#` comments, and keeps quotes as
/// part of the value, so a line copied from a YAML ConfigMap
/// (`KEY: "value"`) would become a wrong setting or a broken render.
#[test]
fn the_settings_file_is_plain_key_value_lines() {
    let settings = repo_file("deploy/config.env");
    let mut keys = BTreeSet::new();
    for (number, line) in settings.lines().enumerate() {
        let number = number + 1;
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("deploy/config.env:{number} is not KEY=value: {line}"));
        assert!(
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "deploy/config.env:{number}: {key:?} is not an environment variable name"
        );
        assert!(
            !value.is_empty() && !value.starts_with(['"', '\'']) && value.trim() == value,
            "deploy/config.env:{number}: the value of {key} is empty, quoted or padded"
        );
        assert!(keys.insert(key), "deploy/config.env sets {key} twice");
    }
    assert!(keys.contains("STICKY_ROUTING_REDIS_URL"), "{keys:?}");
}

/// The pods have an identity of their own (nothing granted to `default`
/// reaches them), and no API token: the service never calls the API.
#[test]
fn the_pods_run_as_their_own_service_account_without_a_token() {
    let account = repo_yaml("deploy/serviceaccount.yaml");
    assert_eq!(account["kind"], "ServiceAccount");
    assert_eq!(account["automountServiceAccountToken"], false);
    let pod = &repo_yaml("deploy/deployment.yaml")["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], account["metadata"]["name"]);
    assert_eq!(pod["automountServiceAccountToken"], false);
}

/// Every manifest in `deploy/` is a resource of the base or of a component,
/// or says in its name that it is an example; a new file nobody listed
/// would otherwise never be applied, nor validated by `make check-deploy`.
#[test]
fn every_manifest_is_in_the_base_or_a_component() {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let base = repo_yaml("deploy/kustomization.yaml");
    assert_eq!(base["kind"], "Kustomization");
    let mut listed: BTreeSet<String> = strings(&base["resources"]).collect();
    assert!(
        strings(&base["configMapGenerator"][0]["envs"]).any(|env| env == "config.env"),
        "the base does not generate its ConfigMap from config.env"
    );
    let mut unlisted = Vec::new();
    for entry in std::fs::read_dir(&deploy).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.join("kustomization.yaml").is_file() {
            let component = repo_yaml(&format!("deploy/{name}/kustomization.yaml"));
            assert_eq!(component["kind"], "Component", "deploy/{name}/");
            let resources: Vec<_> = strings(&component["resources"]).collect();
            assert!(!resources.is_empty(), "deploy/{name}/ adds nothing");
            listed.extend(resources.iter().map(|file| format!("{name}/{file}")));
            for file in std::fs::read_dir(&path).unwrap() {
                let file = file.unwrap().file_name().to_string_lossy().into_owned();
                if file.ends_with(".yaml") && file != "kustomization.yaml" {
                    unlisted.push(format!("{name}/{file}"));
                }
            }
        } else if name.ends_with(".yaml") && name != "kustomization.yaml" {
            unlisted.push(name);
        }
    }
    unlisted.retain(|file| !listed.contains(file) && !file.ends_with(".example.yaml"));
    assert!(
        unlisted.is_empty(),
        "deploy/: {unlisted:?} in no kustomization"
    );
}

fn strings(list: &Value) -> impl Iterator<Item = String> + '_ {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| item.as_str().map(str::to_owned))
}
