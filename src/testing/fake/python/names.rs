//! Name resolution: what a bare name, a module or an attribute stands for.

use super::VERSION;
use super::builtins;
use super::flow::{Flow, raise};
use super::value::{Value, type_name};

/// The modules `import` accepts; those without functions in the builtins table fail on
/// use with `NotImplementedError`.
const KNOWN_MODULES: &[&str] = &[
    "sys",
    "os",
    "os.path",
    "time",
    "math",
    "json",
    "socket",
    "urllib",
    "urllib.request",
    "random",
    "io",
    "base64",
    "collections",
    "itertools",
    "functools",
    "re",
    "string",
    "datetime",
    "pathlib",
    "subprocess",
    "typing",
];

fn is_exception_name(n: &str) -> bool {
    n.ends_with("Error")
        || n.ends_with("Exception")
        || matches!(n, "KeyboardInterrupt" | "SystemExit" | "StopIteration")
}

/// Fails with `ModuleNotFoundError` for a module the fake does not know.
pub(super) fn check_module(module: &str) -> Result<(), Flow> {
    if KNOWN_MODULES.contains(&module) {
        Ok(())
    } else {
        let top = module.split('.').next().unwrap_or(module);
        raise("ModuleNotFoundError", format!("No module named '{top}'"))
    }
}

/// A bare name that is not a variable: a builtin function or an exception class.
pub(super) fn builtin_name(n: &str) -> Result<Value, Flow> {
    match n {
        n if !n.contains('.') && builtins::lookup(n).is_some() => Ok(Value::Func(n.to_owned())),
        "exit" | "quit" => Ok(Value::Func("sys.exit".into())),
        n if is_exception_name(n) => Ok(Value::ExcType(n.to_owned())),
        _ => raise("NameError", format!("name '{n}' is not defined")),
    }
}

/// `obj.name`. Methods resolve to a bound [`Value::Method`] whose call decides whether the
/// method exists.
pub(super) fn attribute(obj: &Value, name: &str) -> Result<Value, Flow> {
    if let Value::Module(m) = obj {
        return module_attribute(obj, m, name);
    }
    match (obj, name) {
        (Value::Exc(_, m), "args") => Ok(Value::Tuple(vec![Value::Str(m.clone())])),
        (Value::Instance(class), _) if class.methods.iter().any(|(m, _)| m == name) => {
            Ok(Value::Method(Box::new(obj.clone()), name.to_owned()))
        }
        (
            Value::Str(_)
            | Value::Bytes(_)
            | Value::Dict(_)
            | Value::Environ
            | Value::File(..)
            | Value::List(_),
            _,
        ) => Ok(Value::Method(Box::new(obj.clone()), name.to_owned())),
        _ => raise("AttributeError", format!("'{}' object has no attribute '{name}'", type_name(obj))),
    }
}

/// `m.name` for the module `m` (`module` is the same value).
fn module_attribute(module: &Value, m: &str, name: &str) -> Result<Value, Flow> {
    let full = format!("{m}.{name}");
    let is_stdio =
        matches!(m, "sys.stdout" | "sys.stderr" | "sys.stdin" | "sys.stdout.buffer" | "sys.stderr.buffer");
    if is_stdio && matches!(name, "write" | "flush" | "read") {
        return Ok(Value::Method(Box::new(module.clone()), name.to_owned()));
    }
    match full.as_str() {
        "sys.stdout" | "sys.stderr" | "sys.stdin" | "sys.stdout.buffer" | "sys.stderr.buffer" | "os.path"
        | "urllib.request" => Ok(Value::Module(full)),
        "sys.version" => Ok(Value::Str(format!("{VERSION} (fake)"))),
        "sys.argv" => Ok(Value::List(vec![Value::Str("-c".into())])),
        "sys.platform" => Ok(Value::Str("linux".into())),
        "os.environ" => Ok(Value::Environ),
        "os.sep" => Ok(Value::Str("/".into())),
        "math.pi" => Ok(Value::Float(std::f64::consts::PI)),
        "math.e" => Ok(Value::Float(std::f64::consts::E)),
        _ if builtins::lookup(&full).is_some() => Ok(Value::Func(full)),
        _ if KNOWN_MODULES.contains(&m) || m.starts_with("sys.") => {
            raise("NotImplementedError", format!("the fake Python does not model {full}"))
        }
        _ => raise("AttributeError", format!("module '{m}' has no attribute '{name}'")),
    }
}
