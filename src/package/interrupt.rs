//! Interrupts: Ctrl-C (SIGINT), SIGTERM, SIGHUP and SIGQUIT remove this process's unfinished
//! output before it exits, and staging folders left behind by processes that died are removed by the next run
//! that writes the same output.
//!
//! `mobius run` registers its temporary output files (and the output folder when it creates
//! it) in the same registry, so an interrupted run leaves none of them.
//!
//! Every staging folder this process creates is registered here, under one lock that is also
//! held while a staging folder is created, committed or removed: when a signal arrives, each
//! registered folder is either still staged (and is removed) or already renamed into place.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The staging folders (and `mobius run`'s temporary files) of this process that are not yet
/// committed or removed.
static STAGING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The marker between an output's name and the pid in a staging folder's name:
/// `.<name>.mobius-tmp-<pid>`.
const STAGING_MARKER: &str = ".mobius-tmp-";

/// The marker between an output's name and the pid in the name of a replaced output folder,
/// set aside while its replacement is renamed into place: `.<name>.mobius-old-<pid>`.
const ASIDE_MARKER: &str = ".mobius-old-";

/// The registry of staging folders and temporary files, locked; the interrupt handler waits
/// for this lock, so whatever is done while holding it completes before the process exits.
pub(crate) fn staging() -> MutexGuard<'static, Vec<PathBuf>> {
    STAGING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The staging folder name for output `name` written by process `pid`.
pub(super) fn staging_name(name: &str, pid: u32) -> String {
    format!(".{name}{STAGING_MARKER}{pid}")
}

/// The name under which process `pid` sets the old output folder `name` aside while replacing
/// it.
pub(super) fn aside_name(name: &str, pid: u32) -> String {
    format!(".{name}{ASIDE_MARKER}{pid}")
}

/// Removes a folder, retrying a few times: a file being created in it at the same moment makes
/// one attempt fail with "not empty".
pub(super) fn remove_folder(dir: &Path) {
    for _ in 0..5 {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}

/// Removes a registered entry: a folder with everything in it, or a file. Returns whether
/// there was one to remove.
pub(crate) fn remove_entry(path: &Path) -> bool {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            remove_folder(path);
            true
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
            true
        }
        Err(_) => false,
    }
}

/// Removes the staging folders of output `name` in `parent` whose process no longer exists,
/// and the old output folders such a process set aside once their replacement is in place.
/// A folder whose process is alive (or cannot be checked) is kept; so is an old output whose
/// replacement never arrived (a warning says where it is).
pub(super) fn remove_stale(parent: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some((pid, aside)) = file_name.to_str().and_then(|n| left_by(n, name)) else {
            continue;
        };
        let is_folder = entry.file_type().is_ok_and(|t| t.is_dir());
        if pid == std::process::id() || !is_folder || process_alive(pid) {
            continue;
        }
        let path = entry.path();
        if aside && std::fs::symlink_metadata(parent.join(name)).is_err() {
            tracing::warn!(
                "{} holds the previous {name}, set aside by process {pid} which stopped before                  replacing it; rename it back to keep it",
                path.display()
            );
            continue;
        }
        tracing::info!(
            "removing {}, left by process {pid} which no longer runs",
            path.display()
        );
        remove_folder(&path);
    }
}

/// The pid in `entry`, a staging folder or set-aside old folder of output `name`, and whether
/// it is the latter; `None` for any other name.
fn left_by(entry: &str, name: &str) -> Option<(u32, bool)> {
    let rest = entry.strip_prefix('.')?.strip_prefix(name)?;
    let (pid, aside) = match rest.strip_prefix(STAGING_MARKER) {
        Some(pid) => (pid, false),
        None => (rest.strip_prefix(ASIDE_MARKER)?, true),
    };
    Some((pid.parse().ok()?, aside))
}

/// Whether process `pid` exists; `true` when that cannot be told (no /proc).
fn process_alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    !proc.join("self").exists() || proc.join(pid.to_string()).exists()
}

