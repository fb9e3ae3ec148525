//! A call's tenant (contract v1.2, "Tenants"): multi-tenant orchestrators
//! send `x-tenant-id` on every call, and merchant ids are unique only within
//! a tenant, so every key of a tenant other than the default lives in that
//! tenant's own namespace ([`super::keys`]).
//!
//! A tenant id is 1 to 64 bytes of ASCII letters, digits, `-` and `_`, case
//! kept (`Acme` and `acme` are two tenants). Absent or empty (after
//! trimming ASCII blanks) is the default tenant, whose keys are exactly
//! those of a service without tenants, so nobody who does not send the
//! header has anything to migrate.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use super::ids::InvalidInput;

/// The metadata key that names a call's tenant, and the field a refusal
/// names.
pub const TENANT_HEADER: &str = "x-tenant-id";
/// Longest tenant id, in bytes.
pub const MAX_TENANT_BYTES: usize = 64;

/// A call's tenant: the default one, or a named one. Shared, not copied:
/// the background tallies keep a tenant per merchant they count, and a
/// clone is a count, not an allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tenant(Option<Arc<str>>);

impl Tenant {
    /// The tenant of a call without the header.
    pub const DEFAULT: Self = Self(None);

    /// Reads a tenant id as a caller sends it: ASCII blanks trimmed; empty
    /// is the default tenant; else letters, digits, `-` and `_`, at most 64
    /// bytes, or an error naming `field`.
    pub fn parse_as(raw: &str, field: &str) -> Result<Self, InvalidInput> {
        let id = raw.trim_matches(|c: char| c.is_ascii_whitespace());
        if id.is_empty() {
            return Ok(Self::DEFAULT);
        }
        if id.len() > MAX_TENANT_BYTES {
            return Err(InvalidInput::new(
                field,
                format!(
                    "is {} bytes long; the limit is {MAX_TENANT_BYTES} bytes",
                    id.len()
                ),
            ));
        }
        if let Some(bad) = id.chars().find(|c| !is_tenant_char(*c)) {
            return Err(InvalidInput::new(
                field,
                format!("may hold only ASCII letters, digits, `-` and `_`, not {bad:?}"),
            ));
        }
        Ok(Self(Some(id.into())))
    }

    /// [`Self::parse_as`], naming the header.
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        Self::parse_as(raw, TENANT_HEADER)
    }

    /// The tenant's id; `None` for the default tenant.
    pub fn id(&self) -> Option<&str> {
        self.0.as_deref()
    }

    pub fn is_default(&self) -> bool {
        self.0.is_none()
    }

    /// The id, or the empty string for the default tenant (as a `tenant_id`
    /// column holds it).
    pub fn as_str(&self) -> &str {
        self.0.as_deref().unwrap_or_default()
    }
}

/// In logs and messages: the id, or `(default)`.
impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id().unwrap_or("(default)"))
    }
}

fn is_tenant_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// The tenants allowed besides the default (`STICKY_ROUTING_TENANTS`):
/// `None` allows any valid tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantAllowlist(Option<BTreeSet<Arc<str>>>);

impl TenantAllowlist {
    /// Any valid tenant is allowed.
    pub const ANY: Self = Self(None);

    /// A comma-separated list of tenant ids: entries trimmed, empty ones
    /// ignored, each a valid tenant id, or an error saying which is not.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut allowed = BTreeSet::new();
        for entry in list.split(',') {
            match Tenant::parse_as(entry, "entry") {
                Ok(Tenant(Some(id))) => {
                    allowed.insert(id);
                }
                Ok(Tenant(None)) => {}
                Err(invalid) => return Err(format!("`{}`: {}", entry.trim(), invalid.reason)),
            }
        }
        Ok(Self(Some(allowed)))
    }

    /// Whether a call of `tenant` may be served: the default tenant always.
    pub fn allows(&self, tenant: &Tenant) -> bool {
        match (&self.0, tenant.id()) {
            (None, _) | (_, None) => true,
            (Some(allowed), Some(id)) => allowed.contains(id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_or_blank_is_the_default_tenant() {
        assert_eq!(Tenant::parse(""), Ok(Tenant::DEFAULT));
        assert_eq!(Tenant::parse(" \t "), Ok(Tenant::DEFAULT));
        assert!(Tenant::DEFAULT.is_default());
        assert_eq!(Tenant::DEFAULT.as_str(), "");
        assert_eq!(Tenant::DEFAULT.to_string(), "(default)");
    }

    #[test]
    fn ids_are_trimmed_and_keep_their_case() {
        let acme = Tenant::parse(" Acme_1-x ").unwrap();
        assert_eq!(acme.id(), Some("Acme_1-x"));
        assert_ne!(
            Tenant::parse("Acme").unwrap(),
            Tenant::parse("acme").unwrap()
        );
        assert_eq!(Tenant::parse(&"a".repeat(64)).unwrap().as_str().len(), 64);
    }

    #[test]
    fn anything_else_is_refused_naming_the_header() {
        for bad in [
            "a.b",
            "a b",
            "é",
            "a/b",
            "a:b",
            "a%b",
            "a{b}",
            &"a".repeat(65),
        ] {
            let invalid = Tenant::parse(bad).unwrap_err();
            assert_eq!(invalid.field, TENANT_HEADER, "{bad}");
        }
        assert!(
            Tenant::parse("a.b")
                .unwrap_err()
                .to_string()
                .starts_with("x-tenant-id: may hold only")
        );
    }

    #[test]
    fn the_allowlist_allows_the_default_and_its_entries_exactly() {
        let list = TenantAllowlist::parse(" acme , ,Globex,").unwrap();
        assert!(list.allows(&Tenant::DEFAULT));
        assert!(list.allows(&Tenant::parse("acme").unwrap()));
        assert!(list.allows(&Tenant::parse("Globex").unwrap()));
        assert!(!list.allows(&Tenant::parse("Acme").unwrap()));
        assert!(!list.allows(&Tenant::parse("other").unwrap()));
        assert!(TenantAllowlist::ANY.allows(&Tenant::parse("other").unwrap()));
        let problem = TenantAllowlist::parse("acme,a.b").unwrap_err();
        assert!(problem.starts_with("`a.b`: may hold only"), "{problem}");
    }
}
