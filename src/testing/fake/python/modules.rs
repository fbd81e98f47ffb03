//! The standard-library functions the fake models, listed in the builtins table: process
//! exit, the virtual clock, the environment, JSON and base64, and network egress checked
//! against the sandbox's policy.

use std::time::Duration;

use base64::Engine as _;

use crate::exec::StreamKind;

use super::super::machine::url_host_port;
use super::super::vfs::WORKDIR;
use super::Host;
use super::builtins::Args;
use super::flow::{Flow, raise};
use super::value::{Value, as_f64, as_int, float_repr, repr, str_of, type_name};

pub(super) fn sys_exit(host: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    let code = match args.get(0) {
        None | Some(Value::None) => 0,
        Some(Value::Int(n)) => i32::try_from(n).unwrap_or(1),
        Some(other) => {
            host.write(StreamKind::Stderr, format!("{}\n", str_of(&other)).as_bytes());
            1
        }
    };
    Err(Flow::Exit(code))
}

/// Advances the virtual clock; the process stops here if its deadline comes first.
pub(super) fn time_sleep(host: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    let secs = args.get(0).as_ref().and_then(as_f64).unwrap_or(0.0);
    if secs.is_nan() || secs < 0.0 {
        return raise("ValueError", "sleep length must be non-negative");
    }
    // Too long for `Duration` is forever: the cell ends at its deadline.
    host.sleep(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))?;
    Ok(Value::None)
}

/// A fixed instant, so that runs are reproducible.
#[expect(clippy::unnecessary_wraps, reason = "every callable has the builtins table's signature")]
pub(super) fn time_time(_: &mut dyn Host, _: &Args<'_>) -> Result<Value, Flow> {
    Ok(Value::Float(1_700_000_000.0))
}

#[expect(clippy::unnecessary_wraps, reason = "every callable has the builtins table's signature")]
pub(super) fn os_getenv(host: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    Ok(env_get(host, args))
}

/// The variable named by the first argument, or the second argument (default `None`):
/// `os.getenv` and `os.environ.get`.
pub(super) fn env_get(host: &dyn Host, args: &Args<'_>) -> Value {
    host.env()
        .get(&args.text(0))
        .map_or_else(|| args.get(1).unwrap_or(Value::None), |v| Value::Str(v.clone()))
}

#[expect(clippy::unnecessary_wraps, reason = "every callable has the builtins table's signature")]
pub(super) fn os_getcwd(_: &mut dyn Host, _: &Args<'_>) -> Result<Value, Flow> {
    Ok(Value::Str(WORKDIR.to_owned()))
}

pub(super) fn math_sqrt(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    let x = args.get(0).as_ref().and_then(as_f64).unwrap_or(f64::NAN);
    if x < 0.0 { raise("ValueError", "math domain error") } else { Ok(Value::Float(x.sqrt())) }
}

pub(super) fn json_dumps(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    Ok(Value::Str(json(&args.get(0).unwrap_or(Value::None))?))
}

/// `json.dumps(v)` with the default separators.
fn json(v: &Value) -> Result<String, Flow> {
    Ok(match v {
        Value::None => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(n) => n.to_string(),
        Value::Float(f) => float_repr(*f),
        Value::Str(s) => format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")),
        Value::List(items) | Value::Tuple(items) => {
            format!("[{}]", items.iter().map(json).collect::<Result<Vec<_>, _>>()?.join(", "))
        }
        Value::Dict(items) => format!(
            "{{{}}}",
            items
                .iter()
                .map(|(k, v)| Ok(format!("{}: {}", json(&Value::Str(str_of(k)))?, json(v)?)))
                .collect::<Result<Vec<_>, Flow>>()?
                .join(", ")
        ),
        other => {
            return raise(
                "TypeError",
                format!("Object of type {} is not JSON serializable", type_name(other)),
            );
        }
    })
}

pub(super) fn b64decode(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    let input = match args.get(0) {
        Some(Value::Str(s)) => s.into_bytes(),
        Some(Value::Bytes(b)) => b,
        _ => return raise("TypeError", "argument should be a bytes-like object or ASCII string"),
    };
    base64::engine::general_purpose::STANDARD
        .decode(input)
        .map(Value::Bytes)
        .or_else(|e| raise("binascii.Error", e.to_string()))
}

pub(super) fn b64encode(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    match args.get(0) {
        Some(Value::Bytes(b)) => {
            Ok(Value::Bytes(base64::engine::general_purpose::STANDARD.encode(b).into_bytes()))
        }
        _ => raise("TypeError", "a bytes-like object is required"),
    }
}

pub(super) fn create_connection(host: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    if connect(host, args)? {
        Ok(Value::None)
    } else {
        raise("OSError", "[Errno 101] Network is unreachable")
    }
}

pub(super) fn urlopen(host: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    if connect(host, args)? {
        Ok(Value::None)
    } else {
        raise("urllib.error.URLError", "<urlopen error [Errno 101] Network is unreachable>")
    }
}

/// Simulated egress to the address in the first argument (`(host, port)` or a URL): one
/// virtual millisecond, then whether the sandbox's network policy lets it through.
fn connect(host: &mut dyn Host, args: &Args<'_>) -> Result<bool, Flow> {
    let (name, port) = match args.get(0) {
        Some(Value::Tuple(hp)) if hp.len() == 2 => (str_of(&hp[0]), as_int(&hp[1]).unwrap_or(0)),
        Some(Value::Str(url)) => match url_host_port(&url) {
            Some((h, p)) => (h, i64::from(p)),
            None => return raise("ValueError", format!("unknown url type: {}", repr(&Value::Str(url)))),
        },
        _ => return raise("TypeError", "expected an address"),
    };
    let port = u16::try_from(port).unwrap_or(0);
    host.sleep(Duration::from_millis(1))?;
    Ok(host.permits(&name, port))
}
