//! Checks `deploy/monitoring/` against the metrics the service exports.
//!
//! Every PromQL expression in the Grafana dashboard (each panel's targets,
//! rows included, and the template variables) and in the alert rules is
//! read with a small PromQL scanner: each metric it names must be one of
//! [`EXPORTED_METRICS`] (a histogram through its `_bucket`, `_sum` or
//! `_count`), each label it filters or groups by must be one the metric
//! has, and each value it matches for `code`, `rpc`, `outcome`, `reason`,
//! `class`, `from`, `to`, `op` or `group` must be one the service writes. A renamed metric or a misspelt outcome
//! would otherwise show as an empty panel, or an alert that never fires,
//! at the moment someone needs it. No Redis and no server: files only.

use std::collections::BTreeSet;

use serde_json::Value;
use sticky_routing::telemetry::{
    EXPORTED_METRICS, PinOutcome, VETO_REASONS, WriteOutcome, canonical_name,
};

use crate::deploy_files::{deploy_setting, repo_file as read, repo_yaml as yaml};

/// The families among [`EXPORTED_METRICS`] that are histograms: they exist
/// only as `_bucket`, `_sum` and `_count` series.
const HISTOGRAMS: &[&str] = &[
    "sticky_routing_rpc_duration_seconds",
    "sticky_routing_redis_command_duration_seconds",
];

/// Labels that the scrape adds to every series (Prometheus Operator's
/// PodMonitor, or kubernetes_sd with the usual relabelling).
const TARGET_LABELS: &[&str] = &[
    "namespace",
    "pod",
    "job",
    "instance",
    "container",
    "endpoint",
];

/// The alerts README.md describes, which on-call relies on.
const REQUIRED_ALERTS: &[&str] = &[
    "StickyRoutingRedisUnreachable",
    "StickyRoutingErrorRatioHigh",
    "StickyRoutingLatencyHigh",
    "StickyRoutingMemoryGuardEngaged",
    "StickyRoutingAdmissionBudgetRefusalsHigh",
    "StickyRoutingShedding",
    "StickyRoutingBreakersOpen",
    "StickyRoutingBreakerIoFailing",
];

/// The circuit breaker's states, as `from` and `to` of its transitions.
const BREAKER_STATES: &[&str] = &["closed", "open", "half_open"];

/// The `op` of `sticky_routing_breaker_io_failures_total`: the breaker's
/// background flush, transition, index write and poll, and its two admin
/// RPCs' reads and writes.
const BREAKER_IO_OPS: &[&str] = &["flush", "transition", "index", "poll", "health", "override"];

/// The `op` of `sticky_routing_experiment_io_failures_total`: the
/// experiment's background flush, GetUplift's read, and the outcomes a full
/// tally could not count.
const EXPERIMENT_IO_OPS: &[&str] = &["flush", "read", "overflow"];

const SEVERITIES: &[&str] = &["critical", "warning", "info"];

/// Fewer panels with queries than this and the dashboard has lost most of
/// what it is for.
const MIN_QUERY_PANELS: usize = 20;

/// The labels each family has, besides [`TARGET_LABELS`] (and `le` on a
/// histogram's `_bucket`).
fn labels_of(family: &str) -> &'static [&'static str] {
    match family {
        "sticky_routing_build_info" => &["version"],
        "sticky_routing_rpc_duration_seconds" => &["rpc", "code"],
        "sticky_routing_pins_total" | "sticky_routing_writes_total" => &["outcome"],
        "sticky_routing_refused_calls_total" => &["reason", "class"],
        "sticky_routing_admission_refusals_total" => &["reason"],
        "sticky_routing_admission_memory_guard_engaged"
        | "sticky_routing_admission_memory_used_bytes"
        | "sticky_routing_admission_memory_limit_bytes"
        | "sticky_routing_redis_up" => &["node"],
        "sticky_routing_redis_command_duration_seconds"
        | "sticky_routing_background_shed_total" => &["command"],
        "sticky_routing_redis_errors_total" => &["kind"],
        "sticky_routing_noscript_fallbacks_total" => &["script"],
        "sticky_routing_breaker_transitions_total" => &["from", "to"],
        "sticky_routing_breaker_vetoes_total" => &["reason"],
        "sticky_routing_breaker_io_failures_total" => &["op"],
        "sticky_routing_experiment_outcomes_total" => &["group", "outcome"],
        "sticky_routing_experiment_io_failures_total" => &["op"],
        _ => &[],
    }
}

