//! The tests that skipped at run time in `cargo xtask test`.
//!
//! A test that cannot run here (not root, a program missing) returns early and libtest counts
//! it as passed, so no summary of cargo's shows it. test-support's `skip` appends a line for it
//! to the file `OBSERVER_SKIPS_FILE` names; the test verb gives every run one fresh file in the
//! target directory (the guests write theirs to the shared directory, appended here after), and
//! prints them all at the end: `xtask: skipped at run time: N`, the line `.ci/run` counts, then
//! one line per skip. Under CI=true a skip fails its test instead, so CI's N is 0.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

/// The skips file of one run.
pub struct Skips {
    path: PathBuf,
}

impl Skips {
    /// `DIR/test-skips.tsv`, emptied (a run before this one may have left lines in it).
    pub fn fresh(dir: &Path) -> Result<Skips> {
        let path = dir.join("test-skips.tsv");
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        fs::write(&path, "").with_context(|| format!("emptying {}", path.display()))?;
        Ok(Skips { path })
    }

    /// Where the tests append their skips: the value of `OBSERVER_SKIPS_FILE`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `lines` (`<test>\t<reason>` each, as a guest's tests wrote them).
    pub fn append(&self, lines: &[String]) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .with_context(|| format!("appending to {}", self.path.display()))
    }

    /// Prints how many tests skipped and each one with its reason (on stderr, with the phase
    /// list that follows).
    pub fn report(&self) {
        let text = fs::read_to_string(&self.path).unwrap_or_default();
        for line in report_lines(&text) {
            eprintln!("{line}");
        }
    }
}

/// The report of a skips file's `text`: the count, then `test: reason` per skip.
fn report_lines(text: &str) -> Vec<String> {
    let skips: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut out = vec![format!("xtask: skipped at run time: {}", skips.len())];
    out.extend(skips.iter().map(|l| {
        let (test, reason) = l.split_once('\t').unwrap_or((l, ""));
        format!("xtask:   - {test}: {reason}")
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_are_counted_and_listed() {
        assert_eq!(report_lines(""), ["xtask: skipped at run time: 0"]);
        assert_eq!(
            report_lines("tail a_test\tnot root\n[6.1 --hooks kprobe] tail b\tnft is missing\n"),
            [
                "xtask: skipped at run time: 2",
                "xtask:   - tail a_test: not root",
                "xtask:   - [6.1 --hooks kprobe] tail b: nft is missing",
            ]
        );
    }

    #[test]
    fn a_fresh_file_is_empty_and_lines_are_appended() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("xtask-skips-{}", std::process::id()));
        fs::create_dir_all(&dir)?;
        fs::write(dir.join("test-skips.tsv"), "old\tline\n")?;
        let skips = Skips::fresh(&dir)?;
        assert_eq!(fs::read_to_string(skips.path())?, "");
        skips.append(&["a\tx".into(), "b\ty".into()])?;
        skips.append(&[])?;
        assert_eq!(fs::read_to_string(skips.path())?, "a\tx\nb\ty\n");
        fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
