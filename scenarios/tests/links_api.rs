#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `--toxiproxy-api ADDR`: the in-process fleet's gateway link goes through
//! a `netfault` proxy whose toxiproxy-shaped API answers on loopback; a toxic
//! added over that API (as a toxiproxy client would, during a manual
//! rehearsal) slows the booking system's calls to the gateway, and removing
//! it gives the speed back.

use std::time::{Duration, Instant};

use scenarios::{Fleet, Profile};

async fn book(http: &reqwest::Client, url: &str, candidate: &str) -> (u16, Duration) {
    let started = Instant::now();
    let r = http
        .post(format!("{url}/bookings"))
        .json(&serde_json::json!({ "candidate": candidate, "level": "back" }))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toxic_added_over_the_api_slows_the_gateway_link_until_removed() {
    let sets = vec![
        "links_api=\"127.0.0.1:0\"".to_owned(),
        "instances=1".to_owned(),
    ];
    let profile = Profile::load(Some("ci"), &sets).unwrap();
    let fleet = Fleet::start(&profile).await.unwrap();
    let links = fleet.links().expect("links behind proxies");
    let api = format!("http://{}", links.api.expect("the API is served"));
    assert!(links.gateway_url.is_some());
    assert!(
        links.redis_url.is_none(),
        "the embedded stack has no Redis link"
    );
    let http = reqwest::Client::new();
    let proxies: serde_json::Value = http
        .get(format!("{api}/proxies"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(proxies["gateway"]["enabled"], true, "{proxies}");

    fleet.reset().await.unwrap();
    let candidates = scenarios::profile::candidates(profile.seed, 3);
    fleet.load_candidates(&candidates).await.unwrap();
    fleet.open().await.unwrap();
    let url = fleet.booking_urls[0].clone();
    let (status, fast) = book(&http, &url, &candidates[0]).await;
    assert_eq!(status, 201);

    // 400 ms on every answer of the gateway: a booking creates a payment
    let added = http
        .post(format!("{api}/proxies/gateway/toxics"))
        .json(&serde_json::json!({
            "name": "slow", "type": "latency", "stream": "downstream",
            "toxicity": 1.0, "attributes": { "latency": 400, "jitter": 0 }
        }))
        .send()
        .await
        .unwrap();
    assert!(added.status().is_success(), "{}", added.status());
    let (status, slow) = book(&http, &url, &candidates[1]).await;
    assert_eq!(status, 201);
    assert!(slow >= Duration::from_millis(400), "{slow:?}");
    let removed = http
        .delete(format!("{api}/proxies/gateway/toxics/slow"))
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status().as_u16(), 204);
    let (status, again) = book(&http, &url, &candidates[2]).await;
    assert_eq!(status, 201);
    assert!(
        again < slow,
        "fast {fast:?}, slow {slow:?}, again {again:?}"
    );
    fleet.stop().await;
}
