//! The API against its own OpenAPI document, by an API fuzzer: schemathesis
//! (from the project's venv, `scripts/requirements-test.txt`) runs every
//! check it has (`--checks all`: no server error, status codes, content
//! types, headers and bodies as documented, invalid data refused, valid
//! data accepted, methods not served refused, auth enforced) against a
//! server running in-process on the embedded stack, with the mock gateway
//! behind it, the sale open and the candidate of the document's example
//! loaded, so the examples book a seat for real; the callbacks name a
//! payment the test holds (its real ID and signature), so they reach the
//! confirm path rather than stopping at 404.
//!
//! - [`the_public_api_answers_as_its_document_says`]: the public
//!   operations (all but tag `admin`) on the public listener.
//! - [`the_admin_api_answers_as_its_document_says`]: the admin
//!   operations (tag `admin`) on the admin listener, with the bearer token.
//! - [`python_s_regex_engine_reads_the_candidate_rule_as_the_code_does`]:
//!   the document's `candidate` pattern in a second regex engine (Python's
//!   `re`, what Python clients validate with) against
//!   `booking_api::bookings::candidate_hash` on tricky strings.
//!
//! Each fuzzer run is bounded: at most [`FUZZ_EXAMPLES`] cases per
//! operation (`SELLOUT_FUZZ_EXAMPLES` overrides), a fixed seed
//! (`SELLOUT_FUZZ_SEED` overrides) and a wall-clock cap ([`FUZZ_TIME_MAX`])
//! after which the fuzzer is killed and the test fails. The document as
//! served and a JUnit report are written to
//! `target/tmp/api-fuzz-{public,admin}/`. `SELLOUT_FUZZ_SCHEMA=<file>` holds
//! the server to another document instead (to try a change to it, or to see
//! the fuzzer catch a mismatch).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use booking::{SaleId, Settings};
use booking_server::FaultsConfig;
use booking_server::config::{Environment, ServerConfig};
use serde_json::{Value, json};

/// Cases per operation, at most.
const FUZZ_EXAMPLES: u32 = 100;
/// The seed, so a failure reproduces.
const FUZZ_SEED: u64 = 18;
/// The longest a fuzzer run may take before it is killed.
const FUZZ_TIME_MAX: Duration = Duration::from_secs(240);
/// The admin token of the fuzzed instance.
const ADMIN_TOKEN: &str = "fuzz-admin-token-0123456789abcdef";
/// The sale, its levels and the candidate the document's examples name
/// (`openapi.rs`: `candidate-0001`, `gold`).
const SALE: &str = "fuzz";
const EXAMPLE_CANDIDATE: &str = "candidate-0001";
/// A candidate the test holds a seat for itself, so the fuzzer's callbacks
/// name a real payment with its real signature.
const HOLDING_CANDIDATE: &str = "candidate-0002";

/// The fuzzer's configuration: the rule the document states in words
/// because a JSON Schema cannot, where a schema-valid request may get the
/// documented 400 (everywhere else 400 for valid data is a failure):
/// `POST /ops/faults/start`, a start more than an hour ahead of the
/// server's clock (a bound that moves with the clock).
const FUZZ_CONFIG: &str = r#"
[[operations]]
include-operation-id = ["opsFaultsStart"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]
"#;

/// What a well-formed callback for a real payment may come to: besides
/// the usual, `402` (the gateway did not complete the payment: the payer
/// never paid, here) and `410` (the hold ended), both documented.
const CALLBACK_OUTCOMES: &str =
    r#"["2xx", "3xx", "401", "402", "403", "404", "409", "410", "429", "5xx"]"#;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// `.venv/bin/<tool>`, or a failure that says how to get it.
