//! The documentation's cross-links resolve: every relative markdown link in `README.md` and
//! `docs/*.md` names a file that exists and, for a `#fragment`, a heading of that file (anchors
//! as GitHub derives them from a heading's text). A section moved or renamed breaks this test,
//! not a reader's click.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The lines of `text` outside fenced code blocks (a fenced block's lines are blanked, so line
/// numbers stay those of the file).
fn outside_fences(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                ""
            } else if fenced {
                ""
            } else {
                line
            }
        })
        .collect()
}

/// GitHub's anchor for a heading's text: lowercase, every character that is not a letter, a
/// digit, a space, `-` or `_` dropped, spaces turned into `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor of a markdown text's headings; a repeated heading gets `-1`, `-2`, ... as on
/// GitHub.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in outside_fences(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes + 1..]);
        let mut anchor = base.clone();
        let mut n = 0;
        while found.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        found.insert(anchor);
    }
    found
}

/// Every link target `](target)` outside fenced code, with its line number (1-based).
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut targets = Vec::new();
    for (number, line) in outside_fences(text).into_iter().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            if let Some(end) = after.find(')') {
                let target = &after[..end];
                if !target.is_empty() && !target.contains(char::is_whitespace) {
                    targets.push((number + 1, target.to_string()));
                }
            }
            rest = after;
        }
    }
    targets
}

/// The broken relative links of the markdown file `file` whose text is `text`, each as
/// `file:line: target: why`.
fn broken_links(file: &Path, text: &str) -> Vec<String> {
    let dir = file.parent().expect("a file has a directory");
    let mut broken = Vec::new();
    for (line, target) in link_targets(text) {
        let scheme = target
            .split_once(':')
            .is_some_and(|(s, _)| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphabetic()));
        if scheme {
            continue;
        }
        let (path, fragment) = match target.split_once('#') {
            Some((path, fragment)) => (path, Some(fragment)),
            None => (target.as_str(), None),
        };
        let at = format!("{}:{line}: {target}", file.display());
        let dest = dir.join(path);
        if !path.is_empty() && !dest.exists() {
            broken.push(format!("{at}: no such file"));
            continue;
        }
        if let Some(fragment) = fragment {
            let dest_text = if path.is_empty() {
                text.to_string()
            } else {
                std::fs::read_to_string(&dest).unwrap_or_default()
            };
            if !anchors(&dest_text).contains(fragment) {
                broken.push(format!("{at}: no heading with that anchor"));
            }
        }
    }
    broken
}

fn documentation_files() -> Vec<PathBuf> {
    let root = repo_root();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let files = documentation_files();
    assert!(files.len() >= 10, "README.md and docs/*.md: {files:?}");
    let mut broken = Vec::new();
    let mut relative = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable");
        relative += link_targets(&text)
            .iter()
            .filter(|(_, t)| !t.starts_with("http"))
            .count();
        broken.extend(broken_links(file, &text));
    }
    assert!(relative >= 40, "only {relative} relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_points_to_every_file_of_docs() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let linked: BTreeSet<String> = link_targets(&readme)
        .into_iter()
        .map(|(_, target)| target)
        .collect();
    for file in documentation_files().iter().skip(1) {
        let name = file.file_name().and_then(|n| n.to_str()).expect("a name");
        let target = format!("docs/{name}");
        assert!(
            linked.contains(&target),
            "README.md's \"Where to go next\" does not link {target}"
        );
    }
}

#[test]
fn anchors_are_github_s() {
    assert_eq!(slug("The terminal's API token"), "the-terminals-api-token");
    assert_eq!(
        slug("Appendix A: the runbooks without gatectl"),
        "appendix-a-the-runbooks-without-gatectl"
    );
    assert_eq!(
        slug("Upgrading a stack deployed before the narrow `InFlight` index"),
        "upgrading-a-stack-deployed-before-the-narrow-inflight-index"
    );
    assert_eq!(slug("2. Round trips, counted"), "2-round-trips-counted");
    let text = "# Title\n\n```sh\n# not a heading\n```\n## Title\n";
    assert_eq!(
        anchors(text),
        BTreeSet::from(["title".to_string(), "title-1".to_string()])
    );
}

#[test]
fn a_broken_link_is_found() {
    let file = repo_root().join("docs").join("EXAMPLE.md");
    let text = "# Here\n\n[ok](#here), [ok](ARCHITECTURE.md#the-problem), \
                [web](https://example.com/x)\n[gone](NOWHERE.md) and [lost](#nowhere)\n\
                [no heading](ARCHITECTURE.md#no-such-section)\n```\n[in code](NOWHERE.md)\n```\n";
    let broken = broken_links(&file, text);
    assert_eq!(broken.len(), 3, "{broken:?}");
    assert!(broken[0].ends_with("EXAMPLE.md:4: NOWHERE.md: no such file"));
    assert!(broken[1].ends_with("EXAMPLE.md:4: #nowhere: no heading with that anchor"));
    assert!(broken[2].contains(":5: ARCHITECTURE.md#no-such-section: no heading"));
}
