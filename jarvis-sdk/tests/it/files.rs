//! Files several writers share: `update_file_locked` keeps every update
//! when processes (not only threads) update one file at once, and the user
//! model and the housing files keep every one of several updates made at
//! once by separate handles.

use std::path::Path;
use std::process::{Command, Stdio};

use jarvis_pack_housing::{FileProfileStore, FileWatchStore, HousingProfile, ProfileStore, WatchStore};
use jarvis_sdk::common::{Timestamp, update_file_locked};
use jarvis_sdk::memory::UserModelFile;

const COUNTER_ENV: &str = "JARVIS_LOCKED_COUNTER";
const PER_WRITER: u64 = 150;

/// Adds one to the number in `path`, under the file's lock.
fn increment(path: &Path) {
    update_file_locked(path, |old| {
        let n: u64 = match old {
            None => 0,
            Some(bytes) => String::from_utf8(bytes).unwrap().trim().parse().unwrap(),
        };
        Ok::<_, ()>((Some(format!("{}\n", n + 1).into_bytes()), ()))
    })
    .unwrap()
    .unwrap();
}

/// The child: increments the counter, then exits.
#[test]
fn locked_counter_child() {
    let Ok(path) = std::env::var(COUNTER_ENV) else {
        return; // an ordinary test run: nothing to do
    };
    for _ in 0..PER_WRITER {
        increment(Path::new(&path));
    }
}

#[test]
fn processes_updating_one_file_at_once_lose_no_update() {
    if std::env::var(COUNTER_ENV).is_ok() {
        return; // inside a child
    }
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(&exe)
                .args(["files::locked_counter_child", "--exact", "--test-threads=1"])
                .env(COUNTER_ENV, &counter)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // This process writes too, from two threads.
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..PER_WRITER {
                    increment(&counter);
                }
            });
        }
    });
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let total: u64 = std::fs::read_to_string(&counter).unwrap().trim().parse().unwrap();
    assert_eq!(total, 5 * PER_WRITER);
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["counter", "counter.lock"],
        "no temporary file left behind"
    );
}

#[test]
fn two_user_model_files_updating_at_once_keep_both_updates() {
    let dir = tempfile::tempdir().unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let home = dir.path();
            s.spawn(move || {
                // Each thread has its own handle, as two processes would.
                let file = UserModelFile::new(home);
                for i in 0..40 {
                    file.update(Timestamp::from_millis(i), |m| {
                        m.entries.insert(format!("k{t}-{i}"), "v".into());
                    })
                    .unwrap();
                }
            });
        }
    });
    let model = UserModelFile::new(dir.path()).read().unwrap().unwrap();
    assert_eq!(model.entries.len(), 160);
}

#[test]
fn two_housing_stores_on_one_home_keep_every_update() {
    let home = tempfile::tempdir().unwrap();
    // Two stores on the same files behave as two processes would: each has
    // its own in-process lock, so only the file's lock orders them.
    std::thread::scope(|s| {
        for t in 0..2u32 {
            let home = home.path();
            s.spawn(move || {
                let watches = FileWatchStore::in_home(home);
                let profile = FileProfileStore::in_home(home);
                for i in 0..25u32 {
                    futures::executor::block_on(watches.add(Some(format!("지역{t}-{i}")), None)).unwrap();
                    let patch = if t == 0 {
                        HousingProfile {
                            household_size: Some(1 + i % 5),
                            ..HousingProfile::default()
                        }
                    } else {
                        HousingProfile {
                            savings: Some(1_000_000 * u64::from(i + 1)),
                            ..HousingProfile::default()
                        }
                    };
                    futures::executor::block_on(profile.merge(patch)).unwrap();
                }
            });
        }
    });
    let watches = futures::executor::block_on(FileWatchStore::in_home(home.path()).list()).unwrap();
    assert_eq!(watches.len(), 50, "every watch added at once is kept");
    let profile = futures::executor::block_on(FileProfileStore::in_home(home.path()).load())
        .unwrap()
        .unwrap();
    assert_eq!(profile.household_size, Some(5), "{profile:?}");
    assert_eq!(profile.savings, Some(25_000_000), "{profile:?}");
}
