//! Loopback servers and clients the tests put on either side of a proxy.
//! Every server stops when its handle drops (its connections with it).
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use netfault::{Netfault, ProxySpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// Any single wait in a test: far longer than any toxic a test sets, so a
/// hang fails the test instead of stalling the suite.
pub const WAIT: Duration = Duration::from_secs(10);

/// A loopback server; aborted (with its connections) on drop.
pub struct Server {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves every connection with `handler` on a free loopback port.
pub async fn serve_with<F, Fut>(handler: F) -> Server
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            connections.spawn(handler(stream));
        }
    });
    Server { addr, task }
}

/// Echoes every byte until the client's EOF, then closes.
pub async fn echo_server() -> Server {
    serve_with(|mut stream| async move {
        let (mut r, mut w) = stream.split();
        let _ = tokio::io::copy(&mut r, &mut w).await;
        let _ = w.shutdown().await;
    })
    .await
}

/// Writes `payload`, then closes.
pub async fn sending_server(payload: Vec<u8>) -> Server {
    serve_with(move |mut stream| {
        let payload = payload.clone();
        async move {
            let _ = stream.write_all(&payload).await;
            let _ = stream.shutdown().await;
        }
    })
    .await
}

/// A proxy named `name` to `upstream` on a free loopback port.
pub async fn proxy(nf: &Netfault, name: &str, upstream: SocketAddr) -> SocketAddr {
    let info = nf
        .create(ProxySpec::new(name, upstream.to_string()))
        .await
        .unwrap();
    info.listen.parse().unwrap()
}

pub async fn connect(addr: SocketAddr) -> TcpStream {
    let stream = tokio::time::timeout(WAIT, TcpStream::connect(addr))
        .await
        .expect("connect in time")
        .expect("connect");
    stream.set_nodelay(true).unwrap();
    stream
}

/// Sends `msg` and reads its echo; the round trip's duration.
pub async fn round_trip(stream: &mut TcpStream, msg: &[u8]) -> Duration {
    let start = Instant::now();
    stream.write_all(msg).await.unwrap();
    let mut back = vec![0; msg.len()];
    tokio::time::timeout(WAIT, stream.read_exact(&mut back))
        .await
        .expect("echo in time")
        .expect("echo");
    assert_eq!(back, msg, "the echo differs");
    start.elapsed()
}

/// Reads until EOF (or an error, returned as is).
pub async fn read_to_end(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut all = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut all))
        .await
        .expect("EOF in time")?;
    Ok(all)
}

/// Whether anything (data or EOF) arrives within `within`.
pub async fn silent_for(stream: &mut TcpStream, within: Duration) -> bool {
    let mut byte = [0_u8; 1];
    tokio::time::timeout(within, stream.read(&mut byte))
        .await
        .is_err()
}

/// `n` bytes of a pattern that shows a reorder or a loss.
pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}
