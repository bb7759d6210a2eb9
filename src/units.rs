//! Human-readable byte counts, as torch's memory summary prints them.

/// Formats `bytes` with a binary unit: `"512 B"`, `"1.5 KiB"`, `"20.0 MiB"`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Reads a byte count: a whole number with an optional binary unit, `B`,
/// `K`/`KiB`, `M`/`MiB`, `G`/`GiB` or `T`/`TiB` (case does not matter;
/// `KB`, `MB`, `GB`, `TB` are read as binary units too, as torch prints
/// them). Fractions are allowed with a unit: `1.5GiB`.
///
/// ```
/// use tensor_arena::units::parse_bytes;
/// assert_eq!(parse_bytes("4096"), Some(4096));
/// assert_eq!(parse_bytes("64GiB"), Some(64 << 30));
/// assert_eq!(parse_bytes("1.5 MiB"), Some(3 << 19));
/// assert_eq!(parse_bytes("lots"), None);
/// ```
pub fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    if let Ok(whole) = number.parse::<u64>() {
        return whole.checked_mul(1u64 << shift);
    }
    let value: f64 = number.parse().ok()?;
    let bytes = value * (1u64 << shift) as f64;
    (shift > 0 && bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64)
        .then_some(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::{format_bytes, parse_bytes};

    #[test]
    fn parses_units() {
        assert_eq!(parse_bytes("0"), Some(0));
        assert_eq!(parse_bytes("512B"), Some(512));
        assert_eq!(parse_bytes("2k"), Some(2048));
        assert_eq!(parse_bytes("20 MB"), Some(20 << 20));
        assert_eq!(parse_bytes("1TiB"), Some(1 << 40));
        assert_eq!(parse_bytes("1.5"), None, "fractions need a unit");
        assert_eq!(parse_bytes("-1"), None);
        assert_eq!(parse_bytes("99999999999T"), None, "overflow");
        assert_eq!(parse_bytes("3 apples"), None);
    }

    #[test]
    fn binary_units() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(20 << 20), "20.0 MiB");
        assert_eq!(format_bytes(3 << 30), "3.0 GiB");
    }
}
