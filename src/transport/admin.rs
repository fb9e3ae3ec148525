//! Who may call the admin RPCs, GetHabits and ForgetCustomer: they read and
//! erase a customer's history, so an operator can limit them to named
//! client identities, matched exactly against the URI and DNS names of the
//! client's certificate (a SPIFFE id fits). No wildcards and no common-name
//! fallback: an identity is either named or refused.

use std::collections::HashSet;
use std::sync::Arc;

use super::tls::ClientIdentity;

/// The admin RPCs' callers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AdminClients {
    /// Any client that reached the service (with mTLS: any authenticated one).
    #[default]
    Anyone,
    /// Only clients whose certificate names one of these identities.
    Only(Arc<HashSet<String>>),
}

impl AdminClients {
    /// Parses `a,b,c`: each identity trimmed, none empty.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut names = HashSet::new();
        for name in text.split(',').map(str::trim) {
            if name.is_empty() {
                return Err(
                    "holds an empty identity; give comma-separated URI or DNS names".into(),
                );
            }
            names.insert(name.to_owned());
        }
        Ok(Self::Only(Arc::new(names)))
    }

    /// Whether a client with `identity` (`None`: plaintext, or no TLS
    /// identity at all) may call an admin RPC.
    pub fn permit(&self, identity: Option<&ClientIdentity>) -> bool {
        match self {
            Self::Anyone => true,
            Self::Only(allowed) => identity
                .is_some_and(|identity| identity.names().iter().any(|name| allowed.contains(name))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing_trims_and_refuses_empty_identities() {
        let parsed = AdminClients::parse(" spiffe://corp/ops , ops.corp.example").unwrap();
        let AdminClients::Only(names) = parsed else {
            panic!("a list parses to Only");
        };
        assert!(names.contains("spiffe://corp/ops") && names.contains("ops.corp.example"));
        assert_eq!(names.len(), 2);
        assert!(AdminClients::parse("a,,b").is_err());
        assert!(AdminClients::parse("").is_err());
    }

    #[test]
    fn a_list_admits_only_exact_names() {
        let only = AdminClients::parse("spiffe://corp/ops").unwrap();
        assert!(!only.permit(None), "no identity is never an admin");
        assert!(!only.permit(Some(&ClientIdentity::default())));
        let named = |name: &str| ClientIdentity::from_names([name.to_owned()]);
        assert!(only.permit(Some(&named("spiffe://corp/ops"))));
        assert!(
            !only.permit(Some(&named("spiffe://corp/Ops"))),
            "case matters"
        );
        assert!(
            !only.permit(Some(&named("spiffe://corp/ops/x"))),
            "no prefixes"
        );
        assert!(AdminClients::Anyone.permit(None));
    }
}
