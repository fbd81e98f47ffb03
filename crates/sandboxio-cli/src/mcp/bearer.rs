//! The bearer token of `sandboxio mcp --transport http`, checked so that the time a refusal
//! takes says nothing about the token. The server keeps only the token's SHA-256 digest and
//! compares it with the digest of what the client sent, always over all 32 bytes: the work
//! depends on the length of the client's own value, never on the token's length or on how
//! many of its bytes a guess got right (a byte-wise comparison that stops at the first
//! difference, or at a length mismatch, tells both).

use sha2::{Digest as _, Sha256};

/// The token a request must carry as `Authorization: Bearer <token>`.
pub struct BearerToken {
    digest: [u8; 32],
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(&Sha256::digest(bytes));
    out
}

impl BearerToken {
    /// Keeps the digest of `token`, not the token.
    pub fn new(token: &str) -> Self {
        BearerToken { digest: digest(token.as_bytes()) }
    }

    /// Whether `authorization` (the header's value, if any) is `Bearer <the token>`.
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let given = authorization.and_then(|v| v.strip_prefix(b"Bearer ")).unwrap_or_default();
        let given = digest(given);
        // Every byte is looked at whatever the earlier ones were; `black_box` keeps the
        // optimizer from turning the fold back into an early exit.
        let difference = given.iter().zip(&self.digest).fold(0_u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(difference) == 0
    }
}

#[cfg(test)]
mod tests {
    use std::hint::black_box;
    use std::time::{Duration, Instant};

    use super::BearerToken;

    #[test]
    fn admits_only_the_exact_token() {
        let token = BearerToken::new("test-token-0123456789abcdef");
        assert!(token.admits(Some(b"Bearer test-token-0123456789abcdef")));
        for refused in [
            &b"Bearer test-token-0123456789abcdeF"[..],
            b"Bearer test-token-0123456789abcde",
            b"Bearer test-token-0123456789abcdefg",
            b"Bearer ",
            b"test-token-0123456789abcdef",
            b"Basic test-token-0123456789abcdef",
        ] {
            assert!(!token.admits(Some(refused)), "{}", String::from_utf8_lossy(refused));
        }
        assert!(!token.admits(None));
    }

    /// The fastest of `rounds` checks of `given` (the minimum is what noise cannot inflate).
    fn fastest(check: &dyn Fn(&[u8]) -> bool, given: &[u8], rounds: usize) -> Duration {
        (0..rounds)
            .map(|_| {
                let started = Instant::now();
                black_box(check(black_box(given)));
                started.elapsed()
            })
            .min()
            .unwrap()
    }

    /// The ratio of the slower to the faster of two checks of the same 16 KiB guess: one
    /// against a token of that length, one against a 16-byte token.
    fn ratio(long: &dyn Fn(&[u8]) -> bool, short: &dyn Fn(&[u8]) -> bool) -> f64 {
        let given = [b"Bearer ".as_slice(), &[b'x'; 16 << 10]].concat();
        let (mut a, mut b) = (Duration::MAX, Duration::MAX);
        // Interleaved, so that a busy moment of the machine slows both alike.
        for _ in 0..5 {
            a = a.min(fastest(long, &given, 6));
            b = b.min(fastest(short, &given, 6));
        }
        let (a, b) = (a.as_secs_f64().max(1e-9), b.as_secs_f64().max(1e-9));
        a.max(b) / a.min(b)
    }

    /// What `--transport http` did before: a byte-wise comparison that returns at once when
    /// the lengths differ (kept here as the control that the measurement sees such a leak).
    fn leaky(token: &[u8], header: &[u8]) -> bool {
        let given = header.strip_prefix(b"Bearer ").unwrap_or_default();
        given.len() == token.len() && given.iter().zip(token).fold(0, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    #[test]
    fn the_time_of_a_refusal_does_not_depend_on_the_tokens_length() {
        let long_token = "y".repeat(16 << 10);
        let short_token = "y".repeat(16);
        // Positive control: the old comparison's early return on a length mismatch shows.
        let leak = ratio(&|given| leaky(long_token.as_bytes(), given), &|given| {
            leaky(short_token.as_bytes(), given)
        });
        assert!(leak > 10.0, "the measurement should see the old comparison's leak: ratio {leak:.1}");
        let (long, short) = (BearerToken::new(&long_token), BearerToken::new(&short_token));
        let ratio = ratio(&|given| long.admits(Some(given)), &|given| short.admits(Some(given)));
        assert!(ratio < 2.0, "a refusal's time depends on the token's length: ratio {ratio:.2}");
    }
}