fn venv_tool(tool: &str) -> PathBuf {
    let path = repo_root().join(".venv/bin").join(tool);
    assert!(
        path.is_file(),
        "{} is missing: run scripts/setup (it installs scripts/requirements-test.txt, schemathesis \
         among them, into .venv)",
        path.display()
    );
    path
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A server on the embedded stack, its two listeners, and the mock gateway.
struct Instance {
    public: String,
    admin: String,
    http: reqwest::Client,
    mock: mock_gateway::Running,
    spawned: booking_server::Spawned,
}

impl Instance {
    /// `armed`: with `[faults]` (an empty schedule), so the fault routes
    /// exist.
    async fn start(armed: bool) -> Instance {
        let config = ServerConfig {
            sale: SaleId::parse(SALE).unwrap(),
            levels: vec![
                common::level("gold", 3, "500.00"),
                common::level("silver", 2, "500.00"),
            ],
            admin_token: Some(ADMIN_TOKEN.into()),
            // production needs X-Confirm-Sale on reset, load and close
            // (428 otherwise), which the fuzzer draws at random
            environment: Environment::Rehearsal,
            settings: Settings::default(),
            stack: common::embedded_stack(),
            key_prefix: SALE.into(),
            faults: armed.then(|| FaultsConfig {
                instance: "fuzz-1".into(),
                seed: 18,
                schedule: faults::Schedule::default(),
            }),
            ..ServerConfig::default()
        };
        let (spawned, mock) =
            common::start_with_mock(mock_gateway::Config::default(), config).await;
        let public = spawned.public.clone();
        let admin = spawned.admin.clone();
        let instance = Instance {
            public,
            admin,
            http: reqwest::Client::new(),
            mock,
            spawned,
        };
        instance.prepare_sale().await;
        instance
    }

    /// `POST` an admin route (with or without a body).
    async fn ops(&self, path: &str, body: Option<Value>) -> Value {
        self.ops_with(reqwest::Method::POST, path, body).await
    }

    async fn ops_with(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let request = self
            .http
            .request(method, format!("{}{path}", self.admin))
            .bearer_auth(ADMIN_TOKEN);
        common::ok_json(request, body, path).await
    }

    /// Reset, the example's candidate loaded, open: the examples book.
    async fn prepare_sale(&self) {
        self.ops("/ops/reset", None).await;
        let loaded = self
            .ops(
                "/ops/load-candidates",
                Some(json!([EXAMPLE_CANDIDATE, HOLDING_CANDIDATE])),
            )
            .await;
        assert_eq!(loaded["added"], 2, "{loaded}");
        let status = self.ops("/ops/open", None).await;
        assert_eq!(status["counters"]["open"], true, "{status}");
    }

    /// Holds a seat for `candidate`: its payment ID and the signature its
    /// checkout URL carries (the one the gateway's redirect will carry).
    async fn hold(&self, candidate: &str) -> (String, String) {
        let response = self
            .http
            .post(format!("{}/bookings", self.public))
            .json(&json!({"candidate": candidate, "level": "silver"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        let booking: Value = response.json().await.unwrap();
        let payment = booking["payment_id"].as_str().unwrap().to_owned();
        let checkout = url::Url::parse(booking["redirect_url"].as_str().unwrap()).unwrap();
        let signature = checkout
            .query_pairs()
            .find(|(k, _)| k == "hash")
            .map(|(_, v)| v.into_owned())
            .expect("the checkout URL carries the signature");
        (payment, signature)
    }

    async fn stop(self) {
        self.spawned.stop().await.expect("server stops");
        self.mock.stop().await;
    }
}

/// What a fuzzer run came to.
struct FuzzRun {
    success: bool,
    output: String,
    took: Duration,
}

/// Runs schemathesis on the document at `<public>/openapi.json` against
/// `base`, with every check, `filters` choosing the operations and
/// `headers` sent with every request. Killed after [`FUZZ_TIME_MAX`].
async fn fuzz(
    public: &str,
    base: &str,
    filters: &[&str],
    headers: &[String],
    more_config: &str,
    name: &str,
) -> FuzzRun {
    let schemathesis = venv_tool("schemathesis");
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("api-fuzz-{name}"));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let examples: u32 = env_or("SELLOUT_FUZZ_EXAMPLES", FUZZ_EXAMPLES);
    let seed: u64 = env_or("SELLOUT_FUZZ_SEED", FUZZ_SEED);
    // the document as served, kept beside the report
    let document = reqwest::get(format!("{public}/openapi.json"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    std::fs::write(work.join("openapi.json"), &document).unwrap();
    // SELLOUT_FUZZ_SCHEMA: another document (a file) to hold the server to
    let location =
        std::env::var("SELLOUT_FUZZ_SCHEMA").unwrap_or_else(|_| format!("{public}/openapi.json"));
    let config = work.join("schemathesis.toml");
    std::fs::write(&config, format!("{FUZZ_CONFIG}{more_config}")).unwrap();
    let mut command = tokio::process::Command::new(&schemathesis);
    command
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(location)
        .args(["--url", base])
        .args(["--checks", "all"])
        .args(["--max-examples", &examples.to_string()])
        .args(["--seed", &seed.to_string()])
        .args(["--workers", "2"])
        .args(["--request-timeout", "15"])
        .args(["--report", "junit"])
        .arg("--report-junit-path")
        .arg(work.join("junit.xml"))
        .args(filters);
    for header in headers {
        command.args(["--header", header]);
    }
    command
        .current_dir(&work)
        .env("NO_COLOR", "1")
        .env("SCHEMATHESIS_TELEMETRY", "false")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    eprintln!("api fuzz ({name}): {command:?}");
    let started = Instant::now();
    let child = command.spawn().unwrap();
    let out = match tokio::time::timeout(FUZZ_TIME_MAX, child.wait_with_output()).await {
        Ok(out) => out.unwrap(),
        Err(_) => panic!(
            "api fuzz ({name}): schemathesis still running after {FUZZ_TIME_MAX:?}: killed \
             (lower SELLOUT_FUZZ_EXAMPLES?)"
        ),
    };
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    FuzzRun {
        success: out.status.success(),
        output,
        took: started.elapsed(),
    }
}

/// The summary line's figures, e.g. `597 generated, 597 passed` (for the
/// assertion that the fuzzer ran cases at all).
fn cases_run(output: &str) -> u64 {
    output
        .lines()
        .filter(|l| l.contains("generated") || l.contains("test cases"))
        .flat_map(|l| l.split(|c: char| !c.is_ascii_digit()))
        .filter_map(|n| n.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

fn report(name: &str, run: &FuzzRun) {
    println!(
        "---- api fuzz ({name}), {:.1} s ----",
        run.took.as_secs_f64()
    );
    println!("{}", run.output);
    assert!(
        run.success,
        "api fuzz ({name}): schemathesis found failures (output above; rerun with the same \
         SELLOUT_FUZZ_SEED to reproduce)"
    );
    assert!(
        cases_run(&run.output) > 0,
        "api fuzz ({name}): no test case ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_public_api_answers_as_its_document_says() {
    let instance = Instance::start(false).await;
    // the callbacks name a real payment with its signature (its status,
    // and the requests the coverage phase makes without them, vary)
    let (payment, signature) = instance.hold(HOLDING_CANDIDATE).await;
    let callback = format!(
        "\n[[operations]]\ninclude-operation-id = \"paymentCallback\"\n\
         parameters = {{ \"paymentID\" = {payment:?}, \"signature\" = {signature:?} }}\n\
         checks.positive_data_acceptance.expected-statuses = {CALLBACK_OUTCOMES}\n"
    );
    let run = fuzz(
        &instance.public,
        &instance.public,
        &["--exclude-tag", booking_api::openapi::ADMIN_TAG],
        &[],
        &callback,
        "public",
    )
    .await;
    // the examples booked the loaded candidate for real
    let status = instance
        .ops_with(reqwest::Method::GET, "/ops/counters", None)
        .await;
    instance.stop().await;
    report("public", &run);
    let gold: u64 = status["levels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["level"] == "gold")
        .filter_map(|l| l["count"].as_u64())
        .sum();
    assert!(
        gold > 0,
        "the document's example never booked a seat: {status}"
    );
}

/// The admin operations on the admin listener, with the token. The
/// fuzzer resets, opens and closes the sale and loads candidates at will;
/// the instance is its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_answers_as_its_document_says() {
    let instance = Instance::start(true).await;
    let run = fuzz(
        &instance.public,
        &instance.admin,
        &["--include-tag", booking_api::openapi::ADMIN_TAG],
        &[format!("Authorization: Bearer {ADMIN_TOKEN}")],
        "",
        "admin",
    )
    .await;
    instance.stop().await;
    report("admin", &run);
}

#[test]
fn python_s_regex_engine_reads_the_candidate_rule_as_the_code_does() {
    use booking_api::bookings::{RAW_CANDIDATE_LEN_MAX, candidate_hash};
    use booking_api::openapi::CANDIDATE_PATTERN;
    let python = venv_tool("python");
    let long: String = "é".repeat(RAW_CANDIDATE_LEN_MAX);
    let samples: Vec<String> = [
        "c-1", "a b", "a\nb", "abc\n", "\n", "\tx", "x\u{7f}", "x\u{80}", "x\u{9f}", "x\u{a0}",
        "\u{200b}", "\u{2028}", "\u{fffd}", "😀", "\u{0}", "", "ÿ",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([long.clone(), format!("{long}é")])
    .collect();
    let script = format!(
        "import json, re, sys\n\
         p = re.compile({pattern})\n\
         samples = json.load(sys.stdin)\n\
         print(json.dumps([p.fullmatch(s) is not None and 1 <= len(s) <= {max} for s in samples]))\n",
        pattern = serde_json::to_string(CANDIDATE_PATTERN).unwrap(),
        max = RAW_CANDIDATE_LEN_MAX
    );
    let mut child = std::process::Command::new(python)
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(serde_json::to_string(&samples).unwrap().as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let matched: Vec<bool> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(matched.len(), samples.len());
    for (sample, by_schema) in samples.iter().zip(matched) {
        assert_eq!(
            candidate_hash(sample).is_ok(),
            by_schema,
            "{sample:?}: the document's rule (Python re) and candidate_hash disagree"
        );
    }
}
