//! Go `time.ParseDuration` syntax, which is what `spec.rollingUpdate.syncTimeout` uses.

use std::time::Duration;

use crate::Error;

/// Units in the order they must be tried: longer spellings first so `ms` is not read as `m`.
const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),
    ("\u{3bc}s", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60 * 1_000_000_000),
    ("h", 3_600 * 1_000_000_000),
];

/// Parses a non-negative Go duration such as `5m`, `1h30m`, `1.5s` or `300ms`.
/// A sign is refused: no setting of ours takes a negative duration.
pub fn parse_go_duration(text: &str) -> Result<Duration, Error> {
    let invalid = |reason| Error::InvalidDuration {
        value: text.to_owned(),
        reason,
    };
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(invalid("empty"));
    }
    let mut rest = text;
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let integer_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (integer, after_integer) = rest.split_at(integer_len);
        let (fraction, after_number) = match after_integer.strip_prefix('.') {
            Some(after_dot) => {
                let fraction_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
                after_dot.split_at(fraction_len)
            }
            None => ("", after_integer),
        };
        if integer.is_empty() && fraction.is_empty() {
            return Err(invalid("expected a number"));
        }
        let (unit, unit_nanos) = UNITS
            .iter()
            .filter(|(unit, _)| after_number.starts_with(unit))
            .max_by_key(|(unit, _)| unit.len())
            .ok_or_else(|| invalid("missing or unknown unit (use ns, us, ms, s, m or h)"))?;
        rest = &after_number[unit.len()..];

        let whole: u128 = if integer.is_empty() {
            0
        } else {
            integer.parse().map_err(|_| invalid("number too large"))?
        };
        let mut nanos = whole
            .checked_mul(*unit_nanos)
            .ok_or_else(|| invalid("number too large"))?;
        // The fraction contributes unit_nanos * fraction / 10^len, truncated like Go does.
        let mut scale = *unit_nanos;
        for digit in fraction.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            nanos += u128::from(digit - b'0') * scale;
        }
        total_nanos = total_nanos
            .checked_add(nanos)
            .ok_or_else(|| invalid("number too large"))?;
    }
    let secs =
        u64::try_from(total_nanos / 1_000_000_000).map_err(|_| invalid("number too large"))?;
    let subsec =
        u32::try_from(total_nanos % 1_000_000_000).map_err(|_| invalid("number too large"))?;
    Ok(Duration::new(secs, subsec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        let cases = [
            ("0", Duration::ZERO),
            ("5m", Duration::from_secs(300)),
            ("90s", Duration::from_secs(90)),
            ("1h30m", Duration::from_secs(5400)),
            ("1.5s", Duration::from_millis(1500)),
            (".5s", Duration::from_millis(500)),
            ("300ms", Duration::from_millis(300)),
            ("10us", Duration::from_micros(10)),
            ("10\u{b5}s", Duration::from_micros(10)),
            ("7ns", Duration::from_nanos(7)),
            ("1h0m0s", Duration::from_secs(3600)),
            ("2m3.25s", Duration::from_millis(123_250)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_go_duration(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn refuses_malformed_durations() {
        for text in [
            "", "5", "m", "5x", "-5m", "+5m", "5m3", "1..5s", "5 m", "1d",
        ] {
            let error = parse_go_duration(text).expect_err(text);
            assert!(
                matches!(error, Error::InvalidDuration { .. }),
                "{text}: {error}"
            );
        }
    }
}
