//! Certificate-URL and topic allowlists.

// clippy's allow-unwrap-in-tests covers #[test] fns, not this binary's helper fns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::*;
use sns::{CertUrlPolicy, PolicyError, TopicPolicy, Verifier, VerifyError};

fn assert_table(policy: &CertUrlPolicy, accept: &[&str], reject: &[&str]) {
    for url in accept {
        let parsed = policy.check(url);
        assert!(parsed.is_ok(), "should accept {url}: {parsed:?}");
    }
    for url in reject {
        assert_eq!(
            policy.check(url),
            Err(VerifyError::CertUrlNotAllowed((*url).to_owned())),
            "should reject {url}"
        );
    }
}

const AWS_ACCEPT: &[&str] = &[
    "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-7506a1e35b36ef5a444dd1a8e7cc3ed8.pem",
    "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem",
    "https://sns.ap-southeast-1.amazonaws.com/x.pem",
    "https://sns.us-gov-west-1.amazonaws.com/x.pem",
    "https://sns.cn-north-1.amazonaws.com.cn/x.pem",
    "https://SNS.US-EAST-1.AMAZONAWS.COM/x.pem", // hosts are case-insensitive
    "https://sns.us-east-1.amazonaws.com:443/x.pem", // the default port, spelled out
];

const AWS_REJECT: &[&str] = &[
    // lookalike hosts
    "https://sns.us-east-1.amazonaws.com.evil.com/x.pem",
    "https://sns.cn-north-1.amazonaws.com.cn.evil.com/x.pem",
    "https://evilsns.us-east-1.amazonaws.com/x.pem",
    "https://sns.evil.us-east-1.amazonaws.com/x.pem",
    "https://sns.us-east-1.amazonaws.co/x.pem",
    "https://sns.us-east-1.amazonaws.com./x.pem",
    "https://sns.amazonaws.com/x.pem",
    "https://amazonaws.com/x.pem",
    "https://sqs.us-east-1.amazonaws.com/x.pem",
    "https://sns.evil.com/x.pem",
    "https://\u{0455}ns.us-east-1.amazonaws.com/x.pem", // Cyrillic dze
    "https://54.239.28.85/x.pem",
    // userinfo tricks
    "https://sns.us-east-1.amazonaws.com@evil.com/x.pem",
    "https://user:pw@sns.us-east-1.amazonaws.com/x.pem",
    "https://user@sns.us-east-1.amazonaws.com/x.pem",
    // ports and schemes
    "https://sns.us-east-1.amazonaws.com:8443/x.pem",
    "https://sns.us-east-1.amazonaws.com:80/x.pem",
    "http://sns.us-east-1.amazonaws.com/x.pem",
    "ftp://sns.us-east-1.amazonaws.com/x.pem",
    "file:///etc/x.pem",
    // paths, queries, fragments
    "https://sns.us-east-1.amazonaws.com/x.pem.txt",
    "https://sns.us-east-1.amazonaws.com/x.crt",
    "https://sns.us-east-1.amazonaws.com/",
    "https://sns.us-east-1.amazonaws.com",
    "https://sns.us-east-1.amazonaws.com/x.pem?redirect=https://evil.com/y.pem",
    "https://sns.us-east-1.amazonaws.com/x.pem#f",
    "https://sns.us-east-1.amazonaws.com/x%2epem",
    // not URLs
    "",
    "/x.pem",
    "sns.us-east-1.amazonaws.com/x.pem",
    "https:///x.pem",
];

#[test]
fn aws_policy_table() {
    assert_table(&CertUrlPolicy::aws(), AWS_ACCEPT, AWS_REJECT);
    assert_eq!(CertUrlPolicy::default(), CertUrlPolicy::aws());
}

#[test]
fn empty_policy_rejects_even_aws() {
    assert_table(&CertUrlPolicy::none(), &[], AWS_ACCEPT);
}

#[test]
fn loopback_http_is_allowed_only_as_configured() {
    let policy = CertUrlPolicy::aws()
        .allow_http_loopback(IpAddr::V4(Ipv4Addr::LOCALHOST), Some(8080))
        .unwrap()
        .allow_http_loopback(IpAddr::V6(Ipv6Addr::LOCALHOST), None)
        .unwrap();
    assert_table(
        &policy,
        &[
            "http://127.0.0.1:8080/SimpleNotificationService-mock.pem",
            "http://[::1]/cert.pem",
            "http://[::1]:80/cert.pem",
            AWS_ACCEPT[0],
        ],
        &[
            "http://127.0.0.1:8081/cert.pem",
            "http://127.0.0.1/cert.pem",
            "http://127.0.0.2:8080/cert.pem",
            "http://localhost:8080/cert.pem",
            "https://127.0.0.1:8080/cert.pem",
            "http://127.0.0.1:8080/cert.txt",
            "http://[::1]:8080/cert.pem",
            "http://u@127.0.0.1:8080/cert.pem",
            "http://127.0.0.1:8080.evil.com/cert.pem",
            "http://sns.us-east-1.amazonaws.com/x.pem",
        ],
    );
    let checked = policy.check("http://127.0.0.1:8080/c.pem").unwrap();
    assert_eq!(
        (checked.host_str(), checked.port()),
        (Some("127.0.0.1"), Some(8080))
    );
}

