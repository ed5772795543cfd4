//! `[faults]` on one in-process server (embedded stack, the mock gateway on
//! loopback): dormant until `POST /ops/faults/start`, then a ledger outage
//! refuses bookings without counting a seat; a schedule for another
//! instance leaves this one alone; every background loop goes through the
//! wrapped ports; a kill point without a killer is only logged; the routes
//! are the admin's and exist only when armed; production refuses the hooks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use booking::{Clock, SystemClock};
use booking_server::config::{Environment, FaultsConfig, ServerConfig};
use serde_json::{Value, json};

const TOKEN: &str = "fault-hooks-token-0123";
/// The longest wait for the background loops to reach a port.
const SETTLE_MAX: Duration = Duration::from_secs(15);

/// A rehearsal's config armed with `schedule` (TOML of `[[fault]]`s) as
/// `instance`; no `[faults]` when `schedule` is `None`.
fn config(schedule: Option<&str>, instance: &str) -> ServerConfig {
    ServerConfig {
        environment: Environment::Rehearsal,
        admin_token: Some(TOKEN.into()),
        settings: common::fast_settings(Duration::from_secs(2)),
        faults: schedule.map(|s| FaultsConfig {
            instance: instance.into(),
            seed: 7,
            schedule: faults::Schedule::from_toml(s).unwrap(),
        }),
        ..ServerConfig::default()
    }
}

const LEDGER_DOWN: &str = r#"
[[fault]]
name = "ledger-down"
target = "ledger"
ops = ["admit"]
instances = ["instance-1"]
start_ms = 0
duration_ms = 60_000
kind = { type = "error" }
"#;

struct Harness {
    base: String,
    /// The admin listener: `/ops/` paths go there.
    admin: String,
    http: reqwest::Client,
    mock: mock_gateway::Running,
    spawned: booking_server::Spawned,
}

impl Harness {
    async fn start(mut config: ServerConfig) -> Harness {
        let mock = mock_gateway::start_local(
            mock_gateway::Config::default(),
            mock_gateway::ScriptSpec::default(),
        )
        .await
        .unwrap();
        config.gateway.base_url = mock.url.clone();
        let spawned = booking_server::Spawned::start(config).await.unwrap();
        Harness {
            base: spawned.public.clone(),
            admin: spawned.admin.clone(),
            http: reqwest::Client::new(),
            mock,
            spawned,
        }
    }

