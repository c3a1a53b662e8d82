//! A real headless Chromium, driven over WebDriver (fantoccini), for the
//! HUD's browser tests and the `hud_frames` example.
//!
//! [`Browser::start`] starts its own `chromedriver` on a free loopback port
//! and one browser session with the capabilities RECIPES.md names
//! (headless, no sandbox, no GPU, no background networking…). When
//! Chromium or chromedriver is missing it prints a loud skip line and
//! answers `None`, unless `JARVIS_REQUIRE_BROWSER=1`, when it panics.
//!
//! chromedriver runs under a small shell watchdog in a process group of its
//! own: when the [`Browser`] is dropped, or the test process dies in any
//! way, the watchdog's input closes and it ends chromedriver and every
//! browser process it started. Browser tests take turns (one browser at a
//! time), so their timings do not disturb each other on a small machine.
//!
//! Waiting is polling the page with a deadline ([`Browser::wait_js`]), never
//! a fixed sleep.

use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};
use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, OwnedMutexGuard};

/// Set to `1` to fail, instead of skip, when Chromium or chromedriver is missing.
pub(crate) const REQUIRE_BROWSER_ENV: &str = "JARVIS_REQUIRE_BROWSER";

/// How long one wait on the page may take before the test fails.
pub(crate) const PAGE_WAIT: Duration = Duration::from_secs(30);

/// The arguments RECIPES.md gives Chromium on this kind of machine.
const CHROME_ARGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
];

/// One browser at a time.
static TURN: LazyLock<Arc<Mutex<()>>> = LazyLock::new(|| Arc::new(Mutex::new(())));

/// How the browser is started.
#[derive(Debug, Clone)]
pub(crate) struct BrowserOptions {
    /// The window's width and height in CSS pixels.
    pub(crate) window: (u32, u32),
    /// More Chromium arguments (e.g. `--force-prefers-reduced-motion`).
    pub(crate) extra_args: Vec<String>,
    /// A phone's screen instead of the window: its width and height in CSS
    /// pixels, at two device pixels per CSS pixel (headless windows are
    /// never narrower than 500 px).
    pub(crate) phone: Option<(u32, u32)>,
}

impl Default for BrowserOptions {
    fn default() -> Self {
        Self {
            window: (1280, 800),
            extra_args: Vec::new(),
            phone: None,
        }
    }
}

/// A running chromedriver and one browser session on it.
#[derive(Debug)]
pub(crate) struct Browser {
    /// The WebDriver session.
    pub(crate) client: Client,
    watchdog: Child,
    stdin: Option<ChildStdin>,
    _turn: OwnedMutexGuard<()>,
}

