//! How logs look and where traces go: typed from `STICKY_ROUTING_LOG_FORMAT`,
//! declared here, and from the standard OpenTelemetry variables (`OTEL_*`).
//!
//! The OpenTelemetry SDK can read its variables itself, but it falls back
//! quietly on a bad value (a sampler it does not know becomes "always on").
//! An operator who sets `OTEL_TRACES_SAMPLER_ARG=10` meaning 10 % deserves
//! the same treatment as for any other setting: the process refuses to
//! start and names the variable. So the variables are checked here, once,
//! and the SDK is configured from the result.

use std::collections::HashMap;
use std::time::Duration;

use crate::declare::{About, Checker, Fallback, settings};

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// For people: one line per event, fields as `key=value`.
    #[default]
    Text,
    /// For log pipelines: one JSON object per line.
    Json,
}

impl LogFormat {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err(format!("expected `text` or `json`, got {text:?}")),
        }
    }
}

/// Which traces are kept, as `OTEL_TRACES_SAMPLER` names them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SamplerChoice {
    AlwaysOn,
    AlwaysOff,
    /// This share of traces, decided from the trace id.
    Ratio(f64),
    /// The caller's decision when it sent a `traceparent`, else the inner
    /// choice: what a service inside someone else's trace should do.
    ParentBased(ParentlessChoice),
}

/// What a parent-based sampler does for a call that starts a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParentlessChoice {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
}

/// The batch span processor's bounds (`OTEL_BSP_*`); `None` keeps the SDK's
/// default. `OTEL_BSP_EXPORT_TIMEOUT` and `OTEL_BSP_MAX_CONCURRENT_EXPORTS`
/// are not here: the SDK's processor, a thread of its own that exports one
/// batch at a time, has neither knob.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchSettings {
    pub max_queue_size: Option<usize>,
    pub schedule_delay: Option<Duration>,
    pub max_export_batch_size: Option<usize>,
}

/// Where and how spans are exported. It exists only when an OTLP endpoint
/// is set: without one there is no exporter and no span is even built.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// The collector's OTLP/gRPC address, such as `http://otel-collector:4317`.
    pub endpoint: String,
    /// `service.name` on every span.
    pub service_name: String,
    pub sampler: SamplerChoice,
    pub batch: BatchSettings,
}

/// Logs and traces together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TelemetrySettings {
    pub log_format: LogFormat,
    pub traces: Option<TraceSettings>,
}

settings! {
    pub TELEMETRY_SETTINGS;
    LOG_FORMAT: LogFormat = About::new("log_format", Fallback::Text("text"), "stderr log lines: `text` for people, `json` for\nlog pipelines (one object per line)"), LogFormat::parse;
}

impl TelemetrySettings {
    /// The log format, as declared above. The traces are read apart, from
    /// the `OTEL_*` variables ([`traces_from_env`]), which are not ours to
    /// declare.
    pub fn from_declared(c: &mut Checker) -> Option<Self> {
        Some(Self {
            log_format: c.value(&LOG_FORMAT)?,
            traces: None,
        })
    }
}

/// What `service.name` is when neither `OTEL_SERVICE_NAME` nor
/// `OTEL_RESOURCE_ATTRIBUTES` names the service.
pub const DEFAULT_SERVICE_NAME: &str = "sticky-routing";

/// The standard variables this service reads; `--help` and docs/operations.md (Traces) list
/// them.
pub const OTEL_VARIABLES: &[&str] = &[
    "OTEL_SDK_DISABLED",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
];

/// The trace settings from `env`; every bad variable is one problem, named.
pub fn traces_from_env(
    env: &HashMap<String, String>,
) -> Result<Option<TraceSettings>, Vec<String>> {
    let get = |name: &str| env.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
    let mut problems = Vec::new();
    // The signal's own endpoint wins over the general one, as the
    // OpenTelemetry specification says.
    let endpoint = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .into_iter()
    .find_map(|name| get(name).map(|value| (name, value)));
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(protocol) = get(name).filter(|p| *p != "grpc") {
            problems.push(format!(
                "{name}: only `grpc` (OTLP over gRPC) is supported, got {protocol:?}"
            ));
        }
    }
    let endpoint = match endpoint {
        None => None,
        Some((name, value)) => match check_endpoint(value) {
            Ok(()) => Some(value.to_owned()),
            Err(why) => {
                problems.push(format!("{name}: {why}"));
                None
            }
        },
    };
    let sampler = sampler(get("OTEL_TRACES_SAMPLER"), get("OTEL_TRACES_SAMPLER_ARG"))
        .map_err(|problem| problems.push(problem))
        .ok();
    let mut count = |name: &'static str| -> Option<usize> {
        let text = get(name)?;
        match text.parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                problems.push(format!(
                    "{name}: expected a whole number above 0, got {text:?}"
                ));
                None
            }
        }
    };
    let max_queue_size = count("OTEL_BSP_MAX_QUEUE_SIZE");
    let max_export_batch_size = count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE");
    // In milliseconds, as the specification gives it.
    let schedule_delay =
        count("OTEL_BSP_SCHEDULE_DELAY").map(|ms| Duration::from_millis(ms as u64));
    if let (Some(batch), Some(queue)) = (max_export_batch_size, max_queue_size)
        && batch > queue
    {
        problems.push(format!(
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE: {batch} is more than OTEL_BSP_MAX_QUEUE_SIZE ({queue})"
        ));
    }
    let disabled = match get("OTEL_SDK_DISABLED")
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            problems.push(format!(
                "OTEL_SDK_DISABLED: expected true or false, got {other:?}"
            ));
            false
        }
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    let Some(endpoint) = endpoint.filter(|_| !disabled) else {
        return Ok(None);
    };
    Ok(Some(TraceSettings {
        endpoint,
        service_name: service_name(get("OTEL_SERVICE_NAME"), get("OTEL_RESOURCE_ATTRIBUTES")),
        sampler: sampler.unwrap_or(SamplerChoice::ParentBased(ParentlessChoice::AlwaysOn)),
        batch: BatchSettings {
            max_queue_size,
            schedule_delay,
            max_export_batch_size,
        },
    }))
}

