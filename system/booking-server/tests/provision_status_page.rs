//! `booking provision` on the AWS stack (S3 on moto, as the other AWS tests)
//! uploads the status page beside `status.json`: the page's bytes as
//! `GET /status` serves them, `text/html`, the CDN `Cache-Control`; a
//! second run leaves it alone; a changed object is put back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use booking_api::status_page::{STATUS_PAGE, STATUS_PAGE_CONTENT_TYPE};
use booking_aws::StepState;
use booking_aws::provision::{STATUS_PAGE_CACHE_CONTROL, status_page_key};
use booking_server::config::{
    AwsStackConfig, PersistenceCheck, ServerConfig, StackConfig, StackKind,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provision_uploads_the_status_page_beside_the_document() {
    let local = booking_aws_local::LocalAws::start().await.unwrap();
    let prefix = format!("page{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff);
    let config = ServerConfig {
        stack: StackConfig {
            kind: StackKind::Aws,
            redis_persistence: PersistenceCheck::OutOfBand,
            aws: AwsStackConfig {
                prefix: prefix.clone(),
                sdk: local.settings(),
                allow_unsupported_settings: true,
                ..AwsStackConfig::default()
            },
            ..StackConfig::default()
        },
        ..ServerConfig::default()
    };
    let resources = booking_aws::Resources::named(&prefix).unwrap();
    let key = status_page_key(&resources.status_key);
    assert_eq!(key, "status.html");

    let first = booking_server::provision(&config, false).await.unwrap();
    let step = first
        .aws
        .as_ref()
        .unwrap()
        .step(&resources.bucket, "status page")
        .cloned()
        .unwrap();
    assert_eq!(step.state, StepState::Created, "{step:?}");

    let s3 = config.stack.aws.sdk.clients().await.s3;
    let read = || async {
        let out = s3
            .get_object()
            .bucket(&resources.bucket)
            .key(&key)
            .send()
            .await
            .unwrap();
        let (ct, cc) = (
            out.content_type().map(str::to_owned),
            out.cache_control().map(str::to_owned),
        );
        let body = out.body.collect().await.unwrap().into_bytes().to_vec();
        (ct, cc, body)
    };
    let (ct, cc, body) = read().await;
    assert_eq!(ct.as_deref(), Some(STATUS_PAGE_CONTENT_TYPE));
    assert!(ct.unwrap().starts_with("text/html"));
    assert_eq!(cc.as_deref(), Some(STATUS_PAGE_CACHE_CONTROL));
    assert_eq!(body, STATUS_PAGE.as_bytes());

    let again = booking_server::provision(&config, false).await.unwrap();
    let step = again
        .aws
        .as_ref()
        .unwrap()
        .step(&resources.bucket, "status page")
        .cloned()
        .unwrap();
    assert_eq!(step.state, StepState::Unchanged, "{step:?}");
    assert!(!again.aws.unwrap().changed(), "idempotent");

    // someone overwrote it: provision puts the page back
    s3.put_object()
        .bucket(&resources.bucket)
        .key(&key)
        .content_type("text/plain")
        .body(b"defaced".to_vec().into())
        .send()
        .await
        .unwrap();
    let third = booking_server::provision(&config, false).await.unwrap();
    let step = third
        .aws
        .as_ref()
        .unwrap()
        .step(&resources.bucket, "status page")
        .cloned()
        .unwrap();
    assert_eq!(step.state, StepState::Updated, "{step:?}");
    let (ct, _, body) = read().await;
    assert_eq!(ct.as_deref(), Some(STATUS_PAGE_CONTENT_TYPE));
    assert_eq!(body, STATUS_PAGE.as_bytes());
}
