//! The health veto through the API: live connector scores let a pin yield
//! to a healthier candidate, with the same single Redis read, and bad scores
//! or ratios are rejected by name.

use std::collections::HashMap;

use rstest::rstest;
use sticky_routing::domain::pin::ScoreRatio;
use sticky_routing::transport::pb;
use tonic::Code;

use crate::support::*;

/// c1 has GIGADAT 3, LOONIO 2, PAYSAFE 1.
async fn habits(app: &TestApp) {
    for (connector, times) in [("GIGADAT", 3), ("LOONIO", 2), ("PAYSAFE", 1)] {
        for _ in 0..times {
            app.success("c1", connector).await;
        }
    }
}

fn scored(scores: &[(&str, f64)], ratio: Option<f64>) -> pb::GetPinRequest {
    pb::GetPinRequest {
        connector_scores: scores.iter().map(|(c, s)| (c.to_string(), *s)).collect(),
        min_score_ratio: ratio,
        ..pin_request("c1", &[])
    }
}

fn names(list: &[pb::ConnectorCount]) -> Vec<&str> {
    list.iter().map(|c| c.connector.as_str()).collect()
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn a_failing_pinned_connector_yields_in_one_redis_read(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    habits(&app).await;
    let before = app.command_calls().await;
    // GIGADAT scores 0.3 < 0.5 × 0.9: vetoed; LOONIO has no score.
    let pin = app
        .pin(scored(&[("GIGADAT", 0.3), ("PAYSAFE", 0.9)], None))
        .await
        .unwrap();
    assert_eq!(
        app.commands_since(&before).await,
        [("hgetall".to_string(), 1)]
    );
    assert!(pin.pinned);
    assert_eq!((pin.connector.as_str(), pin.net_count), ("LOONIO", 2));
    assert_eq!(names(&pin.candidates), ["GIGADAT", "LOONIO", "PAYSAFE"]);
    assert_eq!(names(&pin.vetoed), ["GIGADAT"]);
    assert_eq!(pin.vetoed[0].net_count, 3);
}

#[tokio::test]
async fn every_candidate_vetoed_means_no_pin() {
    let app = spawn_app().await;
    habits(&app).await;
    let pin = app
        .pin(scored(
            &[
                ("GIGADAT", 0.1),
                ("LOONIO", 0.1),
                ("PAYSAFE", 0.1),
                ("OTHER", 1.0),
            ],
            None,
        ))
        .await
        .unwrap();
    assert!(!pin.pinned);
    assert_eq!((pin.connector.as_str(), pin.net_count), ("", 0));
    assert_eq!(names(&pin.candidates), ["GIGADAT", "LOONIO", "PAYSAFE"]);
    assert_eq!(names(&pin.vetoed), ["GIGADAT", "LOONIO", "PAYSAFE"]);
}

#[tokio::test]
async fn the_ratio_comes_from_the_call_or_the_setting_and_zero_disables() {
    let app = spawn_app_with(|s| s.rules.min_score_ratio = ScoreRatio::new(0.9).unwrap()).await;
    habits(&app).await;
    let scores = [("GIGADAT", 0.8), ("LOONIO", 1.0)];
    // The setting: 0.8 < 0.9 × 1.0.
    let pin = app.pin(scored(&scores, None)).await.unwrap();
    assert_eq!(pin.connector, "LOONIO");
    // The call's own ratio wins; 0 turns the veto off.
    for ratio in [0.5, 0.0] {
        let pin = app.pin(scored(&scores, Some(ratio))).await.unwrap();
        assert_eq!(pin.connector, "GIGADAT", "ratio {ratio}");
        assert!(pin.vetoed.is_empty());
    }
    // No scores: v1 behaviour.
    let pin = app.pin(scored(&[], Some(1.0))).await.unwrap();
    assert_eq!(pin.connector, "GIGADAT");
}

#[tokio::test]
async fn the_top_score_counts_only_eligible_connectors() {
    let app = spawn_app().await;
    habits(&app).await;
    let req = pb::GetPinRequest {
        eligible_connectors: vec!["GIGADAT".into(), "LOONIO".into()],
        ..scored(&[("GIGADAT", 0.3), ("LOONIO", 0.4), ("PAYSAFE", 1.0)], None)
    };
    let pin = app.pin(req).await.unwrap();
    assert_eq!(pin.connector, "GIGADAT");
    assert!(pin.vetoed.is_empty());
}

#[tokio::test]
async fn bad_scores_and_ratios_are_rejected_by_name() {
    let app = spawn_app().await;
    habits(&app).await;
    let too_many: Vec<(String, f64)> = (0..65).map(|i| (format!("c{i}"), 1.0)).collect();
    let cases: Vec<(&str, pb::GetPinRequest)> = vec![
        ("min_score_ratio", scored(&[], Some(1.5))),
        ("min_score_ratio", scored(&[], Some(-0.1))),
        ("min_score_ratio", scored(&[], Some(f64::NAN))),
        ("connector_scores", scored(&[("GIGADAT", -1.0)], None)),
        ("connector_scores", scored(&[("GIGADAT", f64::NAN)], None)),
        (
            "connector_scores",
            scored(&[("GIGADAT", f64::INFINITY)], None),
        ),
        (
            "connector_scores",
            pb::GetPinRequest {
                connector_scores: too_many.into_iter().collect::<HashMap<_, _>>(),
                ..pin_request("c1", &[])
            },
        ),
    ];
    for (field, req) in cases {
        let status = app.pin(req).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        assert!(status.message().starts_with(field), "{field}: {status:?}");
    }
}
