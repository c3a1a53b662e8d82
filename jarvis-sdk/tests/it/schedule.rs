//! The scheduler on a test clock: job files, slots and their agents, the
//! run ledger across restarts and crashes, the catch-up rule, broken and
//! edited files, `/schedule` jobs, and `housing_watch` on the scheduler.
//! Every test moves a `ManualClock` and calls `tick()`; nothing sleeps.

use async_trait::async_trait;
use jarvis_pack_housing::{
    EXTERNAL_SEEN_FILE, FileWatchStore, FixtureNoticeSource, HOUSING_WATCH_JOB, NoticeSource, WatchJob,
    WatchStore,
};
use jarvis_sdk::common::{ManualClock, Timestamp, UtcOffset};
use jarvis_sdk::initiative::{
    CatchUp, CronExpr, Job, JobOutput, JobRunner, JobSpec, OutboxItem, ProactiveSink, RunOutcome, RunState,
    SCHEDULE_RUNS_FILE, ScheduleError, Scheduler, SchedulerConfig, StandardCommands, Trigger, parse_when,
};
use jarvis_sdk::turn::{CommandContext, SlashCommands};
use proptest::prelude::*;
use serde_json::Value;
use std::collections::HashSet;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

use crate::capture::capture;
use crate::housing::{NEW_NOTICE_TITLE, with_a_new_notice};

// ---------------------------------------------------------------- helpers

/// A time in Seoul: `kst("2026-11-30T08:00")`.
fn kst(local: &str) -> Timestamp {
    Timestamp::parse_rfc3339(&format!("{local}:00+09:00")).unwrap()
}

fn clock_at(local: &str) -> Arc<ManualClock> {
    Arc::new(ManualClock::new(kst(local).to_system_time()))
}

/// Moves `clock` forward to `local` (Seoul time).
fn set(clock: &ManualClock, local: &str) {
    use jarvis_sdk::common::Clock;
    let now = Timestamp::from(clock.now());
    let target = kst(local);
    assert!(target >= now, "the clock only moves forward");
    clock.advance(Duration::from_millis(
        (target.as_millis() - now.as_millis()) as u64,
    ));
}

fn write_job(home: &Path, name: &str, text: &str) {
    let dir = home.join("schedules");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), text).unwrap();
}

