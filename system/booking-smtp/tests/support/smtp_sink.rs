//! `scripts/smtp-sink` (aiosmtpd from the project's venv) on a free
//! loopback port for a test, killed when dropped; what it delivered read
//! from its Maildir. Included with `#[path]` by the tests that need a real
//! SMTP server.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use booking_smtp::MaildirLog;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sellout-smtp-{tag}-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `scripts/smtp-sink` on a free port; killed when dropped.
pub struct Sink {
    child: Child,
    pub port: u16,
    pub maildir: PathBuf,
}

impl Sink {
    pub fn start(args: &[&str]) -> Sink {
        Sink::start_in(temp_dir("maildir"), args)
    }

    /// The sink delivering into `maildir` (made a Maildir if it is not).
    pub fn start_in(maildir: PathBuf, args: &[&str]) -> Sink {
        let python = root().join(".venv/bin/python");
        assert!(
            python.is_file(),
            "{} is missing: run scripts/setup (it installs aiosmtpd)",
            python.display()
        );
        let mut child = Command::new(python)
            .arg(root().join("scripts/smtp-sink"))
            .arg("--maildir")
            .arg(&maildir)
            .args(["--max-seconds", "120"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("smtp-sink said where it listens");
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("smtp-sink printed {line:?}"));
        Sink {
            child,
            port,
            maildir,
        }
    }

    pub fn log(&self) -> MaildirLog {
        MaildirLog::new(&self.maildir)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.maildir);
    }
}
