//! The load engine's signing path against a real instance that requires
//! candidate tokens (`[candidate_auth]`, the rehearsal's own config and
//! secret, [`scenarios::candidate_tokens`]): with the signer every booking
//! carries its candidate's token and is admitted; without it every booking
//! is refused `401 unauthorized` and no seat is taken.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use booking::{Level, SaleId};
use booking_server::config::{LevelConfig, ServerConfig};
use scenarios::load::{self, LiveStats, LoadConfig, LoadProfile, PayerMix, Targets};
use scenarios::profile::Profile;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_signs_each_candidates_token_and_the_instance_takes_it() {
    let profile = Profile {
        candidate_auth: true,
        ..Profile::default()
    };
    let mock = mock_gateway::start_local(
        mock_gateway::Config::default(),
        mock_gateway::ScriptSpec::default(),
    )
    .await
    .unwrap();
    let mut config = ServerConfig {
        sale: SaleId::parse("signed-load").unwrap(),
        levels: vec![LevelConfig {
            level: Level::parse("gold").unwrap(),
            cap: 1_000,
            price: "500.00".into(),
        }],
        // what a rehearsal's fleet runs with
        candidate_auth: scenarios::candidate_tokens::server_config(&profile),
        ..ServerConfig::default()
    };
    config.gateway.base_url = mock.url.clone();
    let spawned = booking_server::Spawned::start(config).await.unwrap();
    let (server, url) = (spawned.server.clone(), spawned.public.clone());
    let candidates: Vec<String> = (0..200).map(|i| format!("signed-{i:04}")).collect();
    booking_server::ops::reset(&server).await.unwrap();
    booking_server::ops::load_candidates(&server, &candidates)
        .await
        .unwrap();
    booking_server::ops::open(&server).await.unwrap();

    let load_profile = LoadProfile {
        rate: 50.0,
        rush_secs: 1.0,
        late_rate: 0.0,
        late_secs: 0.0,
        duplicate_fraction: 0.0,
        retry_fraction: 0.0,
        users: 16,
        payer_users: 4,
        // nobody pays: the holds are all this test looks at
        mix: PayerMix {
            pay_now: 0.0,
            pay_late: 0.0,
            abandon: 1.0,
            cancel: 0.0,
            fail: 0.0,
            press_back: 0.0,
            second_tab: 0.0,
            forge_cancel: 0.0,
            forge_success: 0.0,
        },
        ..LoadProfile::default()
    };
    let caps = vec![("gold".to_owned(), 1_000u32)];
    let run = |tokens: bool, seed: u64, from: usize| {
        let candidates = candidates[from..from + 100].to_vec();
        let profile = profile.clone();
        let load_profile = load_profile.clone();
        let caps = caps.clone();
        let url = url.clone();
        let gateway_url = mock.url.clone();
        async move {
            let arrivals = load::schedule(&load_profile, &candidates, &caps, seed).unwrap();
            let signer = if tokens {
                scenarios::candidate_tokens::signer(&profile).unwrap()
            } else {
                None
            };
            load::run(
                arrivals,
                Targets {
                    booking_urls: vec![url],
                    gateway_url,
                },
                &load_profile,
                LoadConfig {
                    out_dir: None,
                    stop_by: Duration::from_secs(20),
                    start_at: None,
                    candidate_tokens: signer,
                },
                Arc::new(LiveStats::default()),
            )
            .await
            .unwrap()
        }
    };
    let taken = || async {
        let c = server
            .stack
            .ledger
            .counters(&server.stack.sale)
            .await
            .unwrap();
        c.levels.iter().map(|l| l.count).sum::<u32>()
    };

    // no tokens: every booking refused, nothing taken
    let unsigned = run(false, 3, 0).await;
    let n = unsigned.figures.arrivals_started;
    assert!(n >= 45, "{:?}", unsigned.figures);
    assert_eq!(
        unsigned.booking_outcomes.get("unauthorized").copied(),
        Some(n),
        "{:?}",
        unsigned.booking_outcomes
    );
    assert_eq!(taken().await, 0);

    // signed: every booking admitted, for other candidates
    let signed = run(true, 4, 100).await;
    let n = signed.figures.arrivals_started;
    assert!(n >= 45, "{:?}", signed.figures);
    assert_eq!(
        signed.booking_outcomes.get("admitted").copied(),
        Some(n),
        "{:?}",
        signed.booking_outcomes
    );
    assert_eq!(u64::from(taken().await), n);

    let _ = spawned.stop().await;
    mock.stop().await;
}