#[test]
fn http_only_for_loopback() {
    let lan = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    assert_eq!(
        CertUrlPolicy::aws()
            .allow_http_loopback(lan, Some(80))
            .unwrap_err(),
        PolicyError::NotLoopback(lan)
    );
    let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    assert!(CertUrlPolicy::aws().allow_http_loopback(any, None).is_err());
}

#[test]
fn extra_https_host() {
    let policy = CertUrlPolicy::none()
        .allow_https_host("Certs.Mock.Test", None)
        .unwrap();
    assert_table(
        &policy,
        &[
            "https://certs.mock.test/a.pem",
            "https://CERTS.mock.test:443/a.pem",
        ],
        &[
            "http://certs.mock.test/a.pem",
            "https://certs.mock.test:444/a.pem",
            "https://x.certs.mock.test/a.pem",
            "https://certs.mock.test.evil.com/a.pem",
            AWS_ACCEPT[0],
        ],
    );
    let with_port = CertUrlPolicy::none()
        .allow_https_host("certs.mock.test", Some(8443))
        .unwrap();
    assert_table(
        &with_port,
        &["https://certs.mock.test:8443/a.pem"],
        &["https://certs.mock.test/a.pem"],
    );
    assert!(matches!(
        CertUrlPolicy::none().allow_https_host("bad host", None),
        Err(PolicyError::BadHost(_))
    ));
    assert!(matches!(
        CertUrlPolicy::none().allow_https_host("", None),
        Err(PolicyError::BadHost(_))
    ));
}

#[test]
fn topic_policy_is_exact() {
    let any = TopicPolicy::any();
    assert_eq!(any.check("anything at all"), Ok(()));

    let a = "arn:aws:sns:ap-southeast-1:000000000000:bkash-ipn";
    let b = "arn:aws:sns:ap-southeast-1:000000000000:bkash-refund";
    let only = TopicPolicy::only([a, b]);
    assert_eq!(only.check(a), Ok(()));
    assert_eq!(only.check(b), Ok(()));
    for bad in [
        "arn:aws:sns:ap-southeast-1:000000000000:bkash-ipn2",
        "arn:aws:sns:ap-southeast-1:000000000000:bkash-ip",
        "arn:aws:sns:ap-southeast-1:000000000000:BKASH-IPN",
        " arn:aws:sns:ap-southeast-1:000000000000:bkash-ipn",
        "arn:aws:sns:ap-southeast-1:999999999999:bkash-ipn",
        "",
    ] {
        assert_eq!(
            only.check(bad),
            Err(VerifyError::TopicNotAllowed(bad.to_owned())),
            "{bad:?}"
        );
    }
    assert!(TopicPolicy::only(Vec::<String>::new()).check(a).is_err());
}

#[test]
fn check_before_fetch_runs_all_prechecks() {
    let verifier = Verifier::new(CertUrlPolicy::aws(), TopicPolicy::only([AWS_TOPIC]));
    let mut msg = aws_v1();
    assert_eq!(
        verifier.check_before_fetch(&msg).unwrap().as_str(),
        msg.signing_cert_url
    );

    msg.signing_cert_url = "https://sns.us-west-2.amazonaws.com.evil.com/x.pem".into();
    assert_eq!(
        verifier.check_before_fetch(&msg),
        Err(VerifyError::CertUrlNotAllowed(msg.signing_cert_url.clone()))
    );
    // A forged cert URL is refused before the certificate is even looked at.
    assert_eq!(
        verifier.verify(&msg, b"not a certificate"),
        Err(VerifyError::CertUrlNotAllowed(msg.signing_cert_url.clone()))
    );

    msg.signature_version = "3".into();
    assert_eq!(
        verifier.check_before_fetch(&msg),
        Err(VerifyError::UnsupportedSignatureVersion("3".into()))
    );

    msg.topic_arn = "arn:aws:sns:us-west-2:131990247566:other".into();
    assert_eq!(
        verifier.check_before_fetch(&msg),
        Err(VerifyError::TopicNotAllowed(msg.topic_arn.clone()))
    );
}
