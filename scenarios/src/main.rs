//! `scenarios rehearse`: the headline rehearsal, or any profile, with
//! overrides. Exits 0 only if every invariant and threshold held, 1 if one
//! broke, 2 if the rehearsal could not run.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use booking_server::config::StackKind;
use clap::{Parser, Subcommand};
use scenarios::kills::KillSpec;
use scenarios::profile::FleetKind;
use scenarios::{Profile, Progress};

/// The `booking` binary's allocator: the rehearsal runs the fleet in this
/// process, so it serves with what production serves with.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Rehearse a flash sale: load, audit, report.
#[derive(Debug, Parser)]
#[command(name = "scenarios", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: service_main::LogArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a whole sale (setup, rush, late arrivals, settle, audit, report).
    Rehearse(RehearseArgs),
    /// Print the profile as it would run (after overrides), as TOML.
    Profile(RehearseArgs),
    /// Step the arrival rate up with short rehearsals until a verdict
    /// breaks, on each stack: the highest rate held, its p99, what broke
    /// above it, and the CPU per component; writes capacity.json.
    Capacity(scenarios::capacity::CapacityArgs),
}

#[derive(Debug, clap::Args)]
struct RehearseArgs {
    /// A built-in profile (`default`, `ci`) or a TOML file.
    #[arg(long, short)]
    profile: Option<String>,
    /// Override any profile value by its dotted path, e.g.
    /// `--set load.rate=500 --set candidates=5000` (repeat).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Seed of everything random.
    #[arg(long)]
    seed: Option<u64>,
    /// Backends of the in-process fleet.
    #[arg(long, value_enum)]
    stack: Option<StackKind>,
    /// Redis URL with `--stack redis` (a private redis-server is started if
    /// nothing answers there).
    #[arg(long)]
    redis_url: Option<String>,
    /// Booking instances of the local fleet.
    #[arg(long)]
    instances: Option<usize>,
    /// Where the confirmation emails go: the stack's own log (`outputs`,
    /// the default), `scripts/smtp-sink` on a free port with its Maildir in
    /// the run folder (`smtp`; needs the venv of scripts/setup), or SES on
    /// the local emulators' moto (`ses`; `--stack aws` only). With a mail
    /// server, the audit counts what it delivered.
    #[arg(long, value_enum)]
    mail: Option<scenarios::mail::Mail>,
    /// The local fleet: tasks of this process (`in-process`, the default),
    /// or `booking serve --stack redis` OS processes on a private
    /// redis-server (`processes`; implies `--stack redis`).
    #[arg(long, value_enum)]
    fleet: Option<FleetKind>,
    /// With `--fleet processes`: the `booking` binary (default: the one next
    /// to this executable; `cargo build -p booking-server --bin booking`).
    #[arg(long, value_name = "PATH")]
    booking_bin: Option<PathBuf>,
    /// With `--fleet processes`: SIGKILL an instance mid-rush and start it
    /// again, as INSTANCE@rush=FRACTION[,down_ms=MS], e.g.
    /// `0@rush=0.4,down_ms=1000` (repeat).
    #[arg(long = "kill", value_name = "SPEC")]
    kills: Vec<KillSpec>,
    /// A fault schedule carried out during the load: a built-in one
    /// (`headline`, `kill-after-admission`, `kill-after-create`,
    /// `kill-after-enqueue`, `kill-during-execute`, `kill-after-paid`, `redis-pause`,
    /// `redis-restart`, `instance-pause-restart`, `link-trouble`,
    /// `ports-and-gateway`) or a TOML file. Process faults need `--fleet
    /// processes`.
    #[arg(long, value_name = "NAME|FILE")]
    faults: Option<String>,
    /// Put the Redis and gateway links behind proxies and serve their
    /// toxiproxy-shaped HTTP API here (e.g. 127.0.0.1:8474), so a toxiproxy
    /// client adds toxics by hand while the rehearsal runs.
    #[arg(long, value_name = "ADDR")]
    toxiproxy_api: Option<std::net::SocketAddr>,
    /// Rehearse the deployment at this base URL instead (its public listener).
    #[arg(long)]
    target: Option<String>,
    /// With --target: its admin listener (the /ops/ routes), http://HOST:PORT.
    #[arg(long, value_name = "URL")]
    target_admin: Option<String>,
    /// With --target: the deployment's own configuration file, from which
    /// the admin listener's address and token are read (as `booking`
    /// reads them) unless --target-admin / --target-admin-token say.
    #[arg(long, value_name = "FILE")]
    target_config: Option<PathBuf>,
    /// With --target: the admin token.
    #[arg(long, env = "SELLOUT_ADMIN_TOKEN", hide_env_values = true)]
    target_admin_token: Option<String>,
    /// With --target: confirm its reset, load and close by naming the sale
    /// (a production sale needs it).
    #[arg(long, value_name = "SALE")]
    confirm: Option<String>,
    /// With --target: the mock gateway it talks to (the audit's ground truth).
    #[arg(long)]
    target_gateway: Option<String>,
    /// With --target: run shard INDEX of COUNT of the schedule (arrival k
    /// goes to shard k % COUNT), one generator process per shard; shard 0
    /// also sets the sale up, closes, settles and audits it. `reports
    /// merge` joins the shards' reports.
    #[arg(long, value_name = "INDEX/COUNT")]
    shard: Option<scenarios::shard::Shard>,
    /// With --shard: every shard starts its schedule at this wall-clock
    /// time (RFC 3339, or seconds since the Unix epoch) instead of lead
    /// after it sees the sale open.
    #[arg(long, value_name = "TIME", requires = "shard", value_parser = scenarios::shard::parse_start_at)]
    start_at: Option<std::time::SystemTime>,
    /// With --shard: from the sale's opening to the schedule's start on
    /// every shard, ms (default 3000).
    #[arg(long, value_name = "MS", requires = "shard")]
    shard_lead_ms: Option<u64>,
    /// With --shard: how long a shard other than 0 waits for the sale to
    /// open, ms (default 600000).
    #[arg(long, value_name = "MS", requires = "shard")]
    shard_wait_ms: Option<u64>,
    /// Where run folders go (default reports/runs).
    #[arg(long)]
    out: Option<PathBuf>,
    /// No progress lines.
    #[arg(long, short)]
    quiet: bool,
    /// Signed candidates: the fleet requires candidate tokens and the load
    /// signs each candidate's (HS256; the secret from
    /// SELLOUT_CANDIDATE_AUTH_SECRET, else one of the run's own).
    #[arg(long)]
    candidate_auth: bool,
}

