//! The status sink contract suite against [`S3Status`] on moto's S3 (through
//! the real SDK), unchanged: each case writes its own object in a bucket of
//! its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use booking::notify::StatusSink;
use booking_aws::S3Status;
use booking_aws::resources::STATUS_KEY_DEFAULT;
use booking_aws_local::{LocalAws, Moto, moto_settings};
use booking_contract::outputs::StatusSinkFixture;

/// A fresh bucket on the process's shared moto.
struct Fixture;

#[async_trait]
impl StatusSinkFixture for Fixture {
    async fn sink(&self) -> Arc<dyn StatusSink> {
        let moto = Moto::shared().expect("moto");
        let clients = moto_settings(moto).clients().await;
        let bucket = LocalAws::resources().bucket;
        // the local region is us-east-1: no location constraint
        clients
            .s3
            .create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .expect("bucket created");
        Arc::new(S3Status::new(clients.s3, &bucket, STATUS_KEY_DEFAULT))
    }
}

booking_contract::status_sink_contract!(Fixture);
