//! The SNS side of the webhook: verifying a delivery (allowlists first, then
//! the signing certificate, fetched and cached by URL) and confirming a
//! subscription safely.
//!
//! Nothing here fetches a URL a message names unless the allowlists passed
//! it: the `SigningCertURL` must pass the [`sns::CertUrlPolicy`], and a
//! `SubscribeURL` must point at a scheme, host and port that same policy
//! allows. Redirects are never followed, so an allowed host cannot bounce
//! us elsewhere.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use sns::{MessageType, SigningCert, SnsMessage, Verifier, VerifyError};

use crate::WebhookTrust;

/// How long fetching a certificate or visiting a `SubscribeURL` may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest certificate we read (a PEM certificate is a few KiB).
pub const CERT_BYTES_MAX: usize = 64 * 1024;
/// Certificates kept in the cache; SNS signs with one at a time, so a full
/// cache is cleared rather than managed.
pub const CERT_CACHE_MAX: usize = 16;

/// Why a delivery was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum Rejected {
    /// Not an SNS message, unsigned, badly signed, untrusted certificate URL or
    /// topic: answer 403, change nothing.
    #[error("rejected: {0}")]
    Untrusted(String),
    /// The certificate could not be fetched: the message may be genuine, so
    /// SNS should deliver it again (answer 503).
    #[error("certificate unavailable: {0}")]
    CertUnavailable(String),
}

/// Verifies SNS deliveries for one API instance; caches parsed certificates by
/// URL (in-process, not shared state).
#[derive(Debug)]
pub struct SnsDelivery {
    http: Option<reqwest::Client>,
    certs: Mutex<HashMap<String, SigningCert>>,
}

impl Default for SnsDelivery {
    fn default() -> SnsDelivery {
        SnsDelivery::new()
    }
}

impl SnsDelivery {
    /// A verifier with an empty certificate cache.
    pub fn new() -> SnsDelivery {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(FETCH_TIMEOUT)
            .build()
            .inspect_err(
                |e| tracing::error!(error = %e, "no HTTP client: webhooks cannot be verified"),
            )
            .ok();
        SnsDelivery {
            http,
            certs: Mutex::new(HashMap::new()),
        }
    }

    /// Parses and verifies `body`: topic and certificate URL allowed, the
    /// signature made by the certificate's key, the certificate valid now.
    pub async fn verify(&self, trust: &WebhookTrust, body: &[u8]) -> Result<SnsMessage, Rejected> {
        let untrusted = |e: &dyn std::fmt::Display| Rejected::Untrusted(e.to_string());
        let msg = SnsMessage::from_json(body).map_err(|e| untrusted(&e))?;
        let verifier = Verifier::new(trust.cert_urls.clone(), trust.topics.clone());
        let cert_url = verifier
            .check_before_fetch(&msg)
            .map_err(|e| untrusted(&e))?;
        let cert = self.cert(&cert_url).await?;
        verifier
            .verify_cert(&msg, &cert)
            .map_err(|e| untrusted(&e))?;
        cert.check_validity_at(SystemTime::now())
            .map_err(|e| untrusted(&e))?;
        Ok(msg)
    }

    /// The certificate at `url` (already allowed by the policy), from the cache
    /// or fetched. Only certificates that parse are cached.
    async fn cert(&self, url: &url::Url) -> Result<SigningCert, Rejected> {
        if let Some(cert) = self
            .certs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(url.as_str())
        {
            return Ok(cert.clone());
        }
        let http = self
            .http
            .as_ref()
            .ok_or_else(|| Rejected::CertUnavailable("no HTTP client".into()))?;
        let unavailable = |e: &dyn std::fmt::Display| Rejected::CertUnavailable(e.to_string());
        let mut resp = http
            .get(url.clone())
            .send()
            .await
            .map_err(|e| unavailable(&e))?;
        if !resp.status().is_success() {
            return Err(Rejected::CertUnavailable(format!(
                "{url} answered {}",
                resp.status()
            )));
        }
        let mut pem = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| unavailable(&e))? {
            if pem.len() + chunk.len() > CERT_BYTES_MAX {
                return Err(Rejected::Untrusted(format!(
                    "certificate at {url} larger than {CERT_BYTES_MAX} bytes"
                )));
            }
            pem.extend_from_slice(&chunk);
        }
        let cert = SigningCert::from_pem(&pem)
            .map_err(|e: VerifyError| Rejected::Untrusted(format!("certificate at {url}: {e}")))?;
        let mut certs = self
            .certs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if certs.len() >= CERT_CACHE_MAX {
            certs.clear();
        }
        certs.insert(url.as_str().to_owned(), cert.clone());
        Ok(cert)
    }

    /// Confirms the subscription of a verified `SubscriptionConfirmation` by
    /// visiting its `SubscribeURL`, if that URL is safe to visit.
    pub async fn confirm_subscription(
        &self,
        trust: &WebhookTrust,
        msg: &SnsMessage,
    ) -> Result<(), Confirm> {
        let Some(raw) = msg.subscribe_url.as_deref() else {
            return Err(Confirm::Unsafe("no SubscribeURL".into()));
        };
        let url = safe_subscribe_url(trust, msg, raw).map_err(Confirm::Unsafe)?;
        let http = self
            .http
            .as_ref()
            .ok_or_else(|| Confirm::Failed("no HTTP client".into()))?;
        let resp = http
            .get(url)
            .send()
            .await
            .map_err(|e| Confirm::Failed(e.to_string()))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(Confirm::Failed(format!(
                "SubscribeURL answered {}",
                resp.status()
            )))
        }
    }
}

