//! Structure-aware inputs: request messages whose fields are mostly
//! plausible, so that most calls get past decoding into validation and key
//! encoding, with the edge cases of each rule mixed in; and the answer the
//! store would give, since Redis hands back bytes too.

use std::collections::HashMap;

use prost::Message as _;

use super::rng::Rng;
use crate::breaker::ConnectorHealthRow;
use crate::domain::admission::AdmissionRefusal;
use crate::domain::breaker::{BreakerState, Counts, Override, OverrideUntil, VetoReason};
use crate::domain::counts::Recorded;
use crate::domain::rollout::Mode;
use crate::transport::pb;

/// The seven RPCs of the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rpc {
    RecordOutcome,
    GetPin,
    GetHabits,
    ForgetCustomer,
    GetConnectorHealth,
    SetConnectorOverride,
    GetUplift,
}

impl Rpc {
    pub const ALL: [Rpc; 7] = [
        Rpc::RecordOutcome,
        Rpc::GetPin,
        Rpc::GetHabits,
        Rpc::ForgetCustomer,
        Rpc::GetConnectorHealth,
        Rpc::SetConnectorOverride,
        Rpc::GetUplift,
    ];

    pub fn path(self) -> &'static str {
        match self {
            Rpc::RecordOutcome => "/sticky_routing.v1.StickyRouting/RecordOutcome",
            Rpc::GetPin => "/sticky_routing.v1.StickyRouting/GetPin",
            Rpc::GetHabits => "/sticky_routing.v1.StickyRouting/GetHabits",
            Rpc::ForgetCustomer => "/sticky_routing.v1.StickyRouting/ForgetCustomer",
            Rpc::GetConnectorHealth => "/sticky_routing.v1.StickyRouting/GetConnectorHealth",
            Rpc::SetConnectorOverride => "/sticky_routing.v1.StickyRouting/SetConnectorOverride",
            Rpc::GetUplift => "/sticky_routing.v1.StickyRouting/GetUplift",
        }
    }

    /// The circuit breaker's admin RPCs, which a server with the breaker
    /// off answers `FAILED_PRECONDITION`.
    pub fn needs_breaker(self) -> bool {
        matches!(self, Rpc::GetConnectorHealth | Rpc::SetConnectorOverride)
    }
}

/// One request message of any RPC.
#[derive(Debug, Clone)]
pub enum Request {
    Record(pb::RecordOutcomeRequest),
    Pin(pb::GetPinRequest),
    Habits(pb::GetHabitsRequest),
    Forget(pb::ForgetCustomerRequest),
    Health(pb::GetConnectorHealthRequest),
    Override(pb::SetConnectorOverrideRequest),
    Uplift(pb::GetUpliftRequest),
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Request::Record(m) => m.encode_to_vec(),
            Request::Pin(m) => m.encode_to_vec(),
            Request::Habits(m) => m.encode_to_vec(),
            Request::Forget(m) => m.encode_to_vec(),
            Request::Health(m) => m.encode_to_vec(),
            Request::Override(m) => m.encode_to_vec(),
            Request::Uplift(m) => m.encode_to_vec(),
        }
    }

    /// The payment method and type, as a stored field would start.
    fn method_prefix(&self) -> Option<String> {
        let (method, method_type) = match self {
            Request::Record(m) => (&m.payment_method, &m.payment_method_type),
            Request::Pin(m) => (&m.payment_method, &m.payment_method_type),
            _ => return None,
        };
        Some(format!(
            "{}:{}:",
            method.trim_ascii().to_uppercase(),
            method_type.trim_ascii().to_uppercase()
        ))
    }
}

/// A failure of the store that the backend reports instead of an answer:
/// the ones that are not `INTERNAL`. A foreign value in Redis is
/// `INTERNAL` by design (docs/contract.md, "Answer codes"), and is not the caller's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreFailure {
    Unavailable,
    MaybeApplied,
    DeadlineExceeded,
}

