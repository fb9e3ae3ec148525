//! Checks the ghz recipes in `bench/ghz/` without ghz: each file is JSON
//! with only keys ghz's config reads (ghz ignores a misspelt one), calls an
//! RPC the proto has with fields its request has, uses only the template
//! functions ghz knows, and reads only customers the fill writes.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::deploy_files::repo_file;

/// The keys of ghz's JSON config (0.121: its long flag names). ghz drops
/// any other key without a word, so a typo would silently change a run.
#[rustfmt::skip]
const GHZ_CONFIG_KEYS: &[&str] = &[
    "proto", "protoset", "call", "import-paths", "cacert", "cert", "key", "cname",
    "skipTLS", "insecure", "authority", "async", "rps", "load-schedule", "load-start",
    "load-step", "load-end", "load-step-duration", "load-max-duration", "concurrency",
    "concurrency-schedule", "concurrency-start", "concurrency-end", "concurrency-step",
    "concurrency-step-duration", "concurrency-max-duration", "total", "timeout", "duration",
    "max-duration", "duration-stop", "data", "data-file", "binary-file", "metadata",
    "metadata-file", "stream-interval", "stream-call-duration", "stream-call-count",
    "stream-dynamic-messages", "reflect-metadata", "output", "format", "skipFirst",
    "count-errors", "connections", "connect-timeout", "keepalive", "name", "tags", "cpus",
    "debug", "host", "enable-compression", "lb-strategy",
];

const SERVICE: &str = "sticky_routing.v1.StickyRouting";
const FILL: &str = "record_outcome.json";

fn recipes() -> Vec<(String, Value)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/ghz");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".json"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let text = repo_file(&format!("bench/ghz/{name}"));
            let value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("bench/ghz/{name} is not JSON: {e}"));
            (name, value)
        })
        .collect()
}

/// The field names of the request message of `rpc`, from the proto text.
fn request_fields(proto: &str, rpc: &str) -> Option<BTreeSet<String>> {
    let request = proto
        .split(&format!("rpc {rpc}("))
        .nth(1)?
        .split(')')
        .next()?
        .trim();
    let body = proto
        .split(&format!("message {request} {{"))
        .nth(1)?
        .split('}')
        .next()?;
    Some(
        body.lines()
            .map(|line| line.split("//").next().unwrap_or(""))
            .filter_map(|line| line.split_once('=').map(|(decl, _)| decl))
            .filter_map(|decl| decl.split_whitespace().last())
            .map(str::to_owned)
            .collect(),
    )
}

/// Every `{{...}}` action in a text, trimmed.
fn templates(text: &str) -> Vec<&str> {
    text.split("{{")
        .skip(1)
        .map(|rest| rest.split("}}").next().unwrap_or(rest).trim())
        .collect()
}

/// The problems of one recipe; `filled` is the number of customers the fill writes.
fn problems_of(name: &str, recipe: &Value, proto: &str, filled: u64) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(config) = recipe.as_object() else {
        return vec![format!("{name}: not a JSON object")];
    };
    for key in config.keys() {
        if !GHZ_CONFIG_KEYS.contains(&key.as_str()) {
            problems.push(format!("{name}: ghz has no setting {key:?}"));
        }
    }
    let call = recipe["call"].as_str().unwrap_or("");
    let fields = call
        .strip_prefix(&format!("{SERVICE}."))
        .and_then(|rpc| request_fields(proto, rpc));
    match fields {
        None => problems.push(format!("{name}: the proto has no call {call:?}")),
        Some(fields) => {
            for field in recipe["data"]
                .as_object()
                .into_iter()
                .flat_map(|d| d.keys())
            {
                if !fields.contains(field) {
                    problems.push(format!("{name}: {call} has no field {field:?}"));
                }
            }
        }
    }
    if let Some(outcome) = recipe["data"]["outcome"].as_str()
        && !proto.contains(&format!("  {outcome} = "))
    {
        problems.push(format!("{name}: the proto has no outcome {outcome}"));
    }
    if recipe["metadata"]["x-request-id"].as_str().is_none() {
        problems.push(format!("{name}: no x-request-id in the metadata"));
    }
    if recipe["rps"].is_u64() && !recipe["duration"].is_string() {
        problems.push(format!("{name}: a fixed rate needs a duration"));
    }
    for key in ["duration", "timeout"] {
        if let Some(duration) = recipe[key].as_str()
            && humantime::parse_duration(duration).is_err()
        {
            problems.push(format!("{name}: {key} {duration:?} is not a duration"));
        }
    }
    let text = serde_json::to_string(recipe).unwrap_or_default();
    for action in templates(&text) {
        let words: Vec<&str> = action.split_whitespace().collect();
        match words.as_slice() {
            [".RequestNumber"] | ["newUUID"] => {}
            ["randomInt", low, high] => match (low.parse::<u64>(), high.parse::<u64>()) {
                (Ok(low), Ok(high)) if low < high && high <= filled => {}
                _ => problems.push(format!(
                    "{name}: {{{{{action}}}}} is not a range within the {filled} filled customers"
                )),
            },
            _ => problems.push(format!("{name}: ghz has no template {{{{{action}}}}}")),
        }
    }
    problems
}

