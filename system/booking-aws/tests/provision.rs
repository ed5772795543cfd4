//! `provision` against moto (every service, point-in-time recovery included)
//! and against dynoxide + moto (what the rehearsals use): every setting of
//! the design, read back from the servers; a second run changes nothing; a
//! drifted queue is brought back; what cannot be changed is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use aws_sdk_dynamodb::types::{BillingMode, StreamViewType};
use aws_sdk_sqs::types::QueueAttributeName;
use booking_aws::{ProvisionError, ProvisionOptions, StepState, provision};
use booking_aws_local::LocalAws;

fn options(allow_unsupported: bool) -> ProvisionOptions {
    ProvisionOptions {
        visibility_timeout: Duration::from_secs(60),
        receives_max: 5,
        allow_unsupported,
    }
}

#[tokio::test]
async fn every_setting_of_the_design_is_made_and_a_second_run_changes_nothing() {
    let local = LocalAws::start().await.unwrap();
    let clients = local.moto_settings().clients().await;
    let r = LocalAws::resources();
    let first = provision(&clients, &r, &options(false)).await.unwrap();
    assert!(first.changed());
    assert!(
        first.steps.iter().all(|s| s.state == StepState::Created),
        "{first:#?}"
    );

    let t = clients
        .dynamodb
        .describe_table()
        .table_name(&r.table)
        .send()
        .await
        .unwrap();
    let t = t.table().unwrap();
    assert_eq!(t.key_schema()[0].attribute_name(), "candidate");
    assert_eq!(t.key_schema().len(), 1);
    assert_eq!(
        t.billing_mode_summary().and_then(|b| b.billing_mode()),
        Some(&BillingMode::PayPerRequest)
    );
    let mut gsis: Vec<&str> = t
        .global_secondary_indexes()
        .iter()
        .filter_map(|i| i.index_name())
        .collect();
    gsis.sort_unstable();
    assert_eq!(gsis, ["by_payment", "held_due"]);
    let stream = t.stream_specification().unwrap();
    assert!(stream.stream_enabled());
    assert_eq!(
        stream.stream_view_type(),
        Some(&StreamViewType::NewAndOldImages)
    );
    assert_eq!(t.deletion_protection_enabled(), Some(true));
    let ttl = clients
        .dynamodb
        .describe_time_to_live()
        .table_name(&r.table)
        .send()
        .await
        .unwrap();
    let ttl = ttl.time_to_live_description().unwrap();
    assert_eq!(ttl.attribute_name(), Some("expires_at_s"));
    assert_eq!(
        ttl.time_to_live_status().map(|s| s.as_str()),
        Some("ENABLED")
    );
    let pitr = clients
        .dynamodb
        .describe_continuous_backups()
        .table_name(&r.table)
        .send()
        .await
        .unwrap();
    let status = pitr
        .continuous_backups_description()
        .and_then(|c| c.point_in_time_recovery_description())
        .and_then(|p| p.point_in_time_recovery_status())
        .map(|s| s.as_str().to_owned());
    assert_eq!(status.as_deref(), Some("ENABLED"));
    // deletion protection holds
    assert!(
        clients
            .dynamodb
            .delete_table()
            .table_name(&r.table)
            .send()
            .await
            .is_err()
    );

    let url = clients
        .sqs
        .get_queue_url()
        .queue_name(&r.queue)
        .send()
        .await
        .unwrap();
    let attrs = clients
        .sqs
        .get_queue_attributes()
        .queue_url(url.queue_url().unwrap())
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let a = attrs.attributes().unwrap();
    let get = |k: &str| {
        a.get(&QueueAttributeName::from(k))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(get("FifoQueue"), "true");
    assert_eq!(get("DeduplicationScope"), "messageGroup");
    assert_eq!(get("FifoThroughputLimit"), "perMessageGroupId");
    assert_eq!(get("VisibilityTimeout"), "60");
    assert_eq!(get("ReceiveMessageWaitTimeSeconds"), "20");
    let redrive: serde_json::Value = serde_json::from_str(&get("RedrivePolicy")).unwrap();
    assert_eq!(
        redrive["maxReceiveCount"].to_string().trim_matches('"'),
        "5"
    );
    let dlq = clients
        .sqs
        .get_queue_url()
        .queue_name(&r.dead_letter_queue)
        .send()
        .await
        .unwrap();
    let dlq_arn = clients
        .sqs
        .get_queue_attributes()
        .queue_url(dlq.queue_url().unwrap())
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap();
    assert_eq!(
        redrive["deadLetterTargetArn"].as_str(),
        dlq_arn
            .attributes()
            .unwrap()
            .get(&QueueAttributeName::QueueArn)
            .map(String::as_str),
        "the ARN the server gave, whatever its account ID"
    );
    assert!(
        clients
            .s3
            .head_bucket()
            .bucket(&r.bucket)
            .send()
            .await
            .is_ok()
    );

    let second = provision(&clients, &r, &options(false)).await.unwrap();
    assert!(!second.changed(), "{second:#?}");
    assert!(second.steps.iter().all(|s| s.state == StepState::Unchanged));
    assert_eq!(second.steps.len(), first.steps.len());

    // another visibility timeout is brought to the settings', and only that
    let drifted = ProvisionOptions {
        visibility_timeout: Duration::from_secs(45),
        ..options(false)
    };
    let third = provision(&clients, &r, &drifted).await.unwrap();
    let changed: Vec<_> = third
        .steps
        .iter()
        .filter(|s| s.state != StepState::Unchanged)
        .collect();
    assert_eq!(changed.len(), 1, "{changed:#?}");
    assert_eq!(
        (changed[0].resource.as_str(), changed[0].setting.as_str()),
        (r.queue.as_str(), "VisibilityTimeout")
    );
    assert_eq!(changed[0].state, StepState::Updated);
}

#[tokio::test]
async fn dynoxide_lacks_point_in_time_recovery_and_says_so() {
    let local = LocalAws::start().await.unwrap();
    let clients = local.settings().clients().await;
    let r = LocalAws::resources();
    let refused = provision(&clients, &r, &options(false)).await.unwrap_err();
    assert!(
        matches!(refused, ProvisionError::Unsupported { .. }),
        "{refused}"
    );
    let report = provision(&clients, &r, &options(true)).await.unwrap();
    let pitr = report.step(&r.table, "point-in-time recovery").unwrap();
    assert_eq!(pitr.state, StepState::Unsupported);
    assert_eq!(
        report.step(&r.table, "ttl").unwrap().state,
        StepState::Unchanged,
        "made by the refused run"
    );
}

#[tokio::test]
async fn a_standard_queue_under_the_fifo_name_is_refused() {
    let local = LocalAws::start().await.unwrap();
    let clients = local.moto_settings().clients().await;
    let mut r = LocalAws::resources();
    // the failure queue is standard: claiming it is the dead-letter queue fails
    r.dead_letter_queue = r.failure_queue.clone();
    assert!(matches!(
        provision(&clients, &r, &options(false)).await,
        Err(ProvisionError::Names(_))
    ));
    let r = LocalAws::resources();
    clients
        .sqs
        .create_queue()
        .queue_name(&r.dead_letter_queue)
        .send()
        .await
        .ok();
    let e = provision(&clients, &r, &options(false)).await;
    assert!(
        e.is_err(),
        "moto refuses a standard queue named .fifo, or provision does"
    );
}