impl RehearseArgs {
    /// The shorthand flags as overrides, after the `--set`s.
    fn overrides(&self) -> Vec<String> {
        let mut sets = self.sets.clone();
        let quote = |s: &str| format!("{s:?}");
        if let Some(seed) = self.seed {
            sets.push(format!("seed={seed}"));
        }
        if let Some(fleet) = self.fleet {
            let kind = match fleet {
                FleetKind::InProcess => "in_process",
                FleetKind::Processes => "processes",
            };
            sets.push(format!("fleet={}", quote(kind)));
            if fleet == FleetKind::Processes && self.stack.is_none() {
                sets.push(format!("stack.kind={}", quote("redis")));
            }
        }
        if let Some(bin) = &self.booking_bin {
            sets.push(format!("booking_bin={}", quote(&bin.display().to_string())));
        }
        if !self.kills.is_empty() {
            let specs: Vec<String> = self.kills.iter().map(|k| quote(&k.to_string())).collect();
            sets.push(format!("kills=[{}]", specs.join(", ")));
        }
        if let Some(stack) = self.stack {
            let kind = match stack {
                StackKind::Embedded => "embedded",
                StackKind::Redis => "redis",
                StackKind::Aws => "aws",
            };
            sets.push(format!("stack.kind={}", quote(kind)));
        }
        if let Some(url) = &self.redis_url {
            sets.push(format!("stack.redis_url={}", quote(url)));
        }
        if let Some(n) = self.instances {
            sets.push(format!("instances={n}"));
        }
        if let Some(mail) = self.mail {
            sets.push(format!("mail={}", quote(mail.name())));
        }
        if let Some(f) = &self.faults {
            sets.push(format!("faults={}", quote(f)));
        }
        if let Some(a) = &self.toxiproxy_api {
            sets.push(format!("links_api={}", quote(&a.to_string())));
        }
        if let Some(t) = &self.target {
            sets.push(format!("target={}", quote(t)));
        }
        if let Some(g) = &self.target_gateway {
            sets.push(format!("target_gateway={}", quote(g)));
        }
        if let Some(c) = &self.confirm {
            sets.push(format!("target_confirm={}", quote(c)));
        }
        if let Some(out) = &self.out {
            sets.push(format!("out={}", quote(&out.display().to_string())));
        }
        if self.candidate_auth {
            sets.push("candidate_auth=true".to_owned());
        }
        sets
    }

