//! [`SecretString`]: a value that never prints.

use std::fmt;

/// A secret (an API key, a token, a secret env value). `Debug` and `Display` print
/// `[redacted]`, so a secret cannot reach a log, an audit record or an error message by
/// formatting. Read it only where it must cross to the provider, with
/// [`SecretString::expose_secret`].
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SecretString(String);

impl SecretString {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        SecretString(value.into())
    }

    /// The secret itself. Call it only to hand the value to the provider.
    #[must_use]
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl From<String> for SecretString {
    fn from(value: String) -> Self {
        SecretString(value)
    }
}

impl From<&str> for SecretString {
    fn from(value: &str) -> Self {
        SecretString(value.to_owned())
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretString([redacted])")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::SecretString;

    #[test]
    fn never_prints() {
        let s = SecretString::new("hunter2-canary");
        assert!(!format!("{s:?} {s} {s:#?}").contains("hunter2"));
        assert_eq!(s.expose_secret(), "hunter2-canary");
    }
}
