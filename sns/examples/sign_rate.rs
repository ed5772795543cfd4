//! Signatures per second of one core, for each SignatureVersion: what the mock
//! gateway pays per webhook it sends.
//!
//! ```sh
//! cargo run --release -p sns --example sign_rate
//! ```

use std::time::Instant;

use sns::{SignatureVersion, Signer, SnsMessage};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let signer = Signer::generate("sign-rate")?;
    let mut msg = SnsMessage::from_json(include_bytes!("../tests/fixtures/notification-v1.json"))?;
    for version in [SignatureVersion::V1, SignatureVersion::V2] {
        let n = 2_000;
        let started = Instant::now();
        for i in 0..n {
            msg.message_id = format!("m-{i}");
            signer.sign(&mut msg, version)?;
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{}: {:.0} signatures/s ({:.3} ms each)",
            version.as_str(),
            f64::from(n) / secs,
            secs * 1_000.0 / f64::from(n)
        );
    }
    Ok(())
}
