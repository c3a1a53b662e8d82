//! Notifications: what an agent says on its own reaches the person when no
//! screen shows it.
//!
//! The reflection daemon records every proactive message (a reminder, a
//! watch or source report, a goal reminder) in its session and pushes it to
//! the screens attached there. When **no screen is attached**, it hands the
//! message to the [`Notifier`] once, which sends it through the channels of
//! `$JARVIS_HOME/notifications.yaml`:
//!
//! ```yaml
//! channels:
//!   - kind: webhook                 # POST {"title","message","agent_id","kind","session_id","message_id","at"}
//!     url: https://hooks.example.com/jarvis
//!     agents: [karen]               # optional: only these agents' messages
//!     quiet_hours: "22:00-07:00"    # optional, in the person's zone: held until they end
//!   - kind: email                   # feature `email`
//!     smtp: { host: smtp.example.com, port: 587, username: me, password_env: SMTP_PASSWORD, starttls: true }
//!     from: jarvis@example.com
//!     to: me@example.com
//!   - kind: desktop                 # freedesktop notifications (`notify-send`) where a session bus exists
//! ```
//!
//! **Once.** Each (message, channel) pair is queued in
//! `$JARVIS_HOME/notify_outbox.jsonl` (an [`Outbox`], synced when queued)
//! when the message is first recorded, and marked done once sent, so a
//! restart neither loses a queued notification nor sends a sent one again.
//! (A crash in the instant between a send and its mark sends it again; the
//! body's `message_id` lets a receiver drop the repeat.) A failure (a
//! refused connection, an HTTP status other than 2xx, an SMTP error) is
//! logged and tried again after a backoff, 30 s doubling to one hour; it is
//! never fatal. A background answer (a turn that went on after its
//! acknowledgement) that ends while no screen is attached to its session
//! is handed over the same way. A channel that can never work here (a desktop channel
//! without a session bus) logs that once per message and drops it.

use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use super::outbox::{Outbox, OutboxItem};
use jarvis_agent::ProactiveKind;
use jarvis_common::{Clock, TimeZone, Timestamp};
use jarvis_turn::AnswerNotifier;

/// The channels' file under `JARVIS_HOME`.
pub const NOTIFICATIONS_FILE: &str = "notifications.yaml";
/// The queue of notifications to send, under `JARVIS_HOME`.
pub const NOTIFY_OUTBOX_FILE: &str = "notify_outbox.jsonl";
/// The first wait after a failed send; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(30);
/// The longest wait between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// How long one send may take.
#[cfg(any(feature = "http", feature = "email"))]
const SEND_TIMEOUT: Duration = Duration::from_secs(15);

/// A kind of channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelKind {
    /// An HTTP POST of a JSON body.
    Webhook,
    /// An email over SMTP.
    Email,
    /// A desktop notification.
    Desktop,
}

/// How an email channel reaches its SMTP server.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpSettings {
    /// The server's host name.
    pub host: String,
    /// Its port (587 for submission with STARTTLS).
    pub port: u16,
    /// The user to log in as, if any.
    #[serde(default)]
    pub username: Option<String>,
    /// The environment variable holding the password (never the password).
    #[serde(default)]
    pub password_env: Option<String>,
    /// Upgrade to TLS with STARTTLS (default `true`; `false` sends in
    /// clear text, for a relay on this machine).
    #[serde(default)]
    pub starttls: Option<bool>,
}

/// One channel of `notifications.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelConfig {
    /// Webhook, email or desktop.
    pub kind: ChannelKind,
    /// Only these agents' messages; all when absent.
    #[serde(default)]
    pub agents: Option<Vec<String>>,
    /// `HH:MM-HH:MM` in the person's zone: messages wait until it ends.
    #[serde(default)]
    pub quiet_hours: Option<String>,
    /// The webhook's address.
    #[serde(default)]
    pub url: Option<String>,
    /// The email channel's server.
    #[serde(default)]
    pub smtp: Option<SmtpSettings>,
    /// The email's sender.
    #[serde(default)]
    pub from: Option<String>,
    /// The email's recipient.
    #[serde(default)]
    pub to: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NotificationsFile {
    #[serde(default)]
    channels: Vec<ChannelConfig>,
}

