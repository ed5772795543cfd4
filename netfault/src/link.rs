//! One direction of one connection on its sockets: read the source, pass
//! the bytes through the [`Pipeline`], write the destination, and follow
//! the proxy's toxics as they change.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::chain::Chains;
use crate::pipeline::Pipeline;
use crate::stage::{End, Item};
use crate::stats::Counters;
use crate::toxic::Stream;

/// Bytes read at once (as Go's `io.Copy`, which toxiproxy uses).
const READ_CHUNK_BYTES: usize = 32 * 1024;

/// A direction stops reading while it holds this many bytes (a bandwidth or
/// latency toxic holding data back): the sender then feels TCP's
/// backpressure instead of the proxy buffering without end.
const BUFFERED_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Runs the `stream` direction from `source` to `dest` until it ends; how
/// it ended decides what becomes of the connection.
pub(crate) async fn run<R, W>(
    stream: Stream,
    mut source: R,
    mut dest: W,
    mut chain: watch::Receiver<Arc<Chains>>,
    counters: &Counters,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let current = chain.borrow_and_update().clone();
    let mut pipeline = Pipeline::new(current.toward(stream), Instant::now());
    let mut buf = vec![0_u8; READ_CHUNK_BYTES];
    let mut reading = true;
    let mut watching = true;
    loop {
        let now = Instant::now();
        pipeline.pump(now);
        if let Some(end) = pipeline.finished() {
            if end == End::Eof {
                // half-close: the other direction goes on
                let _ = dest.shutdown().await;
            }
            return end;
        }
        let wake = pipeline.next_wake();
        let can_read = reading && !pipeline.ending() && pipeline.buffered() < BUFFERED_BYTES_MAX;
        let front = pipeline.front();
        let can_write = front.is_some();
        let front = front.unwrap_or_default();
        tokio::select! {
            changed = chain.changed(), if watching => match changed {
                Ok(()) => {
                    let current = chain.borrow_and_update().clone();
                    pipeline.reconcile(current.toward(stream), Instant::now());
                }
                // the proxy is gone; its connections are being dropped
                Err(_) => watching = false,
            },
            read = source.read(&mut buf), if can_read => match read {
                Ok(0) => {
                    reading = false;
                    pipeline.push(Item::End(End::Eof), Instant::now());
                }
                Ok(n) => {
                    let now = Instant::now();
                    let data = Item::Data { bytes: buf[..n].to_vec(), stamp: now };
                    pipeline.push(data, now);
                }
                Err(e) => {
                    tracing::debug!(stream = stream.name(), error = %e, "source failed");
                    return End::Close;
                }
            },
            written = dest.write(front), if can_write => match written {
                Ok(0) => return End::Close,
                Ok(n) => {
                    counters.wrote(stream, n);
                    pipeline.written(n);
                }
                Err(e) => {
                    tracing::debug!(stream = stream.name(), error = %e, "destination failed");
                    return End::Close;
                }
            },
            () = tokio::time::sleep_until(wake.unwrap_or(now)), if wake.is_some() => {}
            // nothing to read, write, wait for or watch: it can never move
            // again (only while its proxy is going away)
            else => return End::Close,
        }
    }
}