    fn profile(&self) -> anyhow::Result<Profile> {
        let mut profile = Profile::load(self.profile.as_deref(), &self.overrides())
            .context("loading the profile")?;
        // the admin listener and token: the flags, else the deployment's
        // own configuration (never a profile file: a token stays out of it)
        let from_config = match &self.target_config {
            Some(path) => Some(
                booking_server::config::ServerConfig::from_file(path)?
                    .admin()
                    .client()
                    .with_context(|| format!("the admin settings of {}", path.display()))?,
            ),
            None => None,
        };
        if let Some(url) = self
            .target_admin
            .clone()
            .or_else(|| from_config.as_ref().map(|(url, _)| url.clone()))
        {
            profile.target_admin = Some(url);
        }
        if let Some(t) = self
            .target_admin_token
            .clone()
            .or_else(|| from_config.and_then(|(_, t)| t))
        {
            profile.target_admin_token = Some(t);
        }
        Ok(profile)
    }

    /// `--shard` and its companions.
    fn sharding(&self) -> Option<scenarios::shard::Sharding> {
        use scenarios::shard::{LEAD_DEFAULT, Sharding, Start, WAIT_MAX_DEFAULT};
        let ms = std::time::Duration::from_millis;
        Some(Sharding {
            shard: self.shard?,
            start: match self.start_at {
                Some(t) => Start::At(t),
                None => Start::Rendezvous {
                    lead: self.shard_lead_ms.map_or(LEAD_DEFAULT, ms),
                },
            },
            wait_max: self.shard_wait_ms.map_or(WAIT_MAX_DEFAULT, ms),
        })
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // goose warns once per failed request: a killed instance's connection
    // errors are counted in the report instead
    if let Err(e) = service_main::init_logging(cli.log.log_format, "warn,goose::goose=error") {
        eprintln!("error: logging: {e}");
        return ExitCode::from(2);
    }
    match run(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<bool> {
    match cli.command {
        Command::Capacity(args) => capacity(&args),
        Command::Profile(args) => {
            let p = args.profile()?;
            print!(
                "{}",
                toml::to_string_pretty(&p).context("printing the profile")?
            );
            Ok(true)
        }
        Command::Rehearse(args) => {
            let profile = args.profile()?;
            let progress = if args.quiet {
                Progress::Quiet
            } else {
                Progress::Lines
            };
            let sharding = args.sharding();
            let outcome = until_interrupted("rehearsal", async {
                match sharding {
                    Some(s) => scenarios::shard::rehearse(&profile, progress, s).await,
                    None => scenarios::rehearse(&profile, progress).await,
                }
            })?;
            Ok(outcome.report.passed)
        }
    }
}

/// `scenarios capacity`: every stack's search, the table on stdout. Ctrl-C
/// drops the search and with it the step's fleet and processes.
fn capacity(args: &scenarios::capacity::CapacityArgs) -> anyhow::Result<bool> {
    let (base, plan, stacks) = args.resolve()?;
    let progress = if args.verbose {
        Progress::Lines
    } else {
        Progress::Quiet
    };
    let (report, path) = until_interrupted(
        "capacity search",
        scenarios::capacity::run(&base, &plan, &stacks, progress),
    )?;
    print!("{}", scenarios::capacity::table(&report));
    println!("written: {}", path.display());
    Ok(report.stacks.iter().all(|s| s.error.is_none()))
}

/// Runs `work` on a new runtime until it ends or Ctrl-C: Ctrl-C drops it,
/// and with it every process and server it started. The handler is set
/// before goose tries to set its own (which then stays unset): goose's
/// would only stop the load, and exit on a second Ctrl-C without running
/// destructors.
fn until_interrupted<T, E>(
    what: &'static str,
    work: impl std::future::Future<Output = Result<T, E>>,
) -> anyhow::Result<T>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let (interrupt, mut interrupted) = tokio::sync::watch::channel(false);
    ctrlc::set_handler(move || {
        interrupt.send_replace(true);
    })
    .context("setting the Ctrl-C handler")?;
    runtime.block_on(async {
        tokio::select! {
            outcome = work => outcome.context(what),
            _ = interrupted.wait_for(|i| *i) => {
                anyhow::bail!("interrupted: everything the {what} started is stopped")
            }
        }
    })
}