/// The values the service writes for a label, where the set is closed.
fn values_of(family: &str, label: &str) -> Option<Vec<&'static str>> {
    Some(match (family, label) {
        ("sticky_routing_rpc_duration_seconds", "code") => (0..=16)
            .map(|code| canonical_name(tonic::Code::from_i32(code)))
            .collect(),
        ("sticky_routing_rpc_duration_seconds", "rpc") => {
            vec![
                "GetPin",
                "RecordOutcome",
                "GetHabits",
                "ForgetCustomer",
                "GetConnectorHealth",
                "SetConnectorOverride",
                "GetUplift",
            ]
        }
        ("sticky_routing_pins_total", "outcome") => PinOutcome::ALL.map(PinOutcome::label).to_vec(),
        ("sticky_routing_writes_total", "outcome") => {
            WriteOutcome::ALL.map(WriteOutcome::label).to_vec()
        }
        ("sticky_routing_refused_calls_total", "reason") => {
            vec!["shed", "undecodable", "over_size"]
        }
        ("sticky_routing_refused_calls_total", "class") => {
            vec!["pin", "feedback", "admin", "low"]
        }
        ("sticky_routing_admission_refusals_total", "reason") => vec!["budget", "memory_guard"],
        ("sticky_routing_breaker_transitions_total", "from" | "to") => BREAKER_STATES.to_vec(),
        ("sticky_routing_breaker_vetoes_total", "reason") => {
            VETO_REASONS.map(|r| r.label()).to_vec()
        }
        ("sticky_routing_breaker_io_failures_total", "op") => BREAKER_IO_OPS.to_vec(),
        ("sticky_routing_experiment_outcomes_total", "group") => {
            vec!["treated", "holdout", "shadow"]
        }
        ("sticky_routing_experiment_outcomes_total", "outcome") => vec!["success", "failure"],
        ("sticky_routing_experiment_io_failures_total", "op") => EXPERIMENT_IO_OPS.to_vec(),
        _ => return None,
    })
}

// --- A PromQL scanner, just enough to find metrics, labels and values ---

/// PromQL's functions and aggregation operators: an identifier followed by
/// `(` must be one of these.
#[rustfmt::skip]
const FUNCTIONS: &[&str] = &[
    // Aggregation operators.
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
    // Functions.
    "abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max",
    "clamp_min", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta",
    "deriv", "double_exponential_smoothing", "exp", "floor", "histogram_avg",
    "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev",
    "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta", "increase",
    "info", "irate", "label_join", "label_replace", "ln", "log2", "log10", "minute", "month",
    "predict_linear", "rate", "resets", "round", "scalar", "sgn", "sort", "sort_desc",
    "sort_by_label", "sort_by_label_desc", "sqrt", "time", "timestamp", "vector", "year",
    "avg_over_time", "min_over_time", "max_over_time", "sum_over_time", "count_over_time",
    "quantile_over_time", "stddev_over_time", "stdvar_over_time", "last_over_time",
    "present_over_time", "mad_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "cos", "cosh", "sin", "sinh", "tan", "tanh", "deg", "rad", "pi",
    // `@ start()` and `@ end()`.
    "start", "end",
];

/// Keywords followed by a list of label names.
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Other keywords, and the number literals spelt as words.
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "offset", "bool", "atan2", "inf", "nan",
];

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Open,
    Close,
    OpenBrace,
    CloseBrace,
    Comma,
    Op(String),
    /// A number, a duration, a range or subquery `[...]`, or a Grafana
    /// variable (`$pod`, `${pod}`).
    Other,
}

