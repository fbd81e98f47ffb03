//! Methods of the builtin types (`str`, `bytes`, `dict`, files, `os.environ`) and of the
//! standard streams. Methods of classes defined in the cell run in the interpreter.

use crate::exec::StreamKind;

use super::Host;
use super::builtins::Args;
use super::flow::{Flow, io_error, raise};
use super::modules::env_get;
use super::value::{Value, count, str_of, type_name};

/// `recv.method(*args)` for a receiver that is not an instance of a cell's class.
pub(super) fn call(host: &mut dyn Host, recv: &Value, method: &str, args: &Args<'_>) -> Result<Value, Flow> {
    match recv {
        Value::Module(m) => stream_method(host, m, method, args),
        Value::Environ if method == "get" => Ok(env_get(host, args)),
        Value::Dict(items) => dict_method(items, method, args),
        Value::Str(s) => str_method(s, method, args),
        Value::Bytes(b) if method == "decode" => Ok(Value::Str(String::from_utf8_lossy(b).into_owned())),
        Value::File(path, mode) => file_method(host, path, mode, method, args),
        Value::List(_) if method == "append" => {
            raise("NotImplementedError", "the fake Python does not model list mutation through methods")
        }
        other => no_attribute(other, method),
    }
}

fn no_attribute(recv: &Value, method: &str) -> Result<Value, Flow> {
    raise("AttributeError", format!("'{}' object has no attribute '{method}'", type_name(recv)))
}

/// `sys.stdout.write`, `sys.stdout.buffer.write`, `flush`, `sys.stdin.read`.
fn stream_method(host: &mut dyn Host, m: &str, method: &str, args: &Args<'_>) -> Result<Value, Flow> {
    let stream = if m.starts_with("sys.stdout") { StreamKind::Stdout } else { StreamKind::Stderr };
    match (m, method) {
        ("sys.stdout" | "sys.stderr", "write") => {
            let text = args.text(0);
            host.write(stream, text.as_bytes());
            Ok(Value::Int(count(text.chars().count())))
        }
        ("sys.stdout.buffer" | "sys.stderr.buffer", "write") => {
            let Some(Value::Bytes(data)) = args.get(0) else {
                return raise("TypeError", "a bytes-like object is required");
            };
            host.write(stream, &data);
            Ok(Value::Int(count(data.len())))
        }
        (m, "flush") if m.starts_with("sys.std") => Ok(Value::None),
        ("sys.stdin", "read") => {
            let data = host.read_stdin()?;
            Ok(Value::Str(String::from_utf8_lossy(&data).into_owned()))
        }
        _ => no_attribute(&Value::Module(m.to_owned()), method),
    }
}

fn dict_method(items: &[(Value, Value)], method: &str, args: &Args<'_>) -> Result<Value, Flow> {
    match method {
        "get" => {
            let key = args.get(0).unwrap_or(Value::None);
            Ok(items
                .iter()
                .find(|(k, _)| *k == key)
                .map_or_else(|| args.get(1).unwrap_or(Value::None), |(_, v)| v.clone()))
        }
        "keys" => Ok(Value::List(items.iter().map(|(k, _)| k.clone()).collect())),
        "values" => Ok(Value::List(items.iter().map(|(_, v)| v.clone()).collect())),
        _ => no_attribute(&Value::Dict(Vec::new()), method),
    }
}

fn str_method(s: &str, method: &str, args: &Args<'_>) -> Result<Value, Flow> {
    match method {
        "upper" => Ok(Value::Str(s.to_uppercase())),
        "lower" => Ok(Value::Str(s.to_lowercase())),
        "strip" => Ok(Value::Str(s.trim().to_owned())),
        "split" => Ok(Value::List(match args.get(0) {
            Some(Value::Str(sep)) => s.split(sep.as_str()).map(|p| Value::Str(p.to_owned())).collect(),
            _ => s.split_whitespace().map(|p| Value::Str(p.to_owned())).collect(),
        })),
        "join" => match args.get(0) {
            Some(Value::List(items) | Value::Tuple(items)) => {
                Ok(Value::Str(items.iter().map(str_of).collect::<Vec<_>>().join(s)))
            }
            _ => raise("TypeError", "can only join an iterable"),
        },
        "encode" => Ok(Value::Bytes(s.as_bytes().to_vec())),
        "startswith" => Ok(Value::Bool(args.get(0).is_some_and(|p| s.starts_with(&str_of(&p))))),
        // Positional `{}` fields only, filled left to right.
        "format" => {
            let mut out = s.to_owned();
            for a in args.positional {
                out = out.replacen("{}", &str_of(a), 1);
            }
            Ok(Value::Str(out))
        }
        _ => no_attribute(&Value::Str(String::new()), method),
    }
}

/// `read` on a file opened for reading, `write` on one opened for writing or appending
/// (each write appends: `open` already truncated a `w` file), `close`.
fn file_method(
    host: &mut dyn Host,
    path: &str,
    mode: &str,
    method: &str,
    args: &Args<'_>,
) -> Result<Value, Flow> {
    match method {
        "read" if mode.starts_with('r') => {
            let data = host.read_file(path).or_else(|e| io_error(&e, path).map(|()| Vec::new()))?;
            Ok(if mode.contains('b') {
                Value::Bytes(data)
            } else {
                Value::Str(String::from_utf8_lossy(&data).into_owned())
            })
        }
        "write" if mode.starts_with('w') || mode.starts_with('a') => {
            let data = match args.get(0) {
                Some(Value::Bytes(b)) => b,
                Some(v) => str_of(&v).into_bytes(),
                None => Vec::new(),
            };
            host.write_file(path, &data, true).or_else(|e| io_error(&e, path))?;
            Ok(Value::Int(count(data.len())))
        }
        "close" => Ok(Value::None),
        _ => no_attribute(&Value::File(String::new(), String::new()), method),
    }
}
