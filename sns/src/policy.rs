//! Allowlists checked before a signing certificate is fetched.

use std::collections::BTreeSet;
use std::net::IpAddr;

use url::{Host, Url};

use crate::error::{PolicyError, VerifyError};

/// Which `SigningCertURL`s may be fetched.
///
/// A URL is allowed only if it parses, has no user info, query or fragment, its path ends in
/// `.pem`, and its scheme, host and port match one of:
/// * the AWS pattern (if enabled): `https://sns.<region>.amazonaws.com` or
///   `https://sns.<region>.amazonaws.com.cn`, default port only;
/// * an https host added with [`CertUrlPolicy::allow_https_host`];
/// * a loopback address added with [`CertUrlPolicy::allow_http_loopback`] (plain http).
///
/// [`CertUrlPolicy::check`] returns the parsed URL: fetch exactly that one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertUrlPolicy {
    aws: bool,
    extra: Vec<AllowedOrigin>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct AllowedOrigin {
    scheme: &'static str,
    host: Host<String>,
    port: Option<u16>,
}

impl Default for CertUrlPolicy {
    /// The AWS pattern only, as [`CertUrlPolicy::aws`].
    fn default() -> Self {
        Self::aws()
    }
}

impl CertUrlPolicy {
    /// Allows real AWS SNS certificate URLs (`https://sns.<region>.amazonaws.com[.cn]/….pem`).
    pub fn aws() -> Self {
        Self {
            aws: true,
            extra: Vec::new(),
        }
    }

    /// Allows nothing until hosts are added (not even AWS).
    pub fn none() -> Self {
        Self {
            aws: false,
            extra: Vec::new(),
        }
    }

    /// Also allows `https://<host>[:<port>]/….pem`. `port: None` means the default port
    /// (443) only. `host` is a domain name or an IP literal, compared exactly (ASCII case
    /// aside).
    pub fn allow_https_host(mut self, host: &str, port: Option<u16>) -> Result<Self, PolicyError> {
        let parsed = Host::parse(host).map_err(|_| PolicyError::BadHost(host.to_owned()))?;
        self.extra.push(AllowedOrigin {
            scheme: "https",
            host: parsed,
            port: normal(port, 443),
        });
        Ok(self)
    }

    /// Also allows plain `http://<ip>[:<port>]/….pem` for a loopback `ip` (the mock gateway
    /// serves its certificate this way). `port: None` means the default port (80) only.
    pub fn allow_http_loopback(
        mut self,
        ip: IpAddr,
        port: Option<u16>,
    ) -> Result<Self, PolicyError> {
        if !ip.is_loopback() {
            return Err(PolicyError::NotLoopback(ip));
        }
        let host = match ip {
            IpAddr::V4(v4) => Host::Ipv4(v4),
            IpAddr::V6(v6) => Host::Ipv6(v6),
        };
        self.extra.push(AllowedOrigin {
            scheme: "http",
            host,
            port: normal(port, 80),
        });
        Ok(self)
    }

    /// Checks `cert_url`, returning the parsed URL to fetch, or
    /// [`VerifyError::CertUrlNotAllowed`].
    pub fn check(&self, cert_url: &str) -> Result<Url, VerifyError> {
        let reject = || VerifyError::CertUrlNotAllowed(cert_url.to_owned());
        let url = Url::parse(cert_url).map_err(|_| reject())?;
        if !url.username().is_empty()
            || url.password().is_some()
            || url.query().is_some()
            || url.fragment().is_some()
            || !url.path().ends_with(".pem")
        {
            return Err(reject());
        }
        let (scheme, port) = (url.scheme(), url.port()); // `port()` is None for the default
        let Some(host) = url.host() else {
            return Err(reject());
        };
        let aws_ok = self.aws
            && scheme == "https"
            && port.is_none()
            && matches!(host, Host::Domain(domain) if is_aws_sns_host(domain));
        let extra_ok = self.extra.iter().any(|allowed| {
            allowed.scheme == scheme && same_host(&allowed.host, &host) && allowed.port == port
        });
        if aws_ok || extra_ok {
            Ok(url)
        } else {
            Err(reject())
        }
    }
}

fn same_host(allowed: &Host<String>, host: &Host<&str>) -> bool {
    match (allowed, host) {
        (Host::Domain(a), Host::Domain(b)) => a == b,
        (Host::Ipv4(a), Host::Ipv4(b)) => a == b,
        (Host::Ipv6(a), Host::Ipv6(b)) => a == b,
        _ => false,
    }
}

/// `Url::port` reports the scheme's default port as `None`; store ports the same way.
fn normal(port: Option<u16>, default: u16) -> Option<u16> {
    port.filter(|&p| p != default)
}

/// `sns.<region>.amazonaws.com` or `sns.<region>.amazonaws.com.cn`, where a region is at
/// least three `-`-separated lowercase alphanumeric parts, starting with a letter and ending
/// with a number (`us-east-1`, `us-gov-west-1`, `cn-north-1`).
fn is_aws_sns_host(domain: &str) -> bool {
    let Some(rest) = domain.strip_prefix("sns.") else {
        return false;
    };
    let Some(region) = rest
        .strip_suffix(".amazonaws.com.cn")
        .or_else(|| rest.strip_suffix(".amazonaws.com"))
    else {
        return false;
    };
    let parts: Vec<&str> = region.split('-').collect();
    parts.len() >= 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
        && parts
            .first()
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_lowercase()))
        && parts
            .last()
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
}

/// Which `TopicArn`s are accepted (exact string match).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPolicy {
    allowed: Option<BTreeSet<String>>,
}

impl TopicPolicy {
    /// Accepts every topic.
    pub fn any() -> Self {
        Self { allowed: None }
    }

    /// Accepts exactly these topic ARNs (an empty list accepts none).
    pub fn only<I, S>(arns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            allowed: Some(arns.into_iter().map(Into::into).collect()),
        }
    }

    /// Checks `topic_arn`, or returns [`VerifyError::TopicNotAllowed`].
    pub fn check(&self, topic_arn: &str) -> Result<(), VerifyError> {
        match &self.allowed {
            Some(set) if !set.contains(topic_arn) => {
                Err(VerifyError::TopicNotAllowed(topic_arn.to_owned()))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_region_shapes() {
        for ok in [
            "sns.us-east-1.amazonaws.com",
            "sns.us-gov-west-1.amazonaws.com",
            "sns.cn-north-1.amazonaws.com.cn",
        ] {
            assert!(is_aws_sns_host(ok), "{ok}");
        }
        for bad in [
            "sns.amazonaws.com",
            "sns.us.amazonaws.com",
            "sns.us-east.amazonaws.com",
            "sns.-east-1.amazonaws.com",
            "sns.us--1.amazonaws.com",
            "sns.1-east-1.amazonaws.com",
            "sns.us-east-1a.amazonaws.com",
            "sns.evil.us-east-1.amazonaws.com",
            "sns.us-east-1.amazonaws.com.evil",
            "sqs.us-east-1.amazonaws.com",
        ] {
            assert!(!is_aws_sns_host(bad), "{bad}");
        }
    }
}