fn ledger(home: &Path) -> Vec<Value> {
    std::fs::read_to_string(home.join(SCHEDULE_RUNS_FILE))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn states_of(home: &Path, job: &str) -> Vec<(String, String)> {
    ledger(home)
        .into_iter()
        .filter(|r| r["job"] == job)
        .map(|r| {
            (
                r["slot"].as_str().unwrap().to_owned(),
                r["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Records every run: job id, agent, prompt, slot. Fails the jobs named in
/// `fail`.
#[derive(Debug, Default)]
struct Recorder {
    runs: Mutex<Vec<(String, String, String, Timestamp)>>,
    fail: Mutex<HashSet<String>>,
    ran: Notify,
}

impl Recorder {
    fn runs(&self) -> Vec<(String, String, Timestamp)> {
        self.runs
            .lock()
            .unwrap()
            .iter()
            .map(|(id, agent, _, slot)| (id.clone(), agent.clone(), *slot))
            .collect()
    }

    fn prompts(&self) -> Vec<String> {
        self.runs.lock().unwrap().iter().map(|r| r.2.clone()).collect()
    }

    fn take(&self) -> Vec<(String, String, Timestamp)> {
        let runs = self.runs();
        self.runs.lock().unwrap().clear();
        runs
    }

    /// [`Recorder::take`], sorted (runs of one tick go concurrently).
    fn take_sorted(&self) -> Vec<(String, String, Timestamp)> {
        let mut runs = self.take();
        runs.sort();
        runs
    }
}

#[async_trait]
impl JobRunner for Recorder {
    async fn run(&self, job: &Job, slot: Timestamp) -> Result<JobOutput, String> {
        self.runs
            .lock()
            .unwrap()
            .push((job.id.clone(), job.agent.clone(), job.prompt.clone(), slot));
        self.ran.notify_one();
        if self.fail.lock().unwrap().contains(&job.id) {
            return Err(format!("{} broke", job.id));
        }
        Ok(JobOutput {
            session_id: Some(format!("sched-{}", job.id)),
            text: format!("ran {}", job.prompt),
        })
    }
}

/// A temporary `$JARVIS_HOME` with a clock in Seoul and a recording runner.
struct Home {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    runner: Arc<Recorder>,
}

impl Home {
    /// A home holding the job files `jobs` (name, text), the clock at `local`.
    fn new(local: &str, jobs: &[(&str, &str)]) -> Self {
        let home = Self {
            dir: tempfile::tempdir().unwrap(),
            clock: clock_at(local),
            runner: Arc::new(Recorder::default()),
        };
        for (name, text) in jobs {
            home.write(name, text);
        }
        home
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes (or replaces) a job file.
    fn write(&self, name: &str, text: &str) {
        write_job(self.path(), name, text);
    }

    /// Moves the clock forward to `local`.
    fn set(&self, local: &str) {
        set(&self.clock, local);
    }

    /// A scheduler over the home, as a newly started process would make.
    fn scheduler(&self) -> Scheduler {
        scheduler(self.path(), &self.clock, self.runner.clone())
    }
}

/// A scheduler over `home` on `clock` with the default settings, as a newly
/// started process would make.
fn scheduler(home: &Path, clock: &Arc<ManualClock>, runner: Arc<dyn JobRunner>) -> Scheduler {
    Scheduler::new(home, clock.clone(), runner, SchedulerConfig::default()).unwrap()
}

fn run(id: &str, agent: &str, local_slot: &str) -> (String, String, Timestamp) {
    (id.to_owned(), agent.to_owned(), kst(local_slot))
}

// ------------------------------------------------------------ firing on time

#[tokio::test]
async fn cron_and_interval_jobs_fire_on_their_slots_as_their_agent() {
    // Monday 30 November 2026, 08:00 in Seoul.
    let h = Home::new(
        "2026-11-30T08:00",
        &[
            (
                "weekly-housing.yaml",
                "agent: karen\nprompt: 이번 주 청약 공고 정리\ncron: \"0 9 * * mon\"\n",
            ),
            ("water.yaml", "prompt: 물 마시기\nevery: 30m\n"),
        ],
    );
    let s = h.scheduler();

    let first = s.tick().await;
    assert_eq!(first.registered, ["water", "weekly-housing"], "by file name");
    assert!(first.runs.is_empty(), "a new job runs no past slot");

    h.set("2026-11-30T08:29");
    assert!(s.tick().await.runs.is_empty());
    h.set("2026-11-30T08:30");
    let at_830 = s.tick().await;
    assert_eq!(h.runner.take(), [run("water", "main", "2026-11-30T08:30")]);
    assert!(matches!(&at_830.runs[0].outcome, RunOutcome::Done(out) if out.text == "ran 물 마시기"));

    h.clock.advance(Duration::from_secs(29 * 60 + 59));
    assert!(s.tick().await.runs.is_empty(), "08:59:59 is before both slots");
    h.clock.advance(Duration::from_secs(1));
    let at_900 = s.tick().await;
    assert_eq!(
        h.runner.take_sorted(),
        [
            run("water", "main", "2026-11-30T09:00"),
            run("weekly-housing", "karen", "2026-11-30T09:00")
        ]
    );
    assert_eq!(
        at_900
            .runs
            .iter()
            .find(|r| r.job == "weekly-housing")
            .unwrap()
            .agent,
        "karen"
    );
    assert!(s.tick().await.runs.is_empty(), "a slot runs once");

    // The ledger: registered, started, done (with the session), in order.
    assert_eq!(
        states_of(h.path(), "weekly-housing")
            .into_iter()
            .map(|(_, s)| s)
            .collect::<Vec<_>>(),
        ["registered", "started", "done"]
    );
    let done = ledger(h.path())
        .into_iter()
        .find(|r| r["job"] == "weekly-housing" && r["state"] == "done")
        .unwrap();
    assert_eq!(done["v"], 1);
    assert_eq!(done["session_id"], "sched-weekly-housing");
    assert_eq!(done["slot"], "2026-11-30T00:00:00.000Z");

    // The AGENDA's view: agent, trigger, next run.
    let jobs = s.jobs();
    let weekly = jobs.iter().find(|j| j.job.id == "weekly-housing").unwrap();
    assert_eq!(weekly.job.agent, "karen");
    assert_eq!(weekly.trigger, "cron \"0 9 * * mon\" (+09:00)");
    assert_eq!(weekly.next_run, Some(kst("2026-12-07T09:00")));
    assert_eq!(weekly.last_run.as_ref().unwrap().state, RunState::Done);
    assert_eq!(s.next_run("water"), Some(kst("2026-11-30T09:30")));
}

#[tokio::test]
async fn a_one_shot_job_runs_once_and_is_done_for_ever() {
    let h = Home::new(
        "2026-11-30T20:00",
        &[(
            "dentist.yaml",
            "agent: karen\nprompt: 치과 예약 알려줘\nat: \"2026-12-01T09:00\"\n",
        )],
    );
    let s = h.scheduler();
    s.tick().await;
    assert_eq!(s.next_run("dentist"), Some(kst("2026-12-01T09:00")));
    h.set("2026-12-01T08:59");
    assert!(s.tick().await.runs.is_empty());
    h.clock.advance(Duration::from_secs(70));
    s.tick().await;
    assert_eq!(h.runner.take(), [run("dentist", "karen", "2026-12-01T09:00")]);
    h.set("2026-12-02T09:00");
    assert!(s.tick().await.runs.is_empty());
    assert_eq!(s.next_run("dentist"), None);
    drop(s);

    // The file stays; a restart does not run it again.
    let again = h.scheduler();
    h.set("2026-12-03T09:00");
    assert!(again.tick().await.runs.is_empty());
    assert_eq!(again.jobs()[0].next_run, None);
    assert!(h.runner.runs().is_empty());
}

#[tokio::test]
async fn next_slots_cross_month_ends_at_the_jobs_offset() {
    // 30 November 2026, 21:00 in Seoul = 12:00 UTC = 07:00 in New York.
    let h = Home::new(
        "2026-11-30T21:00",
        &[
            (
                "new-york.yaml",
                "prompt: x\ncron: \"0 0 1 * *\"\nutc_offset: \"-05:00\"\n",
            ),
            ("month-end.yaml", "prompt: x\ncron: \"30 23 31 * *\"\n"),
            ("leap.yaml", "prompt: x\ncron: \"0 7 29 feb *\"\n"),
        ],
    );
    let s = h.scheduler();
    assert_eq!(
        s.next_run("new-york").unwrap().to_string(),
        "2026-12-01T05:00:00.000Z",
        "midnight of 1 December in New York"
    );
    assert_eq!(
        s.next_run("month-end"),
        Some(kst("2026-12-31T23:30")),
        "November has no 31st"
    );
    assert_eq!(s.next_run("leap"), Some(kst("2028-02-29T07:00")));

    // And they fire there: midnight in New York is 14:00 in Seoul.
    h.set("2026-12-01T14:00");
    s.tick().await;
    assert_eq!(h.runner.take(), [run("new-york", "main", "2026-12-01T14:00")]);
    h.set("2026-12-31T23:30");
    s.tick().await;
    let runs = h.runner.take();
    assert!(
        runs.contains(&run("month-end", "main", "2026-12-31T23:30")),
        "{runs:?}"
    );
}

// ------------------------------------------------------ restarts and crashes

/// A runner whose runs never end: the process "dies" mid-run.
#[derive(Debug, Default)]
struct Hangs;

#[async_trait]
impl JobRunner for Hangs {
    async fn run(&self, _job: &Job, _slot: Timestamp) -> Result<JobOutput, String> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_restart_in_the_middle_of_a_slot_does_not_run_it_twice() {
    let h = Home::new(
        "2026-11-30T08:00",
        &[("report.yaml", "agent: karen\nprompt: 보고\ncron: \"0 9 * * *\"\n")],
    );
    let crashed = scheduler(h.path(), &h.clock, Arc::new(Hangs));
    crashed.tick().await;
    h.set("2026-11-30T09:00");
    {
        // The run starts (its `started` record is durable) and never ends;
        // dropping the tick is the crash.
        let tick = crashed.tick();
        tokio::pin!(tick);
        assert!(futures::poll!(&mut tick).is_pending());
    }
    drop(crashed);
    assert_eq!(
        states_of(h.path(), "report").last().unwrap(),
        &("2026-11-30T00:00:00.000Z".to_owned(), "started".to_owned())
    );

    // A new process over the same home, at the same time.
    let (logs, _guard) = capture();
    let s = h.scheduler();
    assert_eq!(
        s.ledger_load().interrupted,
        [("report".to_owned(), kst("2026-11-30T09:00"))]
    );
    assert!(
        logs.warned(&["report", "interrupted", "not retried"]),
        "{:?}",
        logs.warnings()
    );
    assert!(s.tick().await.runs.is_empty());
    h.clock.advance(Duration::from_secs(30));
    assert!(s.tick().await.runs.is_empty());
    assert!(h.runner.runs().is_empty(), "the interrupted slot is not retried");
    // The next slot runs as usual.
    h.set("2026-12-01T09:00");
    s.tick().await;
    assert_eq!(h.runner.take(), [run("report", "karen", "2026-12-01T09:00")]);
}

#[tokio::test]
async fn a_ledger_with_a_started_slot_and_a_torn_last_line_still_loads() {
    let h = Home::new(
        "2026-11-30T09:00",
        &[("report.yaml", "prompt: 보고\ncron: \"0 9 * * *\"\n")],
    );
    std::fs::write(
        h.path().join(SCHEDULE_RUNS_FILE),
        concat!(
            r#"{"v":1,"job":"report","slot":"2026-11-29T00:00:00.000Z","state":"registered","at":"2026-11-29T00:00:00.000Z"}"#,
            "\n",
            "garbage that is not json\n",
            r#"{"v":1,"job":"report","slot":"2026-11-30T00:00:00.000Z","state":"started","at":"2026-11-30T00:00:01.000Z"}"#,
            "\n",
            r#"{"v":1,"job":"report","slot":"2026-11-30T00:00:00.000Z","sta"#,
        ),
    )
    .unwrap();
    let (logs, _guard) = capture();
    let s = h.scheduler();
    assert_eq!(s.ledger_load().records, 2);
    assert_eq!(s.ledger_load().damaged_lines, 2);
    assert!(logs.warned(&["damaged ledger line"]), "{:?}", logs.warnings());
    assert!(
        s.tick().await.runs.is_empty(),
        "the started slot is not run again"
    );
    h.set("2026-12-01T09:00");
    s.tick().await;
    assert_eq!(h.runner.take(), [run("report", "main", "2026-12-01T09:00")]);
    // New records start on a line of their own, after the torn one.
    let text = std::fs::read_to_string(h.path().join(SCHEDULE_RUNS_FILE)).unwrap();
    let last: Vec<&str> = text.lines().rev().take(2).collect();
    for line in last {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{line}: {e}"));
    }
    assert_eq!(ledger(h.path()).len(), 4);
}

#[tokio::test]
async fn after_downtime_latest_runs_the_last_missed_slot_and_skip_runs_none() {
    let h = Home::new(
        "2026-11-30T08:30",
        &[
            ("latest.yaml", "prompt: a\ncron: \"0 * * * *\"\n"),
            ("skip.yaml", "prompt: b\ncron: \"0 * * * *\"\ncatch_up: skip\n"),
        ],
    );
    let s = h.scheduler();
    s.tick().await;
    h.set("2026-11-30T09:00");
    s.tick().await;
    assert_eq!(h.runner.take().len(), 2);
    drop(s);

    // Down from 09:00 to 13:30.
    h.set("2026-11-30T13:30");
    let s = h.scheduler();
    let report = s.tick().await;
    assert_eq!(h.runner.take(), [run("latest", "main", "2026-11-30T13:00")]);
    let skipped: Vec<(String, Timestamp)> = report.skipped.iter().map(|r| (r.job.clone(), r.slot)).collect();
    assert_eq!(
        skipped,
        [
            ("latest".to_owned(), kst("2026-11-30T10:00")),
            ("latest".to_owned(), kst("2026-11-30T11:00")),
            ("latest".to_owned(), kst("2026-11-30T12:00")),
            ("skip".to_owned(), kst("2026-11-30T10:00")),
            ("skip".to_owned(), kst("2026-11-30T11:00")),
            ("skip".to_owned(), kst("2026-11-30T12:00")),
            ("skip".to_owned(), kst("2026-11-30T13:00")),
        ]
    );
    assert_eq!(
        states_of(h.path(), "skip")
            .into_iter()
            .filter(|(_, s)| s == "skipped")
            .count(),
        4
    );
    assert!(s.tick().await.runs.is_empty(), "the catch-up happens once");
    // Back to normal at the next slot; `skip` runs when on time.
    h.set("2026-11-30T14:01");
    s.tick().await;
    assert_eq!(
        h.runner.take_sorted(),
        [
            run("latest", "main", "2026-11-30T14:00"),
            run("skip", "main", "2026-11-30T14:00")
        ]
    );

    // A restart within the grace window still runs a `skip` slot.
    drop(s);
    h.set("2026-11-30T15:01");
    let s = h.scheduler();
    s.tick().await;
    assert_eq!(h.runner.take().len(), 2);
}

// ------------------------------------------------------- files and editing

#[tokio::test]
async fn broken_job_files_are_skipped_with_a_line_naming_them_and_edits_are_picked_up() {
    let (logs, _guard) = capture();
    let h = Home::new(
        "2026-11-30T08:10",
        &[
            ("good.yaml", "agent: karen\nprompt: 좋은 일\nevery: 1h\n"),
            ("bad-yaml.yaml", "prompt: [unclosed\n"),
            ("unknown-key.yaml", "prompt: x\nevery: 1h\ncolour: red\n"),
            ("two-triggers.yaml", "prompt: x\nevery: 1h\ncron: \"0 9 * * *\"\n"),
            ("bad-cron.yaml", "prompt: x\ncron: \"0 9 * *\"\n"),
            ("bad-value.yaml", "prompt: x\nevery: 1h\ncatch_up: always\n"),
            ("notes.txt", "not a job"),
        ],
    );
    let s = h.scheduler();

    let first = s.tick().await;
    let mut broken: Vec<String> = first
        .broken_files
        .iter()
        .map(|b| b.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    broken.sort();
    assert_eq!(
        broken,
        [
            "bad-cron.yaml",
            "bad-value.yaml",
            "bad-yaml.yaml",
            "two-triggers.yaml",
            "unknown-key.yaml"
        ]
    );
    for (file, reason) in [
        ("bad-yaml.yaml", "reason="),
        ("unknown-key.yaml", "unknown field `colour`"),
        ("two-triggers.yaml", "more than one trigger"),
        ("bad-cron.yaml", "has 4 fields"),
        ("bad-value.yaml", "unknown variant `always`"),
    ] {
        let lines: Vec<String> = logs.warnings().into_iter().filter(|w| w.contains(file)).collect();
        assert_eq!(lines.len(), 1, "one line for {file}: {lines:?}");
        assert!(lines[0].contains(reason), "{file}: {}", lines[0]);
    }
    assert_eq!(first.registered, ["good"]);
    h.set("2026-11-30T09:00");
    let report = s.tick().await;
    assert!(
        report.broken_files.is_empty(),
        "unchanged files are not read (or warned about) again"
    );
    assert_eq!(h.runner.take(), [run("good", "karen", "2026-11-30T09:00")]);
    assert_eq!(logs.warnings().len(), 5);

    // Fix one file and edit another: the next tick sees both.
    h.write("bad-cron.yaml", "prompt: fixed\ncron: \"30 9 * * *\"\n");
    h.write("good.yaml", "agent: main\nprompt: 고친 일\nevery: 1h\n");
    let report = s.tick().await;
    assert_eq!(report.broken_files.len(), 4);
    assert_eq!(report.registered, ["bad-cron"]);
    assert_eq!(s.next_run("bad-cron"), Some(kst("2026-11-30T09:30")));
    h.set("2026-11-30T10:00");
    s.tick().await;
    let mut prompts = h.runner.prompts();
    prompts.sort();
    assert_eq!(prompts, ["fixed", "고친 일"]);
    assert_eq!(
        h.runner.take_sorted(),
        [
            run("bad-cron", "main", "2026-11-30T09:30"),
            run("good", "main", "2026-11-30T10:00")
        ]
    );

    // Disabled, the job does not run; enabled again, its disabled hours
    // are not "missed".
    h.write("good.yaml", "prompt: 고친 일\nevery: 1h\nenabled: false\n");
    h.set("2026-11-30T13:00");
    assert!(s.tick().await.runs.iter().all(|r| r.job != "good"));
    h.write("good.yaml", "prompt: 다시 켠 일\nevery: 1h\nenabled: true\n");
    h.set("2026-11-30T13:20");
    let report = s.tick().await;
    assert_eq!(report.registered, ["good"]);
    assert!(report.runs.iter().all(|r| r.job != "good"), "{:?}", report.runs);
    h.set("2026-11-30T14:00");
    s.tick().await;
    assert!(h.runner.prompts().contains(&"다시 켠 일".to_owned()));
}

#[tokio::test]
async fn job_files_added_removed_or_retimed_while_running_are_picked_up() {
    let h = Home::new("2026-11-30T08:00", &[("hourly.yaml", "prompt: a\nevery: 1h\n")]);
    let s = h.scheduler();
    assert_eq!(s.tick().await.registered, ["hourly"]);

    // Added: registered at the next tick, run at its first slot after that.
    h.write("morning.yaml", "agent: karen\nprompt: b\ncron: \"30 8 * * *\"\n");
    h.set("2026-11-30T08:10");
    assert_eq!(s.tick().await.registered, ["morning"]);
    h.set("2026-11-30T08:30");
    s.tick().await;
    assert_eq!(h.runner.take(), [run("morning", "karen", "2026-11-30T08:30")]);

    // Removed: gone from the list, and its slots do not run.
    std::fs::remove_file(h.path().join("schedules/hourly.yaml")).unwrap();
    h.set("2026-11-30T09:00");
    assert!(s.tick().await.runs.is_empty());
    assert!(s.job("hourly").is_none());

    // Given another time: the new time's slots before the edit are not
    // "missed" (09:45 has passed when the file says 09:45), the next one runs.
    h.set("2026-11-30T09:50");
    h.write("morning.yaml", "agent: karen\nprompt: b\ncron: \"45 9 * * *\"\n");
    let report = s.tick().await;
    assert_eq!(report.registered, ["morning"]);
    assert!(report.runs.is_empty(), "{:?}", report.runs);
    assert_eq!(s.next_run("morning"), Some(kst("2026-12-01T09:45")));
    h.set("2026-12-01T09:45");
    s.tick().await;
    assert_eq!(h.runner.take(), [run("morning", "karen", "2026-12-01T09:45")]);
}

#[tokio::test]
async fn job_ids_that_could_leave_the_schedules_folder_are_refused() {
    let h = Home::new(
        "2026-11-30T08:00",
        &[("escape.yaml", "id: ../outside\nprompt: x\nevery: 1h\n")],
    );
    let victim = h.path().join("victim.yaml");
    std::fs::write(&victim, "keep me").unwrap();
    let s = h.scheduler();
    let hourly = || JobSpec::new("main", "x", Trigger::every("1h").unwrap());
    for id in [
        "../victim",
        "../../etc/passwd",
        "a/b",
        "..",
        ".hidden",
        "/tmp/x",
        "a\\b",
        "a.yaml",
        "Big",
        "",
        &"x".repeat(65),
    ] {
        let err = s.add_job(hourly().with_id(id)).unwrap_err();
        assert!(matches!(err, ScheduleError::InvalidJob { .. }), "{id}: {err}");
        assert!(
            matches!(s.remove_job(id), Err(ScheduleError::NotFound { .. })),
            "{id}"
        );
    }
    assert!(
        s.add_job(JobSpec::new("../karen", "x", Trigger::every("1h").unwrap()))
            .is_err()
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    let broken = s.broken_files();
    assert_eq!(broken.len(), 1);
    assert!(broken[0].reason.contains("\"../outside\""), "{broken:?}");

    // What is written lands in the folder under the id's name, and nothing
    // else is left there (the temporary file was renamed into place).
    s.add_job(hourly().with_id("ok")).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(h.path().join("schedules"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["escape.yaml", "ok.yaml"]);
    let mut home: Vec<String> = std::fs::read_dir(h.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    home.sort();
    assert_eq!(home, [SCHEDULE_RUNS_FILE, "schedules", "victim.yaml"]);
}

#[tokio::test]
async fn hostile_job_files_are_skipped_without_harm() {
    let laughs = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
                  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
                  e: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nprompt: x\nevery: 1h\n";
    let deep = format!(
        "prompt: {}x{}\nevery: 1h\n",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let huge = format!("prompt: \"{}\"\nevery: 1h\n", "가".repeat(30_000));
    let h = Home::new(
        "2026-11-30T08:00",
        &[
            ("laughs.yaml", laughs),
            ("deep.yaml", &deep),
            ("huge.yaml", &huge),
            ("binary.yaml", "\u{0}\u{1}\u{ffff}"),
            ("long-every.yaml", "prompt: x\nevery: 99999999999999999999d\n"),
            ("rare.yaml", "prompt: x\nevery: 400d\n"),
            (
                "far.yaml",
                "prompt: x\nat: \"9999-12-31T23:59\"\nutc_offset: \"+14:00\"\n",
            ),
            (
                "beyond.yaml",
                "prompt: x\nat: \"9999-12-31T23:59\"\nutc_offset: \"-14:00\"\n",
            ),
            ("step.yaml", "prompt: x\ncron: \"59/4294967295 23 31 12 *\"\n"),
            ("ok.yaml", "prompt: x\nevery: 1h\n"),
        ],
    );
    let s = h.scheduler();
    let report = s.tick().await;
    let mut broken: Vec<(String, String)> = report
        .broken_files
        .iter()
        .map(|b| {
            (
                b.path.file_name().unwrap().to_string_lossy().into_owned(),
                b.reason.clone(),
            )
        })
        .collect();
    broken.sort();
    let names: Vec<&str> = broken.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "beyond.yaml",
            "binary.yaml",
            "deep.yaml",
            "huge.yaml",
            "laughs.yaml",
            "long-every.yaml",
            "rare.yaml"
        ],
        "{broken:?}"
    );
    let reason = |name: &str| &broken.iter().find(|(n, _)| n == name).unwrap().1;
    assert!(reason("huge.yaml").contains("larger than 65536 bytes"));
    assert!(reason("rare.yaml").contains("maximum of 366 days"));
    let mut ids: Vec<String> = s.jobs().into_iter().map(|j| j.job.id).collect();
    ids.sort();
    assert_eq!(ids, ["far", "ok", "step"]);
    assert_eq!(s.next_run("step"), Some(kst("2026-12-31T23:59")));
    assert!(s.next_run("far").is_some());
}

#[tokio::test]
async fn a_failing_run_is_recorded_and_the_scheduler_goes_on() {
    let h = Home::new(
        "2026-11-30T08:30",
        &[
            ("flaky.yaml", "prompt: x\nevery: 1h\n"),
            ("steady.yaml", "prompt: y\nevery: 1h\n"),
        ],
    );
    h.runner.fail.lock().unwrap().insert("flaky".into());
    let s = h.scheduler();
    s.tick().await;
    h.set("2026-11-30T09:00");
    let report = s.tick().await;
    let flaky = report.runs.iter().find(|r| r.job == "flaky").unwrap();
    assert_eq!(flaky.outcome, RunOutcome::Failed("flaky broke".into()));
    assert!(matches!(
        report.runs.iter().find(|r| r.job == "steady").unwrap().outcome,
        RunOutcome::Done(_)
    ));
    let failed = ledger(h.path())
        .into_iter()
        .find(|r| r["state"] == "failed")
        .unwrap();
    assert_eq!(failed["error"], "flaky broke");
    // Not retried, and the next slot runs.
    h.clock.advance(Duration::from_secs(60));
    assert!(s.tick().await.runs.is_empty());
    h.set("2026-11-30T10:00");
    assert_eq!(s.tick().await.runs.len(), 2);
}

/// A runner whose runs wait for the test to let them finish.
#[derive(Debug, Default)]
struct Gated {
    gate: Notify,
    started: Mutex<Vec<String>>,
}

#[async_trait]
impl JobRunner for Gated {
    async fn run(&self, job: &Job, _slot: Timestamp) -> Result<JobOutput, String> {
        let first_slow = {
            let mut started = self.started.lock().unwrap();
            started.push(job.id.clone());
            job.id == "slow" && started.iter().filter(|id| *id == "slow").count() == 1
        };
        if first_slow {
            self.gate.notified().await;
        }
        Ok(JobOutput::default())
    }
}

#[tokio::test]
async fn a_job_never_runs_beside_itself_but_other_jobs_do() {
    let h = Home::new(
        "2026-11-30T08:59",
        &[
            ("slow.yaml", "prompt: x\nevery: 1m\n"),
            ("fast.yaml", "prompt: y\nevery: 1m\n"),
        ],
    );
    let runner = Arc::new(Gated::default());
    let s = scheduler(h.path(), &h.clock, runner.clone());
    s.tick().await;
    h.set("2026-11-30T09:00");
    let first = s.tick();
    tokio::pin!(first);
    assert!(futures::poll!(&mut first).is_pending(), "slow is still running");
    h.set("2026-11-30T09:01");
    let second = s.tick().await;
    assert_eq!(second.busy, ["slow"]);
    assert_eq!(second.runs.len(), 1);
    assert_eq!(second.runs[0].job, "fast");
    assert!(s.jobs().iter().find(|j| j.job.id == "slow").unwrap().running);
    runner.gate.notify_one();
    let first = first.await;
    assert_eq!(first.runs.len(), 2);
    // The slot it waited through follows the catch-up rule once it is free.
    let third = s.tick().await;
    assert_eq!(third.runs.len(), 1);
    assert_eq!(
        (third.runs[0].job.as_str(), third.runs[0].slot),
        ("slow", kst("2026-11-30T09:01"))
    );
    assert_eq!(
        *runner.started.lock().unwrap(),
        ["fast", "slow", "fast", "slow"].map(String::from).to_vec()
    );
}

#[tokio::test(start_paused = true)]
async fn the_driver_ticks_on_its_own_and_stops_when_cancelled() {
    let h = Home::new(
        "2026-11-30T08:59",
        &[("ping.yaml", "agent: karen\nprompt: ping\nevery: 1m\n")],
    );
    let s = Arc::new(h.scheduler());
    let cancel = jarvis_sdk::CancellationToken::new();
    let driver = s.clone().spawn(cancel.clone());
    // The first tick registers the job; later ones find its slot due.
    tokio::task::yield_now().await;
    h.set("2026-11-30T09:00");
    tokio::time::timeout(Duration::from_secs(60), h.runner.ran.notified())
        .await
        .expect("the driver ran the job");
    assert_eq!(h.runner.runs(), [run("ping", "karen", "2026-11-30T09:00")]);
    cancel.cancel();
    driver.await.unwrap();
}

// ------------------------------------------------------------ `/schedule`

#[tokio::test]
async fn add_job_writes_a_file_that_a_fresh_scheduler_loads_with_the_agent_given() {
    let h = Home::new("2026-11-30T08:00", &[]);
    let s = h.scheduler();

    // `/schedule` typed in a KAREN session (R-SCHED-2).
    let job = s
        .schedule_text("karen", "매주 월요일 오전 9시 청약 공고 정리해 줘")
        .unwrap();
    assert_eq!(job.agent, "karen");
    assert_eq!(job.id, "job-20261130-0800");
    assert_eq!(job.prompt, "청약 공고 정리해 줘");
    let path = h.path().join("schedules/job-20261130-0800.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("agent: karen") && text.contains("+09:00"), "{text}");
    // The same minute again gets the next free id; an explicit one is kept.
    let second = s.schedule_text("main", "in 2h 오븐 확인").unwrap();
    assert_eq!(second.id, "job-20261130-0800-2");
    assert_eq!(second.trigger, Trigger::At(kst("2026-11-30T10:00")));
    let third = s
        .add_job(
            JobSpec::new("main", "물", Trigger::every("30m").unwrap())
                .with_id("water")
                .with_catch_up(CatchUp::Skip)
                .with_utc_offset(UtcOffset::UTC),
        )
        .unwrap();
    assert_eq!(third.id, "water");
    assert!(matches!(
        s.add_job(JobSpec::new("main", "x", Trigger::every("1h").unwrap()).with_id("water")),
        Err(ScheduleError::Exists { .. })
    ));
    assert!(
        s.add_job(JobSpec::new("main", "x", Trigger::At(kst("2026-11-30T07:00"))))
            .is_err()
    );
    assert!(
        s.add_job(JobSpec::new("main", " ", Trigger::every("1h").unwrap()))
            .is_err()
    );
    assert!(
        s.add_job(JobSpec::new("no agent", "x", Trigger::every("1h").unwrap()))
            .is_err()
    );
    let err = s.schedule_text("karen", "someday maybe").unwrap_err().to_string();
    assert!(err.contains("accepted forms"), "{err}");
    drop(s);

    // A fresh scheduler loads all three as written.
    let fresh = h.scheduler();
    let jobs = fresh.jobs();
    let ids: Vec<&str> = jobs.iter().map(|j| j.job.id.as_str()).collect();
    assert_eq!(ids, ["job-20261130-0800", "job-20261130-0800-2", "water"]);
    let loaded = &jobs[0].job;
    assert_eq!(
        (loaded.agent.as_str(), loaded.prompt.as_str()),
        ("karen", "청약 공고 정리해 줘")
    );
    assert_eq!(loaded.trigger, Trigger::cron("0 9 * * 1").unwrap());
    assert_eq!(jobs[2].job.catch_up, CatchUp::Skip);
    assert_eq!(jobs[2].job.time_zone, UtcOffset::UTC);
    // Registered when added: the first slot after that runs, as KAREN.
    h.set("2026-11-30T09:00");
    fresh.tick().await;
    let runs = h.runner.take();
    assert!(
        runs.contains(&run("job-20261130-0800", "karen", "2026-11-30T09:00")),
        "{runs:?}"
    );

    // Removing deletes the file.
    fresh.remove_job("water").unwrap();
    assert!(!h.path().join("schedules/water.yaml").exists());
    assert!(fresh.job("water").is_none());
    assert!(matches!(
        fresh.remove_job("water"),
        Err(ScheduleError::NotFound { .. })
    ));
}

#[tokio::test]
async fn the_schedule_command_makes_a_job_for_the_sessions_agent() {
    let h = Home::new("2026-11-30T08:00", &[]);
    let commands = StandardCommands::new().with_schedule(Arc::new(h.scheduler()));
    let karen = CommandContext {
        agent_id: "karen",
        session_id: "default-karen",
    };
    let reply = commands
        .handle(&karen, "/schedule 매주 월요일 오전 9시 청약 공고 정리해 줘")
        .await
        .unwrap();
    assert!(reply.contains("scheduled"), "{reply}");
    assert!(
        reply.contains("job-20261130-0800 [karen]: 청약 공고 정리해 줘"),
        "{reply}"
    );
    assert!(
        reply.contains("2026-11-30 09:00 (+09:00)"),
        "the next run: {reply}"
    );
    let job = h.scheduler().job("job-20261130-0800").unwrap();
    assert_eq!(job.agent, "karen");

    let reply = commands.handle(&karen, "/schedule 언젠가 청소").await.unwrap();
    assert!(reply.contains("accepted forms"), "{reply}");
    let reply = commands
        .handle(&karen, "/schedule tomorrow 8am 우산 챙기기")
        .await
        .unwrap();
    assert!(reply.contains("2026-12-01 08:00 (+09:00)"), "{reply}");
    assert_eq!(h.scheduler().jobs().len(), 2);
}

#[tokio::test]
async fn the_scheduler_reads_when_at_its_own_clock_and_offset() {
    let h = Home::new("2026-11-30T22:00", &[]);
    let s = h.scheduler();
    let when = s.parse_when("내일 오전 9시 약 먹기").unwrap();
    assert_eq!(when.trigger, Trigger::At(kst("2026-12-01T09:00")));
    assert_eq!(when.prompt, "약 먹기");
    let utc = Scheduler::new(
        h.path(),
        h.clock.clone(),
        h.runner.clone(),
        SchedulerConfig {
            time_zone: UtcOffset::UTC.into(),
            ..SchedulerConfig::default()
        },
    )
    .unwrap();
    // 22:00 in Seoul is 13:00 UTC: "tomorrow" is still 1 December there.
    assert_eq!(
        utc.parse_when("tomorrow 09:00 x").unwrap().trigger,
        Trigger::At(Timestamp::parse_rfc3339("2026-12-01T09:00:00Z").unwrap())
    );
}

// ---------------------------------------------------------- housing watch

/// Records the reports queued (a team with KAREN); fails while `failing`
/// is set.
#[derive(Debug, Default)]
struct Reports {
    seen: Mutex<Vec<OutboxItem>>,
    failing: Mutex<bool>,
}

impl Reports {
    /// The notice keys of every report, in order.
    fn keys(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .flat_map(|item| item.meta["keys"].as_array().unwrap().clone())
            .map(|k| k.as_str().unwrap().to_owned())
            .collect()
    }
}

#[async_trait]
impl ProactiveSink for Reports {
    async fn enqueue(&self, item: OutboxItem) -> Result<(), String> {
        if *self.failing.lock().unwrap() {
            return Err("no screen open".into());
        }
        self.seen.lock().unwrap().push(item);
        Ok(())
    }

    fn has_agent(&self, agent_id: &str) -> bool {
        agent_id == "karen"
    }

    fn now(&self) -> Timestamp {
        Timestamp::parse_rfc3339("2026-11-30T00:00:00Z").unwrap()
    }
}

fn watch_scheduler(
    home: &Path,
    clock: &Arc<ManualClock>,
    source: FixtureNoticeSource,
    reports: &Arc<Reports>,
) -> Scheduler {
    let store = Arc::new(FileWatchStore::in_home(home).with_clock(clock.clone()));
    let job = WatchJob::new(
        store,
        vec![Arc::new(source) as Arc<dyn NoticeSource>],
        reports.clone(),
    );
    scheduler(home, clock, Arc::new(Recorder::default())).with_builtin(Arc::new(job))
}

#[tokio::test]
async fn housing_watch_reports_a_new_notice_once_and_never_again_after_a_restart() {
    let home = tempfile::tempdir().unwrap();
    let store = FileWatchStore::in_home(home.path());
    let watch = store.add(Some("서울".into()), None).await.unwrap().watch;
    let samples = FixtureNoticeSource::sh();
    let expected = samples.notices().len();
    let clock = clock_at("2026-11-30T08:10");
    let reports = Arc::new(Reports::default());
    let s = watch_scheduler(home.path(), &clock, samples.clone(), &reports);

    // The AGENDA shows the built-in job as KAREN's.
    let info = s
        .jobs()
        .into_iter()
        .find(|j| j.job.id == HOUSING_WATCH_JOB)
        .unwrap();
    assert_eq!(info.job.agent, "karen");
    assert_eq!(info.trigger, "every 30m");
    assert!(info.job.is_builtin());
    assert!(matches!(
        s.remove_job(HOUSING_WATCH_JOB),
        Err(ScheduleError::BuiltIn { .. })
    ));

    s.tick().await;
    set(&clock, "2026-11-30T08:30");
    let report = s.tick().await;
    assert_eq!(report.runs.len(), 1);
    assert_eq!(
        reports.keys().len(),
        expected,
        "every matching sample is new at first"
    );
    let first = reports.seen.lock().unwrap()[0].clone();
    assert_eq!(first.meta["watch_id"], watch.id.as_str());
    assert_eq!(first.session_id, "default-karen");
    assert_eq!(first.agent_id, "karen");
    assert!(first.message_id.starts_with(&format!("watch-{}-", watch.id)));
    set(&clock, "2026-11-30T09:00");
    s.tick().await;
    assert_eq!(reports.keys().len(), expected, "nothing new: nothing reported");

    let seen: Vec<Value> = std::fs::read_to_string(home.path().join(EXTERNAL_SEEN_FILE))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(seen.len(), expected);
    assert_eq!(seen[0]["v"], 1);
    assert_eq!(seen[0]["source"], "housing_watch");
    assert_eq!(seen[0]["watch_id"], watch.id.as_str());
    assert!(seen[0]["key"].as_str().unwrap().starts_with("SH:"));
    assert_eq!(seen[0]["at"], "2026-11-29T23:30:00.000Z");
    drop(s);

    // Restart: new store, job and scheduler over the same home.
    let reports = Arc::new(Reports::default());
    let s = watch_scheduler(home.path(), &clock, samples.clone(), &reports);
    set(&clock, "2026-11-30T09:30");
    assert_eq!(s.tick().await.runs.len(), 1);
    assert!(
        reports.keys().is_empty(),
        "nothing is reported again after a restart"
    );

    // A crash tore the log's last line (a record half written). A new
    // notice appears: only it is reported, once, and the torn line neither
    // stops the log from loading nor swallows the next record.
    drop(s);
    let seen_path = home.path().join(EXTERNAL_SEEN_FILE);
    let mut file = std::fs::OpenOptions::new().append(true).open(&seen_path).unwrap();
    file.write_all(br#"{"v":1,"source":"housing_watch","watch_id":"#)
        .unwrap();
    drop(file);
    let (logs, _guard) = capture();
    let s = watch_scheduler(home.path(), &clock, with_a_new_notice(&samples), &reports);
    set(&clock, "2026-11-30T10:00");
    s.tick().await;
    assert_eq!(reports.keys(), ["SH:sample-sh-2025-07"]);
    assert!(reports.seen.lock().unwrap()[0].text.contains(NEW_NOTICE_TITLE));
    assert!(
        logs.warned(&["external_seen", "damaged line"]),
        "{:?}",
        logs.warnings()
    );
    set(&clock, "2026-11-30T10:30");
    s.tick().await;
    assert_eq!(reports.keys().len(), 1);
    let text = std::fs::read_to_string(&seen_path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), expected + 2, "{text}");
    assert!(
        serde_json::from_str::<Value>(lines[expected]).is_err(),
        "the torn line stays alone"
    );
    let last: Value = serde_json::from_str(lines[expected + 1]).unwrap();
    assert_eq!(last["key"], "SH:sample-sh-2025-07");
    drop(s);

    // And after one more restart, nothing at all is reported again.
    let reports = Arc::new(Reports::default());
    let s = watch_scheduler(home.path(), &clock, with_a_new_notice(&samples), &reports);
    set(&clock, "2026-11-30T11:00");
    assert_eq!(s.tick().await.runs.len(), 1);
    assert!(reports.keys().is_empty(), "{:?}", reports.keys());
}

#[tokio::test]
async fn a_failed_watch_report_is_tried_again_at_the_next_run() {
    let home = tempfile::tempdir().unwrap();
    let clock = clock_at("2026-11-30T08:00");
    let store = Arc::new(FileWatchStore::in_home(home.path()).with_clock(clock.clone()));
    store.add(None, Some("행복주택".into())).await.unwrap();
    let reports = Arc::new(Reports::default());
    *reports.failing.lock().unwrap() = true;
    let job = WatchJob::new(
        store.clone(),
        vec![
            Arc::new(FixtureNoticeSource::sh()) as Arc<dyn NoticeSource>,
            Arc::new(FixtureNoticeSource::lh()),
        ],
        reports.clone(),
    );
    let failed = job.check().await.unwrap();
    assert_eq!(failed.reported, 0);
    assert!(failed.problems[0].contains("no screen open"), "{failed:?}");
    assert!(
        !home.path().join("external_seen.jsonl").exists(),
        "nothing recorded"
    );

    *reports.failing.lock().unwrap() = false;
    let pass = job.check().await.unwrap();
    assert!(pass.reported > 0 && pass.problems.is_empty(), "{pass:?}");
    assert_eq!(reports.keys().len(), pass.reported);
    for item in reports.seen.lock().unwrap().iter() {
        let listed: Vec<&str> = item.text.lines().filter(|l| l.contains("공고")).collect();
        assert!(item.text.contains("행복주택"), "{}", item.text);
        assert!(!listed.is_empty(), "{}", item.text);
    }
    assert_eq!(job.check().await.unwrap().reported, 0);
}

// ------------------------------------------------------------ any input

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// No text makes the parsers panic, and every slot a parsed cron
    /// expression yields matches it and lies on the right side of `t`.
    #[test]
    fn no_text_makes_the_parsers_panic(
        cron in "(@?[0-9*/,a-zA-Z\\-]{0,12} ?){0,6}",
        when in "((every|daily|weekly|monthly|at|in|cron|tomorrow|매일|매주|매월|평일|내일|오늘|오후|오전|밤|[0-9]{1,22}|[0-9]{1,3}(시|분|시간|일|m|h|d|am|pm)|[:,~\\-]|[a-z가-힣]{1,3}) ){0,7}",
        offset in "[+\\-Zz0-9:]{0,7}",
        t in -62_000_000_000_000i64..253_000_000_000_000i64,
        minutes in -840i32..=840,
    ) {
        let t = Timestamp::from_millis(t);
        let offset_tz = UtcOffset::from_minutes(minutes).unwrap();
        let _ = UtcOffset::parse(&offset);
        let _ = Trigger::every(&cron);
        let _ = parse_when(&when, t, offset_tz);
        if let Ok(expr) = CronExpr::parse(&cron) {
            if let Some(next) = expr.next_after(t, offset_tz) {
                prop_assert!(next > t && expr.matches(next, offset_tz));
            }
            if let Some(latest) = expr.latest_at_or_before(t, offset_tz) {
                prop_assert!(latest <= t && expr.matches(latest, offset_tz));
            }
        }
    }

    /// Interval slots are on their grid at any time and offset.
    #[test]
    fn interval_slots_bracket_any_time(
        secs in 60u64..=366 * 86_400,
        t in -62_000_000_000_000i64..253_000_000_000_000i64,
        minutes in -840i32..=840,
    ) {
        let every = Trigger::Every(Duration::from_secs(secs));
        let offset = UtcOffset::from_minutes(minutes).unwrap();
        let t = Timestamp::from_millis(t);
        let latest = every.latest_at_or_before(t, offset).unwrap();
        let next = every.next_after(t, offset).unwrap();
        prop_assert!(latest <= t && t < next);
        prop_assert_eq!(next.as_millis() - latest.as_millis(), secs as i64 * 1_000);
    }
}

/// Panics when it runs the job `boom`; other jobs run.
#[derive(Debug)]
struct Panicking;

#[async_trait]
impl JobRunner for Panicking {
    async fn run(&self, job: &Job, _slot: Timestamp) -> Result<JobOutput, String> {
        if job.id == "boom" {
            panic!("boom went off");
        }
        Ok(JobOutput {
            session_id: None,
            text: format!("ran {}", job.id),
        })
    }
}

#[tokio::test]
async fn a_job_that_panics_is_logged_with_its_name_counted_and_the_others_run() {
    let h = Home::new(
        "2026-11-30T08:00",
        &[
            ("boom.yaml", "prompt: 터져라\nevery: 30m\n"),
            ("fine.yaml", "prompt: 괜찮아\nevery: 30m\n"),
        ],
    );
    let s = scheduler(h.path(), &h.clock, Arc::new(Panicking));
    s.tick().await;
    h.set("2026-11-30T08:30");
    let (logs, guard) = capture();
    let tick = s.tick().await;
    drop(guard);
    let outcome = |id: &str| {
        tick.runs
            .iter()
            .find(|r| r.job == id)
            .map(|r| r.outcome.clone())
            .unwrap()
    };
    assert!(
        matches!(outcome("boom"), RunOutcome::Failed(e) if e.contains("panicked") && e.contains("boom went off"))
    );
    assert!(matches!(outcome("fine"), RunOutcome::Done(_)));
    assert_eq!(s.failed_runs(), 1);
    assert!(
        logs.warned(&["boom", "run failed", "boom went off"]),
        "{:?}",
        logs.lines()
    );
    // The scheduler goes on: the next slot runs both again.
    h.set("2026-11-30T09:00");
    assert_eq!(s.tick().await.runs.len(), 2);
    assert_eq!(s.failed_runs(), 2);
}

// ------------------------------------------------------------ time zones

/// An instant written in RFC 3339 (`2026-03-08T09:00:00-04:00`).
fn at(rfc3339: &str) -> Timestamp {
    Timestamp::parse_rfc3339(rfc3339).unwrap()
}

/// Moves `clock` forward to the instant `rfc3339`.
fn set_to(clock: &ManualClock, rfc3339: &str) {
    use jarvis_sdk::common::Clock;
    let now = Timestamp::from(clock.now());
    let target = at(rfc3339);
    assert!(target >= now, "the clock only moves forward");
    clock.advance(Duration::from_millis(
        (target.as_millis() - now.as_millis()) as u64,
    ));
}

/// Ticks at each instant and returns the slots run, as RFC 3339 strings.
async fn slots_run_at(h: &Home, s: &Scheduler, instants: &[&str]) -> Vec<String> {
    for instant in instants {
        set_to(&h.clock, instant);
        s.tick().await;
    }
    h.runner
        .take()
        .into_iter()
        .map(|(_, _, slot)| slot.to_string())
        .collect()
}

#[tokio::test]
async fn a_daily_job_in_new_york_fires_at_nine_local_across_both_dst_changes() {
    let h = Home::new(
        "2026-03-05T12:00",
        &[(
            "ny.yaml",
            "prompt: morning\ncron: \"0 9 * * *\"\ntime_zone: America/New_York\n",
        )],
    );
    let s = h.scheduler();
    assert_eq!(s.tick().await.registered, ["ny"]);
    assert_eq!(
        s.job("ny").unwrap().describe_trigger(),
        "cron \"0 9 * * *\" (America/New_York)"
    );
    // 12:00 in Seoul is 22:00 the day before in New York; 09:00 EST is
    // 14:00 UTC.
    assert_eq!(s.next_run("ny"), Some(at("2026-03-05T09:00:00-05:00")));
    let runs = slots_run_at(
        &h,
        &s,
        &[
            "2026-03-07T13:59:00Z",
            "2026-03-07T14:00:00Z", // Saturday 09:00 EST
            "2026-03-08T13:00:00Z", // Sunday 09:00 EDT (clocks sprang forward at 02:00)
            "2026-03-08T14:00:00Z", // 09:00 EST would have been now: nothing
            "2026-03-09T13:00:00Z", // Monday 09:00 EDT
        ],
    )
    .await;
    assert_eq!(
        runs,
        [
            "2026-03-06T14:00:00.000Z", // Friday's, caught up (catch_up: latest)
            "2026-03-07T14:00:00.000Z",
            "2026-03-08T13:00:00.000Z",
            "2026-03-09T13:00:00.000Z"
        ]
    );
    // Autumn: Saturday 31 October 09:00 EDT, then Sunday and Monday 09:00 EST.
    set_to(&h.clock, "2026-10-31T12:00:00Z");
    s.tick().await;
    h.runner.take();
    let runs = slots_run_at(
        &h,
        &s,
        &[
            "2026-10-31T13:00:00Z",
            "2026-11-01T13:00:00Z", // 08:00 EST now: not yet
            "2026-11-01T14:00:00Z",
            "2026-11-02T14:00:00Z",
        ],
    )
    .await;
    assert_eq!(
        runs,
        [
            "2026-10-31T13:00:00.000Z",
            "2026-11-01T14:00:00.000Z",
            "2026-11-02T14:00:00.000Z"
        ]
    );
}

#[tokio::test]
async fn a_time_in_the_spring_gap_runs_once_at_the_first_instant_after_it() {
    let h = Home::new(
        "2026-03-06T12:00",
        &[(
            "gap.yaml",
            "prompt: x\ncron: \"30 2 * * *\"\ntime_zone: America/New_York\n",
        )],
    );
    let s = h.scheduler();
    s.tick().await;
    // Saturday 02:30 EST, then on Sunday 02:30 does not exist: 03:00 EDT.
    set_to(&h.clock, "2026-03-07T12:00:00Z");
    s.tick().await;
    h.runner.take();
    assert_eq!(s.next_run("gap"), Some(at("2026-03-08T03:00:00-04:00")));
    let runs = slots_run_at(
        &h,
        &s,
        &[
            "2026-03-08T06:59:00Z", // 01:59 EST
            "2026-03-08T07:00:00Z", // 03:00 EDT, the first instant after the gap
            "2026-03-08T07:30:00Z", // 03:30 EDT
            "2026-03-08T08:00:00Z",
            "2026-03-09T06:30:00Z", // Monday 02:30 EDT
        ],
    )
    .await;
    assert_eq!(runs, ["2026-03-08T07:00:00.000Z", "2026-03-09T06:30:00.000Z"]);
}

#[tokio::test]
async fn a_time_in_the_autumn_repeat_runs_once_at_its_first_occurrence() {
    let h = Home::new(
        "2026-10-30T12:00",
        &[(
            "fold.yaml",
            "prompt: x\ncron: \"30 1 * * *\"\ntime_zone: America/New_York\n",
        )],
    );
    let s = h.scheduler();
    s.tick().await;
    set_to(&h.clock, "2026-10-31T12:00:00Z");
    s.tick().await;
    h.runner.take();
    let runs = slots_run_at(
        &h,
        &s,
        &[
            "2026-11-01T05:30:00Z", // 01:30 EDT
            "2026-11-01T06:15:00Z", // 01:15 EST, the hour again
            "2026-11-01T06:30:00Z", // 01:30 EST: not a second run
            "2026-11-01T07:00:00Z",
            "2026-11-02T06:30:00Z", // Monday 01:30 EST
        ],
    )
    .await;
    assert_eq!(runs, ["2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"]);
    // And across a restart in the repeated hour: still once.
    let h = Home::new(
        "2026-10-30T12:00",
        &[(
            "fold.yaml",
            "prompt: x\ncron: \"30 1 * * *\"\ntime_zone: America/New_York\n",
        )],
    );
    h.scheduler().tick().await;
    set_to(&h.clock, "2026-11-01T05:31:00Z");
    h.scheduler().tick().await;
    set_to(&h.clock, "2026-11-01T06:31:00Z");
    h.scheduler().tick().await;
    let slots: Vec<String> = h.runner.take().into_iter().map(|r| r.2.to_string()).collect();
    assert_eq!(slots, ["2026-11-01T05:30:00.000Z"]);
}

#[tokio::test]
async fn every_counts_absolute_time_across_a_dst_change() {
    let h = Home::new(
        "2026-03-07T12:00",
        &[(
            "often.yaml",
            "prompt: x\nevery: 6h\ntime_zone: America/New_York\n",
        )],
    );
    let s = h.scheduler();
    s.tick().await;
    // Counted from midnight EST of 1 January 1970: 05:00, 11:00, 17:00 and
    // 23:00 UTC, whatever the clocks in New York say.
    let runs = slots_run_at(
        &h,
        &s,
        &[
            "2026-03-07T17:00:00Z",
            "2026-03-07T23:00:00Z",
            "2026-03-08T05:00:00Z",
            "2026-03-08T11:00:00Z",
        ],
    )
    .await;
    assert_eq!(
        runs,
        [
            "2026-03-07T17:00:00.000Z",
            "2026-03-07T23:00:00.000Z",
            "2026-03-08T05:00:00.000Z",
            "2026-03-08T11:00:00.000Z"
        ]
    );
}

#[tokio::test]
async fn a_ledger_written_before_time_zones_is_honoured() {
    // The ledger as the previous scheduler wrote it: registered, then the
    // 09:00 run of 30 November done, the 1 December one started and cut
    // short by a crash.
    let h = Home::new(
        "2026-12-01T09:00",
        &[
            ("daily.yaml", "prompt: 아침\ncron: \"0 9 * * *\"\n"),
            (
                "cut.yaml",
                "prompt: 점심\ncron: \"0 9 * * *\"\nutc_offset: \"+09:00\"\n",
            ),
        ],
    );
    std::fs::write(
        h.path().join(SCHEDULE_RUNS_FILE),
        concat!(
            r#"{"v":1,"job":"daily","slot":"2026-11-29T03:12:45.120Z","state":"registered","at":"2026-11-29T03:12:45.120Z"}"#,
            "\n",
            r#"{"v":1,"job":"daily","slot":"2026-11-30T00:00:00.000Z","state":"started","at":"2026-11-30T00:00:04.112Z"}"#,
            "\n",
            r#"{"v":1,"job":"daily","slot":"2026-11-30T00:00:00.000Z","state":"done","at":"2026-11-30T00:00:31.907Z","session_id":"sched-daily"}"#,
            "\n",
            r#"{"v":1,"job":"cut","slot":"2026-12-01T00:00:00.000Z","state":"started","at":"2026-12-01T00:00:02.001Z"}"#,
            "\n",
        ),
    )
    .unwrap();
    // The person's zone is now a named one with the same offset.
    let s = Scheduler::new(
        h.path(),
        h.clock.clone(),
        h.runner.clone(),
        SchedulerConfig {
            time_zone: jarvis_sdk::common::TimeZone::named("Asia/Seoul").unwrap(),
            ..SchedulerConfig::default()
        },
    )
    .unwrap();
    assert_eq!(s.ledger_load().records, 4);
    assert_eq!(s.ledger_load().damaged_lines, 0);
    let tick = s.tick().await;
    assert!(
        tick.registered.is_empty(),
        "known jobs are not registered again: {tick:?}"
    );
    // 1 December's slot of `daily` was never recorded: it runs; `cut`'s was
    // started before the upgrade: it does not run again.
    assert_eq!(h.runner.take(), [run("daily", "main", "2026-12-01T09:00")]);
    h.set("2026-12-01T12:00");
    assert!(s.tick().await.runs.is_empty());
    assert_eq!(states_of(h.path(), "cut").len(), 1, "nothing new for cut");
    // Every stored timestamp keeps its form.
    for record in ledger(h.path()) {
        for key in ["slot", "at"] {
            let text = record[key].as_str().unwrap();
            assert_eq!(text.len(), 24, "{text}");
            assert!(text.ends_with('Z') && text.as_bytes()[19] == b'.', "{text}");
        }
    }
    h.set("2026-12-02T09:00");
    s.tick().await;
    assert_eq!(
        h.runner.take_sorted(),
        [
            run("cut", "main", "2026-12-02T09:00"),
            run("daily", "main", "2026-12-02T09:00")
        ]
    );
}

#[tokio::test]
async fn a_zone_with_the_same_offset_at_the_next_slot_is_the_same_job() {
    let h = Home::new(
        "2026-11-30T08:00",
        &[(
            "zoned.yaml",
            "prompt: x\ncron: \"0 9 * * *\"\nutc_offset: \"+09:00\"\n",
        )],
    );
    let s = h.scheduler();
    assert_eq!(s.tick().await.registered, ["zoned"]);
    h.clock.advance(Duration::from_secs(60));
    h.write(
        "zoned.yaml",
        "prompt: x\ncron: \"0 9 * * *\"\ntime_zone: Asia/Seoul\n# named now\n",
    );
    let tick = s.tick().await;
    assert!(tick.registered.is_empty(), "{tick:?}");
    assert_eq!(
        s.job("zoned").unwrap().describe_trigger(),
        "cron \"0 9 * * *\" (Asia/Seoul)"
    );
    // Another offset is another job: registered afresh.
    h.clock.advance(Duration::from_secs(60));
    h.write(
        "zoned.yaml",
        "prompt: x\ncron: \"0 9 * * *\"\ntime_zone: America/New_York\n",
    );
    assert_eq!(s.tick().await.registered, ["zoned"]);
}

#[tokio::test]
async fn time_zone_mistakes_in_job_files_name_the_file_and_the_zone() {
    let h = Home::new(
        "2026-11-30T08:00",
        &[
            (
                "both.yaml",
                "prompt: x\nevery: 1h\ntime_zone: Asia/Seoul\nutc_offset: \"+09:00\"\n",
            ),
            (
                "mars.yaml",
                "prompt: x\nevery: 1h\ntime_zone: Mars/Olympus_Mons\n",
            ),
            (
                "ok.yaml",
                "prompt: x\nat: \"2026-12-01T09:00\"\ntime_zone: Europe/London\n",
            ),
        ],
    );
    let s = h.scheduler();
    let broken = s.broken_files();
    let reasons: Vec<(String, String)> = broken
        .iter()
        .map(|b| {
            (
                b.path.file_name().unwrap().to_string_lossy().into_owned(),
                b.reason.clone(),
            )
        })
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert_eq!(reasons[0].0, "both.yaml");
    assert!(
        reasons[0].1.contains("both time_zone and utc_offset"),
        "{reasons:?}"
    );
    assert_eq!(reasons[1].0, "mars.yaml");
    assert!(
        reasons[1]
            .1
            .contains("\"Mars/Olympus_Mons\" is not an IANA time zone name"),
        "{reasons:?}"
    );
    // Through the error type, the file is named too.
    let err = s
        .add_job(JobSpec::new("main", "x", Trigger::every("1h").unwrap()).with_id("ok"))
        .unwrap_err();
    assert!(matches!(err, ScheduleError::Exists { .. }));
    assert_eq!(
        s.next_run("ok"),
        Some(at("2026-12-01T09:00:00Z")),
        "London is on GMT in December"
    );
    // A job added in a zone is written with its name and reads back the same.
    let job = s
        .add_job(
            JobSpec::new("main", "x", Trigger::cron("0 9 * * *").unwrap())
                .with_id("named")
                .with_time_zone(jarvis_sdk::common::TimeZone::named("America/New_York").unwrap()),
        )
        .unwrap();
    let text = std::fs::read_to_string(h.path().join("schedules/named.yaml")).unwrap();
    assert!(
        text.contains("time_zone: America/New_York") && !text.contains("utc_offset"),
        "{text}"
    );
    assert_eq!(h.scheduler().job("named"), Some(job));
}

#[tokio::test]
async fn the_schedule_command_answers_in_the_jobs_zone() {
    let h = Home::new("2026-03-07T12:00", &[]);
    let s = Scheduler::new(
        h.path(),
        h.clock.clone(),
        h.runner.clone(),
        SchedulerConfig {
            time_zone: jarvis_sdk::common::TimeZone::named("America/New_York").unwrap(),
            ..SchedulerConfig::default()
        },
    )
    .unwrap();
    // 12:00 in Seoul on 7 March is 22:00 on 6 March in New York.
    let commands = StandardCommands::new().with_schedule(Arc::new(s));
    let main = CommandContext {
        agent_id: "main",
        session_id: "default-main",
    };
    let reply = commands.handle(&main, "/schedule 매일 9시 산책").await.unwrap();
    assert!(reply.contains("(America/New_York)"), "{reply}");
    assert!(
        reply.contains("2026-03-07 09:00 (-05:00)"),
        "the next run: {reply}"
    );
    let reply = commands
        .handle(&main, "/schedule at 2026-03-08 02:30 x")
        .await
        .unwrap();
    assert!(reply.contains("2026-03-08 03:00 (-04:00)"), "in the gap: {reply}");
}

#[test]
fn the_persons_zone_comes_from_the_environment_and_never_the_system() {
    use jarvis_sdk::app::AppConfig;
    use jarvis_sdk::common::TimeZone;
    let home = tempfile::tempdir().unwrap();
    let home_path = home.path().to_str().unwrap().to_owned();
    let config = |vars: &[(&str, &str)]| {
        let mut all = vec![("JARVIS_HOME", home_path.as_str())];
        all.extend_from_slice(vars);
        AppConfig::from_lookup(|k| all.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    };
    assert_eq!(
        config(&[]).unwrap().agenda.time_zone,
        TimeZone::named("Asia/Seoul").unwrap()
    );
    assert_eq!(
        config(&[("JARVIS_TIME__ZONE", "America/New_York")])
            .unwrap()
            .agenda
            .time_zone
            .to_string(),
        "America/New_York"
    );
    assert_eq!(
        config(&[("JARVIS_TIME__UTC_OFFSET", "-05:00")])
            .unwrap()
            .agenda
            .time_zone,
        UtcOffset::from_minutes(-300).unwrap()
    );
    // The name wins over the offset.
    let both = config(&[
        ("JARVIS_TIME__ZONE", "Europe/Paris"),
        ("JARVIS_TIME__UTC_OFFSET", "+09:00"),
    ]);
    assert_eq!(both.unwrap().agenda.time_zone.to_string(), "Europe/Paris");
    let err = config(&[("JARVIS_TIME__ZONE", "Seoul")]).unwrap_err().to_string();
    assert!(
        err.contains("JARVIS_TIME__ZONE=Seoul") && err.contains("IANA"),
        "{err}"
    );
    let err = config(&[("JARVIS_TIME__UTC_OFFSET", "KST")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("JARVIS_TIME__UTC_OFFSET=KST"), "{err}");
}