/// Installs the handler of SIGINT, SIGTERM, SIGHUP and SIGQUIT: it removes the registered
/// entries and exits with 128 + the signal number (130 for SIGINT, 143 for SIGTERM, 129 for
/// SIGHUP, 131 for SIGQUIT). Without it, an interrupted build leaves its staging folder. A
/// signal this process started with ignored (`nohup` ignores SIGHUP) stays ignored. A failure
/// to install is logged, not fatal.
pub fn install() {
    #[cfg(unix)]
    {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
        let wanted: Vec<i32> = [SIGINT, SIGTERM, SIGHUP, SIGQUIT]
            .into_iter()
            .filter(|&s| !ignored_at_start(s))
            .collect();
        let mut signals = match signal_hook::iterator::Signals::new(wanted) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot install the interrupt handler: {e}");
                return;
            }
        };
        std::thread::spawn(move || {
            if let Some(signal) = signals.forever().next() {
                // Held until exit: nothing can be staged or committed after this point.
                let entries = staging();
                let removed = entries.iter().filter(|p| remove_entry(p)).count();
                // Not `eprintln!`: it panics when stderr is a closed pipe, and the process
                // must exit whatever happens to the message.
                let message = format!("{}\n", interrupted_message(signal, removed));
                let _ = std::io::Write::write_all(&mut std::io::stderr(), message.as_bytes());
                std::process::exit(128 + signal);
            }
        });
    }
}

/// The line printed when `signal` ends the process after `removed` unfinished outputs were
/// removed.
#[cfg(unix)]
fn interrupted_message(signal: i32, removed: usize) -> String {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    let name = match signal {
        SIGINT => "SIGINT".to_string(),
        SIGTERM => "SIGTERM".to_string(),
        SIGHUP => "SIGHUP".to_string(),
        SIGQUIT => "SIGQUIT".to_string(),
        other => format!("signal {other}"),
    };
    if removed == 0 {
        format!("error: interrupted by {name}")
    } else {
        format!("error: interrupted by {name}; unfinished output removed")
    }
}

/// Whether `signal` was ignored when this process started (Linux: the `SigIgn` mask of
/// /proc/self/status); `false` when that cannot be told.
#[cfg(unix)]
fn ignored_at_start(signal: i32) -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| (1..=64).contains(&signal) && mask & (1 << (signal - 1)) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_folders_of_dead_processes_go_live_ones_stay() {
        let t = tempfile::tempdir().unwrap();
        let live = t.path().join(staging_name("out", std::process::id()));
        // Above the largest pid Linux hands out (4194304), so no such process.
        let dead = t.path().join(staging_name("out", 4_194_305));
        let other_output = t.path().join(staging_name("other", 4_194_305));
        let not_a_pid = t.path().join(".out.mobius-tmp-abc");
        for dir in [&live, &dead, &other_output, &not_a_pid] {
            std::fs::create_dir(dir).unwrap();
        }
        remove_stale(t.path(), "out");
        assert!(live.exists());
        // Without /proc no process can be told dead, so every folder stays.
        assert_eq!(dead.exists(), !Path::new("/proc/self").exists());
        assert!(other_output.exists());
        assert!(not_a_pid.exists());
    }

    #[test]
    fn an_old_output_set_aside_goes_only_once_replaced() {
        let t = tempfile::tempdir().unwrap();
        let aside = t.path().join(aside_name("out", 4_194_305));
        std::fs::create_dir(&aside).unwrap();
        // The replacement never arrived: the old output is all there is, so it stays.
        remove_stale(t.path(), "out");
        assert!(aside.exists());
        std::fs::create_dir(t.path().join("out")).unwrap();
        remove_stale(t.path(), "out");
        assert_eq!(aside.exists(), !Path::new("/proc/self").exists());
    }

    #[test]
    fn registered_files_and_folders_are_removed() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join(".y.npy.partial-1");
        let folder = t.path().join("created");
        std::fs::write(&file, b"x").unwrap();
        std::fs::create_dir_all(folder.join("inner")).unwrap();
        assert!(remove_entry(&file));
        assert!(remove_entry(&folder));
        assert!(!remove_entry(&t.path().join("missing")));
        assert!(!file.exists() && !folder.exists());
    }

    #[cfg(unix)]
    #[test]
    fn the_message_says_output_was_removed_only_when_it_was() {
        use signal_hook::consts::{SIGHUP, SIGQUIT, SIGTERM};
        assert_eq!(
            interrupted_message(SIGTERM, 0),
            "error: interrupted by SIGTERM"
        );
        assert_eq!(
            interrupted_message(SIGHUP, 1),
            "error: interrupted by SIGHUP; unfinished output removed"
        );
        assert_eq!(
            interrupted_message(SIGQUIT, 0),
            "error: interrupted by SIGQUIT"
        );
    }
}
