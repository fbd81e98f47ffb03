//! Walks the syntax tree: statements change the module's globals, expressions produce
//! values, calls go to the builtins table, the builtin types' methods, or the cell's classes.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::super::machine::Stop;
use super::ast::{Expr, FPart, Stmt};
use super::builtins::{self, Args};
use super::flow::{Flow, overflow, raise};
use super::methods;
use super::names::{attribute, builtin_name, check_module};
use super::ops::{binary, compare};
use super::value::{Value, index_of, repr, str_of, truthy, type_name};
use super::{Globals, Host};

/// The interpreter of one cell: the module's variables and the process it runs in.
pub(super) struct Interp<'h> {
    pub(super) globals: &'h mut Globals,
    pub(super) host: &'h mut dyn Host,
}

/// `IPython`'s display hooks and the MIME type each produces.
const DISPLAY_HOOKS: &[(&str, &str)] = &[
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_json_", "application/json"),
];

impl Interp<'_> {
    /// The MIME bundle of a displayed value. A hook that raises is left out, as `IPython`
    /// leaves out a failing formatter.
    pub(super) fn display(&mut self, v: &Value) -> Result<crate::exec::MimeBundle, Stop> {
        let mut bundle = crate::exec::MimeBundle::new();
        bundle.insert("text/plain".to_owned(), repr(v).into_bytes());
        if let Value::Instance(class) = v {
            for (hook, mime) in DISPLAY_HOOKS {
                if !class.methods.iter().any(|(m, _)| m == hook) {
                    continue;
                }
                match self.call_method(v, hook, &Args { positional: &[], keywords: &BTreeMap::new() }) {
                    Ok(Value::Str(s)) => {
                        bundle.insert((*mime).to_owned(), s.into_bytes());
                    }
                    Ok(Value::Bytes(b)) => {
                        bundle.insert((*mime).to_owned(), b);
                    }
                    Ok(_) | Err(Flow::Raise(..) | Flow::Exit(_)) => {}
                    Err(Flow::Stop(stop)) => return Err(stop),
                }
            }
        }
        Ok(bundle)
    }

    pub(super) fn exec(&mut self, stmt: &Stmt) -> Result<Option<Value>, Flow> {
        match stmt {
            Stmt::Pass => {}
            Stmt::ClassDef(class) => {
                self.globals.vars.insert(class.name.clone(), Value::Class(Arc::clone(class)));
            }
            Stmt::Expr(e) => return self.eval(e).map(Some),
            Stmt::Assign(target, value) => {
                let v = self.eval(value)?;
                self.assign(target, v)?;
            }
            Stmt::AugAssign(target, op, value) => {
                let current = self.eval(target)?;
                let rhs = self.eval(value)?;
                let v = binary(op, &current, &rhs)?;
                self.assign(target, v)?;
            }
            Stmt::Import(names) => {
                for (module, alias) in names {
                    check_module(module)?;
                    let top = module.split('.').next().unwrap_or(module).to_owned();
                    match alias {
                        Some(a) => self.globals.vars.insert(a.clone(), Value::Module(module.clone())),
                        None => self.globals.vars.insert(top.clone(), Value::Module(top)),
                    };
                }
            }
            Stmt::FromImport(module, names) => {
                check_module(module)?;
                for (name, alias) in names {
                    if name == "*" {
                        continue;
                    }
                    let v = attribute(&Value::Module(module.clone()), name)?;
                    self.globals.vars.insert(alias.clone().unwrap_or_else(|| name.clone()), v);
                }
            }
            Stmt::Raise(None) => return raise("RuntimeError", "No active exception to reraise"),
            Stmt::Raise(Some(e)) => {
                return match self.eval(e)? {
                    Value::Exc(n, m) => Err(Flow::Raise(n, m)),
                    Value::ExcType(n) => Err(Flow::Raise(n, String::new())),
                    _ => raise("TypeError", "exceptions must derive from BaseException"),
                };
            }
            Stmt::Assert(cond, msg) => {
                if !truthy(&self.eval(cond)?) {
                    let m = match msg {
                        Some(m) => str_of(&self.eval(m)?),
                        None => String::new(),
                    };
                    return raise("AssertionError", m);
                }
            }
        }
        Ok(None)
    }

    fn assign(&mut self, target: &Expr, v: Value) -> Result<(), Flow> {
        match target {
            Expr::Name(n) => {
                self.globals.vars.insert(n.clone(), v);
                Ok(())
            }
            Expr::Index(obj, key) => {
                let key = self.eval(key)?;
                let Expr::Name(name) = &**obj else {
                    return raise("NotImplementedError", "the fake Python assigns subscripts of names only");
                };
                let Some(container) = self.globals.vars.get_mut(name) else {
                    return raise("NameError", format!("name '{name}' is not defined"));
                };
                match container {
                    Value::Dict(items) => {
                        match items.iter_mut().find(|(k, _)| *k == key) {
                            Some(slot) => slot.1 = v,
                            None => items.push((key, v)),
                        }
                        Ok(())
                    }
                    Value::List(items) => {
                        let len = items.len();
                        let i = index_of(&key, len)?;
                        items[i] = v;
                        Ok(())
                    }
                    other => raise(
                        "TypeError",
                        format!("'{}' object does not support item assignment", type_name(other)),
                    ),
                }
            }
            _ => raise("NotImplementedError", "the fake Python does not model this assignment target"),
        }
    }

    fn eval(&mut self, e: &Expr) -> Result<Value, Flow> {
        Ok(match e {
            Expr::Const(v) => v.clone(),
            Expr::FStr(parts) => {
                let mut s = String::new();
                for p in parts {
                    match p {
                        FPart::Lit(l) => s.push_str(l),
                        FPart::Expr(e, as_repr) => {
                            let v = self.eval(e)?;
                            s.push_str(&if *as_repr { repr(&v) } else { str_of(&v) });
                        }
                    }
                }
                Value::Str(s)
            }
            Expr::Name(n) => match self.globals.vars.get(n) {
                Some(v) => v.clone(),
                None => builtin_name(n)?,
            },
            Expr::List(items) => Value::List(items.iter().map(|i| self.eval(i)).collect::<Result<_, _>>()?),
            Expr::Tuple(items) => Value::Tuple(items.iter().map(|i| self.eval(i)).collect::<Result<_, _>>()?),
            Expr::Dict(items) => {
                let mut out: Vec<(Value, Value)> = Vec::new();
                for (k, v) in items {
                    let (k, v) = (self.eval(k)?, self.eval(v)?);
                    match out.iter_mut().find(|(ek, _)| *ek == k) {
                        Some(slot) => slot.1 = v,
                        None => out.push((k, v)),
                    }
                }
                Value::Dict(out)
            }
            Expr::Attr(obj, name) => {
                let obj = self.eval(obj)?;
                attribute(&obj, name)?
            }
            Expr::Index(obj, key) => {
                let obj = self.eval(obj)?;
                let key = self.eval(key)?;
                self.index(&obj, &key)?
            }
            Expr::Call(f, args, kwargs) => {
                let f = self.eval(f)?;
                let args = args.iter().map(|a| self.eval(a)).collect::<Result<Vec<_>, _>>()?;
                let mut kw = BTreeMap::new();
                for (k, v) in kwargs {
                    kw.insert(k.clone(), self.eval(v)?);
                }
                self.call(&f, &args, &kw)?
            }
            Expr::Unary(op, operand) => {
                let v = self.eval(operand)?;
                unary(op, &v)?
            }
            Expr::Binary(op, l, r) => {
                let (l, r) = (self.eval(l)?, self.eval(r)?);
                binary(op, &l, &r)?
            }
            Expr::Compare(first, rest) => {
                let mut left = self.eval(first)?;
                for (op, right) in rest {
                    let right = self.eval(right)?;
                    if !compare(op, &left, &right)? {
                        return Ok(Value::Bool(false));
                    }
                    left = right;
                }
                Value::Bool(true)
            }
            Expr::BoolOp(is_and, l, r) => {
                let l = self.eval(l)?;
                if truthy(&l) == *is_and { self.eval(r)? } else { l }
            }
            Expr::IfElse(cond, a, b) => {
                if truthy(&self.eval(cond)?) {
                    self.eval(a)?
                } else {
                    self.eval(b)?
                }
            }
        })
    }

    fn index(&mut self, obj: &Value, key: &Value) -> Result<Value, Flow> {
        match obj {
            Value::List(items) | Value::Tuple(items) => Ok(items[index_of(key, items.len())?].clone()),
            Value::Str(s) => {
                let chars: Vec<char> = s.chars().collect();
                Ok(Value::Str(chars[index_of(key, chars.len())?].to_string()))
            }
            Value::Bytes(b) => Ok(Value::Int(i64::from(b[index_of(key, b.len())?]))),
            Value::Dict(items) => match items.iter().find(|(k, _)| k == key) {
                Some((_, v)) => Ok(v.clone()),
                None => raise("KeyError", repr(key)),
            },
            Value::Environ => {
                let name = str_of(key);
                match self.host.env().get(&name) {
                    Some(v) => Ok(Value::Str(v.clone())),
                    None => raise("KeyError", repr(key)),
                }
            }
            other => raise("TypeError", format!("'{}' object is not subscriptable", type_name(other))),
        }
    }

    fn call(&mut self, f: &Value, args: &[Value], kw: &BTreeMap<String, Value>) -> Result<Value, Flow> {
        let args = Args { positional: args, keywords: kw };
        match f {
            Value::ExcType(name) => Ok(Value::Exc(name.clone(), args.text(0))),
            Value::Class(class) => Ok(Value::Instance(Arc::clone(class))),
            Value::Method(recv, method) => self.call_method(recv, method, &args),
            Value::Func(name) => match builtins::lookup(name) {
                Some(builtin) => builtin(self.host, &args),
                None => raise("NotImplementedError", format!("the fake Python does not model {name}()")),
            },
            other => raise("TypeError", format!("'{}' object is not callable", type_name(other))),
        }
    }

    /// A method of a cell's class evaluates its one `return` expression with `self` bound
    /// (and restores whatever `self` was before); other methods are the builtin types'.
    fn call_method(&mut self, recv: &Value, method: &str, args: &Args<'_>) -> Result<Value, Flow> {
        let Value::Instance(class) = recv else {
            return methods::call(self.host, recv, method, args);
        };
        let Some((_, body)) = class.methods.iter().find(|(name, _)| name == method) else {
            return raise("AttributeError", format!("'{}' object has no attribute '{method}'", class.name));
        };
        let saved = self.globals.vars.insert("self".to_owned(), recv.clone());
        let result = self.eval(body);
        match saved {
            Some(v) => self.globals.vars.insert("self".to_owned(), v),
            None => self.globals.vars.remove("self"),
        };
        result
    }
}

/// `op v` for `not`, `-`, `+` and `~`.
fn unary(op: &str, v: &Value) -> Result<Value, Flow> {
    Ok(match (op, v) {
        ("not", v) => Value::Bool(!truthy(v)),
        ("-", Value::Int(n)) => Value::Int(n.checked_neg().ok_or_else(overflow)?),
        ("-", Value::Float(f)) => Value::Float(-f),
        ("+", Value::Int(_) | Value::Float(_)) => v.clone(),
        ("~", Value::Int(n)) => Value::Int(!n),
        _ => return raise("TypeError", format!("bad operand type for unary {op}: '{}'", type_name(v))),
    })
}
