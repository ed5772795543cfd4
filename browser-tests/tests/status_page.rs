//! The status page in headless Chromium: against a live booking server on
//! the embedded stack (levels fill and show full, a released hold reopens
//! its level, closing shows closed), and against hand-written documents
//! from a tiny server (an "open but full" level shows full, an old document
//! shows stale); and the page's JavaScript rule agrees with
//! `booking_api::status_page::shown` on a table of documents. Every
//! assertion reads what the page shows (text, `data-shown`, `aria-label`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use booking::status::{LevelState, LevelStatus, StatusDocument};
use booking::{Level, SaleId, Settings};
use booking_api::status_page::{STATUS_PAGE, STATUS_PAGE_CONTENT_TYPE, SaleShown, shown};
use booking_server::config::{LevelConfig, ServerConfig, StackConfig};
use browser_tests::{Browser, PHONE, STATUS_PAGE_SHOWS, badge, level_row};
use mock_gateway::payer::{Behaviour, Payer};
use serde_json::{Value, json};

/// The longest the page may take to show a change (it reads every 2 s).
const SHOW_MAX: Duration = Duration::from_secs(10);

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn settings() -> Settings {
    Settings {
        hold: Duration::from_secs(2),
        sweep_interval: Duration::from_millis(200),
        sweep_window: Duration::from_millis(1_200),
        sweep_budget: Duration::from_secs(1),
        visibility_timeout: Duration::from_secs(1),
        status_throttle: Duration::from_millis(100),
        booking_copy_slack: Duration::from_secs(2),
        pending_stale_after: booking::settings::REQUEST_DEADLINE
            + booking::settings::CLOCK_SKEW_MAX,
        ..Settings::default()
    }
}

/// The mock gateway and one booking instance on the embedded stack, with a
/// sale of two tiny levels: gold 2 seats, silver 1.
struct Live {
    base: String,
    /// The admin listener (the `/ops/` routes).
    admin: String,
    http: reqwest::Client,
    mock: mock_gateway::Running,
    spawned: booking_server::Spawned,
}

impl Live {
    async fn start() -> Live {
        let listeners = booking_server::Listeners::loopback().await.unwrap();
        let addr = listeners.public.local_addr().unwrap();
        let base = format!("http://{addr}");
        let admin = listeners.admin_url().unwrap();
        let mock_config = mock_gateway::Config {
            webhook_urls: vec![format!("{base}/payment/webhook")],
            ..mock_gateway::Config::default()
        };
        let topic = mock_config.topic_arn.clone();
        let mock = mock_gateway::start_local(mock_config, mock_gateway::ScriptSpec::default())
            .await
            .unwrap();
        let mut config = ServerConfig {
            sale: SaleId::parse("launch").unwrap(),
            levels: vec![
                LevelConfig {
                    level: Level::parse("gold").unwrap(),
                    cap: 2,
                    price: "500.00".into(),
                },
                LevelConfig {
                    level: Level::parse("silver").unwrap(),
                    cap: 1,
                    price: "300.00".into(),
                },
            ],
            settings: settings(),
            stack: StackConfig::default(),
            key_prefix: format!("browser-{:08x}", std::process::id()),
            ..ServerConfig::default()
        };
        config.gateway.base_url = mock.url.clone();
        config.webhook.loopback_sns_port = Some(mock.addr.port());
        config.webhook.topic_arns = Some(vec![topic]);
        let spawned = booking_server::Spawned::start_on(listeners, config, Some(&base))
            .await
            .unwrap();
        Live {
            base,
            admin,
            http: reqwest::Client::new(),
            mock,
            spawned,
        }
    }

