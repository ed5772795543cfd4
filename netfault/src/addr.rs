//! Listen addresses: parsed without DNS (an IP literal, `localhost`, or an
//! empty host for every interface, as Go's `net.Listen` reads them) and
//! held to loopback unless remote listening is allowed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::NetfaultError;

/// The listen address a proxy gets when none is given: loopback, any free
/// port (toxiproxy would listen on every interface).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:0";

/// Parses `listen`; refuses a non-loopback address unless `allow_remote`.
pub(crate) fn parse_listen(listen: &str, allow_remote: bool) -> Result<SocketAddr, NetfaultError> {
    let listen = if listen.is_empty() {
        DEFAULT_LISTEN
    } else {
        listen
    };
    let addr = match listen.parse::<SocketAddr>() {
        Ok(addr) => addr,
        Err(_) => {
            let bad = || {
                NetfaultError::BadRequest(format!(
                    "listen {listen:?}: want ip:port, localhost:port or :port"
                ))
            };
            let (host, port) = listen.rsplit_once(':').ok_or_else(bad)?;
            let port: u16 = port.parse().map_err(|_| bad())?;
            let ip = match host {
                "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
                "" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                _ => return Err(bad()),
            };
            SocketAddr::new(ip, port)
        }
    };
    if !allow_remote && !addr.ip().is_loopback() {
        return Err(NetfaultError::RemoteListen(listen.to_owned()));
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn loopback_forms_parse_and_others_need_permission() {
        assert_eq!(parse_listen("", false).unwrap().to_string(), "127.0.0.1:0");
        assert_eq!(
            parse_listen("localhost:26379", false).unwrap().to_string(),
            "127.0.0.1:26379"
        );
        assert_eq!(
            parse_listen("[::1]:5", false).unwrap().to_string(),
            "[::1]:5"
        );
        assert!(matches!(
            parse_listen("0.0.0.0:80", false),
            Err(NetfaultError::RemoteListen(_))
        ));
        assert!(matches!(
            parse_listen(":80", false),
            Err(NetfaultError::RemoteListen(_))
        ));
        assert_eq!(parse_listen(":80", true).unwrap().to_string(), "0.0.0.0:80");
        assert!(matches!(
            parse_listen("example.com:80", true),
            Err(NetfaultError::BadRequest(_))
        ));
        assert!(matches!(
            parse_listen("127.0.0.1:http", true),
            Err(NetfaultError::BadRequest(_))
        ));
    }
}
