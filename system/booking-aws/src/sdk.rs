//! The SDK's configuration, standard first: `aws-config`'s defaults read the
//! region, credentials and endpoints the usual way (environment, profile,
//! `AWS_ENDPOINT_URL` and the per-service `AWS_ENDPOINT_URL_<SERVICE>`, then
//! instance metadata), and [`AwsSettings`] only adds what a config file may
//! pin on top: a region, endpoint overrides, static test credentials for a
//! local server.
//!
//! Retries and timeouts are set per client, on purpose:
//! - DynamoDB makes one attempt ([`DYNAMODB_ATTEMPTS`]): a throttle must reach
//!   the adapter, which counts it for the audit, instead of being retried
//!   away inside the SDK. Every caller already has its own retry (a message
//!   redelivered, the next sweep, the reconciler behind a callback).
//! - SQS and S3 keep the standard retry (throttles there are not an audited
//!   invariant) with an attempt timeout above the longest long poll.
//! - SES and SNS (mail and alerts, made on their own by the server's
//!   `[mail]` and `[alerts]`) keep the standard retry; each send has a bound
//!   of its own over all attempts.

use std::sync::Arc;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use serde::{Deserialize, Serialize};

use crate::calls::{AwsCalls, CountCalls};

/// Attempts per DynamoDB call: one, so throttles are seen and counted.
pub const DYNAMODB_ATTEMPTS: u32 = 1;
/// Attempts per SQS or S3 call (the SDK's standard retry).
pub const STANDARD_ATTEMPTS: u32 = 3;
/// One DynamoDB attempt at most: well inside the 8 s request deadline.
pub const DYNAMODB_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);
/// One SQS attempt at most: above the 20 s long poll, or every long poll
/// would time out.
pub const SQS_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(25);
/// One S3 attempt at most.
pub const S3_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// One SES or SNS attempt at most (the whole send has its own bound on
/// top: [`crate::ses::SesConfig::send_timeout_ms`],
/// [`crate::alerts::PUBLISH_TIMEOUT`]).
pub const NOTIFY_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Connecting at most.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The access key of [`AwsSettings::local_credentials`].
pub const LOCAL_ACCESS_KEY: &str = "test";
/// The region a local server gets when none is configured.
pub const LOCAL_REGION: &str = "us-east-1";

/// Per-service endpoint overrides; unset ones come from the standard
/// configuration (`AWS_ENDPOINT_URL_<SERVICE>`, then `AWS_ENDPOINT_URL`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Endpoints {
    /// Every service.
    pub all: Option<String>,
    /// DynamoDB.
    pub dynamodb: Option<String>,
    /// DynamoDB Streams.
    pub dynamodb_streams: Option<String>,
    /// SQS.
    pub sqs: Option<String>,
    /// S3.
    pub s3: Option<String>,
    /// SES (v2), for `[mail] kind = "ses"`.
    pub ses: Option<String>,
    /// SNS, for `[alerts] kind = "sns"`.
    pub sns: Option<String>,
}

impl Endpoints {
    /// The override for one service, or the one for all.
    fn pick<'a>(&'a self, service: &'a Option<String>) -> Option<&'a str> {
        service.as_deref().or(self.all.as_deref())
    }

    /// Whether anything points away from AWS, here or in the environment
    /// (then S3 uses path-style addressing: a local server has no
    /// per-bucket host names).
    fn any_local(&self) -> bool {
        self.all.is_some()
            || self.s3.is_some()
            || std::env::var_os("AWS_ENDPOINT_URL").is_some()
            || std::env::var_os("AWS_ENDPOINT_URL_S3").is_some()
    }
}

/// What a config file may set on top of the standard configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AwsSettings {
    /// The region (otherwise `AWS_REGION`, the profile, instance metadata).
    pub region: Option<String>,
    /// Endpoint overrides.
    pub endpoints: Endpoints,
    /// Static test credentials (`test`/`test`) and, without a region, the
    /// local region: for a local server only, so the SDK never probes
    /// instance metadata.
    pub local_credentials: bool,
    /// S3 path-style addressing (default: on whenever an endpoint is overridden).
    pub s3_path_style: Option<bool>,
}

