//! Tests of the layered settings: defaults, file, environment, credentials,
//! TLS files, and that every bad value is reported by name.

use std::collections::BTreeSet;

use super::*;
use crate::storage::{Secret, redact_url};

mod breaker;
mod documents;
mod rollout;
mod shares;

/// Writes a file under a per-process temporary folder.
fn temp_file(name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sticky-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn defaults_match_the_spec() {
    let s = Settings::defaults();
    assert_eq!(s.listen_addr, "0.0.0.0:50051".parse().unwrap());
    assert_eq!(s.metrics_addr, "0.0.0.0:9464".parse().unwrap());
    assert_eq!(s.redis.url.expose(), "redis://127.0.0.1:6379");
    assert_eq!(
        s.redis.pool_size,
        std::thread::available_parallelism().unwrap().get()
    );
    assert_eq!(s.rules.key_ttl, Duration::from_secs(90 * 86_400));
    assert_eq!(s.rules.admission_window, s.rules.key_ttl);
    assert_eq!(s.rules.max_combos_per_customer, 30);
    assert_eq!(s.rules.budgets.default, 1_000_000);
    assert_eq!(s.rules.min_pin_count, 1);
    assert_eq!(s.worker_threads, s.redis.pool_size);
}

#[test]
fn environment_values_are_typed() {
    let s = Settings::load(
        None,
        &env(&[
            ("STICKY_ROUTING_KEY_TTL", "12h"),
            ("STICKY_ROUTING_ADMISSION_WINDOW", "3600"),
            ("STICKY_ROUTING_MAX_CUSTOMERS", "7"),
            ("STICKY_ROUTING_MAX_CUSTOMERS_Merchant_1", "0"),
            ("STICKY_ROUTING_MIN_PIN_COUNT", "3"),
            ("STICKY_ROUTING_REDIS_POOL_SIZE", "4"),
            ("STICKY_ROUTING_WORKER_THREADS", "3"),
        ]),
    )
    .unwrap();
    assert_eq!(s.rules.key_ttl, Duration::from_secs(12 * 3600));
    assert_eq!(s.rules.admission_window, Duration::from_secs(3600));
    assert_eq!(s.rules.budgets.default, 7);
    assert_eq!(s.rules.budgets.overrides["Merchant_1"], 0);
    assert_eq!(s.rules.min_pin_count, 3);
    assert_eq!(s.redis.pool_size, 4);
    assert_eq!(s.worker_threads, 3);
}

#[test]
fn every_bad_value_is_reported_by_name_at_once() {
    let err = Settings::load(
        None,
        &env(&[
            ("STICKY_ROUTING_KEY_TTL", "soon"),
            ("STICKY_ROUTING_LISTEN_ADDR", "nowhere"),
            ("STICKY_ROUTING_MAX_COMBOS_PER_CUSTOMER", "0"),
            ("STICKY_ROUTING_MAX_CUSTOMERS_m1", "-1"),
            ("STICKY_ROUTING_REDIS_URL", "http://x"),
            ("STICKY_ROUTING_MIN_PIN_COUNT", "0"),
            ("STICKY_ROUTING_REDIS_TIMEOUT", "1000000d"),
        ]),
    )
    .unwrap_err();
    let text = err.to_string();
    for name in [
        "STICKY_ROUTING_REDIS_TIMEOUT",
        "STICKY_ROUTING_KEY_TTL",
        "STICKY_ROUTING_LISTEN_ADDR",
        "STICKY_ROUTING_MAX_COMBOS_PER_CUSTOMER",
        "STICKY_ROUTING_MAX_CUSTOMERS_m1",
        "STICKY_ROUTING_REDIS_URL",
        "STICKY_ROUTING_MIN_PIN_COUNT",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
    assert_eq!(err.problems.len(), 7, "{text}");
}

#[test]
fn the_redis_timeout_is_bounded_at_a_minute() {
    let timeout = |text: &str| {
        Settings::load(None, &env(&[("STICKY_ROUTING_REDIS_TIMEOUT", text)]))
            .map(|s| s.redis.command_timeout)
    };
    assert_eq!(timeout("60s").unwrap(), Duration::from_secs(60));
    assert!(timeout("61s").is_err());
    assert!(timeout("0").is_err());
}

#[test]
fn the_admission_memory_limit_takes_bytes_or_a_share_of_maxmemory() {
    use crate::domain::memory_guard::MemoryLimit;
    use crate::domain::percent::Percent;
    let limit = |text: &str| {
        Settings::load(
            None,
            &env(&[("STICKY_ROUTING_ADMISSION_MEMORY_LIMIT", text)]),
        )
        .map(|s| s.rules.admission_memory_limit)
    };
    assert_eq!(
        Settings::defaults().rules.admission_memory_limit,
        MemoryLimit::OfMaxmemory(Percent::new(80.0).unwrap())
    );
    assert_eq!(limit("2GiB").unwrap(), MemoryLimit::Bytes(2 << 30));
    assert_eq!(
        limit(" 12.5% ").unwrap(),
        MemoryLimit::OfMaxmemory(Percent::new(12.5).unwrap())
    );
    for bad in ["0%", "100.5%", "2 GB", "lots"] {
        let err = limit(bad).unwrap_err();
        assert_eq!(err.problems.len(), 1, "{err}");
        assert!(
            err.problems[0].starts_with("STICKY_ROUTING_ADMISSION_MEMORY_LIMIT: "),
            "{err}"
        );
    }
}

#[test]
fn the_file_sits_between_defaults_and_environment() {
    let path = temp_file(
        "layers.toml",
        "key_ttl = \"2d\"\nmax_combos_per_customer = 5\n[max_customers_overrides]\nBig_Merchant = 99\n",
    );
    let s = Settings::load(
        Some(&path),
        &env(&[("STICKY_ROUTING_MAX_COMBOS_PER_CUSTOMER", "6")]),
    )
    .unwrap();
    assert_eq!(s.rules.key_ttl, Duration::from_secs(2 * 86_400));
    assert_eq!(s.rules.max_combos_per_customer, 6);
    assert_eq!(s.rules.budgets.overrides["Big_Merchant"], 99);
    let via_env = Settings::load(None, &env(&[(CONFIG_FILE_VAR, path.to_str().unwrap())])).unwrap();
    assert_eq!(via_env.rules.max_combos_per_customer, 5);
}

#[test]
fn the_command_line_takes_a_config_file_help_and_version() {
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(
        matches!(parse_command_line(&args(&["--help"]), &env(&[])), Ok(CommandLine::Exit(t)) if t.contains("STICKY_ROUTING_KEY_TTL"))
    );
    assert!(matches!(
        parse_command_line(&args(&[]), &env(&[])),
        Ok(CommandLine::Run(_))
    ));
    let err =
        parse_command_line(&args(&["--config", "/nonexistent/x.toml"]), &env(&[])).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/x.toml"), "{err}");
    assert!(parse_command_line(&args(&["--bogus"]), &env(&[])).is_err());
}

#[test]
fn help_names_the_secret_settings_but_never_their_values() {
    let secrets = env(&[
        ("STICKY_ROUTING_REDIS_PASSWORD", "hunter2"),
        ("STICKY_ROUTING_REDIS_URL", "redis://u:s3cret@h:6379"),
    ]);
    let Ok(CommandLine::Exit(help)) = parse_command_line(&["--help".to_owned()], &secrets) else {
        panic!("--help does not print help");
    };
    assert!(
        help.contains("STICKY_ROUTING_REDIS_PASSWORD[_FILE]"),
        "{help}"
    );
    assert!(
        !help.contains("hunter2") && !help.contains("s3cret"),
        "{help}"
    );
}

#[test]
fn unknown_variables_are_found_and_known_ones_are_not() {
    let names = [
        "STICKY_ROUTING_KEY_TLL",
        "STICKY_ROUTING_KEY_TTL",
        "STICKY_ROUTING_CONFIG",
        "STICKY_ROUTING_MAX_CUSTOMERS_m1",
        "PATH",
    ];
    assert_eq!(unknown_variables(names), ["STICKY_ROUTING_KEY_TLL"]);
}

#[test]
fn file_keys_may_take_the_variable_names_and_keep_merchant_case() {
    let path = temp_file(
        "env-style.toml",
        "STICKY_ROUTING_KEY_TTL = \"3h\"\nMAX_COMBOS_PER_CUSTOMER = 4\nSTICKY_ROUTING_MAX_CUSTOMERS_Shop_A = 7\n",
    );
    let s = Settings::load(Some(&path), &env(&[])).unwrap();
    assert_eq!(s.rules.key_ttl, Duration::from_secs(3 * 3600));
    assert_eq!(s.rules.max_combos_per_customer, 4);
    assert_eq!(s.rules.budgets.overrides["Shop_A"], 7);
}

#[test]
fn unknown_file_keys_and_bad_file_values_are_reported_with_the_file() {
    let path = temp_file("typo.toml", "key_tll = \"3h\"\nkey_ttl = \"soon\"\n");
    let text = Settings::load(Some(&path), &env(&[]))
        .unwrap_err()
        .to_string();
    assert!(text.contains("unknown setting `key_tll`"), "{text}");
    assert!(
        text.contains("STICKY_ROUTING_KEY_TTL (key_ttl in"),
        "{text}"
    );
}

#[test]
fn every_url_form_fred_takes_is_accepted() {
    for url in [
        "redis://127.0.0.1:6379/0",
        "rediss://redis.internal:6380",
        "redis-cluster://10.0.0.1:7000?node=10.0.0.2:7000&node=10.0.0.3:7000",
        "rediss-cluster://10.0.0.1:7000",
        "redis-sentinel://10.0.0.1:26379?sentinelServiceName=sticky&node=10.0.0.2:26379",
        "rediss-sentinel://10.0.0.1:26379/0?sentinelServiceName=sticky",
        "redis+unix:///run/redis/redis.sock",
        "valkey://127.0.0.1:6379",
    ] {
        let loaded = Settings::load(None, &env(&[("STICKY_ROUTING_REDIS_URL", url)]));
        assert!(loaded.is_ok(), "{url}: {loaded:?}");
    }
    let no_service = Settings::load(
        None,
        &env(&[("STICKY_ROUTING_REDIS_URL", "redis-sentinel://h:26379")]),
    );
    assert!(no_service.is_err(), "sentinel without a service name");
}

#[test]
fn credentials_come_from_variables_or_files() {
    let password = temp_file("password", "s3cret\n");
    let username = temp_file("username", "sticky\n");
    let s = Settings::load(
        None,
        &env(&[
            (
                "STICKY_ROUTING_REDIS_USERNAME_FILE",
                username.to_str().unwrap(),
            ),
            (
                "STICKY_ROUTING_REDIS_PASSWORD_FILE",
                password.to_str().unwrap(),
            ),
        ]),
    )
    .unwrap();
    assert_eq!(s.redis.username.as_deref(), Some("sticky"));
    assert_eq!(s.redis.password, Some(Secret::new("s3cret")));
    assert!(!format!("{s:?}").contains("s3cret"));
    let direct = Settings::load(None, &env(&[("STICKY_ROUTING_REDIS_PASSWORD", "pw")])).unwrap();
    assert_eq!(direct.redis.password.unwrap().expose(), "pw");
}

#[test]
fn credentials_given_twice_are_an_error_naming_both() {
    let password = temp_file("password2", "pw");
    let text = Settings::load(
        None,
        &env(&[
            ("STICKY_ROUTING_REDIS_PASSWORD", "a"),
            (
                "STICKY_ROUTING_REDIS_PASSWORD_FILE",
                password.to_str().unwrap(),
            ),
            ("STICKY_ROUTING_REDIS_USERNAME_FILE", "/nonexistent/user"),
        ]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        text.contains("STICKY_ROUTING_REDIS_PASSWORD and STICKY_ROUTING_REDIS_PASSWORD_FILE"),
        "{text}"
    );
    assert!(
        text.contains("STICKY_ROUTING_REDIS_USERNAME_FILE: cannot read /nonexistent/user"),
        "{text}"
    );
    let in_url = Settings::load(
        None,
        &env(&[
            ("STICKY_ROUTING_REDIS_URL", "redis://:hunter2@h:6379"),
            ("STICKY_ROUTING_REDIS_PASSWORD", "other"),
        ]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        in_url.contains("STICKY_ROUTING_REDIS_PASSWORD: STICKY_ROUTING_REDIS_URL holds one too"),
        "{in_url}"
    );
    assert!(
        !in_url.contains("hunter2") && !in_url.contains("other"),
        "{in_url}"
    );
}

#[test]
fn tls_files_need_a_tls_url_and_each_other() {
    let plain = Settings::load(
        None,
        &env(&[("STICKY_ROUTING_REDIS_TLS_CA_FILE", "/nonexistent/ca.pem")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        plain.contains(
            "STICKY_ROUTING_REDIS_TLS_CA_FILE: set, but STICKY_ROUTING_REDIS_URL does not use TLS"
        ),
        "{plain}"
    );
    let half = Settings::load(
        None,
        &env(&[
            ("STICKY_ROUTING_REDIS_URL", "rediss://h:6380"),
            ("STICKY_ROUTING_REDIS_TLS_CERT_FILE", "/nonexistent/c.pem"),
        ]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        half.contains(
            "STICKY_ROUTING_REDIS_TLS_CERT_FILE: needs STICKY_ROUTING_REDIS_TLS_KEY_FILE"
        ),
        "{half}"
    );
    let missing = Settings::load(
        None,
        &env(&[
            ("STICKY_ROUTING_REDIS_URL", "rediss://h:6380"),
            ("STICKY_ROUTING_REDIS_TLS_CA_FILE", "/nonexistent/ca.pem"),
        ]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        missing.contains("STICKY_ROUTING_REDIS_TLS_CA_FILE: /nonexistent/ca.pem"),
        "{missing}"
    );
}

#[test]
fn passwords_are_redacted() {
    assert_eq!(
        redact_url("redis://u:hunter2@h:6379"),
        "redis://u:***@h:6379"
    );
    assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
    assert_eq!(
        redact_url("redis-sentinel://u:pw@h:26379?sentinelServiceName=m&sentinelPassword=s2"),
        "redis-sentinel://u:***@h:26379?sentinelServiceName=m&sentinelPassword=***"
    );
    let s = Settings::load(
        None,
        &env(&[("STICKY_ROUTING_REDIS_URL", "redis://:hunter2@h:1")]),
    )
    .unwrap();
    assert!(!format!("{s:?}").contains("hunter2"));
}

/// Every `STICKY_ROUTING_*` name in `text`, as the service reads it: a
/// setting's key, a `_FILE` form, or a per-merchant family. `NAME[_FILE]`
/// (as `--help` writes it) names both forms.
fn settings_named_in(text: &str) -> Result<BTreeSet<String>, String> {
    let mut named = BTreeSet::new();
    for (at, _) in text.match_indices(ENV_PREFIX) {
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "_{}".contains(*c))
            .collect();
        if name == CONFIG_FILE_VAR {
            continue;
        }
        if text[at + name.len()..].starts_with("[_FILE]") {
            named.extend(settings_named_in(&format!("{name}_FILE"))?);
        }
        match sources::setting_named(&name) {
            Some(sources::Named::Setting(key)) => named.insert(key.to_owned()),
            Some(sources::Named::File(key)) => named.insert(format!("{key}_file")),
            Some(sources::Named::Member { family, .. }) => named.insert(family.to_owned()),
            None => return Err(format!("{name} is not a setting")),
        };
    }
    Ok(named)
}

/// What the declarations say a document must name.
fn declared_settings() -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for about in declarations::all() {
        keys.insert(about.key.to_owned());
        if about.or_file {
            keys.insert(format!("{}_file", about.key));
        }
    }
    keys
}

fn read_doc(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

#[test]
fn the_readme_table_names_exactly_the_declared_settings() {
    let readme = read_doc("README.md");
    let section = readme
        .split("\n## ")
        .find(|section| section.starts_with("Configuration"))
        .expect("the README has a Configuration section");
    let table: String = section
        .lines()
        .filter(|line| line.starts_with('|'))
        .map(|line| format!("{line}\n"))
        .collect();
    assert_eq!(settings_named_in(&table), Ok(declared_settings()));
}

/// Only `NAME=value` lines count, set or as a commented-out example
/// (`# NAME=value`): a name merely mentioned in a comment's prose does not
/// show an operator how to set it.
#[test]
fn the_deploy_settings_name_exactly_the_declared_settings() {
    let settings = read_doc("deploy/config.env");
    let assignments: String = settings
        .lines()
        .map(|line| line.strip_prefix("# ").unwrap_or(line))
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .filter(|name| !name.contains(char::is_whitespace))
        .map(|name| format!("{name}\n"))
        .collect();
    assert_eq!(settings_named_in(&assignments), Ok(declared_settings()));
}

#[test]
fn help_lists_every_declared_setting() {
    let Ok(CommandLine::Exit(help)) = parse_command_line(&["--help".to_owned()], &env(&[])) else {
        panic!("--help does not print help");
    };
    assert_eq!(settings_named_in(&help), Ok(declared_settings()));
}

#[test]
fn a_per_merchant_budget_must_name_a_valid_merchant_id() {
    let long = format!("STICKY_ROUTING_MAX_CUSTOMERS_{}", "m".repeat(200));
    let err = Settings::load(
        None,
        &env(&[
            (long.as_str(), "5"),
            ("STICKY_ROUTING_MAX_CUSTOMERS_ok", "6"),
        ]),
    )
    .unwrap_err();
    assert_eq!(err.problems.len(), 1, "{err}");
    assert!(err.problems[0].contains(&long), "{err}");
    assert!(err.problems[0].contains("128 bytes"), "{err}");
}

#[test]
fn a_failed_check_always_says_why() {
    assert_eq!(ConfigError::new(Vec::new()).problems.len(), 1);
    let one = ConfigError::new(vec!["STICKY_ROUTING_KEY_TTL: bad".into()]);
    assert_eq!(one.problems, ["STICKY_ROUTING_KEY_TTL: bad"]);
}

#[test]
fn the_tenants_list_is_read_and_a_bad_entry_is_reported_by_name() {
    use crate::domain::tenant::{Tenant, TenantAllowlist};
    assert_eq!(
        Settings::load(None, &env(&[])).unwrap().tenants,
        TenantAllowlist::ANY
    );
    let settings =
        Settings::load(None, &env(&[("STICKY_ROUTING_TENANTS", " acme, ,Globex ")])).unwrap();
    assert!(settings.tenants.allows(&Tenant::parse("Globex").unwrap()));
    assert!(!settings.tenants.allows(&Tenant::parse("globex").unwrap()));
    let err = Settings::load(None, &env(&[("STICKY_ROUTING_TENANTS", "acme,a.b")])).unwrap_err();
    assert_eq!(err.problems.len(), 1, "{err}");
    assert!(err.problems[0].contains("STICKY_ROUTING_TENANTS"), "{err}");
    assert!(err.problems[0].contains("`a.b`"), "{err}");
}
