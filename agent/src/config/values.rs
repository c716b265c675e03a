//! Parsers of single setting values, shared by the command-line flags, the `PYAGENT_*` variables and
//! the TOML file, so a value means the same wherever it is written.
//!
//! - Durations: a plain number is seconds (`30`, `1.5`); otherwise a number and a unit as
//!   [`humantime`] reads them (`500ms`, `10s`, `5m`, `2h`, `7d`, summed as `1h30m`).
//! - Sizes: a plain number is bytes; otherwise a number and a unit as [`bytesize`] reads them
//!   (`500MB` and `1GB` are powers of 1000, `512MiB` and `1GiB` of 1024).
//! - Sampling rates: a whole number in [`RATE_HZ`].
//! - CPU budgets: a percentage of one core (`1%`, `0.5%`), or `off`.

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::time::Duration;

pub use crate::profiler::{CoreShare, CpuBudget};

/// Samples per second per thread that every sampler accepts, wherever the rate comes from (the
/// `record`, `top` and `--all-python` flags, `rate_hz` in the config). 10 kHz is the highest rate the
/// samplers sustain at depth 100 (README, "highest sustained rate").
pub const RATE_HZ: RangeInclusive<u32> = 1..=10_000;

/// Why a value could not be read. The message ends with the value itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// Neither a number of seconds nor a number with a time unit.
    #[error("not a duration (seconds, or a number and a unit: 500ms, 10s, 5m, 2h, 7d): {0:?}")]
    Duration(String),
    /// Neither a number of bytes nor a number with a size unit, or too large.
    #[error("not a size (like 1GiB, 500MB or a number of bytes): {0:?}")]
    Size(String),
    /// Not a non-negative whole number that fits.
    #[error("not a whole number: {0:?}")]
    WholeNumber(String),
    /// A sampling rate outside [`RATE_HZ`].
    #[error("must be between {min} and {max} samples per second: {0:?}", min = RATE_HZ.start(), max = RATE_HZ.end())]
    Rate(String),
    /// Not `address:port`.
    #[error("not an address with a port (like 127.0.0.1:9464): {0:?}")]
    Address(String),
    /// Not a share of one core between 0.01% and 100%, nor `off`.
    #[error("not a share of one core between 0.01% and 100% (like 1% or 0.5%), nor off: {0:?}")]
    CoreShare(String),
    /// Not `true`/`false` (or `1`/`0`, `yes`/`no`, `on`/`off`).
    #[error("not true or false: {0:?}")]
    Bool(String),
}

/// A switch: `true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off` (any case).
pub fn parse_bool(text: &str) -> Result<bool, ValueError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(ValueError::Bool(text.to_owned())),
    }
}

/// A CPU budget: a percentage of one core (`1%`, `0.5%`; a plain number is a percentage too),
/// or `off` (also `0`) for none.
pub fn parse_cpu_budget(text: &str) -> Result<CpuBudget, ValueError> {
    let text = text.trim();
    let bad = || ValueError::CoreShare(text.to_owned());
    if text.eq_ignore_ascii_case("off") {
        return Ok(CpuBudget::Off);
    }
    let number = text.strip_suffix('%').unwrap_or(text).trim();
    let percent: f64 = number.parse().map_err(|_| bad())?;
    if percent == 0.0 {
        return Ok(CpuBudget::Off);
    }
    if !percent.is_finite() || percent < 0.0 {
        return Err(bad());
    }
    let millionths = (percent * 1e4).round();
    if millionths > f64::from(u32::MAX) {
        return Err(bad());
    }
    CoreShare::from_millionths(millionths as u32)
        .map(CpuBudget::Limit)
        .ok_or_else(bad)
}

/// A duration: a plain number is seconds (`2`, `0.5`), anything else needs a unit (`500ms`, `2s`,
/// `1h30m`). Negative durations are refused.
pub fn parse_duration(text: &str) -> Result<Duration, ValueError> {
    let text = text.trim();
    let bad = || ValueError::Duration(text.to_owned());
    // humantime insists on a unit; a bare number is read as seconds by appending one, so that
    // `2` and `2s` take the same path (and `1.5` is exact, not an f64 round trip).
    let is_plain_number = !text.is_empty()
        && text.chars().all(|c| c.is_ascii_digit() || c == '.')
        && text.chars().filter(|&c| c == '.').count() <= 1
        && text.chars().any(|c| c.is_ascii_digit());
    let result = if is_plain_number {
        humantime::parse_duration(&format!("{text}s"))
    } else {
        humantime::parse_duration(text)
    };
    result.map_err(|_| bad())
}

/// A size in bytes: a plain number is bytes (`4096`), or a number and a unit (`1GiB`, `500MB`).
pub fn parse_size(text: &str) -> Result<u64, ValueError> {
    let text = text.trim();
    let bad = || ValueError::Size(text.to_owned());
    let size: bytesize::ByteSize = text.parse().map_err(|_| bad())?;
    // bytesize saturates where the product overflows: u64::MAX is the sign of a value too large
    // to count (no directory bound is that big on purpose).
    if size.as_u64() == u64::MAX {
        return Err(bad());
    }
    Ok(size.as_u64())
}

/// A non-negative whole number of type `T`.
pub fn parse_whole_number<T: std::str::FromStr>(text: &str) -> Result<T, ValueError> {
    let text = text.trim();
    text.parse()
        .map_err(|_| ValueError::WholeNumber(text.to_owned()))
}

