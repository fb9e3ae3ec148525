//! A replayed row's fields as small numbers: tenants, merchant ids,
//! payment methods, connectors and combos are each validated once, by the
//! domain's own parsers, the first time a spelling appears, and named by
//! their index after that; a merchant is a (tenant, merchant id) pair, so
//! two tenants' `m1` are two merchants; a customer is a 128-bit hash of
//! (merchant, customer id), so they are two customers too.
//!
//! A row's tenant is its `tenant_id` cell (the empty cell is the default
//! tenant); a row without one is `--tenant`'s, or the default tenant's.
//! With `--tenant`, rows of any other tenant are skipped, as `--merchant`
//! skips other merchants'; but they are read and checked all the same, as
//! a good one still sets the file's time (a row without `at` is one second
//! after the previous good row of the file, whatever is filtered), and a
//! bad one does not.
//!
//! This is what keeps a replay at two million rows a second: the common row
//! meets only hash lookups of text it borrows from the reader's buffer, and
//! allocates nothing. The validation, and its order (the first bad field of
//! a row is the one named), is RecordOutcome's: `RecordCommand::parse`
//! checks the same fields with the same parsers in the same order.
//!
//! Customers are never kept as text: the report needs none, and a customer
//! id is personal data. Two customers of a merchant share a hash only if
//! both 64-bit halves of it collide (about n² / 2¹²⁹ for n customers: nil
//! for any history).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

use foldhash::fast::RandomState;

use super::at;
use super::customers::Identity;
use crate::bulk::rows::{Fields, parse_outcome, parse_tenant};
use crate::domain::InvalidInput;
use crate::domain::attempts::{AttemptDigest, AttemptId};
use crate::domain::combo::{Combo, MethodPrefix};
use crate::domain::counts::Outcome;
use crate::domain::ids::{Connector, CustomerId, MerchantId, PaymentMethod, PaymentMethodType};
use crate::domain::tenant::Tenant;

/// One valid row, as numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// Index into [`Catalog::merchant`] and [`Catalog::tenant`]: the
    /// (tenant, merchant id) pair.
    pub merchant: u32,
    /// The customer's identity within the replay.
    pub customer: Identity,
    /// Index into [`Catalog::prefix`]: the payment method and type.
    pub prefix: u32,
    /// Index into [`Catalog::field`]: the combo.
    pub combo: u32,
    pub outcome: Outcome,
    pub attempt: Option<AttemptDigest>,
    /// How many identical attempts the row stands for.
    pub times: u32,
    /// The row's `at` in Unix milliseconds, when it has one.
    pub at: Option<i64>,
}

/// What a row is to the replay.
#[derive(Debug)]
pub enum Read {
    Attempt(Attempt),
    /// A good row of another merchant than `--merchant`'s, or of another
    /// tenant than `--tenant`'s: not replayed, but its `at`, or its place
    /// in the file, sets the time of the rows after it.
    Skipped {
        at: Option<i64>,
    },
    /// A bad row of another merchant or tenant: neither reported nor
    /// counted, and it sets no time, as in the whole replay.
    SkippedBad,
    /// A bad row: why, and its merchant when that much of it was valid.
    Bad {
        reason: String,
        merchant: Option<u32>,
    },
}

/// One combo: its field, and the connector within it.
#[derive(Debug)]
struct ComboEntry {
    field: Box<str>,
    /// Where the connector starts in `field`.
    connector_at: usize,
}

/// Whose a row whose merchant id is valid is.
#[derive(Debug, Clone, Copy)]
enum Owner {
    /// The index of a merchant this replay counts.
    Counted(u32),
    /// Another merchant's or tenant's, left out by `--merchant` or `--tenant`.
    Other,
}

/// Every spelling seen so far, and what it stands for.
pub struct Catalog {
    only: Option<MerchantId>,
    /// `--tenant`'s index in `tenants`: only its rows are read.
    only_tenant: Option<u32>,
    /// The tenant of a row without a `tenant_id`: `--tenant`'s, else the
    /// default one.
    implied_tenant: u32,
    tenants: Interner<Tenant>,
    merchant_ids: Interner<MerchantId>,
    /// Each merchant's index by its (tenant, merchant id) indexes.
    merchant_by_parts: HashMap<(u32, u32), u32, RandomState>,
    /// Each merchant's (tenant, merchant id) indexes.
    merchants: Vec<(u32, u32)>,
    methods: Interner<PaymentMethod>,
    types: Interner<PaymentMethodType>,
    connectors: Interner<Connector>,
    prefix_by_parts: HashMap<(u32, u32), u32, RandomState>,
    prefixes: Vec<MethodPrefix>,
    combo_by_parts: HashMap<(u32, u32, u32), Result<u32, InvalidInput>, RandomState>,
    combos: Vec<ComboEntry>,
}

/// Two fixed seeds: the two halves of a customer's identity.
const CUSTOMER_SEEDS: [u64; 2] = [0x5ec7_a1b2_c3d4_e5f6, 0x9e37_79b9_7f4a_7c15];