/// The four clients of the adapters.
#[derive(Debug, Clone)]
pub struct Clients {
    /// Every call made with them, per service and operation (one
    /// interceptor on each client).
    pub calls: Arc<AwsCalls>,
    /// DynamoDB, one attempt per call.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// DynamoDB Streams.
    pub streams: aws_sdk_dynamodbstreams::Client,
    /// SQS, long-poll-proof timeouts.
    pub sqs: aws_sdk_sqs::Client,
    /// S3.
    pub s3: aws_sdk_s3::Client,
}

fn timeouts(attempt: Duration) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(attempt)
        .build()
}

impl AwsSettings {
    /// The shared configuration: the standard chain, then these settings.
    pub async fn load(&self) -> SdkConfig {
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if let Some(region) = &self.region {
            loader = loader.region(Region::new(region.clone()));
        } else if self.local_credentials {
            loader = loader.region(Region::new(LOCAL_REGION));
        }
        if self.local_credentials {
            loader = loader.credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                LOCAL_ACCESS_KEY,
                LOCAL_ACCESS_KEY,
                None,
                None,
                "sellout-local",
            ));
        }
        if let Some(all) = &self.endpoints.all {
            loader = loader.endpoint_url(all.clone());
        }
        loader.load().await
    }

    /// The clients, each with its retry and timeouts.
    pub async fn clients(&self) -> Clients {
        let sdk = self.load().await;
        self.clients_from(&sdk)
    }

    /// The clients from a loaded configuration.
    pub fn clients_from(&self, sdk: &SdkConfig) -> Clients {
        let e = &self.endpoints;
        let calls = Arc::new(AwsCalls::default());
        let count = CountCalls(calls.clone());
        let mut dynamodb = aws_sdk_dynamodb::config::Builder::from(sdk)
            .interceptor(count.clone())
            .retry_config(RetryConfig::standard().with_max_attempts(DYNAMODB_ATTEMPTS))
            .timeout_config(timeouts(DYNAMODB_ATTEMPT_TIMEOUT));
        if let Some(url) = e.pick(&e.dynamodb) {
            dynamodb = dynamodb.endpoint_url(url);
        }
        let mut streams = aws_sdk_dynamodbstreams::config::Builder::from(sdk)
            .interceptor(count.clone())
            .retry_config(RetryConfig::standard().with_max_attempts(STANDARD_ATTEMPTS))
            .timeout_config(timeouts(DYNAMODB_ATTEMPT_TIMEOUT));
        if let Some(url) = e.pick(&e.dynamodb_streams) {
            streams = streams.endpoint_url(url);
        }
        let mut sqs = aws_sdk_sqs::config::Builder::from(sdk)
            .interceptor(count.clone())
            .retry_config(RetryConfig::standard().with_max_attempts(STANDARD_ATTEMPTS))
            .timeout_config(timeouts(SQS_ATTEMPT_TIMEOUT));
        if let Some(url) = e.pick(&e.sqs) {
            sqs = sqs.endpoint_url(url);
        }
        let mut s3 = aws_sdk_s3::config::Builder::from(sdk)
            .interceptor(count)
            .retry_config(RetryConfig::standard().with_max_attempts(STANDARD_ATTEMPTS))
            .timeout_config(timeouts(S3_ATTEMPT_TIMEOUT))
            .force_path_style(self.s3_path_style.unwrap_or_else(|| e.any_local()));
        if let Some(url) = e.pick(&e.s3) {
            s3 = s3.endpoint_url(url);
        }
        Clients {
            calls,
            dynamodb: aws_sdk_dynamodb::Client::from_conf(dynamodb.build()),
            streams: aws_sdk_dynamodbstreams::Client::from_conf(streams.build()),
            sqs: aws_sdk_sqs::Client::from_conf(sqs.build()),
            s3: aws_sdk_s3::Client::from_conf(s3.build()),
        }
    }
}