fn tokens(expr: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let ident_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        match c {
            c if c.is_whitespace() => i += 1,
            '#' => {
                while chars.get(i).is_some_and(|&d| d != '\n') {
                    i += 1;
                }
            }
            '"' | '\'' | '`' => {
                let mut value = String::new();
                i += 1;
                loop {
                    let Some(&d) = chars.get(i) else {
                        return Err("an unterminated string".into());
                    };
                    i += 1;
                    if d == c {
                        break;
                    }
                    value.push(d);
                    if d == '\\'
                        && c != '`'
                        && let Some(&escaped) = chars.get(i)
                    {
                        value.push(escaped);
                        i += 1;
                    }
                }
                out.push(Token::Str(value));
            }
            '[' => {
                let Some(len) = chars[i..].iter().position(|&d| d == ']') else {
                    return Err("an unclosed `[`".into());
                };
                i += len + 1;
                out.push(Token::Other);
            }
            '$' => {
                i += 1;
                if chars.get(i) == Some(&'{') {
                    let Some(len) = chars[i..].iter().position(|&d| d == '}') else {
                        return Err("an unclosed `${`".into());
                    };
                    i += len + 1;
                } else {
                    while chars.get(i).is_some_and(|&d| ident_char(d)) {
                        i += 1;
                    }
                }
                out.push(Token::Other);
            }
            '(' | ')' | '{' | '}' | ',' => {
                out.push(match c {
                    '(' => Token::Open,
                    ')' => Token::Close,
                    '{' => Token::OpenBrace,
                    '}' => Token::CloseBrace,
                    _ => Token::Comma,
                });
                i += 1;
            }
            c if c.is_ascii_digit()
                || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                while chars
                    .get(i)
                    .is_some_and(|&d| d.is_ascii_alphanumeric() || d == '.' || d == '_')
                {
                    i += 1;
                }
                out.push(Token::Other);
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while chars.get(i).is_some_and(|&d| ident_char(d)) {
                    i += 1;
                }
                out.push(Token::Ident(chars[start..i].iter().collect()));
            }
            _ => {
                let start = i;
                while chars.get(i).is_some_and(|d| "=!~<>+-*/%^@".contains(*d)) {
                    i += 1;
                }
                if i == start {
                    return Err(format!("an unexpected `{c}`"));
                }
                out.push(Token::Op(chars[start..i].iter().collect()));
            }
        }
    }
    Ok(out)
}

/// `metric{label op "value", ...}`.
#[derive(Debug)]
struct Selector {
    metric: String,
    matchers: Vec<(String, String, String)>,
}

/// What one expression asks for.
#[derive(Debug, Default)]
struct Query {
    selectors: Vec<Selector>,
    /// Labels named in `by`, `without`, `on`, `ignoring`, `group_left` and
    /// `group_right`.
    grouping: Vec<String>,
}

