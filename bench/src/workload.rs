//! What the generator sends: which call, for which tenant, merchant,
//! customer and combo. Customers are drawn with Zipf skew, as real traffic
//! has a few frequent buyers and a long tail.

use std::sync::atomic::{AtomicU64, Ordering};

use rand::Rng;
use rand::rngs::SmallRng;
use rand_distr::{Distribution, Zipf};
use serde::Serialize;
use sticky_routing::transport::pb::{GetPinRequest, Outcome, RecordOutcomeRequest};

use crate::BoxError;

/// The call to make, ghz's `--call` in short form.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CallKind {
    /// RecordOutcome.
    Record,
    /// GetPin.
    Pin,
    /// Both, GetPin with probability `--pin-ratio`.
    Mix,
}

/// The shape of the key space.
#[derive(Debug, Clone, Serialize)]
pub struct KeySpace {
    pub merchants: u64,
    pub customers: u64,
    /// Zipf exponent; 0 is uniform.
    pub zipf: f64,
    /// Distinct combos each customer uses. Above the service's cap (30 by
    /// default) every new combo prunes one.
    pub combos: u64,
}

/// The request mix.
#[derive(Debug, Clone, Serialize)]
pub struct Workload {
    pub call: CallKind,
    pub pin_ratio: f64,
    /// Share of RecordOutcome calls that report a gateway failure.
    pub failure_ratio: f64,
    /// Whether RecordOutcome calls carry an `attempt_id`, as orchestrators
    /// that retry send them.
    pub attempt_ids: bool,
    /// With attempt ids: the share of RecordOutcome calls that repeat an
    /// attempt (`retry-{customer}-{combo}`, so all but the first of them
    /// answer DUPLICATE while the customer remembers it); the rest carry a
    /// fresh random id.
    pub retry_ratio: f64,
    /// RecordOutcome calls name the connector GetPin pinned
    /// (`pin_connector`, its own connector), so the experiment counts them.
    pub pin_connector: bool,
    /// Tenants the merchants are spread over ([`tenant_of`]); 0 sends no
    /// `x-tenant-id`, so every call is the default tenant's.
    pub tenants: u64,
    pub keys: KeySpace,
}

/// One request, ready to send, with the tenant it is sent for
/// (`x-tenant-id`; `None` sends no header: the default tenant).
#[derive(Debug, Clone)]
pub enum Call {
    Record(RecordOutcomeRequest, Option<String>),
    Pin(GetPinRequest, Option<String>),
}

impl Call {
    pub fn name(&self) -> &'static str {
        match self {
            Call::Record(..) => "RecordOutcome",
            Call::Pin(..) => "GetPin",
        }
    }
}

/// Draws requests; one per worker, since it holds the sampler.
pub struct Generator {
    workload: Workload,
    customers: Customers,
    /// The merchants [`Generator::next`] has drawn, when asked to track them.
    seen: Option<MerchantSet>,
}

enum Customers {
    Uniform(u64),
    Zipf(Zipf<f64>),
}

impl Generator {
    pub fn new(workload: Workload) -> Result<Self, BoxError> {
        let keys = &workload.keys;
        if keys.merchants == 0 || keys.customers == 0 || keys.combos == 0 {
            return Err("merchants, customers and combos must be at least 1".into());
        }
        let customers = if keys.zipf == 0.0 {
            Customers::Uniform(keys.customers)
        } else {
            // Precision loss only above 2^53 customers.
            #[allow(clippy::cast_precision_loss)]
            let n = keys.customers as f64;
            Customers::Zipf(Zipf::new(n, keys.zipf).map_err(|e| format!("--zipf: {e}"))?)
        };
        Ok(Self {
            workload,
            customers,
            seen: None,
        })
    }

    /// The same generator, noting every merchant [`Generator::next`] draws
    /// (one atomic OR per call), for [`Generator::merchants_seen`].
    #[must_use]
    pub fn tracking_merchants(self) -> Self {
        let seen = Some(MerchantSet::new(self.workload.keys.merchants));
        Self { seen, ..self }
    }

    /// How many distinct merchants [`Generator::next`] has drawn so far;
    /// `None` unless made with [`Generator::tracking_merchants`].
    pub fn merchants_seen(&self) -> Option<u64> {
        self.seen.as_ref().map(MerchantSet::count)
    }

    /// The next request.
    pub fn next(&self, rng: &mut SmallRng) -> Call {
        let customer = self.customer(rng);
        if let Some(seen) = &self.seen {
            seen.insert(merchant_of(customer, self.workload.keys.merchants));
        }
        let combo = rng.random_range(0..self.workload.keys.combos);
        let pin = match self.workload.call {
            CallKind::Record => false,
            CallKind::Pin => true,
            CallKind::Mix => rng.random_bool(self.workload.pin_ratio),
        };
        let tenant = self.tenant(customer);
        if pin {
            Call::Pin(self.pin(customer, combo), tenant)
        } else {
            let failed = rng.random_bool(self.workload.failure_ratio);
            let mut record = self.record(customer, combo, failed);
            if self.workload.attempt_ids {
                record.attempt_id = if rng.random_bool(self.workload.retry_ratio) {
                    format!("retry-{customer}-{combo}")
                } else {
                    format!("a{:016x}", rng.random::<u64>())
                };
            }
            Call::Record(record, tenant)
        }
    }