/// Why a subscription was not confirmed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Confirm {
    /// The `SubscribeURL` is not one we visit: never retried.
    #[error("unsafe SubscribeURL: {0}")]
    Unsafe(String),
    /// The visit failed: SNS may deliver the confirmation again.
    #[error("subscription not confirmed: {0}")]
    Failed(String),
}

/// Checks a `SubscribeURL` before it is visited (pure): the scheme, host and
/// port must be ones the certificate-URL policy allows (checked by asking the
/// policy about a `.pem` path on the same origin), no user info or fragment,
/// `Action=ConfirmSubscription` for this message's topic.
pub fn safe_subscribe_url(
    trust: &WebhookTrust,
    msg: &SnsMessage,
    raw: &str,
) -> Result<url::Url, String> {
    if msg.message_type != MessageType::SubscriptionConfirmation {
        return Err("not a SubscriptionConfirmation".into());
    }
    let url = url::Url::parse(raw).map_err(|e| format!("{raw}: {e}"))?;
    if !url.username().is_empty() || url.password().is_some() || url.fragment().is_some() {
        return Err(format!("{raw}: user info or fragment"));
    }
    let mut origin = url.clone();
    origin.set_query(None);
    origin.set_path("/SimpleNotificationService-origin-check.pem");
    trust
        .cert_urls
        .check(origin.as_str())
        .map_err(|_| format!("{raw}: host not allowed"))?;
    let pairs: HashMap<String, String> = url.query_pairs().into_owned().collect();
    if pairs.get("Action").map(String::as_str) != Some("ConfirmSubscription") {
        return Err(format!("{raw}: not Action=ConfirmSubscription"));
    }
    if pairs
        .get("TopicArn")
        .is_some_and(|topic| *topic != msg.topic_arn)
    {
        return Err(format!("{raw}: another topic"));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    /// Real SNS certificates are at `https://sns.<region>.amazonaws.com/…`:
    /// the client must speak TLS. A client built without TLS refuses an
    /// `https` URL before connecting (a builder error); ours connects and
    /// fails the handshake against a peer that is not a TLS server.
    #[tokio::test]
    async fn the_certificate_fetcher_speaks_tls() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let peer = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\n\r\nnot tls").await;
        });
        let delivery = SnsDelivery::new();
        let err = delivery
            .http
            .as_ref()
            .unwrap()
            .get(format!(
                "https://127.0.0.1:{port}/SimpleNotificationService-x.pem"
            ))
            .send()
            .await
            .unwrap_err();
        assert!(
            !err.is_builder(),
            "https refused before connecting: {err:?}"
        );
        assert!(err.is_connect(), "expected a failed TLS handshake: {err:?}");
        peer.await.unwrap();
    }

    fn trust() -> WebhookTrust {
        WebhookTrust {
            cert_urls: sns::CertUrlPolicy::none()
                .allow_http_loopback(IpAddr::V4(Ipv4Addr::LOCALHOST), Some(9090))
                .unwrap(),
            topics: sns::TopicPolicy::only(["arn:t"]),
        }
    }

    fn confirmation(url: &str) -> SnsMessage {
        SnsMessage {
            message_type: MessageType::SubscriptionConfirmation,
            topic_arn: "arn:t".into(),
            subscribe_url: Some(url.into()),
            ..SnsMessage::default()
        }
    }

    #[test]
    fn only_allowed_origins_are_visited() {
        let ok = "http://127.0.0.1:9090/?Action=ConfirmSubscription&TopicArn=arn%3At&Token=x";
        assert!(safe_subscribe_url(&trust(), &confirmation(ok), ok).is_ok());
        for bad in [
            "http://127.0.0.1:9091/?Action=ConfirmSubscription&TopicArn=arn%3At&Token=x",
            "http://10.0.0.1:9090/?Action=ConfirmSubscription&Token=x",
            "https://127.0.0.1:9090/?Action=ConfirmSubscription&Token=x",
            "http://u:p@127.0.0.1:9090/?Action=ConfirmSubscription&Token=x",
            "http://127.0.0.1:9090/?Action=Unsubscribe&Token=x",
            "http://127.0.0.1:9090/?Action=ConfirmSubscription&TopicArn=other&Token=x",
            "not a url",
        ] {
            assert!(
                safe_subscribe_url(&trust(), &confirmation(bad), bad).is_err(),
                "{bad}"
            );
        }
        let notification = SnsMessage {
            message_type: MessageType::Notification,
            ..confirmation(ok)
        };
        assert!(safe_subscribe_url(&trust(), &notification, ok).is_err());
    }
}
