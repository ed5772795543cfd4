//! The load engine against the real system in process, at a small scale:
//! the mock gateway, two booking instances sharing one embedded stack
//! (2 s hold), 300 arrivals/s for 2 s with the default payer mix.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use booking::{Level, SaleId, Settings};
use booking_server::config::{LevelConfig, ServerConfig, StackConfig, StackKind};
use scenarios::load::{self, LiveStats, LoadConfig, LoadProfile, Targets};

fn settings() -> Settings {
    Settings {
        hold: Duration::from_secs(2),
        sweep_interval: Duration::from_millis(200),
        sweep_window: Duration::from_millis(1_200),
        sweep_budget: Duration::from_secs(1),
        visibility_timeout: Duration::from_secs(1),
        status_throttle: Duration::from_millis(100),
        booking_copy_slack: Duration::from_secs(2),
        // outlives a whole request (Relation::PendingStaleOutlivesRequest)
        pending_stale_after: booking::settings::REQUEST_DEADLINE
            + booking::settings::CLOCK_SKEW_MAX,
        ..Settings::default()
    }
}

struct System {
    booking_urls: Vec<String>,
    gateway_url: String,
    mock: mock_gateway::Running,
    instances: Vec<booking_server::Spawned>,
}

/// The mock gateway and two instances; candidates loaded, sale open.
async fn start(candidates: &[String], levels: &[(&str, u32)]) -> System {
    let listeners = [
        booking_server::Listeners::loopback().await.unwrap(),
        booking_server::Listeners::loopback().await.unwrap(),
    ];
    let urls: Vec<String> = listeners.iter().map(|l| l.public_url().unwrap()).collect();
    let mock_config = mock_gateway::Config {
        webhook_urls: vec![format!("{}/payment/webhook", urls[0])],
        ..mock_gateway::Config::default()
    };
    let topic = mock_config.topic_arn.clone();
    let mock = mock_gateway::start_local(mock_config, mock_gateway::ScriptSpec::default())
        .await
        .unwrap();
    let mut config = ServerConfig {
        sale: SaleId::parse("load").unwrap(),
        levels: levels
            .iter()
            .map(|(level, cap)| LevelConfig {
                level: Level::parse(level).unwrap(),
                cap: *cap,
                price: "500.00".into(),
            })
            .collect(),
        listen: listeners[0].public.local_addr().unwrap(),
        admin_listen: listeners[0].admin.local_addr().unwrap(),
        settings: settings(),
        stack: StackConfig {
            kind: StackKind::Embedded,
            ..StackConfig::default()
        },
        key_prefix: "load".into(),
        ..ServerConfig::default()
    };
    config.gateway.base_url = mock.url.clone();
    config.webhook.loopback_sns_port = Some(mock.addr.port());
    config.webhook.topic_arns = Some(vec![topic]);
    let first = booking_server::build(&config, &urls[0]).await.unwrap();
    let second = booking_server::build_sharing(&config, &urls[1], &first)
        .await
        .unwrap();
    booking_server::ops::reset(&first).await.unwrap();
    let loaded = booking_server::ops::load_candidates(&first, candidates)
        .await
        .unwrap();
    assert_eq!(loaded.added, candidates.len() as u64);
    booking_server::ops::open(&first).await.unwrap();
    let instances = [first, second]
        .into_iter()
        .zip(listeners)
        .map(|(server, listeners)| {
            booking_server::Spawned::serving(Arc::new(server), listeners).unwrap()
        })
        .collect();
    System {
        booking_urls: urls,
        gateway_url: mock.url.clone(),
        mock,
        instances,
    }
}

