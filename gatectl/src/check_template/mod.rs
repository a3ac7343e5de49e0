//! `gatectl check-template FILE`: the checks of a template that deploys the gate, run on what it
//! deploys (the template and every `AWS::Serverless::Application` it instantiates from a local
//! `Location`, resolved relative to the template), from any directory:
//!
//! * the thresholds: the alarms and the `InFlight` index against the code ([`thresholds`]);
//! * the policy rules no scanner knows (one role per function, the secrets' readers, the queue
//!   policies, the operators' policy, ...): `check-template-policy.py`, built into this binary
//!   and run with Python 3 and PyYAML (`$GATECTL_PYTHON`, else `python3`);
//! * the lint, when the tools are on `PATH` (`--require-lint`: a missing tool is a failure):
//!   `sam validate --lint`, `cfn-lint --include-checks I` and `checkov` (CloudFormation and
//!   secrets frameworks, `--skip-download`) on the template and on each application's.
//!
//! Offline: no AWS credentials or network (the region, `$AWS_DEFAULT_REGION` or `eu-west-1`,
//! only selects cfn-lint's specification).

pub mod thresholds;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The policy rules and their IAM reader, built in so that the command runs from anywhere.
const POLICY_SCRIPT: &str = include_str!("../../../scripts/check-template-policy.py");
const POLICY_MODULE: &str = include_str!("../../../scripts/template_iam.py");

/// What the checks found: one line per check, and whether any failed.
#[derive(Debug, Default)]
pub struct Report {
    /// `ok ...`, `FAIL ...` or `skip ...` lines, in the order run.
    pub lines: Vec<String>,
    /// Whether any check failed.
    pub failed: bool,
}

impl Report {
    fn ok(&mut self, line: String) {
        self.lines.push(format!("ok   {line}"));
    }

    fn fail(&mut self, line: String) {
        self.failed = true;
        self.lines.push(format!("FAIL {line}"));
    }
}

/// The local `Location` of every `AWS::Serverless::Application` of `template` (its text), as
/// written; a URL or an intrinsic is not local and is left out.
pub fn application_locations(template: &str) -> Vec<String> {
    let Some(resources) = template.split("\nResources:\n").nth(1) else {
        return Vec::new();
    };
    let names = resources.lines().filter_map(|l| {
        let name = l.strip_prefix("  ")?.strip_suffix(':')?;
        (!name.starts_with([' ', '#'])).then_some(name)
    });
    names
        .filter_map(|name| thresholds::resource(template, name))
        .filter(|block| block.contains("Type: AWS::Serverless::Application"))
        .filter_map(|block| {
            let location = block
                .lines()
                .find_map(|l| l.trim().strip_prefix("Location:"))?
                .trim()
                .trim_matches(['"', '\'']);
            let local = !location.is_empty() && !location.contains("://");
            (local && !location.starts_with('!')).then(|| location.to_string())
        })
        .collect()
}

/// `path` and, recursively, the applications it instantiates: (path, text), the template
/// first.
///
/// # Errors
/// The path and the I/O error of a file that cannot be read; a template that instantiates
/// itself, directly or through another (a `Location` cycle), named with the chain.
pub fn load(path: &Path) -> Result<Vec<(PathBuf, String)>, String> {
    let mut out = Vec::new();
    load_within(path, &mut Vec::new(), &mut out)?;
    Ok(out)
}

