//! `e2b://`: sandboxes as E2B micro-VMs. Feature `e2b`.
//!
//! This module holds the adapter's layers, each with its own tests: the DSN and
//! environment ([`config`]), the HTTPS client and retry rule (`http`), the control plane
//! (`client`), envd's Connect transport (`envelope`, `process`, `envd`), the code
//! interpreter's stream (`code`, `interpreter`) and the error mapping (`errors`). Each
//! protocol module names the file of E2B's public specification it follows.
//!
//! # DSN
//!
//! `e2b://[?domain=<domain>&template=<template>]`: the control plane at
//! `https://api.<domain>` (default [`config::DEFAULT_DOMAIN`], or the environment variable
//! `E2B_DOMAIN`), new sandboxes from `template` (default [`config::DEFAULT_TEMPLATE`], the
//! code interpreter). The API key comes from `E2B_API_KEY` only (a DSN never holds a
//! secret); building a backend without it works, and the first call that needs it fails
//! with [`Error::Auth`](crate::Error::Auth) naming the variable.
//!
//! Every connection is HTTPS (rustls, HTTP/1.1); there is no plaintext mode.

pub mod config;

mod client;
mod code;
mod envd;
mod envelope;
mod errors;
mod http;
mod interpreter;
mod process;
mod wire;

/// The DSN scheme.
const SCHEME: &str = "e2b";

/// The runtime every E2B request runs on (reqwest needs tokio; callers may not have it).
static PORTAL: crate::backends::portal::Portal = crate::backends::portal::Portal::new(SCHEME, "sandboxio-e2b");