impl System {
    async fn stop(self) {
        for instance in self.instances {
            let _ = instance.stop().await;
        }
        self.mock.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_books_and_pays_at_the_target_rate() {
    let candidates: Vec<String> = (0..700).map(|i| format!("load-{i:04}")).collect();
    let levels = [("gold", 150u32), ("silver", 250)];
    let system = start(&candidates, &levels).await;
    let profile = LoadProfile {
        rate: 300.0,
        rush_secs: 2.0,
        late_rate: 20.0,
        late_secs: 1.0,
        duplicate_fraction: 0.0,
        pay_late_after: Duration::from_millis(1_000),
        users: 64,
        payer_users: 32,
        goose_thresholds: vec!["error-rate<1%".into()],
        ..LoadProfile::default()
    };
    let caps: Vec<(String, u32)> = levels.iter().map(|(l, c)| (l.to_string(), *c)).collect();
    let arrivals = load::schedule(&profile, &candidates, &caps, 11).unwrap();
    assert_eq!(arrivals.len(), 620);
    let out = std::env::temp_dir().join(format!("sellout-load-{:016x}", rand::random::<u64>()));
    let live = Arc::new(LiveStats::default());
    let targets = Targets {
        booking_urls: system.booking_urls.clone(),
        gateway_url: system.gateway_url.clone(),
    };
    let config = LoadConfig {
        out_dir: Some(out.clone()),
        stop_by: Duration::from_secs(30),
        start_at: None,
        candidate_tokens: None,
    };
    let started = std::time::Instant::now();
    let result = load::run(arrivals, targets, &profile, config, live.clone())
        .await
        .unwrap();
    let took = started.elapsed();
    system.stop().await;

    let f = &result.figures;
    eprintln!(
        "{f:#?}\n{:#?}\n{:#?}",
        result.booking_outcomes, result.payments
    );
    assert!(!result.stopped_by_bound, "finished by itself in {took:?}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert_eq!(f.arrivals_scheduled, 620);
    assert_eq!(f.arrivals_started, 620);
    assert_eq!(f.arrivals_dropped, 0);
    let rel = (f.achieved_rate - 300.0).abs() / 300.0;
    assert!(rel < 0.05, "achieved {} bookings/s", f.achieved_rate);
    let (from, to) = result.rush_window;
    assert!(
        to > from && to - from >= Duration::from_millis(1_900),
        "{from:?}..{to:?}"
    );

    // every arrival has one outcome; the seats ran out
    let answered: u64 = result.booking_outcomes.values().sum();
    assert_eq!(answered, 620);
    let admitted = result
        .booking_outcomes
        .get("admitted")
        .copied()
        .unwrap_or(0);
    assert!(admitted >= 380, "{:?}", result.booking_outcomes);
    assert!(
        result
            .booking_outcomes
            .get("level_full")
            .copied()
            .unwrap_or(0)
            > 0,
        "{:?}",
        result.booking_outcomes
    );
    assert_eq!(live.bookings_ok.load(Ordering::Relaxed), admitted);
    assert_eq!(live.arrivals_started.load(Ordering::Relaxed), 620);

    // the payers ran, the paid redirects were delivered and answered paid
    let p = &result.payments;
    let ran: u64 = p.by_kind.values().sum();
    assert_eq!(ran, admitted, "one payer per hold");
    assert_eq!(p.not_run, 0);
    assert!(p.by_kind.get("pay_now").copied().unwrap_or(0) > admitted / 2);
    assert!(p.callback_answers.get("paid").copied().unwrap_or(0) > admitted / 2);
    assert!(live.paid_redirects_delivered.load(Ordering::Relaxed) > admitted / 2);
    assert!(p.redirects_delivered >= p.callback_answers.values().sum::<u64>());
    assert_eq!(p.transport_errors, 0);

    // latency from intended start, ordered
    let names: Vec<&str> = f.transactions.iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"booking") && names.contains(&"checkout"),
        "{names:?}"
    );
    assert!(names.contains(&"callback"), "{names:?}");
    for t in &f.transactions {
        assert!(t.count > 0, "{t:?}");
        assert!(t.p50_ms > 0.0, "{t:?}");
        assert!(t.p50_ms <= t.p90_ms && t.p90_ms <= t.p99_ms, "{t:?}");
        assert!(t.p99_ms <= t.p999_ms && t.p999_ms <= t.max_ms, "{t:?}");
    }
    let booking = &f.transactions[0];
    assert_eq!(booking.count, 620);
    assert_eq!(booking.errors, 0);
    assert!(f.requests >= 620 + admitted * 2, "{}", f.requests);
    assert_eq!(f.server_errors, 0);

    // goose counted the same requests and wrote its reports
    assert_eq!(result.goose.requests, f.requests, "{:#?}", result.goose);
    assert_eq!(result.goose.failures, 0, "{:#?}", result.goose);
    assert!(
        result
            .goose
            .per_request
            .keys()
            .any(|k| k.contains("booking"))
    );
    assert_eq!(result.goose_files.len(), 3, "{:?}", result.goose_files);
    for name in &result.goose_files {
        let len = std::fs::metadata(out.join(name)).unwrap().len();
        assert!(len > 0, "{name} is empty");
    }
    let json = std::fs::read_to_string(out.join("goose-report.json")).unwrap();
    assert!(json.contains("booking"));
    let _ = std::fs::remove_dir_all(&out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_never_answers_is_bounded_and_its_arrivals_are_counted() {
    // a listener that accepts and never answers
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let hold = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let candidates: Vec<String> = (0..200).map(|i| format!("c{i}")).collect();
    let profile = LoadProfile {
        rate: 50.0,
        rush_secs: 2.0,
        late_secs: 0.0,
        duplicate_fraction: 0.0,
        users: 8,
        payer_users: 4,
        ..LoadProfile::default()
    };
    let arrivals = load::schedule(&profile, &candidates, &[("gold".into(), 10)], 1).unwrap();
    let live = Arc::new(LiveStats::default());
    let started = std::time::Instant::now();
    let result = load::run(
        arrivals,
        Targets {
            booking_urls: vec![url],
            gateway_url: "http://127.0.0.1:9".into(),
        },
        &profile,
        LoadConfig {
            out_dir: None,
            stop_by: Duration::from_secs(3),
            start_at: None,
            candidate_tokens: None,
        },
        live.clone(),
    )
    .await
    .unwrap();
    let took = started.elapsed();
    hold.abort();
    assert!(result.stopped_by_bound);
    assert!(
        took < Duration::from_secs(3) + load::EXECUTE_GRACE,
        "{took:?}"
    );
    let f = &result.figures;
    assert_eq!(f.arrivals_scheduled, 100);
    // 8 users, each stuck on its first booking: the rest never started
    assert_eq!(f.arrivals_started, 8, "{f:?}");
    assert_eq!(f.arrivals_dropped, 92);
    assert_eq!(
        result.booking_outcomes.get("transport_error").copied(),
        Some(8),
        "{:?}",
        result.booking_outcomes
    );
    assert_eq!(f.server_errors, 8);
    assert!(result.goose_files.is_empty());
}
