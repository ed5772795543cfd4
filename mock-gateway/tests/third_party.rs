//! Third-party bKash client libraries from PyPI, unchanged but for their base
//! URL, against the gateway: grant → refresh → create → pay → execute → status →
//! search → refund, driven by `tests/third_party/bkash_clients.py` in the venv
//! that `scripts/setup` makes. Then the gateway's ledger must agree.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mock_gateway::config::Merchant;
use mock_gateway::payments::PaymentState;
use mock_gateway::wire::Amount;
use mock_gateway::{Config, ScriptSpec};
use serde_json::Value;

/// The whole script's deadline: it makes a few dozen local calls.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate lives in the workspace")
        .to_path_buf()
}

/// The venv's interpreter; fails (never skips) when `scripts/setup` has not run.
fn venv_python() -> PathBuf {
    let python = repo_root().join(".venv").join("bin").join("python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup first",
        python.display()
    );
    python
}

fn poisha(amount: &str) -> u64 {
    Amount::parse(amount)
        .unwrap_or_else(|c| panic!("bad amount {amount:?}: {c:?}"))
        .poisha()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bkash_clients_from_pypi_work_unchanged_against_the_mock() {
    let python = venv_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/third_party/bkash_clients.py");
    let running = mock_gateway::start_local(
        Config {
            grant_limit: 10,
            ..Default::default()
        },
        ScriptSpec::default(),
    )
    .await
    .expect("gateway starts");
    let merchant = Merchant::default();

    let child = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(&running.url)
        .args(["--username", &merchant.username])
        .args(["--password", &merchant.password])
        .args(["--app-key", &merchant.app_key])
        .args(["--app-secret", &merchant.app_secret])
        .current_dir(repo_root())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e}; run scripts/setup first",
                python.display()
            )
        });
    let output = tokio::time::timeout(SCRIPT_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{} did not finish in {SCRIPT_TIMEOUT:?}", script.display()))
        .expect("script output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("--- bkash_clients.py stdout ---\n{stdout}");
    if !stderr.trim().is_empty() {
        println!("--- bkash_clients.py stderr ---\n{stderr}");
    }
    assert!(
        output.status.success(),
        "bkash_clients.py failed ({}):\n{stderr}",
        output.status
    );

    // What the clients were told, to compare with the ledger.
    let result: Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .map(|j| serde_json::from_str(j).expect("RESULT is JSON"))
        .expect("the script prints a RESULT line");
    let reported = result["payments"].as_array().expect("payments array");
    assert_eq!(reported.len(), 2, "one payment per client: {result}");

    let ledger = running.app.gateway.payments();
    assert_eq!(
        ledger.len(),
        reported.len(),
        "the gateway has exactly the clients' payments"
    );
    for r in reported {
        let id = r["paymentID"].as_str().expect("paymentID");
        let p = ledger
            .iter()
            .find(|p| p.payment_id == id)
            .unwrap_or_else(|| panic!("payment {id} ({}) not in the ledger", r["client"]));
        assert_eq!(p.state, PaymentState::Completed, "{id}");
        assert_eq!(p.trx_id.as_deref(), r["trxID"].as_str(), "{id} trxID");
        assert_eq!(
            p.amount_poisha,
            poisha(r["amount"].as_str().expect("amount"))
        );
        // two execute calls: the one that completed it, then 2117
        let codes: Vec<&str> = p
            .execute_calls
            .iter()
            .map(|c| c.status_code.as_str())
            .collect();
        assert_eq!(codes, ["0000", "2117"], "{id} execute calls");
        assert_eq!(p.payer_events.len(), 1, "{id} paid once");
        let want: Vec<(&str, u64)> = r["refunds"]
            .as_array()
            .expect("refunds")
            .iter()
            .map(|x| {
                (
                    x["refundTrxID"].as_str().expect("refundTrxID"),
                    poisha(x["amount"].as_str().expect("refund amount")),
                )
            })
            .collect();
        let got: Vec<(&str, u64)> = p
            .refunds
            .iter()
            .map(|x| (x.refund_trx_id.as_str(), poisha(&x.amount)))
            .collect();
        assert_eq!(got, want, "{id} refunds (refused ones recorded none)");
        assert_eq!(p.refunded_poisha(), p.amount_poisha, "{id} fully refunded");
    }

    // One grant per client; every refresh spent none.
    let grants: usize = running
        .app
        .gateway
        .grants_in_window()
        .iter()
        .map(|(_, n)| n)
        .sum();
    assert_eq!(grants, 2, "grants spent");

    running.stop().await;
}
