//! `docker://`'s default image is a code interpreter: `run_code` in a sandbox that names no
//! image imports the standard library modules agents reach for and numpy, pandas and
//! matplotlib (Agg), and a module the image lacks really fails. Needs an engine and
//! `sandboxio/python:2` (`scripts/build-images python`); without them each test says so and
//! returns, unless `SANDBOXIO_REQUIRE_DOCKER=1` (CI), where that is a failure.
#![cfg(feature = "docker")]
#![allow(non_snake_case, reason = "test names read as contract clauses: `area__requirement`")]

use sandboxio::backends::docker::DEFAULT_IMAGE;
use sandboxio::{CodeResult, NetworkPolicy, Sandbox};

use crate::support;

/// What the image exists for: each must import in a fresh interpreter.
const MODULES: &[&str] = &[
    "json",
    "sqlite3",
    "decimal",
    "statistics",
    "urllib.request",
    "dataclasses",
    "numpy",
    "pandas",
    "matplotlib",
];

/// Whether the engine and the default image are here; prints why not (or panics under CI).
fn default_image_ready(test: &str) -> bool {
    support::docker_image_ready(test, DEFAULT_IMAGE, "python")
}

/// A deny-all sandbox on `docker://` plus `options` (no `image=`: the default image).
async fn default_sandbox(options: &str) -> Sandbox {
    Sandbox::builder(&format!("docker://{options}"))
        .unwrap()
        .network(NetworkPolicy::deny_all())
        .create()
        .await
        .unwrap()
}

/// What a cell said, for assertion messages.
fn said(out: &CodeResult) -> String {
    format!(
        "status {:?}, stdout {:?}, stderr {:?}, error {:?}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        out.error
    )
}

#[tokio::test]
async fn default_image__imports_the_standard_library_numpy_pandas_and_matplotlib() {
    if !default_image_ready("default_image__imports_the_standard_library_numpy_pandas_and_matplotlib") {
        return;
    }
    let sandbox = default_sandbox("").await;
    // The positive control: a module the image lacks fails the same check, so a pass below
    // is the module's presence, not a cell that cannot fail.
    let missing = sandbox.run_code("import sbx_no_such_module").await.unwrap();
    assert!(!missing.status.success(), "a missing module imported: {}", said(&missing));
    let error = missing.error.as_ref().unwrap_or_else(|| panic!("no structured error: {}", said(&missing)));
    assert_eq!(error.name, "ModuleNotFoundError", "{}", said(&missing));
    assert!(error.value.contains("sbx_no_such_module"), "{}", said(&missing));
    for module in MODULES {
        let out = sandbox.run_code(format!("import {module}\nprint({module}.__name__)")).await.unwrap();
        assert!(out.status.success() && out.error.is_none(), "import {module}: {}", said(&out));
        assert_eq!(out.stdout, format!("{module}\n").as_bytes(), "import {module}: {}", said(&out));
        // No warning either (a read-only cache directory or a font cache built per cell
        // would say so here, on every cell).
        assert!(out.stderr.is_empty(), "import {module}: {}", said(&out));
    }
    sandbox.close().await.unwrap();
}

/// The modules work, not only import: one cell uses each the way an analysis would.
#[tokio::test]
async fn default_image__a_cell_uses_sqlite_decimal_pandas_and_draws_a_png() {
    if !default_image_ready("default_image__a_cell_uses_sqlite_decimal_pandas_and_draws_a_png") {
        return;
    }
    let sandbox = default_sandbox("").await;
    let cell = r#"
import io, json, sqlite3, statistics
from decimal import Decimal
import numpy as np, pandas as pd, matplotlib, matplotlib.pyplot as plt
db = sqlite3.connect(":memory:")
db.execute("create table t (x integer)")
db.executemany("insert into t values (?)", [(1,), (2,), (6,)])
xs = [row[0] for row in db.execute("select x from t order by x")]
frame = pd.DataFrame({"x": np.array(xs)})
plt.plot(xs)
png = io.BytesIO()
plt.savefig(png, format="png")
print(json.dumps([statistics.mean(xs), str(Decimal("0.1") + Decimal("0.2")), int(frame.x.sum()),
                  matplotlib.get_backend().lower(), png.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"]))
"#;
    let out = sandbox.run_code(cell).await.unwrap();
    assert!(out.status.success() && out.error.is_none(), "{}", said(&out));
    assert_eq!(out.stdout_lossy(), "[3, \"0.3\", 9, \"agg\", true]\n", "{}", said(&out));
    sandbox.close().await.unwrap();
}

/// `MPLBACKEND=Agg` comes from the image's environment on both exec paths (sandboxd merges
/// the image's environment itself; the engine's exec API applies it).
#[tokio::test]
async fn default_image__matplotlib_is_agg_on_both_exec_paths() {
    if !default_image_ready("default_image__matplotlib_is_agg_on_both_exec_paths") {
        return;
    }
    for path in ["sandboxd", "api"] {
        let sandbox = default_sandbox(&format!("?exec={path}")).await;
        let out = sandbox
            .run_code("import os, matplotlib\nprint(os.environ.get('MPLBACKEND'), matplotlib.get_backend())")
            .await
            .unwrap();
        assert_eq!(out.stdout_lossy(), "Agg agg\n", "exec={path}: {}", said(&out));
        sandbox.close().await.unwrap();
    }
}
