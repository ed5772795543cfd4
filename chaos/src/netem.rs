//! Network faults for real servers: a TCP proxy on loopback that delays
//! every chunk it forwards, each way, as a network hop between the fleet and
//! a real server (Redis) does. The wrappers of [`crate::wrappers`] delay a
//! call above the client; this delays the bytes below it, so a connection
//! pool sees its connections busy for the whole round trip, as in
//! production.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A running delay proxy; stops (and drops its connections) on drop.
#[derive(Debug)]
pub struct DelayProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    accept: JoinHandle<()>,
}

impl DelayProxy {
    /// Listens on a free loopback port and forwards every connection to
    /// `upstream`, delaying each chunk by `one_way` in each direction (a
    /// round trip gains twice that).
    pub async fn start(upstream: SocketAddr, one_way: Duration) -> std::io::Result<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let accept = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    break;
                };
                connections.spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(pump(cr, sw, one_way), pump(sr, cw, one_way));
                });
                // forget the finished ones
                while connections.try_join_next().is_some() {}
            }
        });
        tracing::info!(%addr, %upstream, ?one_way, "delay proxy up");
        Ok(DelayProxy { addr, accept })
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Chunks read but not yet written, per direction: past this the reader
/// waits, and the sender feels TCP's backpressure.
const CHUNKS_IN_FLIGHT_MAX: usize = 1024;

/// Copies `from` to `to`, each chunk written `delay` after it was read,
/// until either side closes. Pipelined, as a network is: a chunk read while
/// earlier ones are on their way is not held up behind their delays (a
/// copy that slept before each write would carry one chunk per `delay`, and
/// a socket shared by many calls, as the Redis pool's is, would crawl).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    let (tx, mut rx) =
        tokio::sync::mpsc::channel::<(tokio::time::Instant, Vec<u8>)>(CHUNKS_IN_FLIGHT_MAX);
    let read = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let due = tokio::time::Instant::now() + delay;
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                break;
            }
        }
    };
    let write = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn bytes_arrive_intact_and_late_each_way() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf).await.unwrap();
        });
        let proxy = DelayProxy::start(upstream, Duration::from_millis(40))
            .await
            .unwrap();
        let mut c = TcpStream::connect(proxy.addr).await.unwrap();
        let started = std::time::Instant::now();
        c.write_all(b"hello").await.unwrap();
        let mut back = [0u8; 5];
        c.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"hello");
        // two one-way delays at least
        assert!(
            started.elapsed() >= Duration::from_millis(80),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn chunks_sent_one_after_another_are_delayed_together_not_in_turn() {
        // an echo server; twenty writes, each its own chunk, 1 ms apart
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => s.write_all(&buf[..n]).await.unwrap(),
                }
            }
        });
        let proxy = DelayProxy::start(upstream, Duration::from_millis(50))
            .await
            .unwrap();
        let mut c = TcpStream::connect(proxy.addr).await.unwrap();
        c.set_nodelay(true).unwrap();
        let started = tokio::time::Instant::now();
        for i in 0..20u8 {
            c.write_all(&[i]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut back = [0u8; 20];
        c.read_exact(&mut back).await.unwrap();
        let expected: Vec<u8> = (0..20).collect();
        assert_eq!(back.to_vec(), expected, "in order");
        // the last byte left about 20 ms after the first and is back two
        // delays later; a copy that slept before each write would take
        // twenty delays
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(100) && took < Duration::from_millis(250),
            "{took:?}"
        );
    }
}
