//! Interrupts: Ctrl-C (SIGINT) and SIGTERM remove this process's unfinished output before it
//! exits, and staging folders left behind by processes that died are removed by the next run
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

/// The registry of staging folders and temporary files, locked; the interrupt handler waits
/// for this lock, so whatever is done while holding it completes before the process exits.
pub(crate) fn staging() -> MutexGuard<'static, Vec<PathBuf>> {
    STAGING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The staging folder name for output `name` written by process `pid`.
pub(super) fn staging_name(name: &str, pid: u32) -> String {
    format!(".{name}{STAGING_MARKER}{pid}")
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

/// Removes a registered entry: a folder with everything in it, or a file.
pub(crate) fn remove_entry(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => remove_folder(path),
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}

/// Removes the staging folders of output `name` in `parent` whose process no longer exists.
/// A folder whose process is alive (or cannot be checked) is kept.
pub(super) fn remove_stale(parent: &Path, name: &str) {
    let prefix = format!(".{name}{STAGING_MARKER}");
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let is_folder = entry.file_type().is_ok_and(|t| t.is_dir());
        if pid == std::process::id() || !is_folder || process_alive(pid) {
            continue;
        }
        let path = entry.path();
        tracing::info!(
            "removing {}, left by process {pid} which no longer runs",
            path.display()
        );
        remove_folder(&path);
    }
}

/// Whether process `pid` exists; `true` when that cannot be told (no /proc).
fn process_alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    !proc.join("self").exists() || proc.join(pid.to_string()).exists()
}

/// Installs the SIGINT/SIGTERM handler: it removes the registered entries and exits
/// with 128 + the signal number (130 for SIGINT, 143 for SIGTERM). Without it, an interrupted
/// build leaves its staging folder. A failure to install is logged, not fatal.
pub fn install() {
    #[cfg(unix)]
    {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) {
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
                for path in entries.iter() {
                    remove_entry(path);
                }
                let name = if signal == SIGINT {
                    "SIGINT"
                } else {
                    "SIGTERM"
                };
                eprintln!("error: interrupted by {name}; unfinished output removed");
                std::process::exit(128 + signal);
            }
        });
    }
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
    fn registered_files_and_folders_are_removed() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join(".y.npy.partial-1");
        let folder = t.path().join("created");
        std::fs::write(&file, b"x").unwrap();
        std::fs::create_dir_all(folder.join("inner")).unwrap();
        remove_entry(&file);
        remove_entry(&folder);
        remove_entry(&t.path().join("missing"));
        assert!(!file.exists() && !folder.exists());
    }
}
