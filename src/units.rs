//! Sizes and durations as the command line and the Python module take them
//! (`256MiB`, `500MB`, `5m`): one parser for both, so a value means the same wherever
//! it is given. Imports nothing of ours.

use std::time::Duration;

/// Parses a size: a bare number is bytes; `KB`, `MB`, `GB` are powers of 1000; `KiB`,
/// `MiB`, `GiB` powers of 1024 (and `K`, `M`, `G` their short forms). At least 1 byte.
///
/// # Errors
///
/// The text, quoted, with what to write instead.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let bad = || format!("invalid size {text:?}: use e.g. 256MiB, 500MB or 1048576");
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let multiplier: u64 = match unit.trim() {
        "" | "B" | "b" => 1,
        "KB" | "kB" | "kb" => 1000,
        "MB" | "mb" => 1_000_000,
        "GB" | "gb" => 1_000_000_000,
        "KiB" | "kib" | "K" => 1 << 10,
        "MiB" | "mib" | "M" => 1 << 20,
        "GiB" | "gib" | "G" => 1 << 30,
        _ => return Err(bad()),
    };
    let value: f64 = number.parse().map_err(|_| bad())?;
    let bytes = value * multiplier as f64;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// Parses a duration: `100us`, `500ms`, `2s`, `5m` (or `min`), `1h`; a bare number is
/// seconds.
///
/// # Errors
///
/// The text, quoted, with what to write instead (also for a negative or endless one).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {text:?}: use e.g. 500ms, 30s, 5m");
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let seconds = match unit {
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "" | "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(bad()),
    };
    let value: f64 = number.parse().map_err(|_| bad())?;
    Duration::try_from_secs_f64(value * seconds).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("32MB").unwrap(), 32_000_000);
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert_eq!(parse_size("1KB").unwrap(), 1000);
        assert_eq!(parse_size("1KiB").unwrap(), 1024);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("1.5GB").unwrap(), 1_500_000_000);
        assert!(parse_size("0").is_err());
        assert!(parse_size("12XB").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("-5MB").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5ms").unwrap(), Duration::from_millis(5));
        assert_eq!(parse_duration("0.5s").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("100us").unwrap(), Duration::from_micros(100));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
