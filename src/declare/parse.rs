//! The parsers that declarations of several owners share. Each says in its
//! error what it expected; the checker prefixes the variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// `host:port`, where host is an IP address or a name resolved at start-up
/// (`localhost:50051`).
pub fn addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    std::net::ToSocketAddrs::to_socket_addrs(text)
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| format!("`{text}` is not a host:port address such as 0.0.0.0:50051"))
}

/// An address, or `off`.
pub fn addr_or_off(text: &str) -> Result<Option<SocketAddr>, String> {
    match text {
        "off" => Ok(None),
        text => addr(text).map(Some),
    }
}

/// Any text; its owner checks what it means (a URL, a credential).
pub fn text(text: &str) -> Result<String, String> {
    Ok(text.to_owned())
}

pub fn path(text: &str) -> Result<PathBuf, String> {
    match text {
        "" => Err("is empty; give the path of a file".to_owned()),
        path => Ok(PathBuf::from(path)),
    }
}

pub fn whole_number<T: FromStr + PartialOrd + std::fmt::Display>(
    text: &str,
    min: T,
    max: T,
) -> Result<T, String> {
    match text.parse::<T>() {
        Ok(n) if min <= n && n <= max => Ok(n),
        _ => Err(format!(
            "`{text}` is not a whole number from {min} to {max}"
        )),
    }
}

/// Seconds (`3600`) or a duration (`90d`, `12h`, `250ms`).
pub fn duration(text: &str) -> Result<Duration, String> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| format!("`{text}` is too large"));
    }
    humantime::parse_duration(text)
        .map_err(|_| format!("`{text}` is not a duration (seconds, or e.g. 90d, 12h, 250ms)"))
}

pub fn positive_duration(text: &str) -> Result<Duration, String> {
    match duration(text)? {
        d if d.is_zero() => Err("must be greater than 0".into()),
        d => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_take_ips_and_host_names() {
        assert_eq!(addr("[::]:50051").unwrap().port(), 50051);
        assert!(addr("localhost:9464").unwrap().ip().is_loopback());
        assert!(addr("nowhere").is_err());
        assert!(addr("0.0.0.0:99999").is_err());
    }
}
