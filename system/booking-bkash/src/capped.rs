//! Reading an HTTP answer's body with a size cap ([`read_capped`]), so a
//! hostile or broken server cannot make an instance buffer an unbounded
//! answer: the gateway client's answers ([`crate::client::ANSWER_BYTES_MAX`])
//! and the server's fetch of the gateway's ledger read through it.
//!
//! The cap is checked against `Content-Length` before a byte is read, then
//! against what has arrived, chunk by chunk: reading stops at the first
//! chunk past the cap (at most one chunk beyond it is ever held).
//! The caller's timeout bounds how long the reading may take.

/// Why an answer's body was not read.
#[derive(Debug, thiserror::Error)]
pub enum CappedError {
    /// The body is (or announced itself as) larger than the cap.
    #[error("answer larger than {cap} bytes")]
    TooLarge {
        /// The cap it ran past.
        cap: usize,
    },
    /// The body could not be read (reset, broken chunking, timeout).
    #[error("reading the answer: {0}")]
    Read(#[from] reqwest::Error),
}

/// The body of `resp`, at most `cap` bytes ([`CappedError::TooLarge`]
/// beyond, without reading the rest).
pub async fn read_capped(mut resp: reqwest::Response, cap: usize) -> Result<Vec<u8>, CappedError> {
    if resp
        .content_length()
        .is_some_and(|n| usize::try_from(n).map_or(true, |n| n > cap))
    {
        return Err(CappedError::TooLarge { cap });
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > cap {
            return Err(CappedError::TooLarge { cap });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-shot HTTP server that answers `head` then `chunks` (each
    /// written separately), and says how many bytes it managed to write.
    async fn server(
        head: String,
        chunks: Vec<Vec<u8>>,
    ) -> (String, tokio::task::JoinHandle<usize>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", l.local_addr().unwrap());
        let h = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let mut written = 0;
            if s.write_all(head.as_bytes()).await.is_err() {
                return written;
            }
            for c in chunks {
                if s.write_all(&c).await.is_err() {
                    break;
                }
                written += c.len();
            }
            written
        });
        (url, h)
    }

    #[tokio::test]
    async fn a_body_within_the_cap_is_read_whole() {
        let (url, h) = server(
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\n".into(),
            vec![b"hello".to_vec()],
        )
        .await;
        let resp = reqwest::get(url).await.unwrap();
        assert_eq!(&read_capped(resp, 5).await.unwrap()[..], b"hello");
        h.await.unwrap();
    }

    #[tokio::test]
    async fn an_announced_length_over_the_cap_is_refused_unread() {
        let (url, _h) = server(
            "HTTP/1.1 200 OK\r\ncontent-length: 1000000000\r\nconnection: close\r\n\r\n".into(),
            vec![],
        )
        .await;
        let resp = reqwest::get(url).await.unwrap();
        let e = read_capped(resp, 1024).await.unwrap_err();
        assert!(matches!(e, CappedError::TooLarge { cap: 1024 }), "{e}");
    }

    #[tokio::test]
    async fn a_chunked_body_stops_past_the_cap() {
        // 64 MiB announced by nobody: 1 KiB chunks until the client hangs up
        let chunk = {
            let data = vec![b'x'; 1024];
            let mut c = format!("{:x}\r\n", data.len()).into_bytes();
            c.extend_from_slice(&data);
            c.extend_from_slice(b"\r\n");
            c
        };
        let (url, h) = server(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".into(),
            vec![chunk; 64 * 1024],
        )
        .await;
        let resp = reqwest::get(url).await.unwrap();
        let e = read_capped(resp, 8 * 1024).await.unwrap_err();
        assert!(matches!(e, CappedError::TooLarge { cap: 8192 }), "{e}");
        // the client stopped reading: the server could not write it all
        let written = h.await.unwrap();
        assert!(written < 64 * 1024 * 1024, "{written}");
    }
}
