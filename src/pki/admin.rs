//! Who may call the admin RPCs, GetHabits and ForgetCustomer: they read and
//! erase a customer's history, so an operator can limit them to named
//! client identities, each matched exactly against the client certificate's
//! names of its own kind: a URI (a SPIFFE id fits) against the URI names, a
//! bare name against the DNS names. No wildcards and no common-name
//! fallback: an identity is either named or refused.
//!
//! The kinds never cross because webpki vouches for them differently (see
//! `ClientIdentity`): a URI name is not checked at all, so a certificate
//! whose URI name reads `ops.example` must not pass for the DNS name
//! `ops.example`, which a CA may have been asked to vouch for.

use std::collections::HashSet;
use std::sync::Arc;

use rustls::pki_types::DnsName;

use super::ClientIdentity;

/// The admin RPCs' callers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AdminClients {
    /// Any client that reached the service (with mTLS: any authenticated one).
    #[default]
    Anyone,
    /// Only clients whose certificate names one of these identities.
    Only(Arc<AdminNames>),
}

/// The named identities, by the kind of certificate name each must match.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AdminNames {
    /// Matched against URI names only, such as `spiffe://corp/ns/x/sa/y`.
    uris: HashSet<String>,
    /// Matched against DNS names only, such as `ops.corp.example`.
    dns_names: HashSet<String>,
}

impl AdminNames {
    /// How many identities are named.
    pub fn len(&self) -> usize {
        self.uris.len() + self.dns_names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl AdminClients {
    /// Parses `a,b,c`: each identity trimmed, none empty. One with a
    /// `scheme:` is a URI; any other must be a valid DNS name (so no
    /// wildcard), since nothing else could ever match.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut names = AdminNames::default();
        for name in text.split(',').map(str::trim) {
            if name.is_empty() {
                return Err(
                    "holds an empty identity; give comma-separated URI or DNS names".into(),
                );
            }
            let kind = match name.contains(':') {
                true if is_uri(name) => &mut names.uris,
                false if DnsName::try_from(name).is_ok() => &mut names.dns_names,
                _ => {
                    return Err(format!(
                        "`{name}` is neither a URI (`scheme:…`, such as spiffe://…) \
                         nor a DNS name"
                    ));
                }
            };
            kind.insert(name.to_owned());
        }
        Ok(Self::Only(Arc::new(names)))
    }

    /// Whether a client with `identity` (`None`: plaintext, or no TLS
    /// identity at all) may call an admin RPC.
    pub fn permit(&self, identity: Option<&ClientIdentity>) -> bool {
        match self {
            Self::Anyone => true,
            Self::Only(allowed) => identity.is_some_and(|identity| {
                identity.uris().iter().any(|uri| allowed.uris.contains(uri))
                    || identity
                        .dns_names()
                        .iter()
                        .any(|dns| allowed.dns_names.contains(dns))
            }),
        }
    }
}

/// Whether `name` starts with a URI scheme (RFC 3986: a letter, then
/// letters, digits, `+`, `-` or `.`) and a colon, and goes on after it.
fn is_uri(name: &str) -> bool {
    let Some((scheme, rest)) = name.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(name: &str) -> ClientIdentity {
        ClientIdentity::new([name.to_owned()], [])
    }

    fn dns(name: &str) -> ClientIdentity {
        ClientIdentity::new([], [name.to_owned()])
    }

    #[test]
    fn parsing_trims_sorts_by_kind_and_refuses_empty_identities() {
        let parsed = AdminClients::parse(" spiffe://corp/ops , ops.corp.example").unwrap();
        let AdminClients::Only(names) = parsed else {
            panic!("a list parses to Only");
        };
        assert!(names.uris.contains("spiffe://corp/ops"));
        assert!(names.dns_names.contains("ops.corp.example"));
        assert_eq!(names.len(), 2);
        assert!(AdminClients::parse("a,,b").is_err());
        assert!(AdminClients::parse("").is_err());
    }

    /// An entry that could match nothing is a mistake to report at start:
    /// a wildcard, a name with a space, a colon without a scheme.
    #[test]
    fn parsing_refuses_what_is_neither_a_uri_nor_a_dns_name() {
        for bad in [
            "*.corp.example",
            "ops corp",
            ":ops",
            "1x:ops",
            "spiffe:",
            "ops..corp",
        ] {
            let error = AdminClients::parse(bad).unwrap_err();
            assert!(error.contains(bad), "{bad}: {error}");
        }
        for good in [
            "urn:corp:ops",
            "dns:ops.corp",
            "https://ops.corp/x",
            "localhost",
        ] {
            assert!(AdminClients::parse(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn a_list_admits_only_exact_names() {
        let only = AdminClients::parse("spiffe://corp/ops").unwrap();
        assert!(!only.permit(None), "no identity is never an admin");
        assert!(!only.permit(Some(&ClientIdentity::default())));
        assert!(only.permit(Some(&uri("spiffe://corp/ops"))));
        assert!(
            !only.permit(Some(&uri("spiffe://corp/Ops"))),
            "case matters"
        );
        assert!(
            !only.permit(Some(&uri("spiffe://corp/ops/x"))),
            "no prefixes"
        );
        assert!(AdminClients::Anyone.permit(None));
    }

    /// webpki passes URI names unchecked: a URI name that spells an allowed
    /// DNS name is no DNS name, and a DNS name never stands for a URI.
    #[test]
    fn each_identity_matches_only_names_of_its_own_kind() {
        let only = AdminClients::parse("spiffe://corp/ops, ops.corp.example").unwrap();
        assert!(only.permit(Some(&dns("ops.corp.example"))));
        assert!(!only.permit(Some(&uri("ops.corp.example"))));
        assert!(only.permit(Some(&uri("spiffe://corp/ops"))));
        assert!(!only.permit(Some(&dns("spiffe://corp/ops"))));
        let both = ClientIdentity::new(
            ["ops.corp.example".to_owned()],
            ["other.corp.example".to_owned()],
        );
        assert!(!only.permit(Some(&both)));
        let dns_scheme = AdminClients::parse("dns:ops.corp.example").unwrap();
        assert!(!dns_scheme.permit(Some(&dns("ops.corp.example"))));
        assert!(dns_scheme.permit(Some(&uri("dns:ops.corp.example"))));
    }
}
