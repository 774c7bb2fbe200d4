//! The operator console in a real browser: Debian's Chromium, headless, with JavaScript off,
//! driven over WebDriver (fantoccini) against `punctual serve` running in this process on
//! 127.0.0.1:0 with the embedded store and a webhook receiver.
//!
//! Run under `scripts/browser`, which installs `chromium` and `chromium-driver` when missing,
//! starts chromedriver and exports `PUNCTUAL_WEBDRIVER_URL`:
//!
//! ```text
//! scripts/browser cargo test --features browser --test browser
//! ```
//!
//! Without it every test fails and says so. Each test saves screenshots of the pages it visits
//! in `docs/screenshots/`, which the README shows.

mod support;

use std::sync::Arc;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use support::*;
use tokio_util::sync::CancellationToken;

const OPERATOR_KEY: &str = "test-operator-key";
const VIEWER_KEY: &str = "test-viewer-key";

/// A console served in this process; stops when dropped.
struct Served {
    base: String,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn serve() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let stop = CancellationToken::new();
    let mut config = test_serve_config(dir.path(), 100, 16);
    config
        .api
        .keys
        .add_plain("ops-console", punctual_api::Role::Operator, OPERATOR_KEY);
    config
        .api
        .keys
        .add_plain("auditor", punctual_api::Role::Viewer, VIEWER_KEY);
    let (base, _server) = serve_in_process(config, &stop).await;
    Served {
        base,
        stop,
        _dir: dir,
    }
}

/// A headless Chromium session with JavaScript disabled and a fresh profile.
struct Browser {
    client: Option<Client>,
    base: String,
    _profile: tempfile::TempDir,
}

async fn browser(base: &str) -> Browser {
    let url = std::env::var("PUNCTUAL_WEBDRIVER_URL").unwrap_or_else(|_| {
        panic!(
            "PUNCTUAL_WEBDRIVER_URL is not set: run these tests under scripts/browser, which installs Debian's chromium and chromium-driver and starts chromedriver (scripts/browser cargo test --features browser --test browser)"
        )
    });
    let profile = tempfile::tempdir().unwrap();
    let binary = std::env::var("CHROME_BIN").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": binary,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1",
                "--window-size=1360,900", "--lang=en-US",
                "--blink-settings=scriptEnabled=false",
                format!("--user-data-dir={}", profile.path().display()),
            ],
            "prefs": { "profile.managed_default_content_settings.javascript": 2 },
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let client = ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&url)
        .await
        .unwrap_or_else(|e| panic!("cannot start Chromium through chromedriver at {url}: {e}"));
    Browser {
        client: Some(client),
        base: base.to_owned(),
        _profile: profile,
    }
}

impl Browser {
    fn c(&self) -> &Client {
        self.client.as_ref().unwrap()
    }

    async fn open(&self, path: &str) {
        self.c()
            .goto(&format!("{}{path}", self.base))
            .await
            .unwrap_or_else(|e| panic!("cannot open {path}: {e}"));
    }

    async fn path(&self) -> String {
        let u = self.c().current_url().await.unwrap();
        match u.query() {
            Some(q) => format!("{}?{q}", u.path()),
            None => u.path().to_owned(),
        }
    }

