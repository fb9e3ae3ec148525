//! Tenants over gRPC (contract v1.2, "Tenants"): `x-tenant-id` names a
//! namespace of its own for every key; a bad or unlisted tenant is refused
//! before anything is read or written; the default tenant keeps the keys it
//! always had.

use fred::prelude::KeysInterface;
use sticky_routing::domain::tenant::TenantAllowlist;
use tonic::Code;
use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

use sticky_routing::transport::pb;

use crate::support::eventually;

use crate::support::{Topology, outcome, spawn_app_on, spawn_app_with};

/// `message` with `x-tenant-id: tenant` (none for `None`).
fn as_tenant<T>(tenant: Option<&str>, message: T) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(tenant) = tenant {
        request
            .metadata_mut()
            .insert("x-tenant-id", MetadataValue::try_from(tenant).unwrap());
    }
    request
}

fn pin_request(customer: &str) -> pb::GetPinRequest {
    pb::GetPinRequest {
        merchant_id: "m1".into(),
        customer_id: customer.into(),
        payment_method: "interac".into(),
        payment_method_type: "rtp".into(),
        ..Default::default()
    }
}

async fn record_as(
    app: &crate::support::TestApp,
    tenant: Option<&str>,
    customer: &str,
    connector: &str,
) -> Result<pb::RecordOutcomeResponse, Status> {
    let req = outcome("m1", customer, connector, pb::Outcome::Success);
    app.api
        .clone()
        .record_outcome(as_tenant(tenant, req))
        .await
        .map(tonic::Response::into_inner)
}

async fn pin_as(
    app: &crate::support::TestApp,
    tenant: Option<&str>,
    customer: &str,
) -> pb::GetPinResponse {
    app.api
        .clone()
        .get_pin(as_tenant(tenant, pin_request(customer)))
        .await
        .unwrap()
        .into_inner()
}

