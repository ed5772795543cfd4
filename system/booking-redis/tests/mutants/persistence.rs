//! Reading persistence from a server that fails in the middle of the read: a
//! fake server on a free loopback port answers the client's connection setup
//! (and, as a one-node cluster, `CLUSTER SLOTS`), then never answers
//! `CONFIG GET`, closes the connection on it, or answers it with bytes that
//! are not RESP. Each is a server out of
//! reach ([`ReadError::Unavailable`]: try again), not one that refuses
//! `CONFIG` ([`ReadError::ConfigUnavailable`], which sends the operator to the
//! provider's console).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};

use booking_redis::persistence::{ReadError, read};

/// What the fake server does when asked `CONFIG …`.
#[derive(Debug, Clone, Copy)]
enum OnConfig {
    /// Never answers (the client's response bound runs out).
    Hang,
    /// Closes the connection.
    Close,
    /// Answers bytes that are not RESP (a parse error: not an I/O error,
    /// but the client must reconnect).
    Garbage,
}

/// A fake server on a free port; its port. It answers `CLUSTER SLOTS` with
/// every slot on itself, `PING` with `PONG`, `CONFIG …` as `on_config` says
/// and every other command (the client's setup) with `OK`. Its threads end
/// with their connections (the listener's with the test process).
fn fake_server(on_config: OnConfig) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || serve(stream, port, on_config));
        }
    });
    port
}

fn serve(stream: TcpStream, port: u16, on_config: OnConfig) {
    let Ok(mut reader) = stream.try_clone().map(BufReader::new) else {
        return;
    };
    let mut writer = stream;
    let slots = format!("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:{port}\r\n");
    while let Some(args) = read_command(&mut reader) {
        let is = |name: &str| args.first().is_some_and(|a| a.eq_ignore_ascii_case(name));
        let answer = if is("CLUSTER") {
            slots.as_bytes()
        } else if is("PING") {
            b"+PONG\r\n".as_slice()
        } else if is("CONFIG") {
            match on_config {
                OnConfig::Hang => {
                    // until the client gives up and goes away
                    let _ = reader.read_to_end(&mut Vec::new());
                }
                OnConfig::Close => {
                    let _ = writer.shutdown(Shutdown::Both);
                }
                OnConfig::Garbage => {
                    let _ = writer.write_all(b"?not resp\r\n");
                    let _ = reader.read_to_end(&mut Vec::new());
                }
            }
            return;
        } else {
            b"+OK\r\n".as_slice()
        };
        if writer.write_all(answer).is_err() {
            return;
        }
    }
}

/// One RESP command (an array of bulk strings); `None` at the end.
fn read_command(r: &mut impl BufRead) -> Option<Vec<String>> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let n: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        r.read_line(&mut line).ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut bytes = vec![0; len + 2];
        r.read_exact(&mut bytes).ok()?;
        bytes.truncate(len);
        args.push(String::from_utf8_lossy(&bytes).into_owned());
    }
    Some(args)
}

#[tokio::test]
async fn a_server_that_closes_the_connection_on_config_get_is_unavailable() {
    let port = fake_server(OnConfig::Close);
    let answer = read(&format!("redis://127.0.0.1:{port}")).await;
    assert!(
        matches!(answer, Err(ReadError::Unavailable(_))),
        "{answer:?}"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_config_get_is_unavailable() {
    let port = fake_server(OnConfig::Hang);
    let answer = read(&format!("redis://127.0.0.1:{port}")).await;
    assert!(
        matches!(answer, Err(ReadError::Unavailable(_))),
        "{answer:?}"
    );
}

#[tokio::test]
async fn a_cluster_node_that_never_answers_config_get_is_unavailable() {
    let port = fake_server(OnConfig::Hang);
    let answer = read(&format!("redis+cluster://127.0.0.1:{port}")).await;
    assert!(
        matches!(answer, Err(ReadError::Unavailable(_))),
        "{answer:?}"
    );
}

#[tokio::test]
async fn a_server_that_answers_config_get_with_garbage_is_unavailable() {
    let port = fake_server(OnConfig::Garbage);
    let answer = read(&format!("redis://127.0.0.1:{port}")).await;
    assert!(
        matches!(answer, Err(ReadError::Unavailable(_))),
        "a reply that does not parse is connection trouble, not a refusal: {answer:?}"
    );
}
