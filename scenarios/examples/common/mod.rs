//! What the benchmark examples share (`bench_table`, `scale_table`): child
//! processes that are stopped when dropped or on Ctrl-C, a private
//! `redis-server`, a `booking serve` process, wrk on `POST /bookings`, and
//! the table they print. Each example includes it with `#[path]`.

#![allow(dead_code)]

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use parking_lot::Mutex;
use scenarios::cpu;

/// Processes this run started and has not reaped: Ctrl-C kills them.
pub type Started = Arc<Mutex<Vec<u32>>>;

/// A child killed (and reaped) when dropped.
pub struct Guard {
    pub child: Child,
    started: Started,
}

impl Guard {
    pub fn spawn(cmd: &mut Command, started: &Started) -> anyhow::Result<Guard> {
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {:?}", cmd.get_program()))?;
        started.lock().push(child.id());
        Ok(Guard {
            child,
            started: started.clone(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `max`; past it, SIGINT, then SIGKILL 10 s later.
    pub fn wait_for(&mut self, max: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if started.elapsed() > max {
                let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
                let stopping = Instant::now();
                while stopping.elapsed() < Duration::from_secs(10) {
                    if self.child.try_wait()?.is_some() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!("{:?} ran past its bound of {max:?}: stopped", self.pid());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let pid = self.child.id();
        self.started.lock().retain(|p| *p != pid);
    }
}

/// Runs `cmd` to its end (at most `max`), its stdout captured, its stderr
/// into `log`.
pub fn output(
    cmd: &mut Command,
    max: Duration,
    log: &Path,
    started: &Started,
) -> anyhow::Result<String> {
    let err = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(err);
    let mut g = Guard::spawn(cmd, started)?;
    let mut out = g.child.stdout.take().context("stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let status = g.wait_for(max);
    let text = reader.join().unwrap_or_default();
    let status = status?;
    if !status.success() {
        bail!(
            "{:?} exited with {status}; stderr in {}; stdout:\n{text}",
            cmd.get_program(),
            log.display()
        );
    }
    Ok(text)
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The first number after `after` in `text`.
pub fn number_after(text: &str, after: &str) -> Option<f64> {
    let rest = &text[text.find(after)? + after.len()..];
    let rest = rest.trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(rest.len());
    rest[..end].replace(',', "").parse().ok()
}

/// The line of `text` starting with `prefix`.
pub fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.lines().find(|l| l.trim_start().starts_with(prefix))
}

pub fn redis_cli(port: u16, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .context("redis-cli (scripts/setup installs redis-server and its tools)")?;
    if !out.status.success() {
        bail!(
            "redis-cli {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A private `redis-server` on a free port.
pub fn redis_server(started: &Started) -> anyhow::Result<(Guard, u16)> {
    let port = free_port();
    let g = Guard::spawn(
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        started,
    )?;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if redis_cli(port, &["PING"]).is_ok_and(|p| p == "PONG") {
            return Ok((g, port));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("redis-server on port {port} did not answer")
}

#[derive(Debug, Clone, Default)]
pub struct Wrk {
    pub requests: f64,
    pub rps: f64,
    pub non_2xx: f64,
    pub cpu_s: f64,
    /// p99 from `wrk --latency`, ms.
    pub p99_ms: f64,
}

/// Ticks of the children this process has waited for (`cutime + cstime`).
pub fn waited_children_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, r)| r.split_whitespace().collect());
    let field = |i: usize| rest.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    field(13) + field(14)
}

/// A figure, or the error that stopped its part.
pub type Part<T> = Result<T, String>;

pub fn part<T>(name: &str, f: impl FnOnce() -> anyhow::Result<T>) -> Part<T> {
    let t = Instant::now();
    eprintln!("bench: {name} …");
    let r = f().map_err(|e| format!("{e:#}"));
    match &r {
        Ok(_) => eprintln!("bench: {name} done in {:.0} s", t.elapsed().as_secs_f64()),
        Err(e) => eprintln!("bench: {name} failed: {e}"),
    }
    r
}

pub fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "?".into();
    }
    let n = x.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

pub struct Table(pub Vec<[String; 3]>);

impl Table {
    pub fn row(
        &mut self,
        what: impl Into<String>,
        figure: impl Into<String>,
        ratio: impl Into<String>,
    ) {
        self.0.push([what.into(), figure.into(), ratio.into()]);
    }
    pub fn failed(&mut self, what: &str, e: &str) {
        let first = e.lines().next().unwrap_or(e);
        self.row(what, format!("not measured: {first}"), "");
    }
    pub fn print(&self) {
        println!("| measurement | figure | ratio |");
        println!("|---|---|---|");
        for [a, b, c] in &self.0 {
            println!("| {a} | {b} | {c} |");
        }
    }
}

/// On Ctrl-C: SIGINT to every child (a `scenarios` child then stops its
/// own), 10 s for them to go, then SIGKILL, and exit 130.
pub fn stop_children_on_ctrlc(started: &Started, tag: &'static str) -> anyhow::Result<()> {
    let started = started.clone();
    ctrlc::set_handler(move || {
        let signal = |s| {
            let mut pids = cpu::children();
            pids.extend(started.lock().iter().copied());
            for pid in pids {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), s);
            }
        };
        signal(nix::sys::signal::Signal::SIGINT);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10)
            && cpu::children().iter().any(|p| cpu::stat_of(*p).is_some())
        {
            std::thread::sleep(Duration::from_millis(100));
        }
        signal(nix::sys::signal::Signal::SIGKILL);
        eprintln!("{tag}: interrupted; every process it started is stopped");
        std::process::exit(130);
    })?;
    Ok(())
}

/// A `booking serve` process on `config` (written to `<dir>/<name>.toml`,
/// its log beside it), once its `/healthz` answers (60 s at most).
pub fn booking_serve(
    bin: &Path,
    config: &booking_server::config::ServerConfig,
    name: &str,
    dir: &Path,
    runtime: &tokio::runtime::Runtime,
    started: &Started,
) -> anyhow::Result<Guard> {
    config.validate()?;
    let config_path = dir.join(format!("{name}.toml"));
    std::fs::write(&config_path, toml::to_string(config)?)?;
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    let guard = Guard::spawn(
        Command::new(bin)
            .arg("serve")
            .arg("--config")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log),
        started,
    )?;
    let url = format!("http://{}", config.listen);
    let http = reqwest::Client::new();
    let t = Instant::now();
    loop {
        let healthy = runtime.block_on(async {
            http.get(format!("{url}/healthz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        });
        if healthy {
            return Ok(guard);
        }
        if t.elapsed() > Duration::from_secs(60) {
            bail!(
                "booking serve did not answer /healthz in 60 s (log in {})",
                dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Resident memory of a process, bytes (`VmRSS`).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = number_after(line(&status, "VmRSS:")?, "VmRSS:")?;
    Some((kb * 1024.0) as u64)
}

/// A `wrk --latency` duration in ms (`812.00us`, `1.23ms`, `2.01s`).
pub fn wrk_ms(text: &str) -> Option<f64> {
    let t = text.trim();
    let (n, scale) = if let Some(n) = t.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60_000.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1_000.0)
    } else {
        return None;
    };
    n.trim().parse::<f64>().ok().map(|v| v * scale)
}

/// wrk closed loop (one thread, `connections`, `secs`) against `url` with
/// the Lua `script` (its requests), `--latency`; its CPU from this
/// process's waited-children times. Output in `<dir>/<name>.out`.
pub fn wrk_run(
    url: &str,
    script: &str,
    connections: u32,
    secs: u64,
    name: &str,
    dir: &Path,
    started: &Started,
) -> anyhow::Result<Wrk> {
    let script_path = dir.join(format!("{name}.lua"));
    std::fs::write(&script_path, script)?;
    let before = waited_children_ticks();
    let text = output(
        Command::new("wrk")
            .args(["-t1", &format!("-c{connections}"), &format!("-d{secs}s")])
            .arg("--latency")
            .arg("-s")
            .arg(&script_path)
            .arg(url),
        Duration::from_secs(secs + 60),
        &dir.join(format!("{name}.log")),
        started,
    )
    .context("wrk (scripts/setup installs it)")?;
    let cpu_s = waited_children_ticks().saturating_sub(before) as f64 / cpu::TICKS_PER_S;
    std::fs::write(dir.join(format!("{name}.out")), &text)?;
    Ok(Wrk {
        requests: text
            .lines()
            .find(|l| l.contains("requests in"))
            .and_then(|l| number_after(l, ""))
            .unwrap_or(f64::NAN),
        rps: line(&text, "Requests/sec:")
            .and_then(|l| number_after(l, "Requests/sec:"))
            .unwrap_or(f64::NAN),
        non_2xx: line(&text, "Non-2xx")
            .and_then(|l| number_after(l, "responses:"))
            .unwrap_or(0.0),
        cpu_s,
        p99_ms: line(&text, "99%")
            .and_then(|l| l.trim().strip_prefix("99%"))
            .and_then(wrk_ms)
            .unwrap_or(f64::NAN),
    })
}

/// A wrk script posting `POST /bookings` for `level`, candidate
/// `<prefix><i>` with `i` = `first`, `first + step`, … (one wrk thread).
pub fn post_bookings_lua(level: &str, prefix: &str, first: u64, step: u64) -> String {
    format!(
        "-- POST /bookings, a new candidate each request (one thread)\n\
         local n = {first}\n\
         request = function()\n  local c = n\n  n = n + {step}\n  return wrk.format(\"POST\", \"/bookings\", \
         {{[\"Content-Type\"] = \"application/json\"}}, \
         '{{\"candidate\":\"{prefix}' .. c .. '\",\"level\":\"{level}\"}}')\nend\n"
    )
}

/// The mock gateway in this process (RSA webhook signatures off: v2, as the
/// rehearsal's) and the rehearsal config of `profile` on `stack` and
/// `redis_url` against it, with a random admin token set.
pub fn mock_and_config(
    profile: &scenarios::Profile,
    stack: booking_server::config::StackKind,
    redis_url: String,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<(mock_gateway::Running, booking_server::config::ServerConfig)> {
    let sale = booking::SaleId::parse(&profile.sale)?;
    let mock = runtime.block_on(mock_gateway::start_local(
        mock_gateway::Config {
            seed: profile.seed,
            signature_version: 2,
            ..mock_gateway::Config::default()
        },
        mock_gateway::ScriptSpec::default(),
    ))?;
    let topic = mock_gateway::Config::default().topic_arn;
    let mut config =
        scenarios::fleet::rehearsal_config(profile, &sale, stack, redis_url, &mock, topic);
    config.admin_token = Some(format!(
        "{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    ));
    Ok((mock, config))
}
