//! Python's operators on values: arithmetic, `%` formatting and comparison.

use super::flow::{Flow, overflow, raise};
use super::value::{Value, as_f64, as_int, repr, str_of, type_name};

/// `l op r` for the arithmetic operators and `%` formatting.
#[expect(
    clippy::cast_precision_loss,
    reason = "Python converts ints to the nearest float in mixed arithmetic too"
)]
pub(super) fn binary(op: &str, l: &Value, r: &Value) -> Result<Value, Flow> {
    use Value::{Bytes, Float, Int, List, Str, Tuple};
    let unsupported = || {
        raise(
            "TypeError",
            format!("unsupported operand type(s) for {op}: '{}' and '{}'", type_name(l), type_name(r)),
        )
    };
    match (op, l, r) {
        ("+", Str(a), Str(b)) => Ok(Str(format!("{a}{b}"))),
        ("+", Bytes(a), Bytes(b)) => Ok(Bytes([a.as_slice(), b.as_slice()].concat())),
        ("+", List(a), List(b)) => Ok(List([a.clone(), b.clone()].concat())),
        ("+", Tuple(a), Tuple(b)) => Ok(Tuple([a.clone(), b.clone()].concat())),
        ("*", Str(s), n) | ("*", n, Str(s)) if as_int(n).is_some() => {
            let times = usize::try_from(as_int(n).unwrap_or(0)).unwrap_or(0);
            if s.len().saturating_mul(times) > 64 << 20 {
                return raise("MemoryError", "the fake Python caps strings at 64 MiB");
            }
            Ok(Str(s.repeat(times)))
        }
        ("%", Str(fmt), arg) => {
            let items = match arg {
                Tuple(items) => items.clone(),
                other => vec![other.clone()],
            };
            percent_format(fmt, &items)
        }
        (_, Int(_) | Value::Bool(_), Int(_) | Value::Bool(_)) => {
            let (a, b) = (as_int(l).unwrap_or(0), as_int(r).unwrap_or(0));
            match op {
                "+" => a.checked_add(b).map(Int).ok_or_else(overflow),
                "-" => a.checked_sub(b).map(Int).ok_or_else(overflow),
                "*" => a.checked_mul(b).map(Int).ok_or_else(overflow),
                "/" if b == 0 => raise("ZeroDivisionError", "division by zero"),
                "/" => Ok(Float(a as f64 / b as f64)),
                "//" | "%" if b == 0 => raise("ZeroDivisionError", "integer division or modulo by zero"),
                "//" => floor_div(a, b).map(Int).ok_or_else(overflow),
                "%" => floor_div(a, b)
                    .and_then(|q| q.checked_mul(b))
                    .and_then(|qb| a.checked_sub(qb))
                    .map(Int)
                    .ok_or_else(overflow),
                "**" if b < 0 => Ok(Float((a as f64).powf(b as f64))),
                "**" => u32::try_from(b).ok().and_then(|b| a.checked_pow(b)).map(Int).ok_or_else(overflow),
                _ => unsupported(),
            }
        }
        (_, a, b) if as_f64(a).is_some() && as_f64(b).is_some() => {
            let (a, b) = (as_f64(a).unwrap_or(0.0), as_f64(b).unwrap_or(0.0));
            match op {
                "+" => Ok(Float(a + b)),
                "-" => Ok(Float(a - b)),
                "*" => Ok(Float(a * b)),
                "/" | "//" | "%" if b == 0.0 => raise("ZeroDivisionError", "float division by zero"),
                "/" => Ok(Float(a / b)),
                "//" => Ok(Float((a / b).floor())),
                "%" => Ok(Float(a - b * (a / b).floor())),
                "**" => Ok(Float(a.powf(b))),
                _ => unsupported(),
            }
        }
        _ => unsupported(),
    }
}

/// `fmt % items` with the conversions `%s`, `%r`, `%d` and `%%`, left to right.
fn percent_format(fmt: &str, items: &[Value]) -> Result<Value, Flow> {
    let mut out = String::new();
    let mut items = items.iter();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let conv = chars.next();
        if conv == Some('%') {
            out.push('%');
            continue;
        }
        let Some(item) = items.next() else {
            return raise("TypeError", "not enough arguments for format string");
        };
        match conv {
            Some('s') => out.push_str(&str_of(item)),
            Some('r') => out.push_str(&repr(item)),
            Some('d' | 'i') => match item {
                Value::Int(_) | Value::Bool(_) => out.push_str(&as_int(item).unwrap_or(0).to_string()),
                #[expect(
                    clippy::cast_possible_truncation,
                    reason = "the guard keeps the truncated float within i64"
                )]
                Value::Float(f) if f.is_finite() && f.abs() < 9.0e18 => {
                    out.push_str(&(f.trunc() as i64).to_string());
                }
                other => {
                    return raise(
                        "TypeError",
                        format!("%d format: a real number is required, not {}", type_name(other)),
                    );
                }
            },
            other => {
                let shown = other.map(String::from).unwrap_or_default();
                return raise(
                    "NotImplementedError",
                    format!("the fake Python does not model the `%{shown}` conversion"),
                );
            }
        }
    }
    if items.next().is_some() {
        return raise("TypeError", "not all arguments converted during string formatting");
    }
    Ok(Value::Str(out))
}

/// Python's `//` on integers: the quotient rounded towards negative infinity.
fn floor_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b)?;
    let inexact = a.checked_rem(b)? != 0;
    if inexact && ((a < 0) != (b < 0)) { q.checked_sub(1) } else { Some(q) }
}

/// `l op r` for the comparison operators, `in`, `not in`, `is` and `is not`.
pub(super) fn compare(op: &str, l: &Value, r: &Value) -> Result<bool, Flow> {
    match op {
        "==" => Ok(values_equal(l, r)),
        "!=" => Ok(!values_equal(l, r)),
        "is" => Ok(l == r && matches!(l, Value::None | Value::Bool(_))),
        "is not" => Ok(!(l == r && matches!(l, Value::None | Value::Bool(_)))),
        "in" | "not in" => {
            let found = match r {
                Value::List(items) | Value::Tuple(items) => items.iter().any(|i| values_equal(i, l)),
                Value::Str(s) => s.contains(&str_of(l)),
                Value::Dict(items) => items.iter().any(|(k, _)| values_equal(k, l)),
                Value::Environ => false,
                other => {
                    return raise(
                        "TypeError",
                        format!("argument of type '{}' is not iterable", type_name(other)),
                    );
                }
            };
            Ok(found == (op == "in"))
        }
        _ => {
            let ord = match (l, r) {
                (Value::Str(a), Value::Str(b)) => a.partial_cmp(b),
                _ => match (as_f64(l), as_f64(r)) {
                    (Some(a), Some(b)) => a.partial_cmp(&b),
                    _ => None,
                },
            };
            let Some(ord) = ord else {
                return raise(
                    "TypeError",
                    format!(
                        "'{op}' not supported between instances of '{}' and '{}'",
                        type_name(l),
                        type_name(r)
                    ),
                );
            };
            Ok(match op {
                "<" => ord.is_lt(),
                ">" => ord.is_gt(),
                "<=" => ord.is_le(),
                _ => ord.is_ge(),
            })
        }
    }
}

#[expect(clippy::float_cmp, reason = "Python's `==` on numbers is exact")]
fn values_equal(l: &Value, r: &Value) -> bool {
    match (as_f64(l), as_f64(r)) {
        (Some(a), Some(b)) => a == b,
        _ => l == r,
    }
}