/// Chromium and chromedriver, when both are installed.
fn find_browser() -> Option<(PathBuf, PathBuf)> {
    let chromium = std::env::var_os("JARVIS_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| find_program(&["chromium", "chromium-browser", "google-chrome"]))?;
    let driver = find_program(&["chromedriver"])?;
    Some((chromium, driver))
}

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/lib/chromium")])
        .collect();
    names
        .iter()
        .flat_map(|name| dirs.iter().map(move |dir| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

fn required() -> bool {
    std::env::var(REQUIRE_BROWSER_ENV).is_ok_and(|v| v == "1")
}

/// Prints a skip line past the test harness's capture, or panics when a
/// browser is required.
fn skip(what: &str, reason: &str) {
    if required() {
        panic!("{REQUIRE_BROWSER_ENV}=1 but {what} cannot run: {reason}");
    }
    let _ = writeln!(
        std::io::stderr(),
        "\n!!! SKIPPED {what}: {reason}\n!!! (apt-get install chromium chromium-driver; set {REQUIRE_BROWSER_ENV}=1 to make this a failure)\n"
    );
}

/// The watchdog: starts chromedriver as the leader of a new process group,
/// waits until its own input closes, then ends the whole group.
const WATCHDOG: &str = r#"
setsid "$1" --port="$2" >/dev/null 2>&1 &
driver=$!
read -r _ || true
kill -TERM "-$driver" 2>/dev/null
for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
  kill -0 "-$driver" 2>/dev/null || exit 0
  sleep 0.1
done
kill -KILL "-$driver" 2>/dev/null
exit 0
"#;

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("its address").port()
}

impl Browser {
    /// Starts chromedriver and a browser for test `what`; `None` (after a
    /// skip line) when there is no Chromium and none is required.
    pub(crate) async fn start(what: &str, options: BrowserOptions) -> Option<Browser> {
        let Some((chromium, driver)) = find_browser() else {
            skip(what, "Chromium or chromedriver is not installed");
            return None;
        };
        let turn = TURN.clone().lock_owned().await;
        let port = free_port();
        let mut watchdog = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("watchdog")
            .arg(&driver)
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh starts");
        let stdin = watchdog.stdin.take();
        let deadline = Instant::now() + PAGE_WAIT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen on port {port}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut args: Vec<String> = CHROME_ARGS.iter().map(|a| (*a).to_owned()).collect();
        args.push(format!("--window-size={},{}", options.window.0, options.window.1));
        args.extend(options.extra_args.iter().cloned());
        let mut chrome = json!({ "binary": chromium, "args": args });
        if let Some((width, height)) = options.phone {
            chrome["mobileEmulation"] = json!({
                "deviceMetrics": { "width": width, "height": height, "pixelRatio": 2.0, "touch": true },
            });
        }
        let capabilities = json!({ "browserName": "chrome", "goog:chromeOptions": chrome });
        let serde_json::Value::Object(capabilities) = capabilities else {
            unreachable!("a JSON object")
        };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("chromedriver starts a browser session");
        Some(Browser {
            client,
            watchdog,
            stdin,
            _turn: turn,
        })
    }

    /// Ends the browser session, then chromedriver.
    pub(crate) async fn finish(self) {
        let _ = self.client.clone().close().await;
        drop(self);
    }

    /// Opens `url` and waits until the HUD attached to a session.
    pub(crate) async fn open_hud(&self, url: &str) {
        self.client.goto(url).await.expect("the page loads");
        self.wait_js(
            "the HUD attaches to a session and its socket opens",
            "return document.documentElement.dataset.session && /^(ready|read-only)/.test(document.getElementById('status').textContent)",
            |v| v == &Value::Bool(true),
        )
        .await;
    }

    /// Waits until the agents working are `active` (ids in team order,
    /// space-separated), as the HUD shows them.
    pub(crate) async fn wait_active(&self, active: &str) {
        self.wait_js(
            &format!("the working agents are [{active}]"),
            "return document.documentElement.dataset.active",
            |v| v == active,
        )
        .await;
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and answers its value.
    pub(crate) async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        match self.client.execute(script, args).await {
            Ok(value) => value,
            Err(error) => panic!("script failed: {error}\n{script}"),
        }
    }

    /// Polls `script` until `done` holds for its value; fails after
    /// [`PAGE_WAIT`] naming `what` and the last value, with a screenshot.
    pub(crate) async fn wait_js(&self, what: &str, script: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PAGE_WAIT;
        loop {
            let value = self.js(script, vec![]).await;
            if done(&value) {
                return value;
            }
            if Instant::now() > deadline {
                let shot = self.screenshot(&format!("failed-{}", slug(what))).await;
                let status = self
                    .js(
                        "return document.getElementById('status')?.textContent ?? ''",
                        vec![],
                    )
                    .await;
                panic!(
                    "timed out waiting until {what}; last value {value}; status {status}; screenshot {}",
                    shot.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Saves a screenshot as `<name>.png` in [`artifacts_dir`] and answers its path.
    pub(crate) async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("a screenshot");
        let dir = artifacts_dir();
        std::fs::create_dir_all(&dir).expect("the artifacts directory");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("the screenshot is written");
        path
    }

    /// Measures the page's frame times: `requestAnimationFrame` deltas over `ms`.
    pub(crate) async fn frame_times(&self, ms: u64) -> FrameStats {
        let script = r#"
            const [ms, done] = arguments;
            const deltas = [];
            let last = 0;
            const end = performance.now() + ms;
            function step(t) {
              if (last) deltas.push(t - last);
              last = t;
              if (t < end) requestAnimationFrame(step); else done(deltas);
            }
            requestAnimationFrame(step);
        "#;
        let value = self
            .client
            .execute_async(script, vec![json!(ms)])
            .await
            .expect("the frame measurement runs");
        let mut deltas: Vec<f64> = value
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        FrameStats::of(&mut deltas)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Closing the watchdog's input ends chromedriver and the browser.
        drop(self.stdin.take());
        let _ = self.watchdog.wait();
    }
}

/// Frame-time figures, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct FrameStats {
    /// Frames measured.
    pub(crate) frames: usize,
    /// The median frame time.
    pub(crate) median: f64,
    /// The 95th percentile.
    pub(crate) p95: f64,
    /// The longest frame.
    pub(crate) max: f64,
}

impl FrameStats {
    fn of(deltas: &mut [f64]) -> Self {
        deltas.sort_by(f64::total_cmp);
        let at = |q: f64| {
            if deltas.is_empty() {
                f64::NAN
            } else {
                deltas[((deltas.len() - 1) as f64 * q).round() as usize]
            }
        };
        Self {
            frames: deltas.len(),
            median: at(0.5),
            p95: at(0.95),
            max: at(1.0),
        }
    }
}

/// Where the browser tests leave screenshots: `target/hud-artifacts/`
/// (found from the running test or example binary, which lives in
/// `target/<profile>/deps` or `target/<profile>/examples`).
pub(crate) fn artifacts_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("JARVIS_HUD_ARTIFACTS") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir)
        .join("hud-artifacts")
}

fn slug(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(60)
        .collect()
}
