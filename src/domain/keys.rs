//! Redis key encoding. One hash per (merchant, customer):
//! `sticky_gw_{merchant}_{customer}`, one admission key per merchant
//! `sticky_adm_{merchant}`, and the background counts, each key of which
//! carries the hash tag `{S}` of its merchant's shard (`domain::shards`):
//! the circuit breaker's family `sticky_brk_` (contract v1.2 §3), per
//! merchant a counts hash `sticky_brk_c{S}M`, per (merchant, connector) an
//! OPEN key `sticky_brk_o{S}M_C`, and per shard an index hash
//! `sticky_brk_i{S}` whose fields ([`index_trip_field`],
//! [`index_override_field`]) name a pair by length prefix, and per shard
//! and bucket period a counts log `sticky_brk_l{S}_P` ([`breaker_log_key`]);
//! and the
//! experiment counts (contract v1.2 §4), one hash per merchant and UTC day
//! `sticky_exp_{S}M_YYYYMMDD` ([`experiment_key`]) with the fields
//! [`EXPERIMENT_FIELDS`].
//!
//! The encoding must be injective, and no customer key may equal any other
//! key of the service. The escape rule (documented in docs/contract.md):
//! - in the merchant id, `%`, `_`, `{` and `}` become `%25`, `%5F`, `%7B`,
//!   `%7D`, so the first `_` after the prefix always ends the merchant id;
//! - in the customer id, `%`, `{` and `}` are escaped the same way (it is the
//!   tail of the key, so `_` needs no escape);
//! - every kind of key has its own prefix, and no prefix starts another.
//!
//! `{` and `}` are escaped so a caller's id can never form a Redis Cluster
//! hash tag and pile customers into one slot. The sharded keys write the
//! braces themselves around their shard's tag, before the escaped merchant
//! id (M), which holds no brace: every key of a shard shares a slot, which
//! the scripts that carry a whole shard need; the connector (C) after the
//! merchant has `%`, `{` and `}` escaped. Ids without `_` in the merchant
//! id and without `%`, `{`, `}` map to exactly `sticky_gw_{merchant}_{customer}`.
//!
//! Export reads keys back: [`parse_customer_key`] inverts [`customer_key`]
//! exactly, and [`customer_key_pattern`] is the SCAN `MATCH` pattern for
//! every customer key, or for one merchant's.
//!
//! Tenants (contract v1.2, "Tenants"). The default tenant's keys are the
//! layout above, exactly. Every other tenant's keys hold its namespace right
//! after the merchant's place starts: `%T`, the tenant id with `_` escaped
//! as `%5F`, then `_` (`sticky_gw_%Tacme_m1_cust42`,
//! `sticky_adm_%Tacme_m1`, `sticky_exp_{b6.11}%Tacme_m1_20261202`,
//! `sticky_brk_c{b6.11}%Tacme_m1`, `sticky_brk_o{b6.11}%Tacme_m1_GIGADAT`). An escaped
//! merchant id never starts with `%T` (its `%` always starts `%25`, `%5F`,
//! `%7B` or `%7D`), so no tenant's key equals a default one; the escaped
//! tenant holds no `_`, so its first `_` ends it and no two tenants share a
//! key. The tenant is part of the shard's hash (`domain::shards`). A
//! shard's breaker index holds every tenant's merchants of that shard: a
//! tenant's fields start
//! with `@`, the tenant's length in bytes, `:` and the tenant id
//! (`@4:acmet2:m1GIGADAT`), where a default field starts with `t` or `o`.
//! Every family keeps its prefix, so the ACL patterns are unchanged.

use super::ids::{Connector, CustomerId, MerchantId};
use super::shards::{Shard, shard_of};
use super::tenant::Tenant;

/// Prefix of every customer hash.
pub const CUSTOMER_KEY_PREFIX: &str = "sticky_gw_";
/// Prefix of every per-merchant admission key.
pub const ADMISSION_KEY_PREFIX: &str = "sticky_adm_";

/// A customer's hash key. Only [`customer_key`] makes one, so a key handed
/// to the store is always a correctly escaped customer key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CustomerKey(String);

/// A merchant's admission-budget key (both window counters live in it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AdmissionKey(String);

