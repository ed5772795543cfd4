//! `aws-local`: the local AWS-protocol servers for a rehearsal by hand.
//! Prints the environment that points the SDK at them, then serves until
//! SIGTERM or Ctrl-C, and exits 0 after stopping its child servers (fauxqs
//! or moto: dropped with [`booking_aws_local::LocalAws`]). `--log-format
//! text|json` as every service binary.
//!
//! ```sh
//! cargo run -p booking-aws-local -- --ttl-lag-ms 3600 > /tmp/aws-local.env &
//! sleep 5; . /tmp/aws-local.env
//! ```

use std::sync::Arc;
use std::time::Duration;

use booking_aws_local::counting::CountingFront;

use anyhow::Context;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut log_format = service_main::LogFormat::Text;
    let mut lag = booking_aws_local::TTL_LAG_DEFAULT;
    let mut count_to: Option<std::path::PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--ttl-lag-ms" => {
                let ms: u64 = args
                    .next()
                    .context("--ttl-lag-ms needs a value")?
                    .parse()
                    .context("--ttl-lag-ms: a whole number of ms")?;
                lag = Duration::from_millis(ms);
            }
            "--log-format" => {
                let v = args.next().context("--log-format needs text or json")?;
                log_format = match v.as_str() {
                    "text" => service_main::LogFormat::Text,
                    "json" => service_main::LogFormat::Json,
                    _ => anyhow::bail!("--log-format: text or json, not {v:?}"),
                };
            }
            "--count" => {
                count_to = Some(args.next().context("--count needs a file")?.into());
            }
            "-h" | "--help" => {
                println!(
                    "aws-local [--ttl-lag-ms MS] [--count FILE] [--log-format text|json]: DynamoDB+Streams (dynoxide, in process), SQS (fauxqs, else a moto of its own; SELLOUT_LOCAL_SQS=fauxqs|moto|shared-moto) and S3 (moto) on loopback; prints the environment to use them. --count: every call counted by service and operation in fronts before the servers, written to FILE (JSON) every second and at the end"
                );
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other:?} (try --help)"),
        }
    }
    service_main::init_logging(log_format, "warn")
        .map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))?;
    let local = booking_aws_local::LocalAws::start_with(lag)
        .await
        .map_err(anyhow::Error::msg)?;
    let mut e = local.settings().endpoints;
    let calls = Arc::new(booking_aws::AwsCalls::default());
    let mut fronts = Vec::new();
    if count_to.is_some() {
        for (service, endpoint) in [
            ("DynamoDB", &mut e.dynamodb),
            ("DynamoDB Streams", &mut e.dynamodb_streams),
            ("SQS", &mut e.sqs),
            ("S3", &mut e.s3),
        ] {
            if let Some(upstream) = endpoint.clone() {
                let front = CountingFront::start(service, &upstream, calls.clone())
                    .await
                    .context("starting a counting front")?;
                *endpoint = Some(front.url.clone());
                fronts.push(front);
            }
        }
    }
    let show = |v: Option<String>| v.unwrap_or_default();
    println!(
        "# DynamoDB and Streams: dynoxide in aws-local (pid {}); SQS: {} (pid {}); S3, SES and SNS: moto (pid {})",
        std::process::id(),
        local.sqs.kind(),
        local.sqs.pid(),
        local.moto.pid()
    );
    println!("export AWS_ENDPOINT_URL_DYNAMODB={}", show(e.dynamodb));
    println!(
        "export AWS_ENDPOINT_URL_DYNAMODB_STREAMS={}",
        show(e.dynamodb_streams)
    );
    println!("export AWS_ENDPOINT_URL_SQS={}", show(e.sqs));
    println!("export AWS_ENDPOINT_URL_S3={}", show(e.s3));
    // SES v2 (the confirmation emails) and SNS (the alerts) are moto's too
    println!("export AWS_ENDPOINT_URL_SESV2={}", show(e.ses));
    println!("export AWS_ENDPOINT_URL_SNS={}", show(e.sns));
    println!("export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1");
    let write = |path: &std::path::Path| -> anyhow::Result<()> {
        let json = serde_json::to_vec_pretty(&calls.snapshot())?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))
    };
    let mut every = tokio::time::interval(Duration::from_secs(1));
    let stop = service_main::stop_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = every.tick() => {
                if let Some(path) = &count_to {
                    write(path)?;
                }
            }
        }
    }
    if let Some(path) = &count_to {
        write(path)?;
    }
    drop(fronts);
    // the child servers stop here (SIGTERM, and waited for), before exit 0
    local.stop_servers();
    drop(local);
    tracing::info!("aws-local stopped");
    Ok(())
}
