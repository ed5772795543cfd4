//! Browser tests in headless Chromium, driven over WebDriver
//! ([`fantoccini`]) through Debian's `chromedriver`, so they run inside
//! `cargo test`.
//!
//! [`Browser::start`] starts `chromedriver` on a free loopback port (in a
//! process group of its own, killed with the Chromium it launched when the
//! [`Browser`] is closed or dropped) and opens a session on a headless
//! Chromium with a fresh profile and every flag that keeps it off the
//! network ([`CHROMIUM_FLAGS`]: this machine's network is closed, and
//! Chromium otherwise hangs on its background connections).
//!
//! Where `chromium` or `chromedriver` is missing a test is skipped with a
//! loud message, unless `SELLOUT_REQUIRE_BROWSER` is set (`scripts/test`
//! sets it, so CI fails instead); `scripts/setup` installs both.
//! Screenshots go to [`artifacts_dir`] (`target/browser-artifacts/`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

/// Set (to anything but `0` or empty) to fail instead of skipping when the
/// browser is missing.
pub const REQUIRE_ENV: &str = "SELLOUT_REQUIRE_BROWSER";
/// Overrides the Chromium binary (default `/usr/bin/chromium`, else
/// `chromium` on `PATH`).
pub const CHROMIUM_ENV: &str = "SELLOUT_CHROMIUM";
/// Overrides the chromedriver binary (default `/usr/bin/chromedriver`, else
/// `chromedriver` on `PATH`).
pub const CHROMEDRIVER_ENV: &str = "SELLOUT_CHROMEDRIVER";

/// Chromium's flags: headless, no sandbox (root in a container), and nothing
/// that reaches for the network on its own.
pub const CHROMIUM_FLAGS: [&str; 8] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// How long chromedriver may take to accept a session.
pub const DRIVER_START_MAX: Duration = Duration::from_secs(20);

/// A phone-ish viewport (CSS pixels).
pub const PHONE: (u32, u32) = (390, 844);