fn check_endpoint(value: &str) -> Result<(), String> {
    let uri: tonic::codegen::http::Uri = value
        .parse()
        .map_err(|e| format!("not a URL ({e}): {value:?}"))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(_)) => Ok(()),
        _ => Err(format!(
            "expected http://host:port or https://host:port, got {value:?}"
        )),
    }
}

fn sampler(name: Option<&str>, arg: Option<&str>) -> Result<SamplerChoice, String> {
    let ratio = || -> Result<f64, String> {
        let Some(text) = arg else {
            return Ok(1.0);
        };
        match text.parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
            _ => Err(format!(
                "OTEL_TRACES_SAMPLER_ARG: expected a share from 0 to 1 (0.1 keeps 10 % of traces), got {text:?}"
            )),
        }
    };
    Ok(match name.unwrap_or("parentbased_always_on") {
        "always_on" => SamplerChoice::AlwaysOn,
        "always_off" => SamplerChoice::AlwaysOff,
        "traceidratio" => SamplerChoice::Ratio(ratio()?),
        "parentbased_always_on" => SamplerChoice::ParentBased(ParentlessChoice::AlwaysOn),
        "parentbased_always_off" => SamplerChoice::ParentBased(ParentlessChoice::AlwaysOff),
        "parentbased_traceidratio" => SamplerChoice::ParentBased(ParentlessChoice::Ratio(ratio()?)),
        other => {
            return Err(format!(
                "OTEL_TRACES_SAMPLER: expected always_on, always_off, traceidratio, \
                 parentbased_always_on, parentbased_always_off or parentbased_traceidratio, \
                 got {other:?}"
            ));
        }
    })
}

/// `OTEL_SERVICE_NAME`, else `service.name` in `OTEL_RESOURCE_ATTRIBUTES`,
/// else [`DEFAULT_SERVICE_NAME`].
fn service_name(name: Option<&str>, resource_attributes: Option<&str>) -> String {
    let from_attributes = || {
        resource_attributes?.split(',').find_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            (key.trim() == "service.name" && !value.trim().is_empty()).then(|| value.trim())
        })
    };
    name.or_else(from_attributes)
        .unwrap_or(DEFAULT_SERVICE_NAME)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn no_endpoint_means_no_traces_even_with_other_variables() {
        let settings = traces_from_env(&env(&[
            ("OTEL_SERVICE_NAME", "x"),
            ("OTEL_TRACES_SAMPLER", "always_on"),
        ]));
        assert_eq!(settings, Ok(None));
    }

    #[test]
    fn the_sdk_can_be_disabled_with_an_endpoint_set() {
        let mut vars = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_SDK_DISABLED", "TRUE"),
        ]);
        assert_eq!(traces_from_env(&vars), Ok(None));
        vars.insert("OTEL_SDK_DISABLED".into(), "false".into());
        assert!(traces_from_env(&vars).unwrap().is_some());
        vars.insert("OTEL_SDK_DISABLED".into(), "yes".into());
        assert!(traces_from_env(&vars).unwrap_err()[0].starts_with("OTEL_SDK_DISABLED"));
    }

    #[test]
    fn an_endpoint_gives_the_contract_defaults() {
        let settings = traces_from_env(&env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")]))
            .unwrap()
            .unwrap();
        assert_eq!(settings.endpoint, "http://c:4317");
        assert_eq!(settings.service_name, DEFAULT_SERVICE_NAME);
        assert_eq!(
            settings.sampler,
            SamplerChoice::ParentBased(ParentlessChoice::AlwaysOn)
        );
        assert_eq!(settings.batch, BatchSettings::default());
    }

    #[test]
    fn the_traces_endpoint_wins_and_names_come_from_either_variable() {
        let settings = traces_from_env(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://general:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces:4317"),
            ("OTEL_RESOURCE_ATTRIBUTES", "team=pay,service.name=router"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.1"),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(settings.endpoint, "https://traces:4317");
        assert_eq!(settings.service_name, "router");
        assert_eq!(
            settings.sampler,
            SamplerChoice::ParentBased(ParentlessChoice::Ratio(0.1))
        );
        assert_eq!(
            settings.batch.schedule_delay,
            Some(Duration::from_millis(200))
        );
        let named = service_name(Some("own"), Some("service.name=router"));
        assert_eq!(named, "own");
    }

    #[test]
    fn every_bad_variable_is_named_at_once() {
        let problems = traces_from_env(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "10"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
        ]))
        .unwrap_err();
        let text = problems.join("\n");
        for name in [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_TRACES_SAMPLER_ARG",
            "OTEL_BSP_MAX_QUEUE_SIZE",
        ] {
            assert!(text.contains(name), "{name} not named in:\n{text}");
        }
        assert_eq!(problems.len(), 4, "{text}");
        let unknown = traces_from_env(&env(&[("OTEL_TRACES_SAMPLER", "xray")])).unwrap_err();
        assert!(
            unknown[0].starts_with("OTEL_TRACES_SAMPLER:"),
            "{unknown:?}"
        );
    }

    #[test]
    fn log_formats() {
        assert_eq!(LogFormat::parse("JSON"), Ok(LogFormat::Json));
        assert_eq!(LogFormat::parse("text"), Ok(LogFormat::Text));
        assert!(LogFormat::parse("logfmt").unwrap_err().contains("logfmt"));
    }
}
