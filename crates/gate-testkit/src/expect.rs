//! What a scenario expects beyond the kit's invariants, in words: figures that must match and
//! the manual reasons a person may get. Every integration's scenario checks these the same way
//! (`payments::scenario`, `job_client::scenario`).

use super::harness::RunReport;
use gate::manual::ManualReason;

/// Each figure `(what, got, want)` whose `got` is not `want`, as `"{what}: {got}, expected
/// {want}"`; empty when all match.
pub fn figure_misses(figures: &[(&str, usize, usize)]) -> Vec<String> {
    figures
        .iter()
        .filter(|(_, got, want)| got != want)
        .map(|(what, got, want)| format!("{what}: {got}, expected {want}"))
        .collect()
}

/// Each manual item of `report` whose reason is not in `expected`, or whose detail `leaks`
/// (e.g. names a secret of the request), as `"unexpected manual item {code} {detail:?}"`.
pub fn unexpected_manual_items(
    report: &RunReport,
    expected: &[ManualReason],
    leaks: impl Fn(&str) -> bool,
) -> Vec<String> {
    report
        .manual
        .iter()
        .filter(|item| !expected.contains(&item.reason) || leaks(&item.detail))
        .map(|item| {
            format!(
                "unexpected manual item {} {:?}",
                item.reason.code(),
                item.detail
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_figures_that_differ_are_named() {
        let misses = figure_misses(&[("jobs made", 3, 3), ("rows", 2, 3)]);
        assert_eq!(misses, vec!["rows: 2, expected 3".to_string()]);
        assert!(figure_misses(&[("jobs made", 0, 0)]).is_empty());
    }
}