/// Two tenants and the default one, each with merchant `m1` and customer
/// `c1`: three hashes, each pinned to its own connector; the default
/// tenant's key is the layout without tenants; forgetting the customer in
/// one tenant leaves the others; GetHabits reads the call's tenant only.
async fn tenants_keep_apart_on(topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    for (tenant, connector) in [
        (None, "DEFAULT_GW"),
        (Some("acme"), "ACME_GW"),
        (Some("Acme"), "ACME2_GW"),
    ] {
        let answer = record_as(&app, tenant, "c1", connector).await.unwrap();
        assert_eq!(answer.net_count, 1, "{tenant:?}: a new hash each");
    }
    for (tenant, connector) in [
        (None, "DEFAULT_GW"),
        (Some("acme"), "ACME_GW"),
        (Some("Acme"), "ACME2_GW"),
    ] {
        let pin = pin_as(&app, tenant, "c1").await;
        assert_eq!(pin.connector, connector, "{tenant:?}");
        assert_eq!(
            pin.candidates.len(),
            1,
            "{tenant:?} sees only its own combo"
        );
    }
    assert_eq!(
        app.customer_keys().await,
        vec![
            "sticky_gw_%TAcme_m1_c1".to_owned(),
            "sticky_gw_%Tacme_m1_c1".to_owned(),
            "sticky_gw_m1_c1".to_owned(),
        ]
    );
    let habits = app
        .api
        .clone()
        .get_habits(as_tenant(
            Some("acme"),
            pb::GetHabitsRequest {
                merchant_id: "m1".into(),
                customer_id: "c1".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(habits.habits.len(), 1);
    assert_eq!(habits.habits[0].connector, "ACME_GW");
    let forgot = app
        .api
        .clone()
        .forget_customer(as_tenant(
            Some("acme"),
            pb::ForgetCustomerRequest {
                merchant_id: "m1".into(),
                customer_id: "c1".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(forgot.existed);
    assert!(!pin_as(&app, Some("acme"), "c1").await.pinned);
    assert_eq!(pin_as(&app, None, "c1").await.connector, "DEFAULT_GW");
    assert_eq!(pin_as(&app, Some("Acme"), "c1").await.connector, "ACME2_GW");
    // Every key the service wrote has a TTL.
    for key in app.keys().await {
        let ttl: i64 = app.inspect.ttl(&key).await.unwrap();
        assert!(ttl > 0, "{key} has no TTL ({ttl})");
    }
}

#[tokio::test]
async fn tenants_with_the_same_ids_never_share_a_customer() {
    tenants_keep_apart_on(Topology::Single).await;
}

#[tokio::test]
async fn tenants_with_the_same_ids_never_share_a_customer_on_cluster() {
    tenants_keep_apart_on(Topology::Cluster).await;
}

/// A tenant id that is not one, or two of them, is INVALID_ARGUMENT naming
/// the header; a valid one the list leaves out is PERMISSION_DENIED, even
/// when it is also the wrong case of a listed one; nothing reaches Redis
/// for any of them. The default tenant and listed ones are served.
#[tokio::test]
async fn bad_or_unlisted_tenants_are_refused_with_nothing_read_or_written() {
    let app = spawn_app_with(|s| s.tenants = TenantAllowlist::parse("acme, globex").unwrap()).await;
    let before = app.command_calls().await;
    for (tenant, code) in [
        ("a.b", Code::InvalidArgument),
        (&"a".repeat(65), Code::InvalidArgument),
        ("other", Code::PermissionDenied),
        ("Acme", Code::PermissionDenied),
    ] {
        let refused = record_as(&app, Some(tenant), "c1", "GW").await.unwrap_err();
        assert_eq!(refused.code(), code, "{tenant}: {refused:?}");
        assert!(
            refused.message().starts_with("x-tenant-id: "),
            "{}",
            refused.message()
        );
        let refused = app
            .api
            .clone()
            .get_pin(as_tenant(Some(tenant), pin_request("c1")))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), code, "{tenant}");
    }
    // Two values in one call.
    let mut twice = Request::new(outcome("m1", "c1", "GW", pb::Outcome::Success));
    for value in ["acme", "globex"] {
        twice
            .metadata_mut()
            .append("x-tenant-id", MetadataValue::try_from(value).unwrap());
    }
    let refused = app.api.clone().record_outcome(twice).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().contains("x-tenant-id"));
    assert_eq!(
        app.commands_since(&before).await,
        vec![],
        "a refused call reached Redis"
    );
    assert!(app.keys().await.is_empty());
    // Served: the default tenant (absent or empty header) and listed ones.
    for tenant in [None, Some(""), Some("acme"), Some(" globex ")] {
        record_as(&app, tenant, "c1", "GW").await.unwrap();
    }
    assert_eq!(
        app.customer_keys().await,
        vec![
            "sticky_gw_%Tacme_m1_c1".to_owned(),
            "sticky_gw_%Tglobex_m1_c1".to_owned(),
            "sticky_gw_m1_c1".to_owned(),
        ]
    );
}

/// The admission budget is per (tenant, merchant), with the same setting:
/// with a budget of one, each tenant's merchant admits its first new
/// customer and refuses its second.
#[tokio::test]
async fn each_tenants_merchant_has_its_own_budget() {
    let app = spawn_app_with(|s| {
        let m1 = sticky_routing::domain::ids::MerchantId::parse("m1").unwrap();
        s.rules.budgets.overrides.insert(m1, 1);
    })
    .await;
    for tenant in [None, Some("acme"), Some("globex")] {
        let first = record_as(&app, tenant, "c1", "GW").await.unwrap();
        assert_eq!(first.result(), pb::RecordResult::Applied, "{tenant:?}");
        let second = record_as(&app, tenant, "c2", "GW").await.unwrap();
        assert_eq!(second.result(), pb::RecordResult::NotAdmitted, "{tenant:?}");
    }
    let admission: Vec<String> = app
        .keys()
        .await
        .into_iter()
        .filter(|k| k.starts_with("sticky_adm_"))
        .collect();
    assert_eq!(
        admission,
        vec![
            "sticky_adm_%Tacme_m1",
            "sticky_adm_%Tglobex_m1",
            "sticky_adm_m1"
        ]
    );
}

/// Breakers are per (tenant, merchant, connector): failures that trip
/// `acme`'s m1/GW leave the default tenant's m1/GW closed, and an override
/// for `globex` reaches only `globex`'s pins; GetConnectorHealth answers
/// for the call's tenant alone.
#[tokio::test]
async fn each_tenants_breakers_are_its_own() {
    use sticky_routing::domain::breaker::{BreakerSettings, Share};
    let app = spawn_app_with(|s| {
        s.breaker = Some(BreakerSettings {
            window: std::time::Duration::from_secs(20),
            min_calls: 4,
            open_for: std::time::Duration::from_secs(30),
            probe_calls: 2,
            probe_share: Share::new(0.1).unwrap(),
            ..BreakerSettings::DEFAULT
        });
    })
    .await;
    for tenant in [None, Some("acme"), Some("globex")] {
        record_as(&app, tenant, "c1", "GW").await.unwrap();
    }
    // Four failures in acme's m1/GW, each for a new customer: a trip.
    for i in 0..4 {
        let req = outcome("m1", &format!("f{i}"), "GW", pb::Outcome::GatewayFailure);
        app.api
            .clone()
            .record_outcome(as_tenant(Some("acme"), req))
            .await
            .unwrap();
    }
    let vetoed = |pin: &pb::GetPinResponse| !pin.pinned && !pin.vetoes.is_empty();
    eventually(
        std::time::Duration::from_secs(3),
        "acme's breaker opens",
        || async { vetoed(&pin_as(&app, Some("acme"), "c1").await) },
    )
    .await;
    let forced = app
        .api
        .clone()
        .set_connector_override(as_tenant(
            Some("globex"),
            pb::SetConnectorOverrideRequest {
                merchant_id: "m1".into(),
                connector: "GW".into(),
                r#override: pb::BreakerOverride::ForceOpen as i32,
                ttl_seconds: 60,
            },
        ))
        .await;
    forced.unwrap();
    eventually(
        std::time::Duration::from_secs(3),
        "globex's override",
        || async {
            let pin = pin_as(&app, Some("globex"), "c1").await;
            pin.vetoes.first().map(|v| v.reason) == Some(pb::VetoReason::ForcedOpen as i32)
        },
    )
    .await;
    // The default tenant's m1/GW has neither.
    let pin = pin_as(&app, None, "c1").await;
    assert!(pin.pinned && pin.vetoes.is_empty(), "{pin:?}");
    let health = |tenant: Option<&'static str>| {
        let mut api = app.api.clone();
        async move {
            let req = pb::GetConnectorHealthRequest {
                merchant_id: "m1".into(),
            };
            api.get_connector_health(as_tenant(tenant, req))
                .await
                .unwrap()
                .into_inner()
                .connectors
        }
    };
    let acme = health(Some("acme")).await;
    assert_eq!(acme.len(), 1, "{acme:?}");
    assert_eq!(acme[0].state, pb::BreakerState::Open as i32);
    assert_eq!(acme[0].r#override, pb::BreakerOverride::None as i32);
    let globex = health(Some("globex")).await;
    assert_eq!(globex.len(), 1, "{globex:?}");
    assert_eq!(globex[0].r#override, pb::BreakerOverride::ForceOpen as i32);
    assert_ne!(globex[0].state, pb::BreakerState::Open as i32);
    let default = health(None).await;
    assert!(
        default
            .iter()
            .all(|c| c.state == pb::BreakerState::Closed as i32
                && c.r#override == pb::BreakerOverride::None as i32),
        "{default:?}"
    );
    for key in app.keys().await {
        let ttl: i64 = app.inspect.ttl(&key).await.unwrap();
        assert!(ttl > 0, "{key} has no TTL ({ttl})");
    }
}