/// The customer's hash key.
pub fn customer_key(tenant: &Tenant, merchant: &MerchantId, customer: &CustomerId) -> CustomerKey {
    let mut key = String::with_capacity(
        CUSTOMER_KEY_PREFIX.len()
            + namespace_len(tenant)
            + merchant.as_str().len()
            + customer.as_str().len()
            + 1,
    );
    key.push_str(CUSTOMER_KEY_PREFIX);
    push_namespace(&mut key, tenant);
    escape_into(&mut key, merchant.as_str(), true);
    key.push('_');
    escape_into(&mut key, customer.as_str(), false);
    CustomerKey(key)
}

/// The merchant's admission-budget key.
pub fn admission_key(tenant: &Tenant, merchant: &MerchantId) -> AdmissionKey {
    let mut key = String::from(ADMISSION_KEY_PREFIX);
    push_namespace(&mut key, tenant);
    escape_into(&mut key, merchant.as_str(), true);
    AdmissionKey(key)
}

/// Marks a tenant's namespace in a key, where the escaped merchant id
/// would start; an escaped merchant id never starts with it.
const NAMESPACE_MARK: &str = "%T";

/// The bytes [`push_namespace`] may add (an upper bound).
fn namespace_len(tenant: &Tenant) -> usize {
    tenant
        .id()
        .map_or(0, |id| NAMESPACE_MARK.len() + 3 * id.len() + 1)
}

/// A tenant's namespace: nothing for the default tenant, else `%T`, the id
/// with `_` escaped, and `_`.
fn push_namespace(out: &mut String, tenant: &Tenant) {
    if let Some(id) = tenant.id() {
        out.push_str(NAMESPACE_MARK);
        escape_into(out, id, true);
        out.push('_');
    }
}

/// Splits the tenant off `rest`, the part of a key after its prefix: the
/// default tenant when it holds no namespace; `None` when the namespace is
/// not one [`push_namespace`] writes.
fn strip_namespace(rest: &str) -> Option<(Tenant, &str)> {
    let Some(tail) = rest.strip_prefix(NAMESPACE_MARK) else {
        return Some((Tenant::DEFAULT, rest));
    };
    let (escaped, rest) = tail.split_once('_')?;
    let tenant = Tenant::parse(&unescape(escaped, true)?).ok()?;
    // An empty id is the default tenant, which has no namespace.
    tenant.id()?;
    Some((tenant, rest))
}

/// Prefix of every circuit-breaker key (the ACL pattern `~sticky_brk_*`).
pub const BREAKER_KEY_PREFIX: &str = "sticky_brk_";

/// A merchant's breaker counts: one hash for all its connectors.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BreakerCountsKey(String);

/// One (merchant, connector) breaker's OPEN key, whose TTL is OPEN_FOR.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BreakerOpenKey(String);

/// A shard's breaker index: every breaker of the shard's merchants that is
/// not CLOSED, and every override.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BreakerIndexKey(String);

/// `sticky_brk_c{S}M`: the shard's tag ([`Shard::tag`]) is the Cluster hash
/// tag, so every key of the shard's merchants shares a slot, and one
/// script carries all their counts; the merchant (after its tenant's
/// namespace), escaped as customer keys escape it, follows.
pub fn breaker_counts_key(tenant: &Tenant, merchant: &MerchantId) -> BreakerCountsKey {
    let mut key = sharded(BREAKER_KEY_PREFIX, 'c', tenant, merchant, 0);
    push_namespace(&mut key, tenant);
    escape_into(&mut key, merchant.as_str(), true);
    BreakerCountsKey(key)
}

/// `sticky_brk_o{S}M_C`: as the counts key, then `_` (the escaped
/// merchant holds none, so it ends the merchant) and the connector with
/// `%`, `{` and `}` escaped.
pub fn breaker_open_key(tenant: &Tenant, merchant: &MerchantId, connector: &str) -> BreakerOpenKey {
    let mut key = sharded(
        BREAKER_KEY_PREFIX,
        'o',
        tenant,
        merchant,
        connector.len() + 1,
    );
    push_namespace(&mut key, tenant);
    escape_into(&mut key, merchant.as_str(), true);
    key.push('_');
    escape_into(&mut key, connector, false);
    BreakerOpenKey(key)
}