    /// A success for one (customer, combo), for its tenant: used to fill
    /// the key space first.
    pub fn record_call(&self, customer: u64, combo: u64) -> Call {
        Call::Record(self.record(customer, combo, false), self.tenant(customer))
    }

    fn record(&self, customer: u64, combo: u64, failed: bool) -> RecordOutcomeRequest {
        let (method, method_type, connector) = combo_parts(combo);
        RecordOutcomeRequest {
            merchant_id: self.merchant_id(customer),
            customer_id: customer_id(customer),
            payment_method: method.into(),
            payment_method_type: method_type.into(),
            pin_connector: if self.workload.pin_connector {
                connector.clone()
            } else {
                String::new()
            },
            connector,
            outcome: if failed {
                Outcome::GatewayFailure
            } else {
                Outcome::Success
            } as i32,
            ..Default::default()
        }
    }

    fn pin(&self, customer: u64, combo: u64) -> GetPinRequest {
        let (method, method_type, _) = combo_parts(combo);
        GetPinRequest {
            merchant_id: self.merchant_id(customer),
            customer_id: customer_id(customer),
            payment_method: method.into(),
            payment_method_type: method_type.into(),
            ..Default::default()
        }
    }

    fn customer(&self, rng: &mut SmallRng) -> u64 {
        match &self.customers {
            Customers::Uniform(n) => rng.random_range(1..=*n),
            // Zipf samples are whole numbers in 1..=n, as floats.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Customers::Zipf(zipf) => zipf.sample(rng) as u64,
        }
    }

    fn merchant_id(&self, customer: u64) -> String {
        merchant_id(merchant_of(customer, self.workload.keys.merchants))
    }

    fn tenant(&self, customer: u64) -> Option<String> {
        let merchant = merchant_of(customer, self.workload.keys.merchants);
        tenant_of(merchant, self.workload.tenants)
    }

    pub fn keys(&self) -> &KeySpace {
        &self.workload.keys
    }
}

/// The merchant customer `n` belongs to: `n mod merchants`.
pub fn merchant_of(customer: u64, merchants: u64) -> u64 {
    customer % merchants.max(1)
}

/// Merchant `m`'s id.
pub fn merchant_id(merchant: u64) -> String {
    format!("merchant_{merchant:04}")
}

/// Merchant `m`'s tenant among `tenants`: `tenant_{m mod tenants}`, so
/// merchants spread evenly over them; `None` (the default tenant, no
/// header) when `tenants` is 0.
pub fn tenant_of(merchant: u64, tenants: u64) -> Option<String> {
    (tenants > 0).then(|| format!("tenant_{}", merchant % tenants))
}

/// The `STICKY_ROUTING_TENANTS` list that allows every tenant of
/// [`tenant_of`]: `tenant_0,tenant_1,…`.
pub fn tenant_list(tenants: u64) -> String {
    (0..tenants)
        .filter_map(|t| tenant_of(t, tenants))
        .collect::<Vec<_>>()
        .join(",")
}

/// A set of merchant indexes shared by the workers: one bit each.
struct MerchantSet(Vec<AtomicU64>);