#[test]
fn every_recipe_is_a_ghz_config_for_a_real_call() {
    let proto = repo_file("proto/sticky_routing/v1/sticky_routing.proto");
    let recipes = recipes();
    let fill = recipes
        .iter()
        .find(|(name, _)| name == FILL)
        .map(|(_, recipe)| recipe)
        .expect("bench/ghz has the fill recipe");
    assert_eq!(fill["data"]["customer_id"], "cus_{{.RequestNumber}}");
    let filled = fill["total"].as_u64().expect("the fill has a total");
    let script = repo_file("scripts/loadtest.sh");
    let mut problems = Vec::new();
    for (name, recipe) in &recipes {
        problems.extend(problems_of(name, recipe, &proto, filled));
        if !script.contains(name.as_str()) {
            problems.push(format!("{name}: `make loadtest` does not run it"));
        }
    }
    assert!(recipes.len() >= 6, "recipes: {recipes:?}");
    assert!(
        problems.is_empty(),
        "bench/ghz:\n  {}",
        problems.join("\n  ")
    );
}

/// The checker catches each mistake it is there for.
#[test]
fn the_recipe_check_catches_typos_and_reads_past_the_fill() {
    let proto = repo_file("proto/sticky_routing/v1/sticky_routing.proto");
    let good = serde_json::json!({
        "call": "sticky_routing.v1.StickyRouting.GetPin",
        "rps": 100, "duration": "10s",
        "metadata": {"x-request-id": "{{newUUID}}"},
        "data": {"merchant_id": "m", "customer_id": "cus_{{randomInt 0 100}}"}
    });
    assert_eq!(
        problems_of("good", &good, &proto, 100),
        Vec::<String>::new()
    );
    for (change, complaint) in [
        (
            serde_json::json!({"concurency": 5}),
            "no setting \"concurency\"",
        ),
        (
            serde_json::json!({"call": "sticky_routing.v1.StickyRouting.GetPins"}),
            "no call",
        ),
        (
            serde_json::json!({"data": {"customer": "c"}}),
            "no field \"customer\"",
        ),
        (
            serde_json::json!({"data": {"outcome": "OUTCOME_SUCCES"}}),
            "no outcome",
        ),
        (
            serde_json::json!({"data": {"customer_id": "cus_{{randomInt 0 101}}"}}),
            "within the 100",
        ),
        (
            serde_json::json!({"data": {"customer_id": "{{randomNumber 1 2}}"}}),
            "no template",
        ),
        (
            serde_json::json!({"duration": "10 parsecs"}),
            "not a duration",
        ),
        (
            serde_json::json!({"metadata": {"request-id": "x"}}),
            "x-request-id",
        ),
    ] {
        let mut bad = good.clone();
        for (key, value) in change.as_object().unwrap() {
            match (bad[key].as_object_mut(), value.as_object()) {
                (Some(target), Some(fields)) if key == "data" => {
                    target.extend(fields.clone());
                }
                _ => bad[key] = value.clone(),
            }
        }
        let problems = problems_of("bad", &bad, &proto, 100);
        assert!(
            problems.iter().any(|p| p.contains(complaint)),
            "{change}: {problems:?}"
        );
    }
}
