//! The builtin functions, one small function each, and the table that names every callable
//! the fake models (its own builtins and the module functions in [`modules`]).

use std::collections::BTreeMap;

use crate::exec::StreamKind;

use super::super::machine::MAX_REAL_ALLOCATION;
use super::Host;
use super::flow::{Flow, io_error, overflow, raise};
use super::modules;
use super::ops::{binary, compare};
use super::value::{Value, as_f64, as_int, count, repr, str_of, truthy, type_name};

/// The arguments of a call.
pub(super) struct Args<'a> {
    pub(super) positional: &'a [Value],
    pub(super) keywords: &'a BTreeMap<String, Value>,
}

impl Args<'_> {
    /// The positional argument `i`, if given.
    pub(super) fn get(&self, i: usize) -> Option<Value> {
        self.positional.get(i).cloned()
    }

    /// The positional argument `i` as `str()` shows it, or `""`.
    pub(super) fn text(&self, i: usize) -> String {
        self.get(i).map(|v| str_of(&v)).unwrap_or_default()
    }
}

/// A callable: what it does to the process (through `Host`) and what it returns.
pub(super) type Builtin = fn(&mut dyn Host, &Args<'_>) -> Result<Value, Flow>;

/// Every callable by its qualified name: bare names are builtins, dotted names module
/// functions. A name missing here is not callable in the fake.
const TABLE: &[(&str, Builtin)] = &[
    ("print", print),
    ("bytearray", bytearray),
    ("len", len),
    ("str", str),
    ("repr", repr_),
    ("int", int),
    ("float", float),
    ("bool", bool),
    ("abs", abs),
    ("range", range),
    ("list", list),
    ("tuple", tuple),
    ("sorted", sorted),
    ("sum", sum),
    ("min", min),
    ("max", max),
    ("input", input),
    ("open", open),
    ("sys.exit", modules::sys_exit),
    ("time.sleep", modules::time_sleep),
    ("time.time", modules::time_time),
    ("os.getenv", modules::os_getenv),
    ("os.getcwd", modules::os_getcwd),
    ("math.sqrt", modules::math_sqrt),
    ("json.dumps", modules::json_dumps),
    ("base64.b64decode", modules::b64decode),
    ("base64.b64encode", modules::b64encode),
    ("socket.create_connection", modules::create_connection),
    ("urllib.request.urlopen", modules::urlopen),
];

/// The callable named `name`.
pub(super) fn lookup(name: &str) -> Option<Builtin> {
    TABLE.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

#[expect(clippy::unnecessary_wraps, reason = "every callable has the builtins table's signature")]
fn print(host: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    let sep = args.keywords.get("sep").map_or(" ".to_owned(), str_of);
    let end = args.keywords.get("end").map_or("\n".to_owned(), str_of);
    let text = args.positional.iter().map(str_of).collect::<Vec<_>>().join(&sep) + &end;
    let stream = match args.keywords.get("file") {
        Some(Value::Module(m)) if m == "sys.stderr" => StreamKind::Stderr,
        _ => StreamKind::Stdout,
    };
    host.write(stream, text.as_bytes());
    Ok(Value::None)
}

fn bytearray(host: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    match args.get(0) {
        None => Ok(Value::Bytes(Vec::new())),
        Some(Value::Bytes(b)) => Ok(Value::Bytes(b)),
        Some(Value::Int(n)) if n < 0 => raise("ValueError", "negative count"),
        Some(Value::Int(n)) => {
            // CPython zero-fills the buffer, touching every page: the whole size counts
            // against the memory limit at once.
            let n = u64::try_from(n).unwrap_or(u64::MAX);
            host.allocate(n)?;
            if n > MAX_REAL_ALLOCATION {
                return raise(
                    "NotImplementedError",
                    format!(
                        "the fake models bytearray(n) up to {MAX_REAL_ALLOCATION} bytes under the memory limit"
                    ),
                );
            }
            Ok(Value::Bytes(vec![0; usize::try_from(n).unwrap_or(usize::MAX)]))
        }
        Some(other) => {
            raise("TypeError", format!("cannot convert '{}' object to bytearray", type_name(&other)))
        }
    }
}

fn len(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    match args.get(0) {
        Some(Value::Str(s)) => Ok(Value::Int(count(s.chars().count()))),
        Some(Value::Bytes(b)) => Ok(Value::Int(count(b.len()))),
        Some(Value::List(i) | Value::Tuple(i)) => Ok(Value::Int(count(i.len()))),
        Some(Value::Dict(d)) => Ok(Value::Int(count(d.len()))),
        Some(other) => raise("TypeError", format!("object of type '{}' has no len()", type_name(&other))),
        None => raise("TypeError", "len() takes exactly one argument (0 given)"),
    }
}

#[expect(clippy::unnecessary_wraps, reason = "every callable has the builtins table's signature")]
fn str(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    Ok(Value::Str(args.text(0)))
}

#[expect(clippy::unnecessary_wraps, reason = "every callable has the builtins table's signature")]
fn repr_(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    Ok(Value::Str(args.get(0).map(|v| repr(&v)).unwrap_or_default()))
}

fn int(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    match args.get(0) {
        None => Ok(Value::Int(0)),
        Some(Value::Str(s)) => s.trim().parse::<i64>().map(Value::Int).or_else(|_| {
            raise(
                "ValueError",
                format!("invalid literal for int() with base 10: {}", repr(&Value::Str(s.clone()))),
            )
        }),
        Some(Value::Float(f)) if f.is_nan() => raise("ValueError", "cannot convert float NaN to integer"),
        Some(Value::Float(f)) if f.is_infinite() => {
            raise("OverflowError", "cannot convert float infinity to integer")
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_precision_loss,
            reason = "the guard keeps the truncated float within i64"
        )]
        Some(Value::Float(f)) if f.trunc().abs() < i64::MAX as f64 => Ok(Value::Int(f.trunc() as i64)),
        Some(Value::Float(_)) => Err(overflow()),
        Some(v) => as_int(&v)
            .map(Value::Int)
            .map_or_else(|| raise("TypeError", "int() argument must be a string or a number"), Ok),
    }
}

fn float(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    match args.get(0) {
        Some(Value::Str(s)) => s.trim().parse::<f64>().map(Value::Float).or_else(|_| {
            raise(
                "ValueError",
                format!("could not convert string to float: {}", repr(&Value::Str(s.clone()))),
            )
        }),
        Some(v) => as_f64(&v)
            .map(Value::Float)
            .map_or_else(|| raise("TypeError", "float() argument must be a string or a number"), Ok),
        None => Ok(Value::Float(0.0)),
    }
}

#[expect(clippy::unnecessary_wraps, reason = "every callable has the builtins table's signature")]
fn bool(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    Ok(Value::Bool(args.get(0).is_some_and(|v| truthy(&v))))
}

fn abs(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    match args.get(0) {
        Some(Value::Int(n)) => n.checked_abs().map(Value::Int).ok_or_else(overflow),
        Some(Value::Float(f)) => Ok(Value::Float(f.abs())),
        _ => raise("TypeError", "bad operand type for abs()"),
    }
}

/// `range(stop)` or `range(start, stop)`, as a list (the fake has no lazy sequences).
fn range(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    let ints: Vec<i64> = args.positional.iter().filter_map(as_int).collect();
    let (start, stop) = match ints.as_slice() {
        [stop] => (0, *stop),
        [start, stop, ..] => (*start, *stop),
        _ => return raise("TypeError", "range expected at least 1 argument"),
    };
    if stop.checked_sub(start).is_none_or(|n| n > 1_000_000) {
        return raise("NotImplementedError", "the fake Python models ranges of at most 1,000,000 items");
    }
    Ok(Value::List((start..stop).map(Value::Int).collect()))
}

/// The items of the first argument, as `list()` iterates them (a dict yields its keys).
fn items(args: &Args<'_>) -> Result<Vec<Value>, Flow> {
    match args.get(0) {
        None => Ok(Vec::new()),
        Some(Value::List(i) | Value::Tuple(i)) => Ok(i),
        Some(Value::Str(s)) => Ok(s.chars().map(|c| Value::Str(c.to_string())).collect()),
        Some(Value::Dict(d)) => Ok(d.into_iter().map(|(k, _)| k).collect()),
        Some(other) => raise("TypeError", format!("'{}' object is not iterable", type_name(&other))),
    }
}

fn list(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    items(args).map(Value::List)
}

fn tuple(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    items(args).map(Value::Tuple)
}

/// `sorted()` of numbers or of strings; a mix raises `TypeError` as in Python.
fn sorted(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    let mut items = items(args)?;
    let mut err = None;
    items.sort_by(|a, b| match (as_f64(a), as_f64(b), a, b) {
        (Some(x), Some(y), _, _) => x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal),
        (_, _, Value::Str(x), Value::Str(y)) => x.cmp(y),
        _ => {
            err = Some(());
            std::cmp::Ordering::Equal
        }
    });
    if err.is_some() {
        return raise("TypeError", "'<' not supported between these instances");
    }
    Ok(Value::List(items))
}