impl MerchantSet {
    fn new(merchants: u64) -> Self {
        Self(
            (0..merchants.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        )
    }

    fn insert(&self, merchant: u64) {
        let word = usize::try_from(merchant / 64).unwrap_or(usize::MAX);
        if let Some(bits) = self.0.get(word) {
            bits.fetch_or(1 << (merchant % 64), Ordering::Relaxed);
        }
    }

    fn count(&self) -> u64 {
        self.0
            .iter()
            .map(|bits| u64::from(bits.load(Ordering::Relaxed).count_ones()))
            .sum()
    }
}

/// A customer id shaped like a real one (`cus_` and 16 more characters).
pub fn customer_id(customer: u64) -> String {
    format!("cus_{customer:016}")
}

/// Combo `n`: card or wallet, credit or debit, and the connector that
/// makes it distinct. GetPin for (method, type) then ranks several
/// connectors, as it does for a real customer.
pub fn combo_parts(combo: u64) -> (&'static str, &'static str, String) {
    let method = if combo % 4 < 2 { "card" } else { "wallet" };
    let method_type = if combo.is_multiple_of(2) {
        "credit"
    } else {
        "debit"
    };
    (method, method_type, format!("connector_{:02}", combo / 4))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn workload(call: CallKind, zipf: f64) -> Workload {
        Workload {
            call,
            pin_ratio: 0.5,
            failure_ratio: 0.0,
            attempt_ids: false,
            retry_ratio: 0.0,
            pin_connector: false,
            tenants: 0,
            keys: KeySpace {
                merchants: 3,
                customers: 100,
                zipf,
                combos: 8,
            },
        }
    }

    #[test]
    fn combos_are_distinct_fields() {
        let fields: std::collections::HashSet<_> = (0..64).map(combo_parts).collect();
        assert_eq!(fields.len(), 64);
    }

    #[test]
    fn zipf_customers_stay_in_range_and_favour_the_head() {
        let generator = Generator::new(workload(CallKind::Record, 1.1)).unwrap();
        let mut rng = SmallRng::seed_from_u64(7);
        let drawn: Vec<u64> = (0..10_000).map(|_| generator.customer(&mut rng)).collect();
        assert!(drawn.iter().all(|c| (1..=100).contains(c)));
        let head = drawn.iter().filter(|&&c| c == 1).count();
        let tail = drawn.iter().filter(|&&c| c == 100).count();
        assert!(head > 10 * tail.max(1), "head {head}, tail {tail}");
    }

    #[test]
    fn mix_sends_both_calls() {
        let generator = Generator::new(workload(CallKind::Mix, 0.0)).unwrap();
        let mut rng = SmallRng::seed_from_u64(7);
        let pins = (0..1000)
            .filter(|_| matches!(generator.next(&mut rng), Call::Pin(..)))
            .count();
        assert!((350..650).contains(&pins), "{pins} pins in 1000");
    }

    #[test]
    fn attempt_ids_are_fresh_except_for_retries() {
        let mut w = workload(CallKind::Record, 0.0);
        w.attempt_ids = true;
        w.retry_ratio = 0.25;
        let generator = Generator::new(w).unwrap();
        let mut rng = SmallRng::seed_from_u64(7);
        let ids: Vec<String> = (0..1000)
            .map(|_| match generator.next(&mut rng) {
                Call::Record(r, _) => r.attempt_id,
                Call::Pin(..) => unreachable!("record only"),
            })
            .collect();
        let retries = ids.iter().filter(|id| id.starts_with("retry-")).count();
        assert!((180..320).contains(&retries), "{retries} retries in 1000");
        let fresh: std::collections::HashSet<_> =
            ids.iter().filter(|id| id.starts_with('a')).collect();
        assert_eq!(fresh.len(), 1000 - retries, "fresh ids repeat");
    }

    #[test]
    fn merchants_spread_over_tenants_and_the_list_allows_them_all() {
        assert_eq!(tenant_of(7, 0), None);
        assert_eq!(tenant_of(7, 10).as_deref(), Some("tenant_7"));
        assert_eq!(tenant_of(99_999, 10).as_deref(), Some("tenant_9"));
        assert_eq!(tenant_list(3), "tenant_0,tenant_1,tenant_2");
        assert_eq!(tenant_list(0), "");
        let mut w = workload(CallKind::Record, 0.0);
        w.tenants = 2;
        w.pin_connector = true;
        let generator = Generator::new(w).unwrap();
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..100 {
            let Call::Record(record, tenant) = generator.next(&mut rng) else {
                unreachable!("record only")
            };
            let merchant: u64 = record.merchant_id["merchant_".len()..].parse().unwrap();
            assert_eq!(tenant, tenant_of(merchant, 2));
            assert_eq!(record.pin_connector, record.connector);
        }
        let Call::Record(plain, None) = Generator::new(workload(CallKind::Record, 0.0))
            .unwrap()
            .next(&mut rng)
        else {
            unreachable!("record only, no tenant")
        };
        assert_eq!(plain.pin_connector, "");
    }

    #[test]
    fn the_merchants_drawn_are_counted_once_each() {
        let mut w = workload(CallKind::Mix, 0.0);
        w.keys.merchants = 130;
        w.keys.customers = 1000;
        let untracked = Generator::new(w.clone()).unwrap();
        assert_eq!(untracked.merchants_seen(), None);
        let generator = Generator::new(w).unwrap().tracking_merchants();
        assert_eq!(generator.merchants_seen(), Some(0));
        let mut rng = SmallRng::seed_from_u64(7);
        let mut drawn = std::collections::HashSet::new();
        for _ in 0..200 {
            let merchant_id = match generator.next(&mut rng) {
                Call::Record(r, _) => r.merchant_id,
                Call::Pin(p, _) => p.merchant_id,
            };
            drawn.insert(merchant_id);
        }
        assert_eq!(generator.merchants_seen(), Some(drawn.len() as u64));
        assert!(drawn.len() > 64, "both words of the set are used");
    }

    #[test]
    fn an_empty_key_space_is_refused() {
        let mut w = workload(CallKind::Pin, 0.0);
        w.keys.customers = 0;
        assert!(Generator::new(w).is_err());
    }
}