impl Catalog {
    /// A catalog that reads every row, or only merchant `only`'s, and only
    /// `tenant`'s rows when a tenant is named.
    pub fn new(only: Option<MerchantId>, tenant: Option<Tenant>) -> Self {
        let mut tenants = Interner::default();
        let named = tenant.is_some();
        let wanted = tenant.unwrap_or_default();
        let text = wanted.as_str().to_owned();
        // Its own text reads back as itself: nothing to parse.
        let implied_tenant = tenants.index(&text, |_| Ok(wanted)).unwrap_or_default();
        let only_tenant = named.then_some(implied_tenant);
        Self {
            only,
            only_tenant,
            implied_tenant,
            tenants,
            merchant_ids: Interner::default(),
            merchant_by_parts: HashMap::default(),
            merchants: Vec::new(),
            methods: Interner::default(),
            types: Interner::default(),
            connectors: Interner::default(),
            prefix_by_parts: HashMap::default(),
            prefixes: Vec::new(),
            combo_by_parts: HashMap::default(),
            combos: Vec::new(),
        }
    }

    /// A merchant's id (the same in every tenant).
    pub fn merchant(&self, index: u32) -> &MerchantId {
        self.merchant_ids.get(self.merchants[index as usize].1)
    }

    /// A merchant's tenant.
    pub fn tenant(&self, index: u32) -> &Tenant {
        self.tenants.get(self.merchants[index as usize].0)
    }

    /// How many merchants were seen.
    pub fn merchant_count(&self) -> usize {
        self.merchants.len()
    }

    pub fn prefix(&self, index: u32) -> &MethodPrefix {
        &self.prefixes[index as usize]
    }

    /// A combo's hash field, `{PM}:{PMT}:{connector}`.
    pub fn field(&self, combo: u32) -> &str {
        &self.combos[combo as usize].field
    }

    /// A combo's connector.
    pub fn connector(&self, combo: u32) -> &str {
        let entry = &self.combos[combo as usize];
        &entry.field[entry.connector_at..]
    }

    /// Reads one row's fields: the attempt, or why the row is bad. The
    /// tenant comes first, then the merchant id, so that a bad row counts
    /// for its merchant when that much of it is valid, and another tenant's
    /// or merchant's row is skipped under `--tenant` or `--merchant` (read
    /// through all the same, for its time); then an unreadable or missing
    /// cell, then the fields in RecordOutcome's order, then `count`, then
    /// `at`.
    pub fn read(&mut self, fields: &Fields<'_>) -> Read {
        // The tenant first, as a call's header is checked before its body.
        let tenant = match fields.tenant_cell() {
            None => self.implied_tenant,
            Some(cell) => match self.tenants.index(cell, parse_tenant) {
                Ok(tenant) => tenant,
                Err(invalid) => {
                    return Read::Bad {
                        reason: invalid.to_string(),
                        merchant: None,
                    };
                }
            },
        };
        let other_tenant = self.only_tenant.is_some_and(|only| only != tenant);
        let raw = fields.raw();
        let owner = match fields
            .merchant_given()
            .then(|| self.merchant_index(tenant, raw.merchant_id))
        {
            Some(Ok(owner)) => Some(owner),
            // An unusable row's own reason comes first; a bad merchant id
            // is the reason of a row that is otherwise whole.
            Some(Err(invalid)) if fields.unusable().is_none() => {
                return Self::bad(other_tenant, invalid.to_string(), None);
            }
            Some(Err(_)) | None => None,
        };
        let other = other_tenant || matches!(owner, Some(Owner::Other));
        let counted = match owner {
            Some(Owner::Counted(merchant)) => Some(merchant),
            Some(Owner::Other) | None => None,
        };
        if let Some(unusable) = fields.unusable() {
            return Self::bad(other, unusable, counted);
        }
        // A row without a merchant id is unusable (missing), so this is
        // never taken; it keeps a bad row from being counted as anyone's.
        if owner.is_none() {
            return Self::bad(other, "merchant_id: missing".to_owned(), None);
        }
        let bad = |reason: String| Self::bad(other, reason, counted);
        let customer = match CustomerId::check(raw.customer_id) {
            // Another's row needs no identity: it is not replayed.
            Ok(customer) => match counted {
                Some(merchant) => self.customer_identity(merchant, customer),
                None => Identity::from_halves(0, 0),
            },
            Err(invalid) => return bad(invalid.to_string()),
        };
        let parts = self
            .method_index(raw.payment_method)
            .and_then(|method| Ok((method, self.type_index(raw.payment_method_type)?)))
            .and_then(|(method, kind)| Ok((method, kind, self.connector_index(raw.connector)?)))
            .and_then(|(method, kind, connector)| self.combo_index(method, kind, connector));
        let (prefix, combo) = match parts {
            Ok(parts) => parts,
            Err(invalid) => return bad(invalid.to_string()),
        };
        let outcome = match parse_outcome(fields.outcome_word()) {
            Ok(outcome) => outcome,
            Err(invalid) => return bad(invalid.to_string()),
        };
        let attempt = match AttemptId::parse_digest(raw.attempt_id) {
            Ok(attempt) => attempt,
            Err(invalid) => return bad(invalid.to_string()),
        };
        let times = match fields.count() {
            Ok(times) => times,
            Err(reason) => return bad(reason),
        };
        if times > 1 && attempt.is_some() {
            return bad(
                "count: a row with an attempt_id is one attempt; a count above 1 cannot go with it"
                    .to_owned(),
            );
        }
        let at = match at::parse(fields.at().unwrap_or_default()) {
            Ok(at) => at,
            Err(reason) => return bad(reason.to_owned()),
        };
        let Some(merchant) = counted else {
            return Read::Skipped { at };
        };
        Read::Attempt(Attempt {
            merchant,
            customer,
            prefix,
            combo,
            outcome,
            attempt,
            times,
            at,
        })
    }

