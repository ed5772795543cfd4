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

/// Copies `from` to `to`, each chunk `delay` late, until either side closes.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        tokio::time::sleep(delay).await;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
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
}
