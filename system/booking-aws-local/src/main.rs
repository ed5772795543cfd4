//! `aws-local`: the local AWS-protocol servers for a rehearsal by hand.
//! Prints the environment that points the SDK at them, then serves until
//! Ctrl-C.
//!
//! ```sh
//! cargo run -p booking-aws-local -- --ttl-lag-ms 3600 > /tmp/aws-local.env &
//! sleep 5; . /tmp/aws-local.env
//! ```

use std::time::Duration;

use anyhow::Context;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut lag = booking_aws_local::TTL_LAG_DEFAULT;
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
            "-h" | "--help" => {
                println!(
                    "aws-local [--ttl-lag-ms MS]: DynamoDB+Streams (dynoxide, in process), SQS (fauxqs, else a moto of its own; SELLOUT_LOCAL_SQS=fauxqs|moto) and S3 (moto) on loopback; prints the environment to use them"
                );
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other:?} (try --help)"),
        }
    }
    let local = booking_aws_local::LocalAws::start_with(lag)
        .await
        .map_err(anyhow::Error::msg)?;
    let e = local.settings().endpoints;
    let show = |v: Option<String>| v.unwrap_or_default();
    println!(
        "# DynamoDB and Streams: dynoxide in aws-local (pid {}); SQS: {} (pid {}); S3: moto (pid {})",
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
    println!("export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1");
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    Ok(())
}