/// `sticky_brk_i{S}`: the shard's breaker index, in the shard's slot.
pub fn breaker_index_key(shard: Shard) -> BreakerIndexKey {
    BreakerIndexKey(format!("{BREAKER_KEY_PREFIX}i{{{}}}", shard.tag()))
}

/// `sticky_brk_l{S}_<period>`: the shard's breaker counts log of one
/// bucket period (`period` = the bucket the appends were made in, as
/// `BreakerSettings::bucket_of` numbers them), in the shard's slot.
pub fn breaker_log_key(shard: Shard, period: i64) -> String {
    format!("{BREAKER_KEY_PREFIX}l{{{}}}_{period}", shard.tag())
}

/// A key's start: `prefix`, `kind` (if not `\0`), and the hash tag of the
/// merchant's shard; `more` bytes are reserved past the ids.
fn sharded(
    prefix: &str,
    kind: char,
    tenant: &Tenant,
    merchant: &MerchantId,
    more: usize,
) -> String {
    let tag = shard_of(tenant, merchant).tag();
    let mut key = String::with_capacity(
        prefix.len() + 3 + tag.len() + namespace_len(tenant) + merchant.as_str().len() + more,
    );
    key.push_str(prefix);
    if kind != '\0' {
        key.push(kind);
    }
    key.push('{');
    key.push_str(tag);
    key.push('}');
    key
}

/// What an index field of a [`BreakerIndexKey`] holds for its pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexFieldKind {
    /// The breaker's trip (`t…`).
    Trip,
    /// An operator's override (`o…`).
    Override,
}

/// The index field of a (merchant, connector) breaker's trip:
/// `t` + the merchant's length in bytes + `:` + merchant + connector
/// (after the tenant's `@` part, for a tenant other than the default).
pub fn index_trip_field(tenant: &Tenant, merchant: &MerchantId, connector: &str) -> String {
    index_field(tenant, 't', merchant.as_str(), connector)
}

/// The index field of a (merchant, connector) breaker's override:
/// `o` + the merchant's length in bytes + `:` + merchant + connector
/// (after the tenant's `@` part, for a tenant other than the default).
pub fn index_override_field(tenant: &Tenant, merchant: &MerchantId, connector: &str) -> String {
    index_field(tenant, 'o', merchant.as_str(), connector)
}

fn index_field(tenant: &Tenant, kind: char, merchant: &str, connector: &str) -> String {
    // The length prefix, not an escape, ends the merchant: ids go in verbatim.
    match tenant.id() {
        None => format!("{kind}{}:{merchant}{connector}", merchant.len()),
        Some(id) => format!(
            "@{}:{id}{kind}{}:{merchant}{connector}",
            id.len(),
            merchant.len()
        ),
    }
}

/// One index field's pair: what kind of field, and whose breaker.
pub type IndexFieldPair = (IndexFieldKind, Tenant, MerchantId, String);

/// Inverts [`index_trip_field`] and [`index_override_field`]: the kind,
/// tenant, merchant and connector of `field`, or `None` for any field they
/// cannot have written (so a stray field is skipped, never misread).
pub fn parse_index_field(field: &str) -> Option<IndexFieldPair> {
    let (tenant, field_rest) = match field.strip_prefix('@') {
        None => (Tenant::DEFAULT, field),
        Some(tail) => {
            let (id, rest) = length_prefixed(tail)?;
            let tenant = Tenant::parse(id).ok()?;
            tenant.id()?;
            (tenant, rest)
        }
    };
    let (kind, merchant, connector) = parse_pair_field(field_rest)?;
    // Canonical only (no leading zeros, ids as `parse` keeps them).
    let back = match kind {
        IndexFieldKind::Trip => index_trip_field(&tenant, &merchant, &connector),
        IndexFieldKind::Override => index_override_field(&tenant, &merchant, &connector),
    };
    (back == field).then_some((kind, tenant, merchant, connector))
}

