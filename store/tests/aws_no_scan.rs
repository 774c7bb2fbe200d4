//! Invariant 3 ("a poll costs what is due, not what is stored"), checked in the source: the
//! aws backend calls DynamoDB's `Scan` nowhere but in the admin functions named below. Listing goes through the GSI, the lease
//! partition or the DLQ (see `store/src/aws/`). If an export or admin function ever needs a
//! scan, name it in `ALLOWED` below; no request or poll path may.

use std::path::Path;

/// Functions allowed to call `Scan`: `init`'s one-off migration of a deployment made before
/// `by_status` (store/src/aws/init.rs), an admin operation, never a request or poll path.
const ALLOWED: &[&str] = &["backfill_status_index"];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The lines of `text` that call `Scan` outside an allowed function, as `line: fn: code`.
fn scans_outside(text: &str, allowed: &[&str]) -> Vec<String> {
    let mut current_fn = String::new();
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        if let Some(rest) = code.split("fn ").nth(1) {
            current_fn = rest
                .split(['(', '<'])
                .next()
                .unwrap_or("")
                .trim()
                .to_owned();
        }
        let scans = code.contains(".scan()")
            || code.contains("ScanInput")
            || code.contains("operation::scan");
        if scans && !allowed.contains(&current_fn.as_str()) {
            found.push(format!("{}: fn {current_fn}: {}", i + 1, line.trim()));
        }
    }
    found
}

#[test]
fn the_aws_backend_never_scans() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/aws");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(
        files.len() >= 5,
        "expected the aws module's files in {}",
        dir.display()
    );
    let mut offenders = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for o in scans_outside(&text, ALLOWED) {
            offenders.push(format!("{}:{o}", f.display()));
        }
    }
    assert!(
        offenders.is_empty(),
        "Scan on a request or poll path:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_check_finds_a_scan_and_honours_the_allow_list() {
    let src = "
        async fn task_list_pending(&self) {
            let out = self.ddb().scan().table_name(t).send().await?; // sneaky
        }
        async fn export_all(&self) {
            let out = self.ddb().scan().table_name(t).send().await?;
        }
        async fn due_query(&self) {
            // a comment about .scan() is not a call
            self.ddb().query().send().await?;
        }";
    let found = scans_outside(src, &["export_all"]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("fn task_list_pending"), "{found:?}");
    assert_eq!(scans_outside(src, &[]).len(), 2);
}