    async fn post(&self, path: &str, body: Option<Value>) -> (u16, Value) {
        // the ops steps go to the admin listener, naming the production sale
        let mut r = if path.starts_with("/ops/") {
            self.http
                .post(format!("{}{path}", self.admin))
                .header("x-confirm-sale", "launch")
        } else {
            self.http.post(format!("{}{path}", self.base))
        };
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn book(&self, candidate: &str, level: &str) -> Value {
        let (code, b) = self
            .post(
                "/bookings",
                Some(json!({"candidate": candidate, "level": level})),
            )
            .await;
        assert_eq!(code, 201, "{candidate} {level}: {b}");
        b
    }

    async fn stop(self) {
        let _ = self.spawned.stop().await;
        self.mock.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_page_follows_a_live_sale_fill_release_and_close() {
    let Some(browser) = Browser::start("live-sale", PHONE).await.unwrap() else {
        return;
    };
    let live = Live::start().await;
    let result = live_sale(&browser, &live).await;
    browser.close().await;
    live.stop().await;
    result.unwrap();
}

async fn live_sale(b: &Browser, live: &Live) -> anyhow::Result<()> {
    let (code, reset) = live.post("/ops/reset", None).await;
    assert_eq!(code, 200, "{reset}");
    let candidates: Vec<String> = (0..6).map(|i| format!("cand-{i}")).collect();
    let (code, loaded) = live
        .post("/ops/load-candidates", Some(json!(candidates)))
        .await;
    assert_eq!(code, 200, "{loaded}");

    b.client.goto(&format!("{}/status", live.base)).await?;
    let shows = b
        .until("not open yet", STATUS_PAGE_SHOWS, SHOW_MAX, |s| {
            s["state"] == "Not open yet"
        })
        .await?;
    assert_eq!(shows["sale"], "launch");
    assert_eq!(shows["summary"], "The sale has not opened yet.");
    assert_eq!(shows["summary_live"], "polite");

    let (code, opened) = live.post("/ops/open", None).await;
    assert_eq!(code, 200, "{opened}");
    let shows = b
        .until(
            "open, every level with seats",
            STATUS_PAGE_SHOWS,
            SHOW_MAX,
            |s| s["state"] == "Open" && badge(s, "gold") == "Open" && badge(s, "silver") == "Open",
        )
        .await?;
    assert_eq!(level_row(&shows, "gold").unwrap()["left"], "2");
    assert_eq!(shows["stale"], false);

    // fill both levels: gold's two seats held (one paid, one to be
    // abandoned), silver's paid
    let payer = Payer::new(Duration::from_secs(10))?;
    let gold_a = live.book("cand-0", "gold").await;
    let gold_b = live.book("cand-1", "gold").await;
    let silver = live.book("cand-2", "silver").await;
    for paid in [&gold_b, &silver] {
        payer
            .run(paid["redirect_url"].as_str().unwrap(), &Behaviour::PayNow)
            .await?;
    }
    let shows = b
        .until("both levels full", STATUS_PAGE_SHOWS, SHOW_MAX, |s| {
            badge(s, "gold") == "Full" && badge(s, "silver") == "Full"
        })
        .await?;
    let gold = level_row(&shows, "gold").unwrap();
    assert_eq!(gold["left"], "0");
    assert_eq!(gold["shown"], "full");
    assert_eq!(gold["aria"], "gold: Full, 0 of 2 seats left");
    assert_eq!(
        shows["summary"],
        "The sale is open: 0 of 2 levels have seats, 2 full."
    );
    b.screenshot("full").await?;

    // one gold hold is abandoned: after the 2 s hold the reconciler releases it
    payer
        .run(
            gold_a["redirect_url"].as_str().unwrap(),
            &Behaviour::Abandon,
        )
        .await?;
    let shows = b
        .until(
            "gold reopened by the release",
            STATUS_PAGE_SHOWS,
            Duration::from_secs(20),
            |s| badge(s, "gold") == "Open",
        )
        .await?;
    assert_eq!(level_row(&shows, "gold").unwrap()["left"], "1");
    assert_eq!(badge(&shows, "silver"), "Full", "the paid seat stays taken");
    b.screenshot("reopened").await?;

    let (code, closed) = live.post("/ops/close", None).await;
    assert_eq!(code, 200, "{closed}");
    let shows = b
        .until("closed", STATUS_PAGE_SHOWS, SHOW_MAX, |s| {
            s["state"] == "Closed"
        })
        .await?;
    assert_eq!(shows["summary"], "The sale is closed.");
    assert_eq!(badge(&shows, "gold"), "Closed");
    assert_eq!(badge(&shows, "silver"), "Closed");
    b.screenshot("closed").await?;
    Ok(())
}

/// A page server: `/status.html` is the page, `/status.json` whatever the
/// test put in `doc`.
async fn forged_server(doc: Arc<Mutex<Vec<u8>>>) -> (String, tokio::task::JoinHandle<()>) {
    async fn page() -> impl IntoResponse {
        (
            [(header::CONTENT_TYPE, STATUS_PAGE_CONTENT_TYPE)],
            STATUS_PAGE,
        )
    }
    async fn document(State(doc): State<Arc<Mutex<Vec<u8>>>>) -> impl IntoResponse {
        let bytes = doc.lock().unwrap().clone();
        (
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            bytes,
        )
    }
    let app = axum::Router::new()
        .route("/status.html", get(page))
        .route("/status.json", get(document))
        .with_state(doc);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, task)
}

fn level(name: &str, cap: u32, taken: u32, left: u32, state: LevelState) -> LevelStatus {
    LevelStatus {
        level: Level::parse(name).unwrap(),
        cap,
        taken,
        left,
        state,
    }
}

fn document(open: bool, levels: Vec<LevelStatus>, generated_at_ms: u64) -> StatusDocument {
    StatusDocument {
        sale: SaleId::parse("launch").unwrap(),
        open,
        levels,
        generated_at_ms,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_open_but_full_document_shows_full_and_an_old_one_stale() {
    let Some(browser) = Browser::start("forged", PHONE).await.unwrap() else {
        return;
    };
    let doc = Arc::new(Mutex::new(Vec::new()));
    let (base, server) = forged_server(doc.clone()).await;
    let result = forged(&browser, &base, &doc).await;
    browser.close().await;
    server.abort();
    result.unwrap();
}

async fn forged(b: &Browser, base: &str, doc: &Mutex<Vec<u8>>) -> anyhow::Result<()> {
    // gold says open with one left, but every seat is taken
    let lying = document(
        true,
        vec![
            level("gold", 2, 2, 1, LevelState::Open),
            level("silver", 3, 1, 2, LevelState::Open),
        ],
        now_ms(),
    );
    assert_eq!(lying.shows_full_level_open().len(), 1);
    *doc.lock().unwrap() = lying.to_json()?;
    b.client.goto(&format!("{base}/status.html")).await?;
    let shows = b
        .until("forged document read", STATUS_PAGE_SHOWS, SHOW_MAX, |s| {
            s["refreshed"].as_u64() >= Some(1) && s["state"] == "Open"
        })
        .await?;
    let gold = level_row(&shows, "gold").unwrap();
    assert_eq!(gold["badge"], "Full", "{shows:#}");
    assert_eq!(gold["shown"], "full");
    assert_eq!(gold["left"], "0", "seats left come from the counts");
    assert_eq!(badge(&shows, "silver"), "Open");
    assert_eq!(shows["stale"], false);
    b.screenshot("open-but-full").await?;

    // the same document, written a minute ago
    let mut old = lying.clone();
    old.generated_at_ms = now_ms() - 60_000;
    *doc.lock().unwrap() = old.to_json()?;
    let shows = b
        .until("stale", STATUS_PAGE_SHOWS, SHOW_MAX, |s| s["stale"] == true)
        .await?;
    let text = shows["stale_text"].as_str().unwrap();
    let age: u64 = text
        .strip_prefix("Stale: these figures are ")
        .and_then(|t| t.strip_suffix(" s old and may be out of date."))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!((60..=75).contains(&age), "the age is shown: {text}");
    b.screenshot("stale").await?;

    // fresh again: the banner goes
    let mut fresh = lying.clone();
    fresh.generated_at_ms = now_ms();
    *doc.lock().unwrap() = fresh.to_json()?;
    b.until("fresh again", STATUS_PAGE_SHOWS, SHOW_MAX, |s| {
        s["stale"] == false
    })
    .await?;

    // a broken document: the problem is said and the last figures stay
    *doc.lock().unwrap() = b"not json".to_vec();
    let shows = b
        .until("problem shown", STATUS_PAGE_SHOWS, SHOW_MAX, |s| {
            s["problem"]
                .as_str()
                .is_some_and(|p| p.starts_with("Could not read"))
        })
        .await?;
    assert_eq!(badge(&shows, "gold"), "Full");
    Ok(())
}

fn sale_word(s: SaleShown) -> &'static str {
    match s {
        SaleShown::Open => "open",
        SaleShown::Closed => "closed",
        SaleShown::NotYetOpen => "not_yet_open",
    }
}

fn state_word(s: LevelState) -> &'static str {
    match s {
        LevelState::Open => "open",
        LevelState::Full => "full",
        LevelState::Closed => "closed",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_rule_is_the_servers_rule() {
    let Some(browser) = Browser::start("rule", PHONE).await.unwrap() else {
        return;
    };
    let doc = Arc::new(Mutex::new(b"{}".to_vec()));
    let (base, server) = forged_server(doc).await;
    let result = async {
        browser.client.goto(&format!("{base}/status.html")).await?;
        let now = 1_000_000_u64;
        let mut cases = Vec::new();
        let states = [LevelState::Open, LevelState::Full, LevelState::Closed];
        for open in [true, false] {
            for (cap, taken) in [(2, 0), (2, 1), (2, 2), (2, 3), (0, 0)] {
                for state in states {
                    for age in [0_u64, 10_000, 10_001, 60_000] {
                        cases.push(document(
                            open,
                            vec![
                                level("a", cap, taken, cap.saturating_sub(taken), state),
                                level("b", 3, 0, 3, LevelState::Open),
                            ],
                            now - age,
                        ));
                    }
                }
            }
        }
        cases.push(document(true, vec![], now + 5_000));
        let docs: Vec<Value> = cases
            .iter()
            .map(|d| serde_json::from_slice(&d.to_json().unwrap()).unwrap())
            .collect();
        let page = browser
            .eval(
                "return arguments[0].map((d) => judge(d, arguments[1]));",
                vec![json!(docs), json!(now)],
            )
            .await?;
        let page = page.as_array().unwrap();
        assert_eq!(page.len(), cases.len());
        for (d, p) in cases.iter().zip(page) {
            let r = shown(d, now);
            let levels: Vec<&str> = r.levels.iter().map(|l| state_word(l.state)).collect();
            let lefts: Vec<u32> = r.levels.iter().map(|l| l.left).collect();
            assert_eq!(p["sale"], sale_word(r.sale), "{d:?}");
            assert_eq!(p["stale"], r.stale, "{d:?}");
            assert_eq!(p["ageMs"], r.age_ms, "{d:?}");
            let page_levels: Vec<&str> = p["levels"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["shown"].as_str().unwrap())
                .collect();
            let page_lefts: Vec<u64> = p["levels"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["left"].as_u64().unwrap())
                .collect();
            assert_eq!(page_levels, levels, "{d:?}");
            assert_eq!(
                page_lefts,
                lefts.iter().map(|l| u64::from(*l)).collect::<Vec<_>>(),
                "{d:?}"
            );
        }
        eprintln!("the page and the server agree on {} documents", cases.len());
        anyhow::Ok(())
    }
    .await;
    browser.close().await;
    server.abort();
    result.unwrap();
}