/// `N:` then N bytes: those bytes and what follows them.
fn length_prefixed(text: &str) -> Option<(&str, &str)> {
    let (len, rest) = text.split_once(':')?;
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let len: usize = len.parse().ok()?;
    Some((rest.get(..len)?, rest.get(len..)?))
}

/// A default tenant's index field: its kind, merchant and connector.
fn parse_pair_field(field: &str) -> Option<(IndexFieldKind, MerchantId, String)> {
    let kind = match field.as_bytes().first()? {
        b't' => IndexFieldKind::Trip,
        b'o' => IndexFieldKind::Override,
        _ => return None,
    };
    let (merchant, connector) = length_prefixed(field.get(1..)?)?;
    let merchant = MerchantId::parse(merchant).ok()?;
    Connector::parse(connector).ok()?;
    Some((kind, merchant, connector.to_owned()))
}

/// Prefix of every experiment-count key (the ACL pattern `~sticky_exp_*`).
pub const EXPERIMENT_KEY_PREFIX: &str = "sticky_exp_";

/// The fields of an experiment hash, `<group>:<split>:<outcome>`: group
/// `t` (treated), `h` (holdout), `s` (shadow); split `f` (followed), `o`
/// (overridden), `-` (the holdout has none); outcome `s` (success), `f`
/// (gateway failure). Each counts outcomes.
pub const EXPERIMENT_FIELDS: [&str; 10] = [
    "t:f:s", "t:f:f", "t:o:s", "t:o:f", "h:-:s", "h:-:f", "s:f:s", "s:f:f", "s:o:s", "s:o:f",
];

/// One merchant's experiment counts of one UTC day.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExperimentKey(String);

/// `sticky_exp_{S}M_YYYYMMDD`: the hash tag of the merchant's shard
/// ([`Shard::tag`]), so that one script per shard carries every merchant's
/// counts; then the merchant (after its tenant's namespace) escaped as in
/// customer and admission keys (its own `_` too, so the first `_` after
/// it ends it), then the day, eight digits (`day` is YYYYMMDD; a larger
/// number is written whole, and still parses back).
pub fn experiment_key(tenant: &Tenant, merchant: &MerchantId, day: u32) -> ExperimentKey {
    let mut key = sharded(EXPERIMENT_KEY_PREFIX, '\0', tenant, merchant, 9);
    push_experiment_tail(&mut key, tenant, merchant, day);
    ExperimentKey(key)
}

/// The layout before the shards (until 2026-12): `sticky_exp_M_YYYYMMDD`,
/// no hash tag. Such keys live out their retention (35 days by default);
/// GetUplift and the report read them beside the sharded ones, so no count
/// written before the change is lost. An escaped merchant or namespace
/// never starts with `{`, so no key of one layout is a key of the other.
pub fn legacy_experiment_key(tenant: &Tenant, merchant: &MerchantId, day: u32) -> ExperimentKey {
    let mut key = String::with_capacity(
        EXPERIMENT_KEY_PREFIX.len() + namespace_len(tenant) + merchant.as_str().len() + 9,
    );
    key.push_str(EXPERIMENT_KEY_PREFIX);
    push_experiment_tail(&mut key, tenant, merchant, day);
    ExperimentKey(key)
}

fn push_experiment_tail(key: &mut String, tenant: &Tenant, merchant: &MerchantId, day: u32) {
    push_namespace(key, tenant);
    escape_into(key, merchant.as_str(), true);
    key.push('_');
    key.push_str(&format!("{day:08}"));
}

/// Inverts [`experiment_key`] and [`legacy_experiment_key`]: the tenant,
/// merchant and day of `key`, or `None` for any key they cannot have made
/// (so a stray key is skipped, never misread).
pub fn parse_experiment_key(key: &str) -> Option<(Tenant, MerchantId, u32)> {
    let rest = key.strip_prefix(EXPERIMENT_KEY_PREFIX)?;
    // The sharded layout's tag; a legacy key has none.
    let rest = match rest.strip_prefix('{') {
        Some(tagged) => tagged.split_once('}')?.1,
        None => rest,
    };
    let (tenant, rest) = strip_namespace(rest)?;
    let (merchant, day) = rest.split_once('_')?;
    if day.len() < 8 || !day.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let day: u32 = day.parse().ok()?;
    let merchant = MerchantId::parse(&unescape(merchant, true)?).ok()?;
    // Canonical only: trimmed ids, the day's own digits, the right shard.
    let canonical = experiment_key(&tenant, &merchant, day) == key
        || legacy_experiment_key(&tenant, &merchant, day) == key;
    canonical.then_some((tenant, merchant, day))
}