impl AwsSettings {
    /// An SES v2 client from a loaded configuration (the `ses` endpoint
    /// override, else the standard ones), the standard retry.
    pub fn ses_client(&self, sdk: &SdkConfig) -> aws_sdk_sesv2::Client {
        let e = &self.endpoints;
        let mut ses = aws_sdk_sesv2::config::Builder::from(sdk)
            .retry_config(RetryConfig::standard().with_max_attempts(STANDARD_ATTEMPTS))
            .timeout_config(timeouts(NOTIFY_ATTEMPT_TIMEOUT));
        if let Some(url) = e.pick(&e.ses) {
            ses = ses.endpoint_url(url);
        }
        aws_sdk_sesv2::Client::from_conf(ses.build())
    }

    /// An SNS client from a loaded configuration (the `sns` endpoint
    /// override, else the standard ones), the standard retry.
    pub fn sns_client(&self, sdk: &SdkConfig) -> aws_sdk_sns::Client {
        let e = &self.endpoints;
        let mut sns = aws_sdk_sns::config::Builder::from(sdk)
            .retry_config(RetryConfig::standard().with_max_attempts(STANDARD_ATTEMPTS))
            .timeout_config(timeouts(NOTIFY_ATTEMPT_TIMEOUT));
        if let Some(url) = e.pick(&e.sns) {
            sns = sns.endpoint_url(url);
        }
        aws_sdk_sns::Client::from_conf(sns.build())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn overrides_land_on_each_client_and_dynamodb_never_retries() {
        let settings = AwsSettings {
            endpoints: Endpoints {
                all: Some("http://127.0.0.1:1".into()),
                dynamodb: Some("http://127.0.0.1:2".into()),
                ..Endpoints::default()
            },
            local_credentials: true,
            ..AwsSettings::default()
        };
        let c = settings.clients().await;
        let d = c.dynamodb.config();
        assert_eq!(
            d.retry_config().map(|r| r.max_attempts()),
            Some(DYNAMODB_ATTEMPTS)
        );
        assert_eq!(
            d.timeout_config()
                .and_then(|t| t.operation_attempt_timeout()),
            Some(DYNAMODB_ATTEMPT_TIMEOUT)
        );
        assert_eq!(d.region().map(|r| r.as_ref()), Some(LOCAL_REGION));
        let q = c.sqs.config();
        assert!(
            q.timeout_config()
                .and_then(|t| t.operation_attempt_timeout())
                .is_some_and(|t| t > booking::queue::RECEIVE_WAIT_MAX),
            "an attempt outlives the longest long poll"
        );
        assert_eq!(
            q.retry_config().map(|r| r.max_attempts()),
            Some(STANDARD_ATTEMPTS)
        );
        // path-style S3 is proven against moto in tests/queue.rs
    }

    #[tokio::test]
    async fn ses_and_sns_clients_bound_each_attempt() {
        // the endpoints are proven against moto in tests/ses.rs, tests/sns.rs
        let settings = AwsSettings {
            local_credentials: true,
            ..AwsSettings::default()
        };
        let sdk = settings.load().await;
        let ses = settings.ses_client(&sdk);
        let sns = settings.sns_client(&sdk);
        for (t, r) in [
            (ses.config().timeout_config(), ses.config().retry_config()),
            (sns.config().timeout_config(), sns.config().retry_config()),
        ] {
            assert_eq!(
                t.and_then(|t| t.operation_attempt_timeout()),
                Some(NOTIFY_ATTEMPT_TIMEOUT)
            );
            assert_eq!(r.map(|r| r.max_attempts()), Some(STANDARD_ATTEMPTS));
        }
    }
}