    /// `path` with the admin token (`token`: `None` sends none).
    async fn call(
        &self,
        post: bool,
        path: &str,
        body: Option<Value>,
        token: Option<&str>,
    ) -> (u16, Value) {
        let on = if path.starts_with("/ops/") {
            &self.admin
        } else {
            &self.base
        };
        let url = format!("{on}{path}");
        let mut r = if post {
            self.http.post(url)
        } else {
            self.http.get(url)
        };
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn ops(&self, post: bool, path: &str, body: Option<Value>) -> Value {
        let (code, v) = self.call(post, path, body, Some(TOKEN)).await;
        assert_eq!(code, 200, "{path}: {v}");
        v
    }

    /// Reset, `candidates` eligible, open.
    async fn open_sale(&self, candidates: &[&str]) {
        self.ops(true, "/ops/reset", None).await;
        self.ops(true, "/ops/load-candidates", Some(json!(candidates)))
            .await;
        self.ops(true, "/ops/open", None).await;
    }

    async fn book(&self, candidate: &str) -> (u16, Value) {
        self.call(
            true,
            "/bookings",
            Some(json!({"candidate": candidate, "level": "general"})),
            None,
        )
        .await
    }

    /// Starts the schedule now; returns the state answered.
    async fn start_faults(&self) -> Value {
        let now = SystemClock.now_ms();
        let state = self
            .ops(
                true,
                "/ops/faults/start",
                Some(json!({"started_unix_ms": now})),
            )
            .await;
        assert_eq!(state["started_unix_ms"], now, "{state}");
        state
    }

    async fn faults(&self) -> Value {
        self.ops(false, "/ops/faults", None).await
    }

    async fn taken(&self) -> u64 {
        let status = self.ops(false, "/ops/status", None).await;
        status["counters"]["levels"][0]["count"].as_u64().unwrap()
    }

    async fn metrics(&self) -> String {
        let resp = self
            .http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.text().await.unwrap()
    }

    async fn stop(self) {
        self.spawned.stop().await.expect("server stops");
        self.mock.stop().await;
    }
}

/// The count of the fault called `name` in a `/ops/faults` state.
fn count<'a>(state: &'a Value, name: &str) -> &'a Value {
    state["counts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["fault"] == name)
        .unwrap_or_else(|| panic!("no count for {name}: {state}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ledger_outage_refuses_bookings_only_once_started_and_counts_no_seat() {
    let h = Harness::start(config(Some(LEDGER_DOWN), "instance-1")).await;
    h.open_sale(&["alice", "bob"]).await;

    let dormant = h.faults().await;
    assert_eq!(dormant["instance"], "instance-1");
    assert_eq!(dormant["started_unix_ms"], Value::Null);
    assert_eq!(dormant["fired"], json!([]));
    assert_eq!(count(&dormant, "ledger-down")["fired"], 0);
    let (code, booked) = h.book("alice").await;
    assert_eq!(code, 201, "dormant: {booked}");
    assert_eq!(h.taken().await, 1);

    h.start_faults().await;
    let (code, refused) = h.book("bob").await;
    assert_eq!(code, 503, "{refused}");
    assert_eq!(refused["error"], "busy", "{refused}");
    assert_eq!(h.taken().await, 1, "the refused booking counted no seat");

    let state = h.faults().await;
    assert_eq!(count(&state, "ledger-down")["fired"], 1, "{state}");
    assert_eq!(state["dropped"], 0);
    let fired = &state["fired"][0];
    assert_eq!(
        (
            &fired["fault"],
            &fired["target"],
            &fired["op"],
            &fired["instance"],
            &fired["effect"]
        ),
        (
            &json!("ledger-down"),
            &json!("ledger"),
            &json!("admit"),
            &json!("instance-1"),
            &json!("failed")
        ),
        "{state}"
    );
    let metrics = h.metrics().await;
    assert!(
        metrics.contains("booking_faults_fired_total{fault=\"ledger-down\"} 1\n"),
        "{metrics}"
    );
    assert!(metrics.ends_with("# EOF\n"), "still one OpenMetrics text");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_schedule_naming_another_instance_leaves_this_one_alone() {
    let h = Harness::start(config(Some(LEDGER_DOWN), "instance-2")).await;
    h.open_sale(&["alice"]).await;
    h.start_faults().await;
    let (code, booked) = h.book("alice").await;
    assert_eq!(code, 201, "{booked}");
    assert_eq!(h.taken().await, 1);
    let state = h.faults().await;
    assert_eq!(state["instance"], "instance-2");
    let c = count(&state, "ledger-down");
    assert_eq!(
        (&c["calls"], &c["fired"]),
        (&json!(0), &json!(0)),
        "{state}"
    );
    assert_eq!(state["fired"], json!([]));
    h.stop().await;
}

/// A schedule entry: `instance` kills itself at `point` for the whole run.
fn kill_at(name: &str, instance: &str, point: &str) -> String {
    format!(
        "[[fault]]\nname = \"{name}\"\ntarget = \"instance\"\ninstances = [\"{instance}\"]\n\
         start_ms = 0\nduration_ms = 60_000\nkind = {{ type = \"kill\", point = \"{point}\" }}\n\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_killer_a_kill_point_is_logged_and_the_booking_goes_through() {
    let schedule = [
        kill_at("die-after-enqueue", "instance-1", "after_enqueue"),
        kill_at(
            "other-dies-after-admission",
            "instance-2",
            "after_admission",
        ),
    ]
    .concat();
    let h = Harness::start(config(Some(&schedule), "instance-1")).await;
    h.open_sale(&["alice"]).await;
    h.start_faults().await;
    let (code, booked) = h.book("alice").await;
    assert_eq!(code, 201, "{booked}");
    let state = h.faults().await;
    assert_eq!(count(&state, "die-after-enqueue")["fired"], 1, "{state}");
    assert_eq!(count(&state, "other-dies-after-admission")["fired"], 0);
    let fired = state["fired"].as_array().unwrap();
    assert_eq!(fired.len(), 1, "{state}");
    assert_eq!(fired[0]["effect"], "killed");
    assert_eq!(fired[0]["point"], "after_enqueue");
    assert_eq!(fired[0]["target"], "instance");
    assert_eq!(fired[0]["op"], "send");
    h.stop().await;
}

/// `after_admission` is a kill after a seat was counted: an admission
/// the ledger refused (here a candidate not on the list) leaves nothing
/// to recover and does not reach it; the next one that counts a seat does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_admission_kill_point_waits_for_an_admission_that_counted_a_seat() {
    let schedule = kill_at("die-after-admission", "instance-1", "after_admission");
    let h = Harness::start(config(Some(&schedule), "instance-1")).await;
    h.open_sale(&["alice"]).await;
    h.start_faults().await;
    let (code, refused) = h.book("mallory").await;
    assert_eq!(code, 403, "{refused}");
    let state = h.faults().await;
    assert_eq!(count(&state, "die-after-admission")["fired"], 0, "{state}");
    let (code, booked) = h.book("alice").await;
    assert_eq!(code, 201, "{booked}");
    let state = h.faults().await;
    assert_eq!(count(&state, "die-after-admission")["fired"], 1, "{state}");
    assert_eq!(state["fired"][0]["point"], "after_admission");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_background_loop_and_the_gateway_go_through_the_wrappers() {
    // zero-ms latencies: they fire (and are counted) without changing anything
    let zero = |name: &str, target: &str, op: &str| {
        format!(
            "[[fault]]\nname = \"{name}\"\ntarget = \"{target}\"\nops = [\"{op}\"]\n\
             start_ms = 0\nduration_ms = 60_000\n\
             kind = {{ type = \"latency\", delay = {{ fixed = {{ ms = 0 }} }} }}\n"
        )
    };
    let sites = [
        ("worker", "queue", "receive"),
        ("reconciler", "records", "held_due"),
        ("expiry-handler", "stream", "read"),
        ("locks", "coordination", "try_lock"),
        ("status-writer", "status_sink", "put"),
        ("gateway-create", "gateway", "create"),
    ];
    let mut schedule: String = sites.iter().map(|(n, t, o)| zero(n, t, o)).collect();
    schedule.push_str(
        "[[fault]]\nname = \"clock-ahead\"\ntarget = \"clock\"\nstart_ms = 0\n\
         duration_ms = 60_000\nkind = { type = \"clock_skew\", ms = 0 }\n",
    );
    let h = Harness::start(config(Some(&schedule), "instance-1")).await;
    h.open_sale(&["alice"]).await;
    h.start_faults().await;
    let (code, booked) = h.book("alice").await;
    assert_eq!(code, 201, "{booked}");
    // the status writer publishes on /ops/status
    h.ops(false, "/ops/status", None).await;
    let started = Instant::now();
    loop {
        let state = h.faults().await;
        let quiet: Vec<&str> = sites
            .iter()
            .map(|(n, _, _)| *n)
            .chain(["clock-ahead"])
            .filter(|n| count(&state, n)["fired"] == 0)
            .collect();
        if quiet.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < SETTLE_MAX,
            "never reached through the wrappers: {quiet:?}: {state:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fault_routes_are_the_admins_and_exist_only_when_armed() {
    let armed = Harness::start(config(Some(LEDGER_DOWN), "instance-1")).await;
    for (post, path) in [(false, "/ops/faults"), (true, "/ops/faults/start")] {
        let body = Some(json!({"started_unix_ms": 1}));
        let (code, _) = armed.call(post, path, body.clone(), None).await;
        assert_eq!(code, 401, "{path} without the token");
        let (code, _) = armed.call(post, path, body, Some("nope")).await;
        assert_eq!(code, 401, "{path} with a wrong token");
    }
    let far = SystemClock.now_ms() + 2 * 3_600_000;
    for bad in [
        json!({"started_unix_ms": far}),
        json!({"started": 1}),
        json!("now"),
    ] {
        let (code, why) = armed
            .call(true, "/ops/faults/start", Some(bad.clone()), Some(TOKEN))
            .await;
        assert_eq!(code, 400, "{bad}: {why}");
    }
    assert_eq!(
        armed.faults().await["started_unix_ms"],
        Value::Null,
        "refused starts start nothing"
    );
    let metrics = armed.metrics().await;
    assert!(
        metrics.contains("booking_faults_fired_total{fault=\"ledger-down\"} 0\n"),
        "{metrics}"
    );
    armed.stop().await;

    let plain = Harness::start(config(None, "")).await;
    for (post, path) in [(false, "/ops/faults"), (true, "/ops/faults/start")] {
        let body = Some(json!({"started_unix_ms": 1}));
        let (code, _) = plain.call(post, path, body, Some(TOKEN)).await;
        assert_eq!(code, 404, "{path} without [faults]");
    }
    let metrics = plain.metrics().await;
    assert!(!metrics.contains("booking_faults_fired"), "{metrics}");
    plain.stop().await;
}

#[tokio::test]
async fn production_refuses_the_fault_hooks() {
    let config = ServerConfig {
        environment: Environment::Production,
        ..config(Some(LEDGER_DOWN), "instance-1")
    };
    let err = booking_server::build(&config, "http://127.0.0.1:1")
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("fault hooks are for rehearsals") && err.contains("rehearsal"),
        "{err}"
    );
}