fn parse(expr: &str) -> Result<Query, String> {
    let toks = tokens(expr)?;
    let mut query = Query::default();
    let mut i = 0;
    while let Some(token) = toks.get(i) {
        i += 1;
        match token {
            Token::Ident(word) => {
                let lower = word.to_ascii_lowercase();
                let next = toks.get(i);
                // `sum by (rpc) (...)`: an aggregation with its grouping first.
                let grouping_follows = matches!(next, Some(Token::Ident(k))
                    if k.eq_ignore_ascii_case("by") || k.eq_ignore_ascii_case("without"));
                if GROUPING.contains(&lower.as_str()) {
                    if next != Some(&Token::Open) {
                        continue; // group_left without labels
                    }
                    i += 1;
                    loop {
                        match toks.get(i) {
                            Some(Token::Ident(label)) => query.grouping.push(label.clone()),
                            Some(Token::Comma) => {}
                            Some(Token::Close) => break,
                            other => return Err(format!("{other:?} in `{word} (...)`")),
                        }
                        i += 1;
                    }
                    i += 1;
                } else if KEYWORDS.contains(&lower.as_str()) {
                    // `and`, `offset`, `bool`, ...: nothing to check.
                } else if next == Some(&Token::Open) || grouping_follows {
                    if !FUNCTIONS.contains(&lower.as_str()) {
                        return Err(format!("`{word}` is not a PromQL function"));
                    }
                } else {
                    let mut selector = Selector {
                        metric: word.clone(),
                        matchers: Vec::new(),
                    };
                    if next == Some(&Token::OpenBrace) {
                        i += 1;
                        loop {
                            match (toks.get(i), toks.get(i + 1), toks.get(i + 2)) {
                                (Some(Token::CloseBrace), ..) => break,
                                (Some(Token::Comma), ..) => i += 1,
                                (
                                    Some(Token::Ident(label)),
                                    Some(Token::Op(op)),
                                    Some(Token::Str(value)),
                                ) if ["=", "!=", "=~", "!~"].contains(&op.as_str()) => {
                                    selector.matchers.push((
                                        label.clone(),
                                        op.clone(),
                                        value.clone(),
                                    ));
                                    i += 3;
                                }
                                _ => {
                                    return Err(format!(
                                        "a label matcher of `{word}` that is not `label op \"value\"`"
                                    ));
                                }
                            }
                        }
                        i += 1;
                    }
                    query.selectors.push(selector);
                }
            }
            Token::OpenBrace => return Err("a selector without a metric name".into()),
            _ => {}
        }
    }
    Ok(query)
}

/// The exported family a series name belongs to.
fn family_of(name: &str) -> Result<&'static str, String> {
    if let Some(&family) = EXPORTED_METRICS.iter().find(|&&f| f == name) {
        if HISTOGRAMS.contains(&family) {
            return Err(format!(
                "`{name}` is a histogram, which has no series of its own: use `{name}_bucket`, `_sum` or `_count`"
            ));
        }
        return Ok(family);
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix)
            && let Some(&family) = HISTOGRAMS.iter().find(|&&h| h == base)
        {
            return Ok(family);
        }
    }
    Err(format!(
        "`{name}` is not a metric the service exports (sticky_routing::telemetry::EXPORTED_METRICS)"
    ))
}

fn is_known_label(label: &str) -> bool {
    label == "le"
        || TARGET_LABELS.contains(&label)
        || EXPORTED_METRICS
            .iter()
            .any(|family| labels_of(family).contains(&label))
}

/// Checks one expression; returns the families it uses, and pushes what is
/// wrong with it, each naming `place`.
fn check_expr(expr: &str, place: &str, problems: &mut Vec<String>) -> BTreeSet<&'static str> {
    let mut families = BTreeSet::new();
    let query = match parse(expr) {
        Ok(query) => query,
        Err(why) => {
            problems.push(format!("{place}: cannot read `{expr}`: {why}"));
            return families;
        }
    };
    if query.selectors.is_empty() {
        problems.push(format!("{place}: `{expr}` names no metric"));
    }
    for selector in &query.selectors {
        let family = match family_of(&selector.metric) {
            Ok(family) => family,
            Err(why) => {
                problems.push(format!("{place}: {why}"));
                continue;
            }
        };
        families.insert(family);
        for (label, op, value) in &selector.matchers {
            let le = label == "le" && selector.metric.ends_with("_bucket");
            if !(le
                || TARGET_LABELS.contains(&label.as_str())
                || labels_of(family).contains(&label.as_str()))
            {
                problems.push(format!(
                    "{place}: `{}` has no label `{label}` (it has {:?})",
                    selector.metric,
                    labels_of(family)
                ));
                continue;
            }
            let Some(known) = values_of(family, label) else {
                continue;
            };
            if value.contains('$') {
                continue; // a Grafana variable
            }
            let alternatives: Vec<&str> = if op.contains('~') {
                if value.contains(|c: char| ".*+?()[]{}\\^$".contains(c)) {
                    continue; // a real regular expression: not checked
                }
                value.split('|').collect()
            } else {
                vec![value.as_str()]
            };
            for alternative in alternatives {
                if !known.contains(&alternative) {
                    problems.push(format!(
                        "{place}: `{}{{{label}{op}\"{value}\"}}`: the service never writes {label}=\"{alternative}\" (it writes {known:?})",
                        selector.metric
                    ));
                }
            }
        }
    }
    for label in &query.grouping {
        if !is_known_label(label) {
            problems.push(format!(
                "{place}: groups by `{label}`, which no exported metric has"
            ));
        }
    }
    families
}