/// A channel checked and ready.
#[derive(Debug, Clone)]
struct Channel {
    config: ChannelConfig,
    /// Quiet hours as minutes of the day, `[start, end)`.
    quiet: Option<(u32, u32)>,
}

/// Reads `notifications.yaml` text into its channels; an error names what
/// is wrong.
pub fn parse_notifications(yaml: &str) -> Result<Vec<ChannelConfig>, String> {
    let file: NotificationsFile = serde_yaml::from_str(yaml).map_err(|e| e.to_string())?;
    for (i, channel) in file.channels.iter().enumerate() {
        check_channel(channel).map_err(|e| format!("channel {}: {e}", i + 1))?;
    }
    Ok(file.channels)
}

fn check_channel(c: &ChannelConfig) -> Result<Option<(u32, u32)>, String> {
    let quiet = c.quiet_hours.as_deref().map(parse_quiet_hours).transpose()?;
    match c.kind {
        ChannelKind::Webhook => {
            let url = c.url.as_deref().ok_or("a webhook needs `url`")?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("the webhook url {url:?} is not http(s)"));
            }
        }
        ChannelKind::Email => {
            let smtp = c.smtp.as_ref().ok_or("an email channel needs `smtp`")?;
            if smtp.host.trim().is_empty() {
                return Err("`smtp.host` is empty".into());
            }
            for (name, value) in [("from", &c.from), ("to", &c.to)] {
                if !value.as_deref().is_some_and(|v| v.contains('@')) {
                    return Err(format!("an email channel needs `{name}`, an address"));
                }
            }
        }
        ChannelKind::Desktop => {}
    }
    Ok(quiet)
}

/// `HH:MM-HH:MM` as minutes of the day.
fn parse_quiet_hours(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("quiet_hours {text:?} is not HH:MM-HH:MM");
    let (a, b) = text.split_once('-').ok_or_else(bad)?;
    let minutes = |t: &str| -> Option<u32> {
        let (h, m) = t.trim().split_once(':')?;
        let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
        (h < 24 && m < 60).then_some(h * 60 + m)
    };
    let (start, end) = (minutes(a).ok_or_else(bad)?, minutes(b).ok_or_else(bad)?);
    if start == end {
        return Err(format!("quiet_hours {text:?} is empty"));
    }
    Ok((start, end))
}

/// Whether `minute` (of the day) is inside `[start, end)`, across midnight
/// when `end < start`.
fn is_quiet((start, end): (u32, u32), minute: u32) -> bool {
    if start < end {
        (start..end).contains(&minute)
    } else {
        minute >= start || minute < end
    }
}

/// A message to notify about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// The message's id (the proactive entry's).
    pub message_id: String,
    /// The session it was recorded in.
    pub session_id: String,
    /// The agent that said it.
    pub agent_id: String,
    /// That agent's display name, for the title.
    pub agent_name: String,
    /// What kind of message it is.
    pub kind: ProactiveKind,
    /// The text.
    pub text: String,
    /// When it was recorded.
    pub at: Timestamp,
}

/// What one [`Notifier::tick`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotifyReport {
    /// `(message id, channel number from 1)` sent.
    pub sent: Vec<(String, usize)>,
    /// Notifications held by quiet hours.
    pub held: usize,
    /// Sends that failed (tried again later).
    pub failed: usize,
    /// Notifications waiting for their backoff.
    pub waiting: usize,
}

/// A failed send: `permanent` ones are not tried again.
#[derive(Debug)]
struct SendError {
    message: String,
    permanent: bool,
}

impl SendError {
    fn again(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            permanent: false,
        }
    }
}

/// The notification dispatcher; see the module docs.
pub struct Notifier {
    channels: Vec<Channel>,
    queue: Outbox,
    clock: Arc<dyn Clock>,
    zone: TimeZone,
    /// Per queued id: failed tries and when to try again.
    retry: Mutex<HashMap<String, (u32, Timestamp)>>,
    /// Agents' display names, for titles.
    names: HashMap<String, String>,
    #[cfg(feature = "http")]
    http: reqwest::Client,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("channels", &self.channels.len())
            .field("queued", &self.queue.len())
            .finish_non_exhaustive()
    }
}