/// The SCAN `MATCH` patterns for the experiment keys of `tenant`'s
/// `merchant`, or of every merchant (glob characters of the id escaped, as
/// in [`customer_key_pattern`]), of both layouts. The default tenant's
/// pattern without a merchant matches every key of both layouts and every
/// tenant's: the reader keeps those [`parse_experiment_key`] says are the
/// default tenant's.
pub fn experiment_key_patterns(tenant: &Tenant, merchant: Option<&MerchantId>) -> Vec<String> {
    let tail = experiment_pattern_tail(tenant, merchant);
    let sharded = match merchant {
        Some(merchant) => format!("{{{}}}", shard_of(tenant, merchant).tag()),
        None if tenant.id().is_none() => {
            // `sticky_exp_*` already matches the sharded keys.
            return vec![format!("{EXPERIMENT_KEY_PREFIX}{tail}")];
        }
        None => "{*}".to_owned(),
    };
    vec![
        format!("{EXPERIMENT_KEY_PREFIX}{sharded}{tail}"),
        format!("{EXPERIMENT_KEY_PREFIX}{tail}"),
    ]
}

/// The SCAN `MATCH` pattern for the sharded experiment keys of `shard`
/// among those [`experiment_key_patterns`] matches (the default tenant's
/// matches every tenant's, as there).
pub fn experiment_shard_pattern(
    shard: Shard,
    tenant: &Tenant,
    merchant: Option<&MerchantId>,
) -> String {
    let tail = experiment_pattern_tail(tenant, merchant);
    format!("{EXPERIMENT_KEY_PREFIX}{{{}}}{tail}", shard.tag())
}

/// The patterns' part after the layout's start: the namespace, the
/// merchant if any, then `*`.
fn experiment_pattern_tail(tenant: &Tenant, merchant: Option<&MerchantId>) -> String {
    let mut tail = String::new();
    push_glob_escaped(&mut tail, &namespace_of(tenant));
    if let Some(merchant) = merchant {
        let mut escaped = String::new();
        escape_into(&mut escaped, merchant.as_str(), true);
        push_glob_escaped(&mut tail, &escaped);
        tail.push('_');
    }
    tail.push('*');
    tail
}

/// `sticky_exp_l{S}`: the shard's experiment counts log, a list of the
/// instances' ticks (one frame each) not yet added into the day hashes,
/// in the shard's slot. No experiment day key has `{` after its first
/// letter (the escaped ids hold none), so neither this key nor
/// [`experiment_log_meta_key`] is one.
pub fn experiment_log_key(shard: Shard) -> String {
    format!("{EXPERIMENT_KEY_PREFIX}l{{{}}}", shard.tag())
}

/// `sticky_exp_m{S}`: where the shard's log stands in being added into the
/// day hashes (the batch, its chunks, the next chunk), beside the log.
pub fn experiment_log_meta_key(shard: Shard) -> String {
    format!("{EXPERIMENT_KEY_PREFIX}m{{{}}}", shard.tag())
}

/// The shard whose [`experiment_log_key`] or [`experiment_log_meta_key`]
/// `key` is, so that a scan of the experiment prefix passes over them.
pub fn parse_experiment_log_key(key: &str) -> Option<Shard> {
    let rest = key.strip_prefix(EXPERIMENT_KEY_PREFIX)?;
    let tagged = rest.strip_prefix('l').or_else(|| rest.strip_prefix('m'))?;
    Shard::all().find(|shard| {
        tagged
            .strip_prefix('{')
            .and_then(|t| t.strip_prefix(shard.tag()))
            == Some("}")
    })
}