// --- The files ---

fn dashboard() -> Value {
    let relative = "deploy/monitoring/dashboard.json";
    serde_json::from_str(&read(relative)).unwrap_or_else(|e| panic!("{relative} is not JSON: {e}"))
}

/// Every panel, the ones inside rows (collapsed rows hold theirs) included.
fn all_panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(panels: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in panels.as_array().into_iter().flatten() {
            out.push(panel);
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    // The old layout, in case someone exports one.
    for row in dashboard["rows"].as_array().into_iter().flatten() {
        walk(&row["panels"], &mut out);
    }
    out
}

fn text<'a>(value: &'a Value, field: &str) -> &'a str {
    value[field].as_str().unwrap_or("")
}

fn fail_on(problems: &[String], what: &str) {
    assert!(problems.is_empty(), "{what}:\n  {}", problems.join("\n  "));
}

#[test]
fn the_dashboard_asks_only_for_exported_metrics_and_shows_them_all() {
    let dashboard = dashboard();
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    let mut query_panels = 0;
    let mut ids = BTreeSet::new();

    assert!(
        dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "schemaVersion {:?}: export it from a Grafana 10 or later",
        dashboard["schemaVersion"]
    );
    let variables = dashboard["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        variables.iter().any(|v| text(v, "name") == "datasource"
            && text(v, "type") == "datasource"
            && text(v, "query") == "prometheus"),
        "no `datasource` variable of Prometheus data sources: the dashboard would be tied to one"
    );
    for variable in variables.iter().filter(|v| text(v, "type") == "query") {
        let name = text(variable, "name");
        let place = format!("variable `{name}`");
        let query = variable["query"]
            .as_str()
            .or_else(|| variable["query"]["query"].as_str())
            .unwrap_or("");
        let Some(inner) = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
        else {
            problems.push(format!(
                "{place}: `{query}` is not label_values(metric, label)"
            ));
            continue;
        };
        let (expr, label) = inner.rsplit_once(',').unwrap_or(("", inner));
        if !is_known_label(label.trim()) {
            problems.push(format!(
                "{place}: no exported metric has a label `{}`",
                label.trim()
            ));
        }
        if !expr.is_empty() {
            used.extend(check_expr(expr, &place, &mut problems));
        }
    }

    for panel in all_panels(&dashboard) {
        let title = text(panel, "title");
        let id = &panel["id"];
        assert!(ids.insert(id.to_string()), "panel id {id} is used twice");
        if text(panel, "type") == "row" {
            continue;
        }
        let place = format!("panel {title:?} (id {id})");
        let uses_variable = |datasource: &Value| text(datasource, "uid") == "${datasource}";
        if !uses_variable(&panel["datasource"]) {
            problems.push(format!("{place}: its datasource is not ${{datasource}}"));
        }
        let targets = panel["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("{place}: no query"));
            continue;
        }
        query_panels += 1;
        for target in &targets {
            let place = format!("{place}, target {}", text(target, "refId"));
            if target.get("datasource").is_some() && !uses_variable(&target["datasource"]) {
                problems.push(format!("{place}: its datasource is not ${{datasource}}"));
            }
            let expr = text(target, "expr");
            if expr.trim().is_empty() {
                problems.push(format!("{place}: an empty expression"));
                continue;
            }
            used.extend(check_expr(expr, &place, &mut problems));
        }
    }
    fail_on(&problems, "deploy/monitoring/dashboard.json");

    assert!(
        query_panels >= MIN_QUERY_PANELS,
        "only {query_panels} panels with queries in the dashboard, expected at least {MIN_QUERY_PANELS}"
    );
    // Every family of the service's own, and the process' CPU and memory,
    // is on the dashboard: a new metric comes with its panel.
    let missing: Vec<_> = EXPORTED_METRICS
        .iter()
        .filter(|family| {
            family.starts_with("sticky_routing_")
                || ["process_cpu_seconds_total", "process_resident_memory_bytes"].contains(family)
        })
        .filter(|family| !used.contains(*family))
        .collect();
    assert!(missing.is_empty(), "no panel shows {missing:?}");
}

