//! `STICKY_ROUTING_BREAKER=off` through the API: the breaker's admin RPCs
//! answer `FAILED_PRECONDITION` naming the setting, before they read the
//! request and without touching Redis, and GetPin still lists its score
//! vetoes with their reason.

use sticky_routing::transport::pb;
use tonic::Code;

use crate::support::*;

#[tokio::test]
async fn the_breaker_admin_rpcs_need_the_breaker() {
    let app = spawn_app_with(|s| s.breaker = None).await;
    let before = app.command_calls().await;
    for merchant in ["m1", " "] {
        let health = app
            .api
            .clone()
            .get_connector_health(pb::GetConnectorHealthRequest {
                merchant_id: merchant.into(),
            })
            .await
            .unwrap_err();
        let set = app
            .api
            .clone()
            .set_connector_override(pb::SetConnectorOverrideRequest {
                merchant_id: merchant.into(),
                connector: "GIGADAT".into(),
                r#override: pb::BreakerOverride::ForceOpen.into(),
                ttl_seconds: 60,
            })
            .await
            .unwrap_err();
        for (rpc, status) in [
            ("GetConnectorHealth", health),
            ("SetConnectorOverride", set),
        ] {
            assert_eq!(status.code(), Code::FailedPrecondition, "{rpc}: {status:?}");
            assert!(
                status.message().starts_with(rpc)
                    && status.message().contains("STICKY_ROUTING_BREAKER"),
                "{status:?}"
            );
        }
    }
    assert_eq!(app.commands_since(&before).await, []);
}

#[tokio::test]
async fn get_pin_lists_score_vetoes_with_their_reason_when_off() {
    let app = spawn_app_with(|s| s.breaker = None).await;
    for connector in ["GIGADAT", "GIGADAT", "LOONIO"] {
        app.success("c1", connector).await;
    }
    let pin = app
        .pin(pb::GetPinRequest {
            connector_scores: [("GIGADAT".to_string(), 0.1), ("LOONIO".to_string(), 1.0)]
                .into_iter()
                .collect(),
            ..pin_request("c1", &[])
        })
        .await
        .unwrap();
    assert_eq!(pin.connector, "LOONIO");
    assert_eq!(
        pin.vetoes,
        [pb::Veto {
            connector: "GIGADAT".into(),
            net_count: 2,
            reason: pb::VetoReason::Score.into(),
        }]
    );
    let metrics = app.scrape().await;
    assert_eq!(
        sample(
            &metrics,
            "sticky_routing_breaker_vetoes_total{reason=\"score\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
}
