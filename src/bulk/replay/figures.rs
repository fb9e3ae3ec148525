//! What a replay reports: the counts it keeps per merchant ([`Tally`]),
//! the rates made of them ([`Figures`]), and the two ways of printing
//! them, a table a person reads and one JSON object for machines.

use serde::Serialize;

use crate::domain::tenant::Tenant;

/// The counts behind one merchant's figures (or every merchant's).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub attempts: u64,
    /// Attempts GetPin would have pinned.
    pub with_pin: u64,
    /// Of those, the attempts whose connector was the pin.
    pub followed: u64,
    pub successes: u64,
    pub followed_successes: u64,
    /// Successes of attempts with a pin that went elsewhere.
    pub elsewhere_successes: u64,
    pub no_pin_successes: u64,
    pub duplicates: u64,
    pub bad_rows: u64,
}

impl Tally {
    /// Counts one attempt: `followed` is `None` without a pin, else whether
    /// the attempt went to it.
    pub fn count(&mut self, followed: Option<bool>, success: bool) {
        let success = u64::from(success);
        self.attempts += 1;
        self.successes += success;
        match followed {
            None => self.no_pin_successes += success,
            Some(true) => {
                self.with_pin += 1;
                self.followed += 1;
                self.followed_successes += success;
            }
            Some(false) => {
                self.with_pin += 1;
                self.elsewhere_successes += success;
            }
        }
    }
}

/// One merchant's figures (or every merchant's), as `--json` prints them:
/// rates are fractions from 0 to 1, and 0 where undefined.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    /// The merchant's tenant, when it is not the default one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merchant_id: Option<String>,
    pub attempts: u64,
    pub with_pin: u64,
    pub followed: u64,
    pub coverage: f64,
    pub agreement: f64,
    pub sr_followed: f64,
    pub sr_not_followed: f64,
    pub sr_no_pin: f64,
    pub sr_observed: f64,
    pub sr_estimated: f64,
    pub duplicates: u64,
    pub bad_rows: u64,
}

/// `part ÷ whole`, 0 when `whole` is 0.
fn rate(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

impl Figures {
    pub fn of(merchant_id: Option<&str>, tally: &Tally) -> Self {
        let without_pin = tally.attempts - tally.with_pin;
        let sr_followed = rate(tally.followed_successes, tally.followed);
        let sr_no_pin = rate(tally.no_pin_successes, without_pin);
        // Had every attempt with a pin followed it: the pinned attempts at
        // the followed rate, the others at the rate without a pin.
        let sr_estimated = if tally.attempts == 0 {
            0.0
        } else {
            (sr_followed * tally.with_pin as f64 + sr_no_pin * without_pin as f64)
                / tally.attempts as f64
        };
        Self {
            tenant_id: None,
            merchant_id: merchant_id.map(str::to_owned),
            attempts: tally.attempts,
            with_pin: tally.with_pin,
            followed: tally.followed,
            coverage: rate(tally.with_pin, tally.attempts),
            agreement: rate(tally.followed, tally.with_pin),
            sr_followed,
            sr_not_followed: rate(tally.elsewhere_successes, tally.with_pin - tally.followed),
            sr_no_pin,
            sr_observed: rate(tally.successes, tally.attempts),
            sr_estimated,
            duplicates: tally.duplicates,
            bad_rows: tally.bad_rows,
        }
    }

    /// The same figures, of a merchant of `tenant`.
    pub fn in_tenant(self, tenant: &Tenant) -> Self {
        Self {
            tenant_id: tenant.id().map(str::to_owned),
            ..self
        }
    }

    /// The merchant as the table names it: `tenant/merchant` for a tenant
    /// other than the default; empty for every merchant together.
    pub fn name(&self) -> String {
        let merchant = self.merchant_id.as_deref().unwrap_or_default();
        match &self.tenant_id {
            Some(tenant) => format!("{tenant}/{merchant}"),
            None => merchant.to_owned(),
        }
    }
}

/// The whole report: every merchant together, and the top merchants.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub overall: Figures,
    pub merchants: Vec<Figures>,
}

/// Says what the figures are, under the table.
pub const CAVEAT: &str = "\
This is an observational estimate, not an experiment: customers who kept to one
connector may differ from the others in ways a replay cannot see. To measure the
uplift, turn sticky routing on with a holdout (STICKY_ROUTING_HOLDOUT) and read
`sticky-routing report`.";

const LEGEND: &str = "\
coverage: attempts that had a pin; agreement: of those, attempts that went to it.
success rates: of attempts that followed the pin, went elsewhere, or had no pin;
observed: of every attempt; estimated: had every attempt with a pin followed it.";