    /// The visible text of the page.
    async fn text(&self) -> String {
        self.c()
            .find(Locator::Css("body"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    async fn find(&self, css: &str) -> fantoccini::elements::Element {
        match self.c().find(Locator::Css(css)).await {
            Ok(e) => e,
            Err(e) => panic!(
                "no {css} on {}: {e}\n{}",
                self.path().await,
                self.text().await
            ),
        }
    }

    /// Clicks what submits a form or follows a link, and waits for the next page.
    async fn click(&self, css: &str) {
        let target = self.find(css).await;
        self.click_element(target).await;
    }

    /// Clicks `e` and waits until the page it was on is replaced and the next one is loaded.
    async fn click_element(&self, e: fantoccini::elements::Element) {
        let old = self.c().find(Locator::Css("html")).await.unwrap();
        e.click()
            .await
            .unwrap_or_else(|e| panic!("cannot click: {e}"));
        let start = std::time::Instant::now();
        while old.tag_name().await.is_ok() {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "the click led to no new page"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        self.c()
            .wait()
            .for_element(Locator::Css("body"))
            .await
            .unwrap();
    }

    async fn fill(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        e.clear().await.unwrap();
        e.send_keys(text).await.unwrap();
    }

    async fn count(&self, css: &str) -> usize {
        self.c().find_all(Locator::Css(css)).await.unwrap().len()
    }

    async fn attr(&self, css: &str, name: &str) -> Option<String> {
        self.c()
            .find(Locator::Css(css))
            .await
            .ok()?
            .attr(name)
            .await
            .unwrap()
    }

    /// The flash message shown after a post.
    async fn flash(&self) -> String {
        match self.c().find(Locator::Css("p.flash")).await {
            Ok(e) => e.text().await.unwrap(),
            Err(_) => String::new(),
        }
    }

    async fn log_in(&self, key: &str) {
        self.open("/console").await;
        assert!(
            self.path().await.starts_with("/console/login"),
            "an anonymous visit goes to the login page, not {}",
            self.path().await
        );
        self.fill("#key", key).await;
        self.click("section.login button[type=submit]").await;
        assert_eq!(self.path().await, "/console", "{}", self.text().await);
    }

    /// Saves a screenshot of the window as docs/screenshots/<name>.png.
    async fn shot(&self, name: &str) {
        self.shot_sized(name, 900).await;
    }

    /// The same, with the window `height` pixels tall for the picture.
    async fn shot_sized(&self, name: &str, height: u32) {
        self.c().set_window_size(1360, height).await.unwrap();
        let png = self.c().screenshot().await.unwrap();
        self.c().set_window_size(1360, 900).await.unwrap();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// The session cookie and CSRF token this browser holds, to forge posts with.
    async fn credentials(&self) -> (String, String) {
        let cookie = self
            .c()
            .get_all_cookies()
            .await
            .unwrap()
            .into_iter()
            .find(|c| c.name() == "punctual_session")
            .expect("a session cookie");
        let Some(csrf) = self.attr("input[name=csrf]", "value").await else {
            panic!(
                "no CSRF token on {}: {}",
                self.path().await,
                self.c().source().await.unwrap()
            );
        };
        (format!("punctual_session={}", cookie.value()), csrf)
    }

    async fn close(mut self) {
        if let Some(c) = self.client.take() {
            c.close().await.unwrap();
        }
    }
}

async fn task_json(base: &str, id: &str) -> Value {
    api_client()
        .get(format!("{base}/v1/tasks/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn dlq_len(base: &str) -> usize {
    let v: Value = api_client()
        .get(format!("{base}/v1/dlq"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["letters"].as_array().unwrap().len()
}

async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while !f().await {
        assert!(start.elapsed() < timeout, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A plain (unauthenticated to the console) client for forged posts.
fn raw_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Tasks for the pages to show: invoices over the next hour, reports on the log target, a
/// few that fire during the test, and three that die at once (the receiver refuses their first
/// call with a permanent 400) and succeed when replayed.
async fn seed(base: &str, receiver: &Receiver) {
    let now = now();
    let mut tasks = Vec::new();
    for i in 0..48 {
        let mut t = http_task(
            &format!("invoice-2026-{i:04}"),
            now + 120_000 + i * 70_000 + (i * i * 1_000) % 50_000,
            &receiver.url,
        );
        t["payload"] = json!({ "invoice": 1000 + i, "customer": format!("c-{:03}", i * 7 % 100), "amount_cents": 1999 + i * 150 });
        tasks.push(t);
    }
    for i in 0..24 {
        tasks.push(json!({
            "id": format!("report-daily-{i:02}"),
            "run_at": punctual_core::validate::format_rfc3339(now + 300_000 + i * 140_000),
            "target": { "type": "log" },
            "payload": { "report": "daily", "part": i },
        }));
    }
    for i in 0..40 {
        tasks.push(http_task(
            &format!("warmup-{i:03}"),
            now + 200 + i * 50,
            &receiver.url,
        ));
    }
    for id in ["dead-a1", "dead-b2", "dead-c3"] {
        let mut t = http_task(id, now, &receiver.url);
        t["max_attempts"] = json!(3);
        tasks.push(t);
    }
    create_batch(base, tasks).await;
    receiver.wait_distinct(43, Duration::from_secs(20)).await;
    wait_until(
        "three dead letters are in the DLQ",
        Duration::from_secs(20),
        || async move { dlq_len(base).await == 3 },
    )
    .await;
}

fn dead_on_first_call() -> Script {
    Arc::new(|id: &str, n: usize| {
        if id.starts_with("dead-") && n == 1 {
            400
        } else {
            200
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_finds_reschedules_cancels_replays_and_purges() {
    let served = serve().await;
    let base = served.base.clone();
    let receiver = Receiver::scripted(dead_on_first_call()).await;
    seed(&base, &receiver).await;
    let b = browser(&base).await;

    // JavaScript is really off: a page's script does not run.
    b.c()
        .goto("data:text/html,<title>off</title><script>document.title='on'</script>")
        .await
        .unwrap();
    assert_eq!(
        b.c().title().await.unwrap(),
        "off",
        "JavaScript must be disabled"
    );

    // Log in.
    b.open("/console").await;
    assert!(b.path().await.starts_with("/console/login"));
    b.shot("login").await;
    b.fill("#key", "not-a-key").await;
    b.click("section.login button[type=submit]").await;
    assert!(b.flash().await.contains("not known"), "{}", b.text().await);
    b.log_in(OPERATOR_KEY).await;
    let text = b.text().await;
    for expected in [
        "overview",
        "tasks per minute",
        "fire rate",
        "lag p99",
        "dlq depth",
        "shards",
    ] {
        assert!(
            text.to_lowercase().contains(expected),
            "overview lacks {expected:?}: {text}"
        );
    }
    assert!(
        text.contains("ops-console") && text.to_lowercase().contains("operator"),
        "who is logged in: {text}"
    );
    assert!(
        b.count("svg.chart rect.future").await > 20,
        "the next hour's bars"
    );
    assert!(
        b.count("svg.chart rect.past").await >= 1,
        "what fired during the test"
    );
    b.shot_sized("overview", 1180).await;

    // Find a task by id prefix.
    b.click("header nav a[href='/console/tasks']").await;
    assert_eq!(b.path().await, "/console/tasks");
    b.shot("tasks").await;
    b.fill("input[name=id_prefix]", "invoice-2026-0007").await;
    b.click("form.filters button[type=submit]").await;
    assert!(b.path().await.contains("id_prefix=invoice-2026-0007"));
    assert_eq!(
        b.count("table.tasks tbody tr").await,
        1,
        "{}",
        b.text().await
    );
    b.click("table.tasks tbody a").await;
    assert_eq!(b.path().await, "/console/tasks/invoice-2026-0007");

    // Reschedule it to 90 minutes from now, and see the new due time.
    let before = task_json(&base, "invoice-2026-0007").await;
    b.fill("#in_minutes", "90").await;
    b.click("form.reschedule-in button").await;
    assert_eq!(b.path().await, "/console/tasks/invoice-2026-0007");
    let flash = b.flash().await;
    assert!(flash.starts_with("Rescheduled to"), "{flash}");
    let after = task_json(&base, "invoice-2026-0007").await;
    assert_eq!(after["version"], before["version"].as_u64().unwrap() + 1);
    let due_ms = after["due_ms"].as_i64().unwrap();
    assert!(
        (due_ms - (now() + 90 * 60_000)).abs() < 30_000,
        "due in 90 min: {after}"
    );
    let shown = chrono::DateTime::from_timestamp_millis(due_ms)
        .unwrap()
        .format("%Y-%m-%d %H:%M:%S")
        .to_string();
    let text = b.text().await;
    assert!(
        text.contains(&shown),
        "the page shows the new due time {shown}: {text}"
    );
    assert!(
        text.contains("in 90 min") || text.contains("in 89 min"),
        "{text}"
    );
    b.shot("task").await;

    // A stale form is refused: the task changes (through the API) after the page was read.
    b.open("/console/tasks/invoice-2026-0008").await;
    let resp = api_client()
        .patch(format!("{base}/v1/tasks/invoice-2026-0008"))
        .json(&json!({ "payload": { "invoice": 1008, "note": "changed elsewhere" } }))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    b.click("form.cancel button").await;
    let flash = b.flash().await;
    assert!(
        flash.contains("changed since you read it") && flash.contains("nothing was changed"),
        "{flash}"
    );
    assert_eq!(
        task_json(&base, "invoice-2026-0008").await["status"],
        "SCHEDULED"
    );
    b.shot("task-stale").await;
    // Cancel it from a fresh page.
    b.open("/console/tasks/invoice-2026-0008").await;
    b.click("form.cancel button").await;
    assert!(
        b.flash().await.starts_with("Cancelled"),
        "{}",
        b.text().await
    );
    assert_eq!(
        task_json(&base, "invoice-2026-0008").await["status"],
        "CANCELLED"
    );

    // Edit a payload: JSON is checked before saving.
    b.open("/console/tasks/invoice-2026-0009").await;
    b.fill("#payload", "{\"invoice\": 1009,").await;
    b.click("form.payload-edit button[type=submit]").await;
    assert!(
        b.flash().await.contains("not valid JSON"),
        "{}",
        b.text().await
    );
    assert_eq!(task_json(&base, "invoice-2026-0009").await["version"], 1);
    b.fill("#payload", "{\"invoice\": 1009, \"amount_cents\": 4200}")
        .await;
    b.click("form.payload-edit button[type=submit]").await;
    assert!(
        b.flash().await.starts_with("Payload saved"),
        "{}",
        b.text().await
    );
    assert_eq!(
        task_json(&base, "invoice-2026-0009").await["payload"],
        json!({ "invoice": 1009, "amount_cents": 4200 })
    );

    // Replay a DEAD task from its page, found through the Dead filter; it fires again.
    b.click("header nav a[href='/console/tasks']").await;
    b.click("nav.tabs a[href='/console/tasks?status=DEAD']")
        .await;
    assert_eq!(
        b.count("table.tasks tbody tr").await,
        3,
        "{}",
        b.text().await
    );
    b.click("table.tasks a[href='/console/tasks/dead-a1']")
        .await;
    assert!(b.text().await.contains("DEAD"));
    b.click("form.replay button").await;
    assert!(
        b.flash().await.starts_with("Replayed"),
        "{}",
        b.text().await
    );
    wait_until("dead-a1 fires again", Duration::from_secs(10), || async {
        receiver.counts().get("dead-a1") == Some(&2)
    })
    .await;
    wait_until("dead-a1 succeeds", Duration::from_secs(10), || async {
        task_json(&base, "dead-a1").await["status"] == "SUCCEEDED"
    })
    .await;

    // Dead letters: replay the selected one (a checkbox), then purge another after confirming.
    b.click("header nav a[href='/console/dlq']").await;
    assert_eq!(
        b.count("table.letters tbody tr").await,
        3,
        "{}",
        b.text().await
    );
    b.shot("dead-letters").await;
    let rows = b
        .c()
        .find_all(Locator::Css("table.letters tbody tr"))
        .await
        .unwrap();
    let mut b2_box = None;
    for row in rows {
        if row.text().await.unwrap().contains("dead-b2") {
            b2_box = Some(
                row.find(Locator::Css("input[type=checkbox]"))
                    .await
                    .unwrap(),
            );
        }
    }
    b2_box.expect("dead-b2's row").click().await.unwrap();
    b.click("div.bulk button.primary").await;
    let flash = b.flash().await;
    assert!(flash.contains("Replayed 1 of 1 selected"), "{flash}");
    wait_until("dead-b2 fires again", Duration::from_secs(10), || async {
        receiver.counts().get("dead-b2") == Some(&2)
    })
    .await;

    let letters = b.count("table.letters tbody tr").await;
    assert_eq!(
        letters,
        2,
        "dead-a1's letter is dropped (its task is live again), dead-b2's replayed: {}",
        b.text().await
    );
    let rows = b
        .c()
        .find_all(Locator::Css("table.letters tbody tr"))
        .await
        .unwrap();
    for row in rows {
        if row.text().await.unwrap().contains("dead-c3") {
            let purge = row.find(Locator::Css("a.button.danger")).await.unwrap();
            b.click_element(purge).await;
            break;
        }
    }
    assert!(b.path().await.ends_with("/purge"), "{}", b.path().await);
    assert!(b.text().await.contains("Purge this dead letter?"));
    b.shot("purge-confirm").await;
    b.click("section.confirm button.danger").await;
    assert!(
        b.flash().await.starts_with("Purged letter"),
        "{}",
        b.text().await
    );
    assert_eq!(
        task_json(&base, "dead-c3").await["status"],
        "DEAD",
        "a purge leaves the task"
    );
    assert_eq!(
        receiver.counts().get("dead-c3"),
        Some(&1),
        "a purged letter does not fire"
    );

    // Log out: the session is gone.
    b.click("header form button").await;
    assert!(b.path().await.starts_with("/console/login"));
    assert!(b.flash().await.contains("Logged out"));
    b.open("/console/tasks").await;
    assert!(
        b.path().await.starts_with("/console/login"),
        "{}",
        b.path().await
    );
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_sees_no_actions_and_the_server_refuses_its_posts() {
    let served = serve().await;
    let base = served.base.clone();
    let receiver = Receiver::scripted(dead_on_first_call()).await;
    seed(&base, &receiver).await;
    let b = browser(&base).await;
    b.log_in(VIEWER_KEY).await;
    assert!(b.text().await.to_lowercase().contains("viewer"));

    b.open("/console/tasks/invoice-2026-0003").await;
    assert!(b.text().await.contains("invoice-2026-0003"));
    assert_eq!(
        b.count("form[action^='/console/act/']:not(.inline)").await,
        0,
        "no action forms"
    );
    assert_eq!(b.count("section.actions").await, 0);
    b.shot("task-viewer").await;
    b.open("/console/dlq").await;
    assert_eq!(b.count("table.letters tbody tr").await, 3);
    assert_eq!(b.count("input[type=checkbox]").await, 0, "no selection");
    assert_eq!(
        b.count("table.letters button, a.button").await,
        0,
        "no replay or purge"
    );
    let (cookie, csrf) = b.credentials().await;
    b.open("/console/dlq/1/purge").await;
    assert!(
        b.text().await.contains("role too weak"),
        "{}",
        b.text().await
    );

    // A forged post with the viewer's own session and valid CSRF token: refused by role.
    let resp = raw_client()
        .post(format!("{base}/console/act/cancel"))
        .header("cookie", cookie)
        .header("accept", "text/html")
        .form(&[
            ("csrf", csrf.as_str()),
            ("id", "invoice-2026-0003"),
            ("version", "1"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let body = resp.text().await.unwrap();
    assert!(
        body.contains("role too weak") && body.contains("viewer"),
        "{body}"
    );
    assert_eq!(
        task_json(&base, "invoice-2026-0003").await["status"],
        "SCHEDULED"
    );
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_without_the_csrf_token_is_refused() {
    let served = serve().await;
    let base = served.base.clone();
    let receiver = Receiver::start().await;
    create_batch(
        &base,
        vec![http_task("csrf-victim", now() + 3_600_000, &receiver.url)],
    )
    .await;
    let b = browser(&base).await;
    b.log_in(OPERATOR_KEY).await;
    b.open("/console/tasks/csrf-victim").await;
    let (cookie, csrf) = b.credentials().await;

    // The operator's own session, without the token: refused, nothing changed.
    let post = |fields: Vec<(&'static str, String)>| {
        raw_client()
            .post(format!("{base}/console/act/cancel"))
            .header("cookie", cookie.clone())
            .header("accept", "text/html")
            .form(&fields)
            .send()
    };
    for fields in [
        vec![
            ("id", "csrf-victim".to_owned()),
            ("version", "1".to_owned()),
        ],
        vec![
            ("csrf", "forged-token".to_owned()),
            ("id", "csrf-victim".to_owned()),
            ("version", "1".to_owned()),
        ],
    ] {
        let resp = post(fields).await.unwrap();
        assert_eq!(resp.status(), 403);
        let body = resp.text().await.unwrap();
        assert!(body.contains("no valid CSRF token"), "{body}");
    }
    assert_eq!(task_json(&base, "csrf-victim").await["status"], "SCHEDULED");

    // The same forged form in the browser. From a page of another site ("localhost"), the
    // browser does not even send the SameSite=Strict session cookie.
    b.c()
        .goto(&attacker_page(&base, "localhost").await)
        .await
        .unwrap();
    b.click("button").await;
    assert!(
        b.text().await.contains("Not logged in"),
        "{}",
        b.text().await
    );
    assert_eq!(task_json(&base, "csrf-victim").await["status"], "SCHEDULED");
    // From another port of the same host (the same site, so the cookie goes along), the
    // missing token is what refuses it.
    b.c()
        .goto(&attacker_page(&base, "127.0.0.1").await)
        .await
        .unwrap();
    b.click("button").await;
    let text = b.text().await;
    assert!(text.contains("Refused: no valid CSRF token"), "{text}");
    assert!(text.contains("Nothing was changed"), "{text}");
    b.shot("csrf-refused").await;
    assert_eq!(task_json(&base, "csrf-victim").await["status"], "SCHEDULED");

    // The same post with the session's token goes through: the token was what was missing.
    let resp = post(vec![
        ("csrf", csrf.clone()),
        ("id", "csrf-victim".to_owned()),
        ("version", "1".to_owned()),
    ])
    .await
    .unwrap();
    assert_eq!(resp.status(), 303);
    assert_eq!(task_json(&base, "csrf-victim").await["status"], "CANCELLED");
    b.close().await;
}

/// Serves, on another port of `host`, a page whose form posts to the console's cancel action
/// without a token; returns its URL.
async fn attacker_page(base: &str, host: &str) -> String {
    let html = format!(
        "<!doctype html><title>win a prize</title><form method=post action='{base}/console/act/cancel'><input type=hidden name=id value=csrf-victim><input type=hidden name=version value=1><button>Claim</button></form>"
    );
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let html = html.clone();
            async move { axum::response::Html(html) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{host}:{}/", addr.port())
}