/// What the store answers the call, carried to the backend in the request.
#[derive(Debug, Clone)]
pub struct StoreAnswer {
    /// The customer's hash as `fields_of` hands it over: any UTF-8 field,
    /// any integer count.
    pub fields: Vec<(String, i64)>,
    pub ttl: i64,
    pub recorded: Recorded,
    pub existed: bool,
    pub min_pin_count: i64,
    pub failure: Option<StoreFailure>,
    /// The server runs with `STICKY_ROUTING_BREAKER=off`.
    pub breaker_off: bool,
    /// The breakers' vetoes GetPin meets, by connector.
    pub breaker_vetoes: HashMap<String, VetoReason>,
    /// What the breakers answer GetConnectorHealth: any counts and times,
    /// in bytewise connector order as storage reads them.
    pub health: Vec<ConnectorHealthRow>,
    /// The merchant's mode: in `Off` GetPin reads nothing, so the store's
    /// failure never reaches it.
    pub mode: Mode,
    /// Whether the customer is in the holdout (counts in mode `On` only).
    pub held_out: bool,
}

impl StoreAnswer {
    /// Whether a call of `rpc` meets the store's failure: every call that
    /// reads or writes Redis, which GetPin in mode off does not.
    pub fn fails(&self, rpc: Rpc) -> Option<StoreFailure> {
        match rpc {
            Rpc::GetPin if self.mode == Mode::Off => None,
            _ => self.failure,
        }
    }
}

/// A request of `rpc` with plausible fields, and now and then bad ones:
/// half the requests are all plausible, the rest spoil each field once in
/// 2, 4 or 8, so that every rule is hit alone and with others.
pub fn request(rng: &mut Rng, rpc: Rpc) -> Request {
    let spoil = *rng.pick(&[0, 0, 0, 2, 4, 8]);
    let g = &mut Gen { rng, spoil };
    match rpc {
        Rpc::RecordOutcome => Request::Record(pb::RecordOutcomeRequest {
            merchant_id: g.id(MERCHANTS),
            customer_id: g.id(CUSTOMERS),
            payment_method: g.id(METHODS),
            payment_method_type: g.id(METHOD_TYPES),
            connector: g.id(CONNECTORS),
            outcome: g.outcome(),
            attempt_id: if g.rng.one_in(2) {
                String::new()
            } else {
                g.id(ATTEMPTS)
            },
            pin_connector: if g.rng.one_in(2) {
                String::new()
            } else {
                g.id(CONNECTORS)
            },
        }),
        Rpc::GetPin => Request::Pin(pb::GetPinRequest {
            merchant_id: g.id(MERCHANTS),
            customer_id: g.id(CUSTOMERS),
            payment_method: g.id(METHODS),
            payment_method_type: g.id(METHOD_TYPES),
            eligible_connectors: (0..g.count()).map(|_| g.id(CONNECTORS)).collect(),
            connector_scores: (0..g.count())
                .map(|_| (g.id(CONNECTORS), g.score()))
                .collect(),
            min_score_ratio: (!g.rng.one_in(2)).then(|| g.score()),
        }),
        Rpc::GetHabits => Request::Habits(pb::GetHabitsRequest {
            merchant_id: g.id(MERCHANTS),
            customer_id: g.id(CUSTOMERS),
        }),
        Rpc::ForgetCustomer => Request::Forget(pb::ForgetCustomerRequest {
            merchant_id: g.id(MERCHANTS),
            customer_id: g.id(CUSTOMERS),
        }),
        Rpc::GetConnectorHealth => Request::Health(pb::GetConnectorHealthRequest {
            merchant_id: g.id(MERCHANTS),
        }),
        Rpc::SetConnectorOverride => Request::Override(pb::SetConnectorOverrideRequest {
            merchant_id: g.id(MERCHANTS),
            connector: g.id(CONNECTORS),
            r#override: g.override_kind(),
            ttl_seconds: g.ttl(),
        }),
        Rpc::GetUplift => Request::Uplift(pb::GetUpliftRequest {
            merchant_id: g.id(MERCHANTS),
            days: g.days(),
        }),
    }
}

/// Field values: plausible ones, spoiled once in `spoil` (never when 0).
struct Gen<'r> {
    rng: &'r mut Rng,
    spoil: usize,
}

