//! Which addresses `web_fetch` refuses to reach: every address that is not
//! on the public internet (loopback, private ranges, link-local, shared
//! CGNAT space, unspecified, multicast, broadcast, reserved, IPv6
//! unique-local and site-local), also when an IPv6 address carries one of
//! those IPv4 addresses inside it (mapped, compatible, NAT64, 6to4).
//!
//! The check runs on the addresses a host name resolved to, and the request
//! then connects to exactly those addresses, so a second DNS answer cannot
//! swap in another one.

#[cfg(feature = "http")]
use std::net::SocketAddr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What kind of non-public address `ip` is, as words for a refusal
/// (`"a loopback address"`), or `None` for a public address.
///
/// ```
/// use jarvis_turn::non_public_address_kind;
///
/// assert_eq!(non_public_address_kind("127.0.0.1".parse().unwrap()), Some("a loopback address"));
/// assert_eq!(non_public_address_kind("::ffff:10.0.0.1".parse().unwrap()), Some("a private address"));
/// assert_eq!(non_public_address_kind("93.184.215.14".parse().unwrap()), None);
/// ```
pub fn non_public_address_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => v6_kind(v6),
    }
}

fn v4_kind(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_unspecified() {
        Some("an unspecified address")
    } else if a == 0 {
        Some("a reserved address (0.0.0.0/8, \"this network\")")
    } else if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_private() {
        Some("a private address")
    } else if ip.is_link_local() {
        Some("a link-local address")
    } else if a == 100 && (64..128).contains(&b) {
        Some("a shared address (100.64.0.0/10, carrier-grade NAT)")
    } else if ip.is_broadcast() {
        Some("a broadcast address")
    } else if ip.is_multicast() {
        Some("a multicast address")
    } else if a >= 240 {
        Some("a reserved address (240.0.0.0/4)")
    } else {
        None
    }
}

fn v6_kind(ip: Ipv6Addr) -> Option<&'static str> {
    let segments = ip.segments();
    if ip.is_unspecified() {
        return Some("an unspecified address");
    }
    if ip.is_loopback() {
        return Some("a loopback address");
    }
    // IPv4 inside IPv6: mapped (::ffff:a.b.c.d), the old compatible form
    // (::a.b.c.d), NAT64 (64:ff9b::/96) and 6to4 (2002:AABB:CCDD::/48).
    let embedded = if let Some(v4) = ip.to_ipv4_mapped() {
        Some(v4)
    } else if segments[..6] == [0; 6] || segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        Some(Ipv4Addr::from(((segments[6] as u32) << 16) | segments[7] as u32))
    } else if segments[0] == 0x2002 {
        Some(Ipv4Addr::from(((segments[1] as u32) << 16) | segments[2] as u32))
    } else {
        None
    };
    if let Some(v4) = embedded {
        return v4_kind(v4);
    }
    if segments[0] & 0xfe00 == 0xfc00 {
        Some("a unique-local address (fc00::/7)")
    } else if segments[0] & 0xffc0 == 0xfe80 {
        Some("a link-local address")
    } else if segments[0] & 0xffc0 == 0xfec0 {
        Some("a site-local address (fec0::/10)")
    } else if segments[0] & 0xff00 == 0xff00 {
        Some("a multicast address")
    } else {
        None
    }
}

/// Which addresses a fetch may reach.
#[cfg(feature = "http")]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct AddressPolicy {
    /// Every address, public or not.
    pub(super) allow_private: bool,
    /// These exact addresses (IP and port) even though they are not public.
    pub(super) exceptions: Vec<SocketAddr>,
}

#[cfg(feature = "http")]
impl AddressPolicy {
    /// Why `addr` may not be reached (its kind), or `None` when it may.
    pub(super) fn refusal(&self, addr: SocketAddr) -> Option<&'static str> {
        if self.allow_private || self.exceptions.contains(&addr) {
            return None;
        }
        non_public_address_kind(addr.ip())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(text: &str) -> Option<&'static str> {
        non_public_address_kind(text.parse().unwrap())
    }

    #[test]
    fn ipv4_ranges_that_are_not_public_are_named() {
        for (ip, words) in [
            ("127.0.0.1", "loopback"),
            ("127.255.255.254", "loopback"),
            ("10.0.0.1", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("100.127.255.255", "carrier-grade NAT"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "0.0.0.0/8"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("240.0.0.1", "240.0.0.0/4"),
        ] {
            let found = kind(ip).unwrap_or_else(|| panic!("{ip} passed as public"));
            assert!(found.contains(words), "{ip}: {found}");
        }
    }

    #[test]
    fn public_ipv4_addresses_pass_including_the_edges_of_private_ranges() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.215.14",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.255.255",
            "11.0.0.1",
            "192.167.1.1",
            "223.255.255.255",
        ] {
            assert_eq!(kind(ip), None, "{ip}");
        }
    }

    #[test]
    fn ipv6_ranges_that_are_not_public_are_named() {
        for (ip, words) in [
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fc00::1", "unique-local"),
            ("fd12:3456::1", "unique-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
        ] {
            let found = kind(ip).unwrap_or_else(|| panic!("{ip} passed as public"));
            assert!(found.contains(words), "{ip}: {found}");
        }
    }

    #[test]
    fn ipv4_inside_ipv6_is_judged_as_ipv4() {
        for (ip, words) in [
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.1.2.3", "private"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::ffff:7f00:1", "loopback"),
            ("::127.0.0.1", "loopback"),
            ("::192.168.0.1", "private"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("64:ff9b::10.0.0.1", "private"),
            ("2002:7f00:1::", "loopback"),
            ("2002:c0a8:101::1", "private"),
        ] {
            let found = kind(ip).unwrap_or_else(|| panic!("{ip} passed as public"));
            assert!(found.contains(words), "{ip}: {found}");
        }
        for ip in ["::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"] {
            assert_eq!(kind(ip), None, "{ip}");
        }
    }

    #[test]
    fn public_ipv6_addresses_pass() {
        for ip in [
            "2001:4860:4860::8888",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
        ] {
            assert_eq!(kind(ip), None, "{ip}");
        }
    }

    #[cfg(feature = "http")]
    #[test]
    fn the_policy_lifts_the_check_wholly_or_for_exact_addresses() {
        let loopback: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let other_port: SocketAddr = "127.0.0.1:8081".parse().unwrap();
        let public: SocketAddr = "8.8.8.8:443".parse().unwrap();
        let strict = AddressPolicy::default();
        assert_eq!(strict.refusal(loopback), Some("a loopback address"));
        assert_eq!(strict.refusal(public), None);
        let open = AddressPolicy {
            allow_private: true,
            exceptions: Vec::new(),
        };
        assert_eq!(open.refusal(loopback), None);
        let one = AddressPolicy {
            allow_private: false,
            exceptions: vec![loopback],
        };
        assert_eq!(one.refusal(loopback), None);
        assert_eq!(one.refusal(other_port), Some("a loopback address"));
    }
}
