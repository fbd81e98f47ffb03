//! Class 11: a result comes only from a channel the code cannot forge for another command
//! or another cell.

use sandboxio::{Command, NetworkPolicy};

use crate::support::{block_on, local};

/// Plants error records everywhere a cell's record could be: every directory the previous
/// design used (`/run/sandboxio/cell-<n>.error`) and the one a cell gets now.
const PLANT: &str = r#"
import os
planted = 0
for d in ["/run/sandboxio", "/run/sandboxio-cell", "/workspace"]:
    try:
        os.makedirs(d, exist_ok=True)
        for n in range(64):
            with open(f"{d}/cell-{n}.error", "wb") as f:
                f.write(b"ForgedError\0forged by another cell\0Traceback\n")
        with open(f"{d}/error", "wb") as f:
            f.write(b"ForgedError\0forged by another cell\0Traceback\n")
        planted += 1
    except OSError:
        pass
print(planted)
"#;

#[test]
fn class_11__no_cell_or_command_can_forge_another_cells_error() {
    let sbx = local(NetworkPolicy::deny_all());
    // Positive control: the planting cell really writes its records (at least in the
    // workspace and in its own view of /run). What it reports for itself is its own
    // business: a cell owns its interpreter.
    let planted = block_on(sbx.run_code(PLANT)).unwrap();
    let count: u32 = String::from_utf8_lossy(&planted.stdout).trim().parse().unwrap();
    assert!(count >= 2, "control: the cell planted its records in only {count} places");
    let planted = block_on(sbx.run(Command::new("/usr/bin/python3").arg("-c").arg(PLANT))).unwrap();
    assert!(planted.success(), "{}", planted.stderr_lossy());
    // Later cells report their own outcome only.
    for _ in 0..4 {
        let clean = block_on(sbx.run_code("print(6 * 7)")).unwrap();
        assert!(clean.error.is_none(), "a clean cell reported a forged error: {:?}", clean.error);
        assert_eq!(clean.stdout, b"42\n");
    }
    let raised = block_on(sbx.run_code("raise KeyError('mine')")).unwrap();
    assert_eq!(raised.error.as_ref().map(|e| e.name.as_str()), Some("KeyError"));
    block_on(sbx.close()).unwrap();
}

/// A module an earlier cell plants in the working directory, where the runner's own imports
/// used to find it first: it rewrites every later cell's outcome.
const SHADOW: &str = r#"
with open("traceback.py", "w") as f:
    f.write("import sys\nsys.stdout.write('FORGED OUTPUT\\n')\ndef format_exception(*a, **k):\n    return ['forged']\n")
print("planted")
"#;

#[test]
fn class_11__a_module_planted_by_an_earlier_cell_cannot_take_over_the_runner() {
    let sbx = local(NetworkPolicy::deny_all());
    let planted = block_on(sbx.run_code(SHADOW)).unwrap();
    assert_eq!(planted.stdout, b"planted\n");
    // Positive control: the planted module is what a plain `python3 -c 'import traceback'`
    // in the working directory gets.
    let control =
        block_on(sbx.run(Command::new("/usr/bin/python3").arg("-c").arg("import traceback"))).unwrap();
    assert_eq!(
        control.stdout, b"FORGED OUTPUT\n",
        "control: the planted module does not shadow the standard one"
    );
    let clean = block_on(sbx.run_code("print(6 * 7)")).unwrap();
    assert_eq!(clean.stdout, b"42\n", "a planted module rewrote a later cell's output");
    let raised = block_on(sbx.run_code("raise KeyError('mine')")).unwrap();
    assert_eq!(raised.error.as_ref().map(|e| e.name.as_str()), Some("KeyError"));
    assert!(
        raised.error.as_ref().is_some_and(|e| e.traceback.iter().any(|l| l.contains("KeyError"))),
        "{:?}",
        raised.error
    );
    block_on(sbx.close()).unwrap();
}