impl Gen<'_> {
    fn spoils(&mut self) -> bool {
        self.spoil != 0 && self.rng.one_in(self.spoil)
    }

    fn id(&mut self, plausible: &[&str]) -> String {
        if self.spoils() {
            text(self.rng)
        } else {
            (*self.rng.pick(plausible)).to_owned()
        }
    }

    fn outcome(&mut self) -> i32 {
        if self.spoils() {
            *self.rng.pick(&[0, 3, -1, i32::MAX, i32::MIN])
        } else if self.rng.one_in(2) {
            pb::Outcome::Success.into()
        } else {
            pb::Outcome::GatewayFailure.into()
        }
    }

    fn override_kind(&mut self) -> i32 {
        if self.spoils() {
            *self.rng.pick(&[3, -1, i32::MAX, i32::MIN])
        } else {
            self.rng.below(3) as i32
        }
    }

    /// An override's lifetime: plausible is 1 second to a week, spoiled
    /// is 0, just past a week, or anything.
    fn ttl(&mut self) -> u32 {
        if !self.spoils() {
            return *self.rng.pick(&[1, 60, 3600, 604_800]);
        }
        let any = self.rng.next() as u32;
        *self.rng.pick(&[0, 604_801, u32::MAX, any])
    }

    /// GetUplift's days: plausible is 0 (7) to 35, spoiled is past it.
    fn days(&mut self) -> u32 {
        if !self.spoils() {
            return *self.rng.pick(&[0, 1, 7, 35]);
        }
        let any = self.rng.next() as u32;
        *self.rng.pick(&[36, u32::MAX, any])
    }

    /// How many entries a repeated field gets: mostly none or a few,
    /// sometimes up to the limit of 64 and past it.
    fn count(&mut self) -> usize {
        match self.rng.below(16) {
            0 => {
                let spread = if self.spoils() { 7 } else { 5 };
                60 + self.rng.below(spread)
            }
            1..=7 => 0,
            _ => 1 + self.rng.below(4),
        }
    }

    /// A score or ratio: plausible is in [0, 1]; spoiled is anything.
    fn score(&mut self) -> f64 {
        if !self.spoils() {
            return self.rng.below(1001) as f64 / 1000.0;
        }
        if self.rng.one_in(2) {
            return f64::from_bits(self.rng.next());
        }
        *self.rng.pick(&[
            -0.0,
            1.000_000_1,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE / 2.0,
            f64::MAX,
        ])
    }
}

/// The store's answer to `request`: fields of its payment method (so that
/// pins and vetoes happen) among foreign ones, and odd counts.
pub fn store_answer(rng: &mut Rng, request: Option<&Request>) -> StoreAnswer {
    let prefix = request
        .and_then(Request::method_prefix)
        .unwrap_or_else(|| "INTERAC:RTP:".into());
    let fields = (0..rng.below(8))
        .map(|_| {
            let field = match rng.below(4) {
                0 | 1 => format!("{prefix}{}", rng.pick(CONNECTORS)),
                2 => format!("{}:{}:{}", text(rng), text(rng), text(rng)),
                _ => text(rng),
            };
            (field, stored_count(rng))
        })
        .collect();
    let recorded = match rng.below(4) {
        0 => Recorded::Applied {
            net_count: stored_count(rng),
            pruned: rng.next() as u32,
        },
        1 => Recorded::IgnoredNoHabit,
        2 => Recorded::NotAdmitted(AdmissionRefusal::Budget),
        _ => Recorded::Duplicate {
            net_count: stored_count(rng),
        },
    };
    let failure = match rng.below(48) {
        0 => Some(StoreFailure::Unavailable),
        1 => Some(StoreFailure::MaybeApplied),
        2 => Some(StoreFailure::DeadlineExceeded),
        _ => None,
    };
    let breaker_vetoes = (0..rng.below(3))
        .map(|_| {
            let reason = *rng.pick(&[
                VetoReason::CircuitOpen,
                VetoReason::CircuitHalfOpen,
                VetoReason::ForcedOpen,
            ]);
            ((*rng.pick(CONNECTORS)).to_owned(), reason)
        })
        .collect();
    StoreAnswer {
        breaker_off: rng.one_in(8),
        mode: *rng.pick(&[Mode::On, Mode::On, Mode::Shadow, Mode::Off]),
        held_out: rng.one_in(4),
        breaker_vetoes,
        health: health_rows(rng),
        fields,
        ttl: if rng.one_in(4) {
            rng.next() as i64
        } else {
            86_400
        },
        recorded,
        existed: rng.one_in(2),
        min_pin_count: 1 + rng.below(3) as i64,
        failure,
    }
}