#[test]
fn the_alert_rules_ask_only_for_exported_metrics_and_say_what_to_do() {
    let relative = "deploy/monitoring/alerts.yaml";
    let rules = yaml(relative);
    assert_eq!(
        text(&rules, "apiVersion"),
        "monitoring.coreos.com/v1",
        "{relative}"
    );
    assert_eq!(text(&rules, "kind"), "PrometheusRule", "{relative}");
    let mut problems = Vec::new();
    let mut alerts = BTreeSet::new();
    for group in rules["spec"]["groups"].as_array().into_iter().flatten() {
        let group_name = text(group, "name");
        for rule in group["rules"].as_array().into_iter().flatten() {
            let name = if rule.get("alert").is_some() {
                text(rule, "alert")
            } else {
                text(rule, "record")
            };
            let place = format!("group {group_name:?}, rule {name:?}");
            let expr = text(rule, "expr");
            if expr.trim().is_empty() {
                problems.push(format!("{place}: no expr"));
                continue;
            }
            check_expr(expr, &place, &mut problems);
            if rule.get("alert").is_none() {
                continue;
            }
            if !alerts.insert(name.to_owned()) {
                problems.push(format!("{place}: a second alert of that name"));
            }
            if text(rule, "for").is_empty() {
                problems.push(format!(
                    "{place}: no `for`: it would fire on one bad scrape"
                ));
            }
            let severity = text(&rule["labels"], "severity");
            if !SEVERITIES.contains(&severity) {
                problems.push(format!(
                    "{place}: severity {severity:?}, not one of {SEVERITIES:?}"
                ));
            }
            for (annotation, at_least) in [("summary", 20), ("description", 200)] {
                if text(&rule["annotations"], annotation).len() < at_least {
                    problems.push(format!(
                        "{place}: the {annotation} should say, in {at_least} characters or more, what it means and what to check"
                    ));
                }
            }
            // A label the expression aggregates away renders as nothing.
            let grouping = parse(expr).map(|q| q.grouping).unwrap_or_default();
            if !grouping.is_empty() {
                for annotation in ["summary", "description"] {
                    let words = text(&rule["annotations"], annotation);
                    for label in words.split("$labels.").skip(1).map(|rest| {
                        rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                            .next()
                            .unwrap_or("")
                    }) {
                        if !grouping.iter().any(|g| g == label) {
                            problems.push(format!(
                                "{place}: its {annotation} shows $labels.{label}, which the expression aggregates away"
                            ));
                        }
                    }
                }
            }
        }
    }
    fail_on(&problems, relative);
    let missing: Vec<_> = REQUIRED_ALERTS
        .iter()
        .filter(|name| !alerts.contains(**name))
        .collect();
    assert!(missing.is_empty(), "{relative} has no alert {missing:?}");
}

