//! Who may use the operator routes (`/stats`, `/metrics`, `/expand`, `/compact`, and the gateway
//! sidecar's `/v1/compress` and `/v1/retrieve/{hash}`): loopback
//! callers, and callers in a configured list of trusted networks, with an optional bearer token
//! on top. `/healthz` stays open for load balancers; the agent routes are the agent's.
//!
//! `/expand` serves stashed content and `/compact` can fill the store, so neither may answer
//! whoever reaches the port when sluice listens beyond loopback.

use std::net::IpAddr;

use http::HeaderMap;

use crate::respond::ProxyError;

/// A network in CIDR form, `10.0.0.0/8` or `fd00::/8` (a bare address is a /32 or /128).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// A CIDR that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a network in CIDR form (like 10.0.0.0/8 or fd00::/8): `{0}`")]
pub struct BadCidr(pub String);

impl std::str::FromStr for Cidr {
    type Err = BadCidr;

    fn from_str(text: &str) -> Result<Cidr, BadCidr> {
        let bad = || BadCidr(text.to_owned());
        let (address, prefix) = text.trim().split_once('/').unwrap_or((text.trim(), ""));
        let network: IpAddr = address.parse().map_err(|_| bad())?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = if prefix.is_empty() {
            max
        } else {
            prefix.parse().map_err(|_| bad())?
        };
        if prefix > max {
            return Err(bad());
        }
        Ok(Cidr { network, prefix })
    }
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.prefix)
            }
            _ => false,
        }
    }
}

fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let (whole, rest) = (usize::from(bits / 8), bits % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    rest == 0 || (a[whole] ^ b[whole]) >> (8 - rest) == 0
}

/// Who the operator routes answer.
#[derive(Debug, Clone, Default)]
pub struct Admission {
    /// Networks trusted besides loopback (`--trusted`).
    pub trusted: Vec<Cidr>,
    /// When set, the routes also want `Authorization: Bearer <token>` (`SLUICE_ADMIN_TOKEN`).
    pub token: Option<String>,
}

impl Admission {
    /// Whether `peer` is loopback or in a trusted network (the address half of
    /// [`Admission::check`]).
    pub fn trusts(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        peer.is_loopback() || self.trusted.iter().any(|net| net.contains(peer))
    }

    /// Whether a caller at `peer` sending `headers` may use an operator route.
    ///
    /// # Errors
    /// A 403 saying why not.
    pub fn check(&self, peer: IpAddr, headers: &HeaderMap) -> Result<(), ProxyError> {
        if !self.trusts(peer) {
            return Err(ProxyError::Forbidden(
                "operator routes answer loopback and trusted networks only",
            ));
        }
        let Some(token) = &self.token else {
            return Ok(());
        };
        let sent = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if sent.is_some_and(|sent| constant_time_eq(sent.as_bytes(), token.as_bytes())) {
            Ok(())
        } else {
            Err(ProxyError::Forbidden(
                "operator routes want the admin bearer token",
            ))
        }
    }
}

/// Compares without stopping at the first difference, so timing does not tell how much of a
/// guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn cidrs_parse_and_match_both_families() {
        let net: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(net.contains(ip("10.1.200.3")));
        assert!(!net.contains(ip("10.2.0.1")));
        assert!(
            net.contains(ip("::ffff:10.1.0.9")),
            "a v4-mapped peer on a [::] listener"
        );
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains(ip("fd12::1")) && !v6.contains(ip("fe80::1")));
        let one: Cidr = "192.168.1.7".parse().unwrap();
        assert!(one.contains(ip("192.168.1.7")) && !one.contains(ip("192.168.1.8")));
        let odd: Cidr = "172.16.0.0/12".parse().unwrap();
        assert!(odd.contains(ip("172.31.255.255")) && !odd.contains(ip("172.32.0.0")));
        for bad in ["10.0.0.0/33", "nonsense", "10.0.0.0/x", "::/129"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn loopback_and_trusted_callers_pass_others_get_403() {
        let open = Admission::default();
        let none = HeaderMap::new();
        assert!(open.check(ip("127.0.0.1"), &none).is_ok());
        assert!(open.check(ip("::1"), &none).is_ok());
        assert!(open.check(ip("::ffff:127.0.0.1"), &none).is_ok());
        assert!(open.check(ip("10.0.0.5"), &none).is_err());
        let trusted = Admission {
            trusted: vec!["10.0.0.0/8".parse().unwrap()],
            token: Some("s3cret".into()),
        };
        assert!(
            trusted.check(ip("10.0.0.5"), &none).is_err(),
            "the token is wanted"
        );
        let mut bearer = HeaderMap::new();
        bearer.insert(
            http::header::AUTHORIZATION,
            "Bearer s3cret".parse().unwrap(),
        );
        assert!(trusted.check(ip("10.0.0.5"), &bearer).is_ok());
        assert!(
            trusted.check(ip("192.168.0.5"), &bearer).is_err(),
            "not a trusted network"
        );
        bearer.insert(
            http::header::AUTHORIZATION,
            "Bearer s3cres".parse().unwrap(),
        );
        assert_eq!(
            trusted
                .check(ip("127.0.0.1"), &bearer)
                .unwrap_err()
                .status(),
            http::StatusCode::FORBIDDEN
        );
    }
}