/// GetConnectorHealth's rows: connectors in bytewise order, any state,
/// counts and times.
fn health_rows(rng: &mut Rng) -> Vec<ConnectorHealthRow> {
    let mut connectors: Vec<String> = (0..rng.below(4))
        .map(|_| (*rng.pick(CONNECTORS)).to_owned())
        .collect();
    connectors.sort();
    connectors.dedup();
    connectors
        .into_iter()
        .map(|connector| {
            let at = rng.next() as i64 >> rng.below(64);
            let state = match rng.below(3) {
                0 => BreakerState::Closed,
                1 => BreakerState::Open { until_ms: at },
                _ => BreakerState::HalfOpen { since_ms: at },
            };
            let over = rng.one_in(2).then(|| OverrideUntil {
                kind: *rng.pick(&[Override::ForceOpen, Override::ForceClosed]),
                until_ms: rng.next() as i64,
            });
            ConnectorHealthRow {
                connector,
                state,
                counts: Counts {
                    calls: rng.next() >> rng.below(64),
                    failures: rng.next() >> rng.below(64),
                },
                open_until_ms: at,
                over,
            }
        })
        .collect()
}

const MERCHANTS: &[&str] = &["m1", "merchant_123", "{m}", "m%5F", "Mé日", " m1\t"];
const CUSTOMERS: &[&str] = &["c1", "cus_abc", "%7Bc%7D", "{c}_", "c 1", "🦀"];
const METHODS: &[&str] = &["interac", "CARD", " upi ", "wallet"];
const METHOD_TYPES: &[&str] = &["rtp", "debit", "Credit", "é"];
const CONNECTORS: &[&str] = &["GIGADAT", "LOONIO", "acme:eu:1", " Giga:Dat", "stripe"];
const ATTEMPTS: &[&str] = &["pay_1", " Pay_2 ", "a:b{c}%"];

/// The pieces an id's rules care about: escape-like text, separators,
/// whitespace (trimmed at the ends only), characters that are refused,
/// multi-byte UTF-8, and lengths at each limit.
const PIECES: &[&str] = &[
    "a",
    "Z",
    "9",
    "%",
    "_",
    "{",
    "}",
    "%25",
    "%5F",
    "%7B",
    "%7D",
    ":",
    " ",
    "\t",
    "\u{A0}",
    "\u{3000}",
    "\u{0}",
    "\n",
    "\u{7F}",
    "\u{85}",
    "\u{200B}",
    "\u{200D}",
    "\u{202E}",
    "\u{2066}",
    "\u{FEFF}",
    "\u{2028}",
    "\u{AD}",
    "\u{E0041}",
    "é",
    "e\u{301}",
    "€",
    "日",
    "🦀",
    "Ω",
    "ß",
    "ﬃ",
    "ǅ",
];

fn text(rng: &mut Rng) -> String {
    match rng.below(16) {
        // Lengths at the id, field and combo limits.
        0 => "x".repeat(*rng.pick(&[0, 1, 20, 30, 62, 63, 64, 65, 127, 128, 129])),
        1 => (0..rng.below(12))
            .filter_map(|_| char::from_u32(rng.next() as u32 % 0x11_0000))
            .collect(),
        _ => (0..1 + rng.below(10)).map(|_| *rng.pick(PIECES)).collect(),
    }
}

fn stored_count(rng: &mut Rng) -> i64 {
    match rng.below(8) {
        0 => *rng.pick(&[0, -1, i64::MIN, i64::MAX]),
        1 => rng.next() as i64,
        _ => 1 + rng.below(50) as i64,
    }
}