impl Notifier {
    /// The notifier of `home`: the channels of its `notifications.yaml`
    /// (none when the file is missing) and its queue. A malformed file is
    /// an error naming it.
    pub fn open(home: &Path, clock: Arc<dyn Clock>, zone: impl Into<TimeZone>) -> Result<Self, String> {
        let path = home.join(NOTIFICATIONS_FILE);
        let configs = match std::fs::read_to_string(&path) {
            Ok(text) => parse_notifications(&text).map_err(|e| format!("{}: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let queue = Outbox::open(
            home.join(NOTIFY_OUTBOX_FILE),
            super::outbox::DEFAULT_OUTBOX_CAPACITY,
        )
        .map_err(|e| e.to_string())?;
        Self::new(configs, queue, clock, zone)
    }

    /// A notifier over `configs` queueing in `queue`.
    pub fn new(
        configs: Vec<ChannelConfig>,
        queue: Outbox,
        clock: Arc<dyn Clock>,
        zone: impl Into<TimeZone>,
    ) -> Result<Self, String> {
        let mut channels = Vec::with_capacity(configs.len());
        for (i, config) in configs.into_iter().enumerate() {
            let quiet = check_channel(&config).map_err(|e| format!("channel {}: {e}", i + 1))?;
            channels.push(Channel { config, quiet });
        }
        Ok(Self {
            channels,
            queue,
            clock,
            zone: zone.into(),
            retry: Mutex::new(HashMap::new()),
            names: HashMap::new(),
            #[cfg(feature = "http")]
            http: reqwest::Client::builder()
                .timeout(SEND_TIMEOUT)
                .build()
                .unwrap_or_default(),
        })
    }

    /// Titles name agents by these display names (agent id → name).
    pub fn with_agent_names(mut self, names: HashMap<String, String>) -> Self {
        self.names = names;
        self
    }

    /// The display name of `agent_id` (its id when unknown).
    pub fn agent_name(&self, agent_id: &str) -> String {
        self.names
            .get(agent_id)
            .cloned()
            .unwrap_or_else(|| agent_id.to_owned())
    }

    /// Whether any channel is configured.
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }

    /// Notifications waiting to be sent.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The time by the notifier's clock.
    pub fn now(&self) -> Timestamp {
        Timestamp::from_system_time(self.clock.now())
    }

    /// Queues `n` for every channel that takes its agent; answers how many.
    pub async fn notify(&self, n: &Notification) -> usize {
        let mut queued = 0;
        for (i, channel) in self.channels.iter().enumerate() {
            if channel
                .config
                .agents
                .as_ref()
                .is_some_and(|agents| !agents.iter().any(|a| a == &n.agent_id))
            {
                continue;
            }
            let item = OutboxItem {
                message_id: format!("{}@{}", n.message_id, i + 1),
                session_id: n.session_id.clone(),
                agent_id: n.agent_id.clone(),
                kind: n.kind,
                text: n.text.clone(),
                at: n.at,
                meta: json!({"channel": i + 1, "agent_name": n.agent_name, "message_id": n.message_id}),
            };
            match self.queue.put(item).await {
                Ok(_) => queued += 1,
                Err(error) => {
                    tracing::warn!(%error, message_id = %n.message_id, "a notification could not be queued")
                }
            }
        }
        queued
    }

    /// Sends what is due: every queued notification whose channel is not in
    /// quiet hours and whose backoff has passed.
    pub async fn tick(&self) -> NotifyReport {
        let now = self.now();
        let minute = {
            let t = self.zone.civil(now);
            t.hour * 60 + t.minute
        };
        let mut report = NotifyReport::default();
        for item in self.queue.pending().await {
            let number = item.meta["channel"].as_u64().unwrap_or(0) as usize;
            let Some(channel) = number.checked_sub(1).and_then(|i| self.channels.get(i)) else {
                tracing::warn!(id = %item.message_id, "a queued notification's channel is no longer configured; it is dropped");
                self.queue.done(&item.message_id).await;
                continue;
            };
            if channel.quiet.is_some_and(|q| is_quiet(q, minute)) {
                report.held += 1;
                continue;
            }
            let tries = self
                .retry
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&item.message_id)
                .copied();
            if tries.is_some_and(|(_, next)| next > now) {
                report.waiting += 1;
                continue;
            }
            match self.send(channel, &item).await {
                Ok(()) => {
                    self.queue.done(&item.message_id).await;
                    self.retry
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&item.message_id);
                    let id = item.meta["message_id"]
                        .as_str()
                        .unwrap_or(&item.message_id)
                        .to_owned();
                    report.sent.push((id, number));
                }
                Err(e) if e.permanent => {
                    tracing::warn!(id = %item.message_id, channel = number, error = %e.message,
                        "a notification cannot be sent through this channel here; it is dropped");
                    self.queue.done(&item.message_id).await;
                }
                Err(e) => {
                    report.failed += 1;
                    let failures = tries.map_or(1, |(n, _)| n + 1);
                    let wait = FIRST_BACKOFF
                        .saturating_mul(1 << (failures - 1).min(16))
                        .min(MAX_BACKOFF);
                    let next = Timestamp::from_millis(now.as_millis() + wait.as_millis() as i64);
                    tracing::warn!(id = %item.message_id, channel = number, error = %e.message, failures,
                        retry_in_secs = wait.as_secs(), "a notification could not be sent; it is tried again");
                    self.retry
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(item.message_id.clone(), (failures, next));
                }
            }
        }
        if !report.sent.is_empty() {
            self.queue.compact().await;
        }
        report
    }

    /// Ticks every `interval` until `cancel` fires.
    pub async fn run(self: Arc<Self>, interval: Duration, cancel: CancellationToken) {
        let mut every = tokio::time::interval(interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = every.tick() => { self.tick().await; }
            }
        }
    }

    async fn send(&self, channel: &Channel, item: &OutboxItem) -> Result<(), SendError> {
        let agent_name = item.meta["agent_name"].as_str().unwrap_or(&item.agent_id);
        let kind = match item.kind {
            ProactiveKind::Answer => "answer",
            ProactiveKind::Filler => "filler",
            ProactiveKind::Proactive => "proactive",
        };
        let title = format!("{agent_name} - Jarvis");
        match channel.config.kind {
            ChannelKind::Webhook => {
                let body = json!({
                    "title": title,
                    "message": item.text,
                    "agent_id": item.agent_id,
                    "kind": kind,
                    "session_id": item.session_id,
                    "message_id": item.meta["message_id"].as_str().unwrap_or(&item.message_id),
                    "at": item.at,
                });
                self.webhook(channel.config.url.as_deref().unwrap_or_default(), &body)
                    .await
            }
            ChannelKind::Email => email(&channel.config, &title, &item.text).await,
            ChannelKind::Desktop => desktop(&title, &item.text).await,
        }
    }

    #[cfg(feature = "http")]
    async fn webhook(&self, url: &str, body: &serde_json::Value) -> Result<(), SendError> {
        let response = self
            .http
            .post(url)
            .json(body)
            .send()
            .await
            .map_err(|e| SendError::again(jarvis_common::error_chain(&e)))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(SendError::again(format!(
                "the webhook answered {}",
                response.status()
            )))
        }
    }

    #[cfg(not(feature = "http"))]
    async fn webhook(&self, _url: &str, _body: &serde_json::Value) -> Result<(), SendError> {
        Err(SendError {
            message: "this build has no HTTP client (cargo feature `http`)".into(),
            permanent: true,
        })
    }
}