#[test]
fn the_podmonitor_scrapes_the_metrics_port_of_the_deployments_pods() {
    let monitor = yaml("deploy/monitoring/podmonitor.yaml");
    let deployment = yaml("deploy/deployment.yaml");
    assert_eq!(text(&monitor, "apiVersion"), "monitoring.coreos.com/v1");
    assert_eq!(text(&monitor, "kind"), "PodMonitor");

    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("the PodMonitor selects by matchLabels");
    assert!(!selector.is_empty(), "the PodMonitor selects every pod");
    for (key, value) in selector {
        assert_eq!(
            &pod_labels[key], value,
            "the PodMonitor selects {key}={value}, which the Deployment's pods do not have"
        );
    }

    let metrics_port: u64 = deploy_setting("STICKY_ROUTING_METRICS_ADDR")
        .as_deref()
        .and_then(|addr| addr.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .expect("STICKY_ROUTING_METRICS_ADDR in deploy/config.env is host:port");
    let ports: Vec<&Value> = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|container| container["ports"].as_array().into_iter().flatten())
        .collect();
    let endpoints = monitor["spec"]["podMetricsEndpoints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!endpoints.is_empty(), "the PodMonitor scrapes nothing");
    for endpoint in &endpoints {
        let name = text(endpoint, "port");
        let port = ports
            .iter()
            .find(|port| text(port, "name") == name)
            .unwrap_or_else(|| panic!("the Deployment has no container port named {name:?}"));
        assert_eq!(
            port["containerPort"].as_u64(),
            Some(metrics_port),
            "port {name:?} is not STICKY_ROUTING_METRICS_ADDR's"
        );
        assert_eq!(text(endpoint, "path"), "/metrics");
    }
}

/// The checker itself: each kind of mistake it is there for is caught, and
/// a correct expression passes.
#[test]
fn the_checker_catches_misspelt_metrics_labels_and_values() {
    let problems_of = |expr: &str| {
        let mut problems = Vec::new();
        check_expr(expr, "here", &mut problems);
        problems
    };
    assert_eq!(
        problems_of(
            r#"histogram_quantile(0.99, sum by (rpc, le) (rate(sticky_routing_rpc_duration_seconds_bucket{pod=~"$pod", code!~"OK|INVALID_ARGUMENT"}[$__rate_interval]))) > 0.05 and on (namespace) sum(process_resident_memory_bytes) offset 5m"#
        ),
        Vec::<String>::new()
    );
    for (expr, complaint) in [
        (
            "rate(sticky_routing_pin_total[5m])",
            "`sticky_routing_pin_total` is not a metric",
        ),
        (
            "sum(rate(sticky_routing_rpc_duration_seconds[5m]))",
            "is a histogram",
        ),
        (
            "rate(sticky_routing_pins_total_count[5m])",
            "is not a metric",
        ),
        ("up == 0", "`up` is not a metric"),
        (
            "sum by (method) (rate(sticky_routing_pins_total[5m]))",
            "groups by `method`",
        ),
        (
            r#"sticky_routing_pins_total{reason="shed"}"#,
            "has no label `reason`",
        ),
        (
            r#"sticky_routing_pins_total{outcome="pined"}"#,
            "outcome=\"pined\"",
        ),
        (
            r#"sticky_routing_rpc_duration_seconds_count{code!~"OK|INVALID_ARGUMNT"}"#,
            "code=\"INVALID_ARGUMNT\"",
        ),
        (
            "rated(sticky_routing_pins_total[5m])",
            "not a PromQL function",
        ),
        (
            r#"{__name__="sticky_routing_pins_total"}"#,
            "without a metric name",
        ),
        ("vector(1)", "names no metric"),
        (
            r#"sticky_routing_breaker_transitions_total{to="opened"}"#,
            "to=\"opened\"",
        ),
        (
            r#"sum by (op) (rate(sticky_routing_breaker_io_failures_total{op="read"}[5m]))"#,
            "op=\"read\"",
        ),
        (
            r#"sticky_routing_breaker_vetoes_total{reason="circuit"}"#,
            "reason=\"circuit\"",
        ),
        (
            r#"sticky_routing_experiment_outcomes_total{group="control"}"#,
            "group=\"control\"",
        ),
        (
            r#"sticky_routing_experiment_outcomes_total{outcome="gateway_failure"}"#,
            "outcome=\"gateway_failure\"",
        ),
        (
            r#"sticky_routing_experiment_io_failures_total{op="poll"}"#,
            "op=\"poll\"",
        ),
    ] {
        let problems = problems_of(expr);
        assert!(
            problems.iter().any(|p| p.contains(complaint)),
            "`{expr}`: expected a complaint with {complaint:?}, got {problems:?}"
        );
    }
    for family in HISTOGRAMS {
        assert!(
            EXPORTED_METRICS.contains(family),
            "{family} is not exported"
        );
    }
}