/// The values `sum`, `min` and `max` reduce: one sequence argument, or the arguments.
fn operands(args: &Args<'_>) -> Vec<Value> {
    match (args.get(0), args.positional.len()) {
        (Some(Value::List(i) | Value::Tuple(i)), 1) => i,
        _ => args.positional.to_vec(),
    }
}

fn sum(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    operands(args).iter().try_fold(Value::Int(0), |acc, v| binary("+", &acc, v))
}

fn min(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    extreme("min", "<", operands(args))
}

fn max(_: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    extreme("max", ">", operands(args))
}

/// The first item no other item beats under `op` (`min` and `max` keep the first of ties).
fn extreme(name: &str, op: &str, items: Vec<Value>) -> Result<Value, Flow> {
    let mut best: Option<Value> = None;
    for v in items {
        best = Some(match best {
            None => v,
            Some(b) => {
                if compare(op, &v, &b)? {
                    v
                } else {
                    b
                }
            }
        });
    }
    best.map_or_else(|| raise("ValueError", format!("{name}() arg is an empty sequence")), Ok)
}

fn input(host: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    if let Some(prompt) = args.get(0) {
        host.write(StreamKind::Stdout, str_of(&prompt).as_bytes());
    }
    let data = host.read_stdin()?;
    let text = String::from_utf8_lossy(&data);
    match text.lines().next() {
        Some(l) => Ok(Value::Str(l.to_owned())),
        None => raise("EOFError", "EOF when reading a line"),
    }
}

/// `open(path, mode)`: `w` truncates now, `r` checks the file exists now, as Python does;
/// reads and writes go through the file's methods.
fn open(host: &mut dyn Host, args: &Args<'_>) -> Result<Value, Flow> {
    let path = args.text(0);
    let mode =
        args.get(1).or_else(|| args.keywords.get("mode").cloned()).map_or("r".to_owned(), |m| str_of(&m));
    if mode.starts_with('w') {
        host.write_file(&path, b"", false).or_else(|e| io_error(&e, &path))?;
    } else if !mode.starts_with('a') {
        host.read_file(&path).or_else(|e| io_error(&e, &path).map(|()| Vec::new()))?;
    }
    Ok(Value::File(path, mode))
}
