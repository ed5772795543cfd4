//! `status.json` on S3: [`S3Status`], the [`StatusSink`] every writer
//! overwrites whole.
//!
//! A CDN in front serves the page; the object says how long a copy may be
//! served ([`STATUS_CACHE_CONTROL`]): no longer than the writers' 2 s
//! throttle, so a full level is never shown open for longer than the
//! throttle allows.

use async_trait::async_trait;
use aws_sdk_s3::primitives::ByteStream;
use booking::notify::{NotifyError, StatusSink};

use crate::errors::Failure;

/// The object's `Cache-Control`: browsers revalidate every second, a CDN
/// keeps a copy two seconds (the status throttle).
pub const STATUS_CACHE_CONTROL: &str = "public, max-age=1, s-maxage=2, must-revalidate";
/// The object's `Content-Type`.
pub const STATUS_CONTENT_TYPE: &str = "application/json";

/// The status document as an S3 object.
#[derive(Debug, Clone)]
pub struct S3Status {
    client: aws_sdk_s3::Client,
    bucket: String,
    key: String,
}

impl S3Status {
    /// The document at `bucket`/`key`.
    pub fn new(client: aws_sdk_s3::Client, bucket: &str, key: &str) -> S3Status {
        S3Status {
            client,
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        }
    }
}

#[async_trait]
impl StatusSink for S3Status {
    async fn put(&self, document: &[u8]) -> Result<(), NotifyError> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(&self.key)
            .content_type(STATUS_CONTENT_TYPE)
            .cache_control(STATUS_CACHE_CONTROL)
            .body(ByteStream::from(document.to_vec()))
            .send()
            .await
            .map_err(|e| NotifyError::Unavailable(Failure::of(&e).message))?;
        Ok(())
    }

    async fn get(&self) -> Result<Option<Vec<u8>>, NotifyError> {
        let out = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&self.key)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => {
                return Ok(None);
            }
            Err(e) => return Err(NotifyError::Unavailable(Failure::of(&e).message)),
        };
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| NotifyError::Unavailable(e.to_string()))?;
        Ok(Some(body.into_bytes().to_vec()))
    }
}
