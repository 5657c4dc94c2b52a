//! Ascending ids: `<prefix>_<16 hex digits of time and sequence><6 random chars>`.
//!
//! The hex part is `max(now_ms << 20, last + 1)`, so ids from one process are
//! strictly increasing even when the clock stalls or steps back, and ids
//! from processes sharing a ledger order by time. The random tail keeps two
//! processes from ever minting the same id in the same millisecond.

use std::sync::atomic::{AtomicU64, Ordering};

use rand::Rng;

static LAST: AtomicU64 = AtomicU64::new(0);

/// A new id with `prefix`, greater than every id this process made before.
pub fn ascending(prefix: &str) -> String {
    let now = (crate::clock::now_ms().max(0) as u64) << 20;
    let mut last = LAST.load(Ordering::Relaxed);
    let value = loop {
        let next = now.max(last + 1);
        match LAST.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => break next,
            Err(seen) => last = seen,
        }
    };
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::rng();
    let tail: String = (0..6)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{prefix}_{value:016x}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_ascend_in_string_order() {
        let ids: Vec<String> = (0..10_000).map(|_| ascending("msg")).collect();
        for w in ids.windows(2) {
            assert!(w[0] < w[1], "{} !< {}", w[0], w[1]);
        }
        assert!(ids[0].starts_with("msg_"));
        assert_eq!(ids[0].len(), 4 + 16 + 6);
    }
}