impl Report {
    /// The JSON object, on one line.
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The table a person reads; `source` names the history.
    pub fn text(&self, source: &str, customers: usize) -> String {
        let overall = &self.overall;
        let mut out = format!(
            "Replay of {source}: {} attempts, {} duplicates left out, {} bad rows; {customers} \
             customers with habits at the end.\n\n",
            overall.attempts, overall.duplicates, overall.bad_rows
        );
        let names: Vec<String> = self.merchants.iter().map(Figures::name).collect();
        let width = names
            .iter()
            .map(|name| name.chars().count())
            .chain([8])
            .max()
            .unwrap_or(8);
        out.push_str(&format!(
            "{:<width$}  {:>10}  {:>8}  {:>9}  {:>8}  {:>9}  {:>7}  {:>8}  {:>9}\n",
            "merchant",
            "attempts",
            "coverage",
            "agreement",
            "followed",
            "elsewhere",
            "no pin",
            "observed",
            "estimated"
        ));
        let row = |name: &str, f: &Figures| {
            format!(
                "{name:<width$}  {:>10}  {:>8}  {:>9}  {:>8}  {:>9}  {:>7}  {:>8}  {:>9}\n",
                f.attempts,
                percent(f.coverage),
                percent(f.agreement),
                percent(f.sr_followed),
                percent(f.sr_not_followed),
                percent(f.sr_no_pin),
                percent(f.sr_observed),
                percent(f.sr_estimated),
            )
        };
        out.push_str(&row("(all)", overall));
        for (name, merchant) in names.iter().zip(&self.merchants) {
            out.push_str(&row(name, merchant));
        }
        out.push('\n');
        out.push_str(LEGEND);
        out.push_str("\n\n");
        out.push_str(CAVEAT);
        out.push('\n');
        out
    }
}

fn percent(share: f64) -> String {
    format!("{:.1} %", share * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_follow_their_definitions_and_are_zero_when_undefined() {
        let mut tally = Tally::default();
        for (followed, success) in [
            (Some(true), true),
            (Some(true), true),
            (Some(true), false),
            (Some(false), false),
            (None, true),
            (None, false),
            (None, false),
            (None, false),
        ] {
            tally.count(followed, success);
        }
        let f = Figures::of(Some("m1"), &tally);
        assert_eq!((f.attempts, f.with_pin, f.followed), (8, 4, 3));
        assert_eq!(f.coverage, 0.5);
        assert_eq!(f.agreement, 0.75);
        assert_eq!(f.sr_followed, 2.0 / 3.0);
        assert_eq!(f.sr_not_followed, 0.0);
        assert_eq!(f.sr_no_pin, 0.25);
        assert_eq!(f.sr_observed, 3.0 / 8.0);
        assert_eq!(f.sr_estimated, (2.0 / 3.0 * 4.0 + 0.25 * 4.0) / 8.0);
        let empty = Figures::of(None, &Tally::default());
        assert_eq!(
            (
                empty.coverage,
                empty.agreement,
                empty.sr_followed,
                empty.sr_estimated
            ),
            (0.0, 0.0, 0.0, 0.0)
        );
    }

    #[test]
    fn the_json_has_the_contracts_names_and_no_merchant_id_overall() {
        let report = Report {
            overall: Figures::of(None, &Tally::default()),
            merchants: vec![Figures::of(Some("m1"), &Tally::default())],
        };
        let value: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
        let names = |v: &serde_json::Value| {
            let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            keys.sort();
            keys
        };
        let mut expected = vec![
            "attempts",
            "with_pin",
            "followed",
            "coverage",
            "agreement",
            "sr_followed",
            "sr_not_followed",
            "sr_no_pin",
            "sr_observed",
            "sr_estimated",
            "duplicates",
            "bad_rows",
        ];
        expected.sort();
        assert_eq!(names(&value["overall"]), expected);
        expected.push("merchant_id");
        expected.sort();
        assert_eq!(names(&value["merchants"][0]), expected);
        assert_eq!(value["merchants"][0]["merchant_id"], "m1");
    }

    #[test]
    fn a_tenants_merchant_says_its_tenant_and_the_defaults_does_not() {
        let acme = Tenant::parse("acme").unwrap();
        let report = Report {
            overall: Figures::of(None, &Tally::default()),
            merchants: vec![
                Figures::of(Some("m1"), &Tally::default()).in_tenant(&acme),
                Figures::of(Some("m1"), &Tally::default()).in_tenant(&Tenant::DEFAULT),
            ],
        };
        let value: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
        assert_eq!(value["merchants"][0]["tenant_id"], "acme");
        assert_eq!(value["merchants"][0]["merchant_id"], "m1");
        assert!(value["merchants"][1].get("tenant_id").is_none());
        assert!(value["overall"].get("tenant_id").is_none());
        let text = report.text("h.csv", 0);
        assert!(
            text.lines().any(|line| line.starts_with("acme/m1 ")),
            "{text}"
        );
        assert!(text.lines().any(|line| line.starts_with("m1 ")), "{text}");
    }

    #[test]
    fn the_table_says_it_is_an_estimate() {
        let report = Report {
            overall: Figures::of(None, &Tally::default()),
            merchants: Vec::new(),
        };
        let text = report.text("h.csv", 0);
        assert!(text.contains("observational estimate, not an experiment"));
        assert!(text.contains("STICKY_ROUTING_HOLDOUT"));
    }
}