/// Whether a missing browser must fail the test ([`REQUIRE_ENV`]).
pub fn browser_required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `name` from the environment variable `env`, else `default` if it exists,
/// else `name` found on `PATH`.
fn find_tool(env: &str, default: &str, name: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    if Path::new(default).is_file() {
        return Some(PathBuf::from(default));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Chromium and chromedriver, if both are installed.
pub fn tools() -> Option<(PathBuf, PathBuf)> {
    Some((
        find_tool(CHROMIUM_ENV, "/usr/bin/chromium", "chromium")?,
        find_tool(CHROMEDRIVER_ENV, "/usr/bin/chromedriver", "chromedriver")?,
    ))
}

/// Where screenshots go: `target/browser-artifacts/` (under
/// `CARGO_TARGET_DIR` when set), created.
pub fn artifacts_dir() -> anyhow::Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("browser-artifacts");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// A free loopback port (bound, read, released).
fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// A headless Chromium session and the chromedriver serving it.
#[derive(Debug)]
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    profile: PathBuf,
    test: String,
}

impl Browser {
    /// A fresh browser for `test`, with a viewport of `size` CSS pixels;
    /// `None` (after a loud message on stderr) when Chromium or
    /// chromedriver is missing and [`browser_required`] is not set; an
    /// error when it is.
    pub async fn start(test: &str, size: (u32, u32)) -> anyhow::Result<Option<Browser>> {
        let Some((chromium, chromedriver)) = tools() else {
            if browser_required() {
                bail!(
                    "{test}: chromium or chromedriver not found and {REQUIRE_ENV} is set \
                     (run scripts/setup, or point {CHROMIUM_ENV}/{CHROMEDRIVER_ENV} at them)"
                );
            }
            eprintln!(
                "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
                 !!! SKIPPED {test}: chromium or chromedriver not installed\n\
                 !!! (scripts/setup installs them; set {REQUIRE_ENV}=1 to fail instead)\n\
                 !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
            );
            return Ok(None);
        };
        let port = free_port()?;
        let profile = std::env::temp_dir().join(format!(
            "sellout-chromium-{}-{test}-{port}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile)?;
        let mut command = Command::new(&chromedriver);
        command
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let driver = command
            .spawn()
            .with_context(|| format!("starting {}", chromedriver.display()))?;
        tracing::info!(port, pid = driver.id(), "chromedriver started");
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| (*s).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        args.push(format!("--window-size={},{}", size.0, size.1));
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"binary": chromium, "args": args}),
        );
        // from here on the driver is killed on every way out
        let mut partial = Partial {
            driver: Some(driver),
            profile: profile.clone(),
        };
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        let client = loop {
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(c) => break c,
                Err(e) if started.elapsed() < DRIVER_START_MAX => {
                    tracing::debug!(error = %e, "chromedriver not ready");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e).context("no WebDriver session from chromedriver"),
            }
        };
        let driver = partial.driver.take().context("driver")?;
        let browser = Browser {
            client,
            driver,
            profile,
            test: test.to_owned(),
        };
        browser.set_viewport(size).await?;
        Ok(Some(browser))
    }

    /// Resizes the window so the page's viewport is `size` CSS pixels.
    pub async fn set_viewport(&self, size: (u32, u32)) -> anyhow::Result<()> {
        self.client.set_window_size(size.0, size.1).await?;
        let inner = self
            .client
            .execute("return [window.innerWidth, window.innerHeight];", vec![])
            .await?;
        let (w, h) = (
            inner[0].as_u64().unwrap_or(0),
            inner[1].as_u64().unwrap_or(0),
        );
        let (dw, dh) = (
            u64::from(size.0).saturating_sub(w),
            u64::from(size.1).saturating_sub(h),
        );
        if dw > 0 || dh > 0 {
            let to = |a: u32, d: u64| u32::try_from(u64::from(a) + d).unwrap_or(a);
            self.client
                .set_window_size(to(size.0, dw), to(size.1, dh))
                .await?;
        }
        Ok(())
    }

    /// Saves a screenshot of the viewport as `<artifacts>/<test>-<name>.png`.
    pub async fn screenshot(&self, name: &str) -> anyhow::Result<PathBuf> {
        let png = self.client.screenshot().await?;
        let path = artifacts_dir()?.join(format!("{}-{name}.png", self.test));
        std::fs::write(&path, png).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("screenshot: {}", path.display());
        Ok(path)
    }

    /// Runs `script` (a function body; `arguments` are `args`) and returns
    /// its value.
    pub async fn eval(&self, script: &str, args: Vec<Value>) -> anyhow::Result<Value> {
        Ok(self.client.execute(script, args).await?)
    }

    /// Evaluates `script` every 100 ms until `done` holds for its value, at
    /// most `max`; the last value, or an error naming `what` and it.
    pub async fn until(
        &self,
        what: &str,
        script: &str,
        max: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let started = Instant::now();
        loop {
            let v = self.eval(script, vec![]).await?;
            if done(&v) {
                return Ok(v);
            }
            if started.elapsed() > max {
                let _ = self.screenshot(&format!("timeout-{}", slug(what))).await;
                bail!("{what}: not seen within {max:?}; the page shows {v:#}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Ends the session (Chromium quits) and stops chromedriver.
    pub async fn close(self) {
        // the session's end and the group kill happen in Drop too; ending the
        // session first lets Chromium quit cleanly
        let client = self.client.clone();
        let _ = tokio::time::timeout(Duration::from_secs(5), client.close()).await;
        drop(self);
    }
}

/// A file-name-safe form of `s`.
fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// Kills chromedriver's process group: the driver and the Chromium it
/// started (they share it), by the group id this process made.
fn kill_group(driver: &mut Child, profile: &Path) {
    let pgid = driver.id();
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let _ = driver.kill();
    let _ = driver.wait();
    let _ = std::fs::remove_dir_all(profile);
}

/// The driver while the session is not made yet: killed if starting fails.
struct Partial {
    driver: Option<Child>,
    profile: PathBuf,
}

impl Drop for Partial {
    fn drop(&mut self) {
        if let Some(mut d) = self.driver.take() {
            kill_group(&mut d, &self.profile);
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        kill_group(&mut self.driver, &self.profile);
    }
}

/// A script (for [`Browser::eval`] / [`Browser::until`]) that reads what
/// the status page shows: the sale's state word, the summary, the stale
/// banner (text and whether shown), the problem line, how many refreshes
/// ran, and per level row its name, state (`data-shown`), seats-left text,
/// its state badge's text and its `aria-label`.
pub const STATUS_PAGE_SHOWS: &str = r##"
const $ = (id) => document.getElementById(id);
const stale = $("stale");
return {
  sale: $("sale-name").textContent,
  state: $("sale-state").textContent,
  summary: $("summary").textContent,
  summary_live: $("summary").getAttribute("aria-live"),
  stale: stale.className === "shown" && getComputedStyle(stale).display !== "none",
  stale_text: stale.textContent,
  problem: $("problem").textContent,
  refreshed: Number(document.body.dataset.refreshed || 0),
  levels: Array.from(document.querySelectorAll("#levels tr")).map((tr) => ({
    level: tr.querySelector("th").textContent,
    shown: tr.dataset.shown,
    left: tr.querySelectorAll("td")[0].textContent,
    badge: tr.querySelector(".badge").textContent,
    aria: tr.getAttribute("aria-label"),
  })),
};
"##;

/// The row of `level` in a [`STATUS_PAGE_SHOWS`] value.
pub fn level_row<'a>(shows: &'a Value, level: &str) -> Option<&'a Value> {
    shows["levels"]
        .as_array()?
        .iter()
        .find(|l| l["level"] == level)
}

/// The badge text of `level` in a [`STATUS_PAGE_SHOWS`] value (`"Open"`,
/// `"Full"`, `"Closed"`), empty if the page has no such row.
pub fn badge(shows: &Value, level: &str) -> String {
    level_row(shows, level)
        .and_then(|l| l["badge"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_keep_chromium_off_the_network() {
        for f in [
            "--headless",
            "--no-sandbox",
            "--disable-quic",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ] {
            assert!(CHROMIUM_FLAGS.contains(&f), "{f}");
        }
    }

    #[test]
    fn rows_are_found_by_level() {
        let shows = json!({"levels": [{"level": "gold", "badge": "Full"}, {"level": "silver", "badge": "Open"}]});
        assert_eq!(badge(&shows, "gold"), "Full");
        assert_eq!(badge(&shows, "silver"), "Open");
        assert_eq!(badge(&shows, "bronze"), "");
        assert_eq!(slug("a b/c"), "a-b-c");
    }
}
