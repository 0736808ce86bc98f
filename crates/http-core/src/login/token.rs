//! Device tokens: what a successful login hands the browser, so that its
//! later attempts for that account are recognised as coming from a known
//! device (OWASP, "Slow Down Online Guessing Attacks with Device Cookies").
//!
//! A token is `v1.<device>.<expiry>.<mac>`: a random 128-bit device id (32
//! hex digits), the Unix second it expires at, and an HMAC-SHA256 (64 hex
//! digits) with the server's secret over the account, the device id and the
//! expiry. The account is not in the token (it is the one the attempt is
//! for), so a token is valid for the account it was issued for only: one
//! for another account, expired, altered or forged does not verify.

use std::fmt::Write as _;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// What the MAC covers first: a token of this scheme and version, and
/// nothing else the same secret might sign.
const DOMAIN: &[u8] = b"ratelab-http login device token v1\0";
const PREFIX: &str = "v1.";
/// A token's length: `v1.`, 32 hex digits, `.`, at most 20 digits, `.`, 64
/// hex digits. Anything longer is not read.
pub(crate) const MAX_LEN: usize = 3 + 32 + 1 + 20 + 1 + 64;

/// A device id: 128 random bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct DeviceId(pub(crate) [u8; 16]);

impl DeviceId {
    /// A new random id; `None` if the system has no randomness to give.
    pub(crate) fn random() -> Option<Self> {
        let mut bytes = [0; 16];
        getrandom::fill(&mut bytes).ok()?;
        Some(DeviceId(bytes))
    }

    /// The id in lowercase hex.
    pub(crate) fn hex(&self) -> String {
        hex(&self.0)
    }
}

/// Signs and verifies tokens with one secret.
#[derive(Clone)]
pub(crate) struct Signer {
    mac: HmacSha256,
}

impl Signer {
    /// A signer keyed with `secret` (any length: the builder asks for 32
    /// bytes at least).
    pub(crate) fn new(secret: &[u8]) -> Self {
        // HMAC takes keys of any length: this cannot fail.
        let mac = HmacSha256::new_from_slice(secret)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        Signer { mac }
    }

    fn mac(&self, account: &str, device: DeviceId, expires: u64) -> HmacSha256 {
        let mut mac = self.mac.clone();
        mac.update(DOMAIN);
        // The account's length first: no two (account, rest) pairs read the
        // same.
        mac.update(&(account.len() as u64).to_be_bytes());
        mac.update(account.as_bytes());
        mac.update(&device.0);
        mac.update(&expires.to_be_bytes());
        mac
    }

    /// The token for `account` on `device`, valid until the Unix second
    /// `expires`.
    pub(crate) fn sign(&self, account: &str, device: DeviceId, expires: u64) -> String {
        let tag = self.mac(account, device, expires).finalize().into_bytes();
        format!("{PREFIX}{}.{expires}.{}", device.hex(), hex(&tag))
    }

    /// The device `token` names, if it is a token this signer issued for
    /// `account` that has not expired at the Unix second `now`. Anything
    /// else (another account's, expired, altered, forged, garbage) is
    /// `None`, never an error: the attempt is simply not from a known
    /// device. The MAC is compared in constant time.
    pub(crate) fn verify(&self, token: &str, account: &str, now: u64) -> Option<DeviceId> {
        if token.len() > MAX_LEN {
            return None;
        }
        let mut parts = token.strip_prefix(PREFIX)?.split('.');
        let (device, expires, tag) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || expires.is_empty() || expires.len() > 20 {
            return None;
        }
        let device = DeviceId(unhex::<16>(device)?);
        // Digits only: `parse` would also take a `+`.
        if !expires.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let expires: u64 = expires.parse().ok()?;
        let tag = unhex::<32>(tag)?;
        if expires <= now {
            return None;
        }
        self.mac(account, device, expires)
            .verify_slice(&tag)
            .ok()
            .map(|()| device)
    }
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.write_str("Signer")
    }
}

/// `bytes` in lowercase hex.
fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// `N` bytes from exactly `2 × N` hex digits (either case).
fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let text = text.as_bytes();
    if text.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| char::from(c).to_digit(16);
    let mut out = [0; N];
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        let value = digit(pair[0])? * 16 + digit(pair[1])?;
        *byte = u8::try_from(value).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn signer() -> Signer {
        Signer::new(&[7; 32])
    }

    #[test]
    fn a_token_verifies_for_its_account_only() {
        let device = DeviceId([0xab; 16]);
        let token = signer().sign("alice", device, NOW + 60);
        assert!(token.len() <= MAX_LEN, "{token}");
        assert_eq!(signer().verify(&token, "alice", NOW), Some(device));
        assert_eq!(signer().verify(&token, "bob", NOW), None);
        assert_eq!(signer().verify(&token, "Alice", NOW), None);
        // Another secret did not issue it.
        assert_eq!(Signer::new(&[8; 32]).verify(&token, "alice", NOW), None);
    }

    #[test]
    fn expired_altered_and_garbage_tokens_do_not_verify() {
        let device = DeviceId([1; 16]);
        let token = signer().sign("alice", device, NOW + 60);
        assert_eq!(signer().verify(&token, "alice", NOW + 60), None);
        // Every one-character change of the token breaks it.
        for i in 0..token.len() {
            let mut bytes = token.clone().into_bytes();
            bytes[i] = if bytes[i] == b'0' { b'1' } else { b'0' };
            let altered = String::from_utf8(bytes).unwrap();
            assert_eq!(signer().verify(&altered, "alice", NOW), None, "{altered}");
        }
        // A later expiry with the old MAC.
        let later = token.replace(&format!(".{}.", NOW + 60), &format!(".{}.", NOW + 6000));
        assert_eq!(signer().verify(&later, "alice", NOW), None);
        for garbage in [
            "",
            "v1.",
            "v1...",
            "v2.00.1.00",
            &"v1.".repeat(100),
            "v1.zz000000000000000000000000000000.1.00",
            &format!("{token}.x"),
            &format!("{token} "),
            "v1.é",
        ] {
            assert_eq!(signer().verify(garbage, "alice", NOW), None, "{garbage:?}");
        }
        let plus = token.replace(&format!(".{}.", NOW + 60), &format!(".+{}.", NOW + 60));
        assert_eq!(signer().verify(&plus, "alice", NOW), None);
    }

    #[test]
    fn accounts_that_run_into_the_device_id_differ() {
        // The account's length is signed: "a" + device starting with "b"
        // is not "ab" + the rest.
        let device = DeviceId([0; 16]);
        let token = signer().sign("a", device, NOW + 60);
        assert_eq!(signer().verify(&token, "a\0", NOW), None);
        assert_eq!(signer().verify(&token, "", NOW), None);
    }

    #[test]
    fn device_ids_are_random() {
        let (a, b) = (DeviceId::random().unwrap(), DeviceId::random().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.hex().len(), 32);
    }
}