    /// A bad row: reported and counted, unless it is another merchant's
    /// or tenant's (`other`).
    fn bad(other: bool, reason: String, merchant: Option<u32>) -> Read {
        if other {
            Read::SkippedBad
        } else {
            Read::Bad { reason, merchant }
        }
    }

    /// The index of `tenant`'s merchant `text`, or [`Owner::Other`] for a
    /// merchant or tenant that `--merchant` or `--tenant` leaves out.
    fn merchant_index(&mut self, tenant: u32, text: &str) -> Result<Owner, InvalidInput> {
        let id = self.merchant_ids.index(text, MerchantId::parse)?;
        let wanted = self.only_tenant.is_none_or(|only| only == tenant)
            && self
                .only
                .as_ref()
                .is_none_or(|only| only == self.merchant_ids.get(id));
        if !wanted {
            return Ok(Owner::Other);
        }
        let merchants = &mut self.merchants;
        let index = *self
            .merchant_by_parts
            .entry((tenant, id))
            .or_insert_with(|| {
                merchants.push((tenant, id));
                (merchants.len() - 1) as u32
            });
        Ok(Owner::Counted(index))
    }

    fn customer_identity(&self, merchant: u32, customer: &str) -> Identity {
        let [high, low] = CUSTOMER_SEEDS.map(|seed| {
            foldhash::quality::FixedState::with_seed(seed).hash_one((merchant, customer))
        });
        Identity::from_halves(high, low)
    }

    fn method_index(&mut self, text: &str) -> Result<u32, InvalidInput> {
        self.methods.index(text, PaymentMethod::parse)
    }

    fn type_index(&mut self, text: &str) -> Result<u32, InvalidInput> {
        self.types.index(text, PaymentMethodType::parse)
    }

    fn connector_index(&mut self, text: &str) -> Result<u32, InvalidInput> {
        self.connectors.index(text, Connector::parse)
    }

    /// The prefix and combo of (method, type, connector), checked by
    /// [`Combo::new`] once.
    fn combo_index(
        &mut self,
        method: u32,
        kind: u32,
        connector: u32,
    ) -> Result<(u32, u32), InvalidInput> {
        let prefix = match self.prefix_by_parts.get(&(method, kind)) {
            Some(&prefix) => prefix,
            None => {
                let prefix = MethodPrefix::new(self.methods.get(method), self.types.get(kind));
                self.prefixes.push(prefix);
                let index = (self.prefixes.len() - 1) as u32;
                self.prefix_by_parts.insert((method, kind), index);
                index
            }
        };
        let key = (method, kind, connector);
        if let Some(known) = self.combo_by_parts.get(&key) {
            return known.clone().map(|combo| (prefix, combo));
        }
        let made = Combo::new(
            self.methods.get(method),
            self.types.get(kind),
            self.connectors.get(connector),
        )
        .map(|combo| {
            self.combos.push(ComboEntry {
                connector_at: self.prefixes[prefix as usize].as_str().len(),
                field: combo.field().into(),
            });
            (self.combos.len() - 1) as u32
        });
        self.combo_by_parts.insert(key, made.clone());
        made.map(|combo| (prefix, combo))
    }
}

/// Values of one kind, each under an index, and the spellings read so far.
struct Interner<T> {
    by_text: HashMap<Box<str>, u32, RandomState>,
    by_value: HashMap<T, u32, RandomState>,
    values: Vec<T>,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Self {
            by_text: HashMap::default(),
            by_value: HashMap::default(),
            values: Vec::new(),
        }
    }
}

impl<T: Clone + Eq + Hash> Interner<T> {
    /// The index of `text` once `parse` accepts it; equal values share one
    /// index whatever their spelling (`card` and `CARD`).
    fn index(
        &mut self,
        text: &str,
        parse: impl FnOnce(&str) -> Result<T, InvalidInput>,
    ) -> Result<u32, InvalidInput> {
        if let Some(&index) = self.by_text.get(text) {
            return Ok(index);
        }
        let value = parse(text)?;
        let next = self.values.len() as u32;
        let index = *self.by_value.entry(value.clone()).or_insert(next);
        if index == next {
            self.values.push(value);
        }
        self.by_text.insert(text.into(), index);
        Ok(index)
    }

    fn get(&self, index: u32) -> &T {
        &self.values[index as usize]
    }
}