/// [`load`], with `chain` the templates that instantiate `path` (a cycle's witness).
fn load_within(
    path: &Path,
    chain: &mut Vec<PathBuf>,
    out: &mut Vec<(PathBuf, String)>,
) -> Result<(), String> {
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if chain.contains(&canonical) {
        let names: Vec<String> = chain.iter().map(|p| p.display().to_string()).collect();
        return Err(format!(
            "{}: a Location cycle ({} -> {})",
            path.display(),
            names.join(" -> "),
            canonical.display()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    out.push((path.to_path_buf(), text.clone()));
    chain.push(canonical);
    for location in application_locations(&text) {
        load_within(&dir.join(&location), chain, out)?;
    }
    chain.pop();
    Ok(())
}

/// Runs every check on `path` (the thresholds, the policy rules, the lint; `require_lint`: a
/// linter not installed fails the check instead of skipping it).
pub fn run(path: &Path, require_lint: bool) -> Report {
    let mut report = Report::default();
    let templates = match load(path) {
        Ok(t) => t,
        Err(e) => {
            report.fail(e);
            return report;
        }
    };
    if templates.len() == 1 {
        report.lines.push(format!(
            "note {}: instantiates no gate application (a local AWS::Serverless::Application); \
             the checks read this file alone",
            path.display()
        ));
    }
    let texts: Vec<String> = templates.iter().map(|(_, t)| t.clone()).collect();
    let problems = thresholds::check(&texts);
    if problems.is_empty() {
        report.ok("thresholds: the alarms and the InFlight index match gate::signals".into());
    }
    for p in problems {
        report.fail(format!("thresholds: {p}"));
    }
    policy(path, &mut report);
    for (file, _) in &templates {
        lint(file, require_lint, &mut report);
    }
    report
}

/// The policy rules: the built-in script, run with `$GATECTL_PYTHON` or `python3`.
fn policy(path: &Path, report: &mut Report) {
    let dir = std::env::temp_dir().join(format!(
        "gatectl-check-template-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join("check-template-policy.py"), POLICY_SCRIPT))
        .and_then(|()| std::fs::write(dir.join("template_iam.py"), POLICY_MODULE));
    if let Err(e) = written {
        report.fail(format!("policy: cannot write {}: {e}", dir.display()));
        return;
    }
    let python = std::env::var("GATECTL_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .arg(dir.join("check-template-policy.py"))
        .arg(path)
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    match out {
        Err(e) => report.fail(format!(
            "policy: {python}: {e} (the policy rules need Python 3 with PyYAML; set GATECTL_PYTHON)"
        )),
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let errors = String::from_utf8_lossy(&out.stderr).trim().to_string();
            if out.status.success() {
                report.ok(format!("policy: {text}"));
            } else if errors.contains("No module named 'yaml'") {
                report.fail(format!(
                    "policy: {python} has no PyYAML (pip install pyyaml, or set GATECTL_PYTHON)"
                ));
            } else {
                for line in errors.lines() {
                    report.fail(format!("policy: {line}"));
                }
            }
        }
    }
}

/// The three linters on one file, each skipped (or failed, `require_lint`) when not on `PATH`.
fn lint(file: &Path, require_lint: bool, report: &mut Report) {
    let region = std::env::var("AWS_DEFAULT_REGION").unwrap_or_else(|_| "eu-west-1".into());
    let f = file.display().to_string();
    let runs: [(&str, Vec<&str>); 3] = [
        (
            "sam",
            vec!["validate", "--lint", "--template", &f, "--region", &region],
        ),
        // Its exit code is a bit mask (2 error, 4 warning, 8 informational): any bit fails.
        (
            "cfn-lint",
            vec!["--regions", &region, "--include-checks", "I", "--", &f],
        ),
        (
            "checkov",
            vec![
                "--file",
                &f,
                "--framework",
                "cloudformation",
                "secrets",
                "--skip-download",
                "--compact",
                "--quiet",
            ],
        ),
    ];
    for (tool, args) in runs {
        let out = Command::new(tool)
            .args(&args)
            .env("AWS_DEFAULT_REGION", &region)
            .env("AWS_REGION", &region)
            .env("SAM_CLI_TELEMETRY", "0")
            .output();
        match out {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if require_lint {
                    report.fail(format!("lint: {tool} not installed ({f})"));
                } else {
                    report
                        .lines
                        .push(format!("skip lint: {tool} not installed ({f})"));
                }
            }
            Err(e) => report.fail(format!("lint: {tool}: {e} ({f})")),
            Ok(out) if out.status.success() => report.ok(format!("lint: {tool} {f}")),
            Ok(out) => {
                report.fail(format!("lint: {tool} {f}:"));
                for stream in [&out.stdout, &out.stderr] {
                    for line in String::from_utf8_lossy(stream).lines() {
                        report.lines.push(format!("     {line}"));
                    }
                }
            }
        }
    }
}
