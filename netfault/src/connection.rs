//! One client connection: dial the upstream, run both directions, and end
//! the connection the way a direction ended it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::chain::Chains;
use crate::link;
use crate::stage::End;
use crate::stats::Counters;
use crate::toxic::Stream;

/// How long dialing the upstream may take before the client is dropped.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `client` until both directions end, or one closes or resets the
/// connection. Dropping the future drops the connection (how a disabled
/// proxy cuts its connections).
pub(crate) async fn serve(
    mut client: TcpStream,
    peer: SocketAddr,
    upstream_addr: String,
    chain: watch::Receiver<Arc<Chains>>,
    counters: Arc<Counters>,
) {
    let _open = counters.accepted();
    let dialed = tokio::time::timeout(
        UPSTREAM_CONNECT_TIMEOUT,
        TcpStream::connect(upstream_addr.as_str()),
    )
    .await;
    let mut upstream = match dialed {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            counters.upstream_failed();
            tracing::warn!(%peer, upstream = %upstream_addr, error = %e, "unable to open connection to upstream");
            return;
        }
        Err(_) => {
            counters.upstream_failed();
            tracing::warn!(%peer, upstream = %upstream_addr, "upstream connect timed out");
            return;
        }
    };
    // Go's sockets (toxiproxy's) send at once; so do these
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    tracing::debug!(%peer, upstream = %upstream_addr, "accepted client");

    let end = {
        let (client_read, client_write) = client.split();
        let (upstream_read, upstream_write) = upstream.split();
        let up = link::run(
            Stream::Upstream,
            client_read,
            upstream_write,
            chain.clone(),
            &counters,
        );
        let down = link::run(
            Stream::Downstream,
            upstream_read,
            client_write,
            chain,
            &counters,
        );
        tokio::pin!(up, down);
        let (mut up_done, mut down_done) = (false, false);
        loop {
            tokio::select! {
                end = &mut up, if !up_done => match end {
                    End::Eof => up_done = true,
                    other => break other,
                },
                end = &mut down, if !down_done => match end {
                    End::Eof => down_done = true,
                    other => break other,
                },
            }
            if up_done && down_done {
                break End::Eof;
            }
        }
    };
    if end == End::Reset {
        // SO_LINGER 0: closing sends an RST instead of a FIN
        let _ = client.set_zero_linger();
        let _ = upstream.set_zero_linger();
        counters.reset_sent();
    }
    tracing::debug!(%peer, ?end, "connection ended");
}