/// A background answer that ended with no screen attached goes out as a
/// notification of kind `answer`.
#[async_trait::async_trait]
impl AnswerNotifier for Notifier {
    async fn notify_answer(&self, session_id: &str, agent_id: &str, message_id: &str, text: &str) {
        let notification = Notification {
            message_id: message_id.to_owned(),
            session_id: session_id.to_owned(),
            agent_id: agent_id.to_owned(),
            agent_name: self.agent_name(agent_id),
            kind: ProactiveKind::Answer,
            text: text.to_owned(),
            at: self.now(),
        };
        self.notify(&notification).await;
    }
}

#[cfg(feature = "email")]
async fn email(config: &ChannelConfig, title: &str, text: &str) -> Result<(), SendError> {
    use lettre::message::header::ContentType;
    use lettre::transport::smtp::authentication::Credentials;
    use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

    let permanent = |message: String| SendError {
        message,
        permanent: true,
    };
    let smtp = config
        .smtp
        .as_ref()
        .ok_or_else(|| permanent("no smtp settings".into()))?;
    let address = |a: Option<&String>| {
        a.ok_or_else(|| permanent("an address is missing".into()))?
            .parse()
            .map_err(|e| permanent(format!("bad address: {e}")))
    };
    let message = Message::builder()
        .from(address(config.from.as_ref())?)
        .to(address(config.to.as_ref())?)
        .subject(title)
        .header(ContentType::TEXT_PLAIN)
        .body(text.to_owned())
        .map_err(|e| permanent(e.to_string()))?;
    let mut builder = if smtp.starttls.unwrap_or(true) {
        AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&smtp.host)
            .map_err(|e| permanent(e.to_string()))?
    } else {
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&smtp.host)
    };
    builder = builder.port(smtp.port).timeout(Some(SEND_TIMEOUT));
    if let Some(user) = &smtp.username {
        let password = smtp
            .password_env
            .as_deref()
            .and_then(|name| std::env::var(name).ok())
            .unwrap_or_default();
        builder = builder.credentials(Credentials::new(user.clone(), password));
    }
    builder
        .build()
        .send(message)
        .await
        .map(|_| ())
        .map_err(|e| SendError::again(jarvis_common::error_chain(&e)))
}

