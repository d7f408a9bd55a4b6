//! Strict RFC 3339 date-times, as the protocol requires: `YYYY-MM-DDTHH:MM:SS`, an optional
//! fraction of one to nine digits, then `Z` or `±HH:MM`; uppercase `T` and `Z`; no leap second;
//! the day checked against the month, leap years included.

use super::error::{CeError, Code};

/// `ns` since the epoch as strict RFC 3339 UTC with nine fractional digits.
pub fn format_rfc3339(ns: i64) -> String {
    strata_journal::export::format_time(ns)
}

/// Nanoseconds since the Unix epoch of a strict RFC 3339 string; `field` names it in errors.
pub fn parse_rfc3339(s: &str, field: &str) -> Result<i128, CeError> {
    let bad = |why: &str| CeError::new(Code::InvalidDateTime, format!("{field}: {why}"));
    let b = s.as_bytes();
    if b.len() < 20 || b.len() > 35 {
        return Err(bad("not of the form YYYY-MM-DDTHH:MM:SS[.f]Z|±HH:MM"));
    }
    let num = |from: usize, len: usize| -> Result<i64, CeError> {
        let part = b.get(from..from + len).ok_or_else(|| bad("truncated"))?;
        if !part.iter().all(u8::is_ascii_digit) {
            return Err(bad("expected digits"));
        }
        Ok(part.iter().fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0')))
    };
    let sep = |at: usize, c: u8| if b.get(at) == Some(&c) { Ok(()) } else { Err(bad("wrong separator")) };
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    sep(4, b'-')?;
    sep(7, b'-')?;
    sep(10, b'T')?;
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    sep(13, b':')?;
    sep(16, b':')?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err(bad("no such day"));
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err(bad("time of day out of range"));
    }
    let mut at = 19;
    let mut nanos: i128 = 0;
    if b.get(at) == Some(&b'.') {
        let digits = b[at + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if !(1..=9).contains(&digits) {
            return Err(bad("the fraction has one to nine digits"));
        }
        let frac = num(at + 1, digits)?;
        nanos = i128::from(frac) * 10i128.pow(9 - digits as u32);
        at += 1 + digits;
    }
    let offset_s: i64 = match b.get(at) {
        Some(b'Z') if b.len() == at + 1 => 0,
        Some(sign @ (b'+' | b'-')) if b.len() == at + 6 => {
            let (oh, om) = (num(at + 1, 2)?, num(at + 4, 2)?);
            sep(at + 3, b':')?;
            if oh > 23 || om > 59 {
                return Err(bad("offset out of range"));
            }
            let o = oh * 3600 + om * 60;
            if *sign == b'+' { o } else { -o }
        }
        _ => return Err(bad("expected Z or ±HH:MM at the end")),
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    Ok(i128::from(secs) * 1_000_000_000 + nanos)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_forms_parse_to_epoch_nanoseconds() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z", "t").unwrap(), 0);
        assert_eq!(parse_rfc3339("2024-02-29T12:00:00.5+01:00", "t").unwrap(), 1_709_204_400_500_000_000);
        assert_eq!(parse_rfc3339("2000-03-01T00:00:00.000000001-00:30", "t").unwrap(), 951_870_600_000_000_001);
    }

    #[test]
    fn lax_forms_are_invalid_date_time() {
        for s in [
            "not-a-date",
            "2026-02-31T00:00:00Z",
            "2026-07-30 00:00:00Z",
            "2026-07-30t00:00:00z",
            "2025-02-29T00:00:00Z",
            "2026-07-30T24:00:00Z",
            "2026-07-30T23:59:60Z",
            "2026-07-30T00:00:00",
            "2026-07-30T00:00:00.Z",
            "2026-07-30T00:00:00.1234567890Z",
            "2026-07-30T00:00:00+0100",
            "2026-07-30T00:00:00+24:00",
            "+2026-07-30T00:00:00Z",
        ] {
            let e = parse_rfc3339(s, "now").unwrap_err();
            assert_eq!(e.code, Code::InvalidDateTime, "{s}");
        }
    }
}
