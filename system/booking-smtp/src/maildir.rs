//! [`MaildirLog`]: what an SMTP server delivered into a Maildir, read back.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use booking::notify::{Alert, Confirmation, NotifyError, OutputLog, StatusWrite};

use crate::compose::{Delivered, read_back};

/// The messages of a Maildir (`new/` and `cur/`; `tmp/` holds deliveries
/// still being written), each read back as the confirmation it carries.
#[derive(Debug, Clone)]
pub struct MaildirLog {
    dir: PathBuf,
}

impl MaildirLog {
    /// The Maildir at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> MaildirLog {
        MaildirLog { dir: dir.into() }
    }

    /// Its folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every message delivered, in file-name order (a Maildir name starts
    /// with its delivery time). A message that is not a confirmation is an
    /// error naming its file: the audit must not skip what it cannot read.
    pub fn delivered(&self) -> Result<Vec<Delivered>, String> {
        let mut files = Vec::new();
        for sub in ["new", "cur"] {
            let dir = self.dir.join(sub);
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(format!("{}: {e}", dir.display())),
            };
            for entry in entries {
                let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
                files.push(entry.path());
            }
        }
        files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
        files
            .iter()
            .map(|path| {
                let raw = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
                read_back(&raw).map_err(|e| format!("{}: {e}", path.display()))
            })
            .collect()
    }

    /// The confirmations delivered, repeats included (the audit's view).
    pub async fn sent_mail(&self) -> Result<Vec<Confirmation>, NotifyError> {
        let log = self.clone();
        tokio::task::spawn_blocking(move || log.delivered())
            .await
            .map_err(|e| NotifyError::Unavailable(format!("reading the maildir: {e}")))?
            .map(|d| d.into_iter().map(|d| d.confirmation).collect())
            .map_err(NotifyError::Unavailable)
    }
}

/// An [`OutputLog`] whose emails are the ones a mail server delivered into
/// a Maildir (what the candidates received), the alerts and status writes
/// still the stack's own: the audit's view of a deployment that mails over
/// SMTP.
#[derive(Debug, Clone)]
pub struct MaildirOutputs {
    /// The stack's own log (alerts, status writes).
    pub base: Arc<dyn OutputLog>,
    /// Where the mail server delivers.
    pub maildir: MaildirLog,
}

#[async_trait]
impl OutputLog for MaildirOutputs {
    async fn sent_mail(&self) -> Result<Vec<Confirmation>, NotifyError> {
        self.maildir.sent_mail().await
    }

    async fn alerts_raised(&self) -> Result<Vec<Alert>, NotifyError> {
        self.base.alerts_raised().await
    }

    async fn status_writes(&self, since_ms: u64) -> Result<Vec<StatusWrite>, NotifyError> {
        self.base.status_writes(since_ms).await
    }
}
