//! Class 1: no value given through the env API reaches a host process's environment or
//! argv; it enters only inside the namespaces.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sandboxio::{Command, NetworkPolicy, Sandbox};

use crate::support::{block_on, eventually, skip};

/// A shared object whose constructor creates a file in `hits` (named by its pid), compiled
/// with the host's `cc`; `None` (after a loud skip) without one.
fn canary_library(test: &str, hits: &Path) -> Option<PathBuf> {
    let source = hits.join("canary.c");
    let library = hits.join("canary.so");
    std::fs::write(
        &source,
        format!(
            "#include <stdio.h>\n#include <unistd.h>\n__attribute__((constructor)) static void hit(void) {{\n  char p[512]; snprintf(p, sizeof p, \"{}/hit-%d\", (int)getpid());\n  FILE *f = fopen(p, \"w\"); if (f) fclose(f);\n}}\n",
            hits.display()
        ),
    )
    .unwrap();
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        skip(test, "no C compiler (cc) to build the LD_PRELOAD payload");
        return None;
    }
    Some(library)
}

fn hits(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map_or(0, |d| d.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("hit-")).count())
}

/// A world-writable scratch directory on the host (the canary must be writable by whatever
/// uid a host process of the sandbox runs as).
fn scratch(name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir().join(format!("sbx-adv-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

#[test]
fn class_01__ld_preload_through_the_env_api_never_runs_on_the_host() {
    let test = "class_01__ld_preload_through_the_env_api_never_runs_on_the_host";
    let dir = scratch("class01");
    let Some(library) = canary_library(test, &dir) else { return };
    let preload = library.to_str().unwrap();
    // Positive control: the payload does run in a host process that has it in its env.
    let ran = std::process::Command::new("/bin/true").env("LD_PRELOAD", preload).status().unwrap();
    assert!(ran.success());
    assert_eq!(hits(&dir), 1, "control: the LD_PRELOAD payload did not run in a plain host process");
    std::fs::remove_file(
        std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with("hit-"))
            .unwrap()
            .path(),
    )
    .unwrap();

    // The attack, through every door of the env API.
    let sbx = block_on(
        Sandbox::builder("local://")
            .unwrap()
            .network(NetworkPolicy::deny_all())
            .env("LD_PRELOAD", preload)
            .secret_env("LD_AUDIT", preload)
            .create(),
    )
    .unwrap();
    for command in [
        Command::new("true").env("LD_PRELOAD", preload),
        Command::new("true").env("LD_LIBRARY_PATH", dir.to_str().unwrap()).env("LD_PRELOAD", "canary.so"),
    ] {
        let _ = block_on(sbx.run(command));
    }
    let mut streamed = sbx.stream(Command::new("true").env("LD_PRELOAD", preload)).unwrap();
    let _ = block_on(streamed.wait());
    block_on(sbx.close()).unwrap();
    assert_eq!(hits(&dir), 0, "a value given through the env API ran code in a host process");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Host processes (in this test's mount namespace, so not sandboxed ones) whose environment
/// holds `needle`.
fn host_environments_holding(needle: &str) -> Vec<u32> {
    let mine = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok().as_ref() != Some(&mine) {
            continue;
        }
        let holds = std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()));
        if holds {
            found.push(pid);
        }
    }
    found
}

#[test]
fn class_01__secrets_are_in_no_host_process_environment_and_no_argv() {
    let secret = format!("sbx-secret-{}-{}", std::process::id(), line!());
    let sandbox_secret = format!("{secret}-sandbox");
    // Positive control: the scan finds a host process holding a value in its environment.
    let mut control =
        std::process::Command::new("sleep").arg("30").env("SBX_CONTROL", &secret).spawn().unwrap();
    let seen =
        eventually(Duration::from_secs(5), || host_environments_holding(&secret).contains(&control.id()));
    let _ = control.kill();
    let _ = control.wait();
    assert!(seen, "control: the scan did not see a host process's environment");

    let sbx = block_on(
        Sandbox::builder("local://")
            .unwrap()
            .network(NetworkPolicy::deny_all())
            .secret_env("SBX_SANDBOX_SECRET", sandbox_secret.as_str())
            .create(),
    )
    .unwrap();
    let mut stream = sbx
        // A command's own variable (local:// declares no command-scoped secrets: its
        // commands are one user) must stay off the host as much as the sandbox's secret.
        .stream(Command::shell("echo started; read x").env("SBX_COMMAND_SECRET", secret.as_str()))
        .unwrap();
    // The command is running (it printed): look while it waits on stdin.
    let first = block_on(futures_lite::StreamExt::next(&mut stream)).unwrap().unwrap();
    assert_eq!(first.data, b"started\n");
    // The command really has its secrets (inside the sandbox).
    let inside = block_on(sbx.run(Command::shell("printf %s \"$SBX_SANDBOX_SECRET\""))).unwrap();
    assert_eq!(inside.stdout, sandbox_secret.as_bytes());
    assert_eq!(
        host_environments_holding(&secret),
        Vec::<u32>::new(),
        "a command secret is in a host process's environment"
    );
    assert_eq!(
        host_environments_holding(&sandbox_secret),
        Vec::<u32>::new(),
        "a sandbox secret is in a host process's environment"
    );
    let in_argv = crate::support::processes_mentioning(&secret)
        .into_iter()
        .filter(|(pid, _)| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|b| b.windows(secret.len()).any(|w| w == secret.as_bytes()))
        })
        .collect::<Vec<_>>();
    assert!(in_argv.is_empty(), "a secret is in some process's argv: {in_argv:?}");
    drop(stream);
    block_on(sbx.close()).unwrap();
}