/// Every key kind reads as the Redis key it is.
macro_rules! key_as_str {
    ($($key:ident),*) => {$(
        impl $key {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::ops::Deref for $key {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<&str> for $key {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    )*};
}

key_as_str!(
    CustomerKey,
    AdmissionKey,
    BreakerCountsKey,
    BreakerOpenKey,
    BreakerIndexKey,
    ExperimentKey
);

/// The (tenant, merchant, customer) whose hash `key` is: `None` for any
/// key that [`customer_key`] cannot have made (another prefix, an escape it
/// never writes, an id the id rules reject). It accepts exactly the keys
/// the service writes, so an exported id imports back to the very same key.
pub fn parse_customer_key(key: &str) -> Option<(Tenant, MerchantId, CustomerId)> {
    let (tenant, rest) = strip_namespace(key.strip_prefix(CUSTOMER_KEY_PREFIX)?)?;
    // The merchant id's own `_` are escaped: its first `_` ends it.
    let (merchant, customer) = rest.split_once('_')?;
    let merchant = MerchantId::parse(&unescape(merchant, true)?).ok()?;
    let customer = CustomerId::parse(&unescape(customer, false)?).ok()?;
    // Canonical only: an id with spaces at its ends is trimmed by `parse`,
    // so it would no longer encode to `key`.
    (customer_key(&tenant, &merchant, &customer) == key).then_some((tenant, merchant, customer))
}

/// The SCAN `MATCH` pattern for the customer keys of `tenant`'s `merchant`,
/// or of every merchant of `tenant`. The escaped ids are themselves
/// glob-escaped: an id such as `a*` must match only its own keys, not
/// those of `ab`. Without a merchant, the default tenant's pattern matches
/// every tenant's keys: the reader keeps those [`parse_customer_key`] says
/// are the default tenant's (or every tenant's, for an export of all).
pub fn customer_key_pattern(tenant: &Tenant, merchant: Option<&MerchantId>) -> String {
    let mut pattern = String::from(CUSTOMER_KEY_PREFIX);
    push_glob_escaped(&mut pattern, &namespace_of(tenant));
    if let Some(merchant) = merchant {
        let mut escaped = String::new();
        escape_into(&mut escaped, merchant.as_str(), true);
        push_glob_escaped(&mut pattern, &escaped);
        // The escaped merchant id holds no `_`: this one ends it.
        pattern.push('_');
    }
    pattern.push('*');
    pattern
}

/// A tenant's namespace as keys hold it.
fn namespace_of(tenant: &Tenant) -> String {
    let mut namespace = String::new();
    push_namespace(&mut namespace, tenant);
    namespace
}

/// `text` with the glob characters of a `MATCH` pattern escaped.
fn push_glob_escaped(pattern: &mut String, text: &str) {
    for ch in text.chars() {
        if matches!(ch, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(ch);
    }
}

/// Undoes [`escape_into`]; `None` for text it cannot have written: a `%`
/// that starts no escape it uses, or a character it always escapes.
fn unescape(escaped: &str, escape_underscore: bool) -> Option<String> {
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(at) = rest.find(['%', '{', '}', '_']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let (ch, len) = match tail.get(..3) {
            Some("%25") => ('%', 3),
            Some("%7B") => ('{', 3),
            Some("%7D") => ('}', 3),
            Some("%5F") if escape_underscore => ('_', 3),
            _ if tail.starts_with('_') && !escape_underscore => ('_', 1),
            _ => return None,
        };
        out.push(ch);
        rest = &tail[len..];
    }
    out.push_str(rest);
    Some(out)
}

fn escape_into(out: &mut String, id: &str, escape_underscore: bool) {
    // By runs of bytes, not by characters: every byte escaped is ASCII, so
    // the runs between them are whole UTF-8 sequences, copied at once.
    let mut rest = id;
    while let Some(at) = rest
        .bytes()
        .position(|b| matches!(b, b'%' | b'{' | b'}') || (escape_underscore && b == b'_'))
    {
        let (run, tail) = rest.split_at(at);
        out.push_str(run);
        let mut tail = tail.chars();
        out.push_str(match tail.next() {
            Some('%') => "%25",
            Some('{') => "%7B",
            Some('}') => "%7D",
            _ => "%5F",
        });
        rest = tail.as_str();
    }
    out.push_str(rest);
}

#[cfg(test)]
mod tenant_tests;
#[cfg(test)]
mod tests;