/// A sampling rate: a whole number in [`RATE_HZ`].
pub fn parse_rate_hz(text: &str) -> Result<u32, ValueError> {
    let rate: u32 = parse_whole_number(text)?;
    check_rate_hz(rate).map_err(|_| ValueError::Rate(text.trim().to_owned()))
}

/// `rate` if it is in [`RATE_HZ`].
pub fn check_rate_hz(rate: u32) -> Result<u32, ValueError> {
    if RATE_HZ.contains(&rate) {
        Ok(rate)
    } else {
        Err(ValueError::Rate(rate.to_string()))
    }
}

/// A log filter (tracing `EnvFilter` syntax). Field values in `[span{field=value}]` are matched
/// literally, not compiled as regular expressions: a counted repetition in one made the regex
/// compiler allocate gigabytes (found by fuzzing the config file), and a log filter has no need
/// for patterns.
pub fn parse_log_filter(
    text: &str,
) -> Result<tracing_subscriber::EnvFilter, tracing_subscriber::filter::ParseError> {
    tracing_subscriber::EnvFilter::builder()
        .with_regex(false)
        .parse(text)
}

/// `address:port`, like `127.0.0.1:9464` or `[::1]:9464`.
pub fn parse_socket_addr(text: &str) -> Result<SocketAddr, ValueError> {
    let text = text.trim();
    text.parse()
        .map_err(|_| ValueError::Address(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_budget_is_a_percentage_of_one_core_or_off() {
        let share = |t: &str| parse_cpu_budget(t).map(|s| s.to_string());
        assert_eq!(share("1%"), Ok("1%".into()));
        assert_eq!(share(" 0.5 % "), Ok("0.5%".into()));
        assert_eq!(share("2"), Ok("2%".into()));
        assert_eq!(share("100%"), Ok("100%".into()));
        assert_eq!(parse_cpu_budget("off"), Ok(CpuBudget::Off));
        assert_eq!(parse_cpu_budget("0"), Ok(CpuBudget::Off));
        for bad in [
            "-1%",
            "101%",
            "0.001%",
            "1 percent",
            "",
            "NaN",
            "inf",
            "1e30",
        ] {
            assert!(
                matches!(parse_cpu_budget(bad), Err(ValueError::CoreShare(_))),
                "{bad:?}"
            );
        }
    }

    /// Fuzz crash (out of memory): this `log` value from a config file made the regex compiler
    /// behind `EnvFilter` allocate over 2 GB. Field values are now literal.
    #[test]
    fn log_filter_with_a_huge_repetition_is_cheap() {
        let text = r"e] e-[&vt{`v`e[&-gt[pd=.................4........................}}}}}}}}7777}}}777777777777777777777777777777777777777777777777777777777777/},TiOPE_B`b";
        let _ = parse_log_filter(text);
        assert!(parse_log_filter("info,pyagent[sample{pid=1.*}]=debug").is_ok());
        assert!(parse_log_filter("warn").is_ok());
    }

    #[test]
    fn durations() {
        for (text, expected) in [
            ("2", Duration::from_secs(2)),
            ("0.5", Duration::from_millis(500)),
            ("1.5", Duration::from_millis(1500)),
            (" 30 ", Duration::from_secs(30)),
            ("2s", Duration::from_secs(2)),
            ("1.5s", Duration::from_millis(1500)),
            ("500ms", Duration::from_millis(500)),
            ("5m", Duration::from_secs(300)),
            ("1h30m", Duration::from_secs(5400)),
            ("7d", Duration::from_secs(604_800)),
            ("0", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(text), Ok(expected), "{text:?}");
        }
        for bad in [
            "",
            "s",
            "10x",
            "-1s",
            "-5",
            "1..5",
            ".",
            "ten",
            "10 seconds please",
        ] {
            assert_eq!(
                parse_duration(bad),
                Err(ValueError::Duration(bad.trim().to_owned())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("2 GiB"), Ok(2 << 30));
        assert_eq!(parse_size("500MB"), Ok(500_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        for bad in ["", "GiB", "1 potato", "-1", "99999999999999TiB"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn rates_share_one_range() {
        assert_eq!(parse_rate_hz("1"), Ok(1));
        assert_eq!(parse_rate_hz("10000"), Ok(10_000));
        assert_eq!(parse_rate_hz("0"), Err(ValueError::Rate("0".into())));
        assert_eq!(
            parse_rate_hz("10001"),
            Err(ValueError::Rate("10001".into()))
        );
        assert_eq!(
            parse_rate_hz("-5"),
            Err(ValueError::WholeNumber("-5".into()))
        );
        assert_eq!(
            ValueError::Rate("0".into()).to_string(),
            "must be between 1 and 10000 samples per second: \"0\""
        );
    }

    #[test]
    fn messages_are_one_line_and_end_with_the_value() {
        let err = parse_duration("-5s").unwrap_err().to_string();
        assert!(err.starts_with("not a duration"), "{err}");
        assert!(err.ends_with("\"-5s\"") && !err.contains('\n'), "{err}");
        assert!(parse_socket_addr("localhost").is_err());
        assert_eq!(
            parse_socket_addr("0.0.0.0:9999").map(|a| a.port()),
            Ok(9999)
        );
    }
}