#[cfg(not(feature = "email"))]
async fn email(_config: &ChannelConfig, _title: &str, _text: &str) -> Result<(), SendError> {
    Err(SendError {
        message: "this build has no email channel (cargo feature `email`)".into(),
        permanent: true,
    })
}

/// A freedesktop notification through `notify-send`, where a session bus
/// exists.
async fn desktop(title: &str, text: &str) -> Result<(), SendError> {
    if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_none() {
        return Err(SendError {
            message: "no desktop session bus (DBUS_SESSION_BUS_ADDRESS is not set)".into(),
            permanent: true,
        });
    }
    let status = tokio::process::Command::new("notify-send")
        .args(["--app-name=Jarvis", "--", title, text])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .await;
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(SendError::again(format!("notify-send exited with {s}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SendError {
            message: "notify-send is not installed".into(),
            permanent: true,
        }),
        Err(e) => Err(SendError::again(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_are_checked_and_quiet_hours_wrap_midnight() {
        let ok = "channels:\n  - { kind: webhook, url: \"http://127.0.0.1:9/h\", quiet_hours: \"22:00-07:00\" }\n  - { kind: desktop, agents: [karen] }\n";
        assert_eq!(parse_notifications(ok).unwrap().len(), 2);
        for bad in [
            "channels:\n  - { kind: webhook }\n",
            "channels:\n  - { kind: webhook, url: \"ftp://x\" }\n",
            "channels:\n  - { kind: email, smtp: { host: h, port: 25 }, from: a@b }\n",
            "channels:\n  - { kind: desktop, quiet_hours: \"25:00-07:00\" }\n",
            "channels:\n  - { kind: pager }\n",
            "channels:\n  - { kind: desktop, colour: red }\n",
        ] {
            assert!(parse_notifications(bad).is_err(), "{bad}");
        }
        let night = parse_quiet_hours("22:00-07:00").unwrap();
        assert!(is_quiet(night, 23 * 60) && is_quiet(night, 6 * 60 + 59));
        assert!(!is_quiet(night, 7 * 60) && !is_quiet(night, 12 * 60));
        let lunch = parse_quiet_hours("12:00-13:00").unwrap();
        assert!(is_quiet(lunch, 12 * 60 + 30) && !is_quiet(lunch, 13 * 60));
    }
}
