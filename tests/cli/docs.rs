//! The manual (README.md and docs/) against the code: every relative link resolves, no
//! file of the repository points at a document outside it, and the examples run.
//!
//! In each Markdown file, in order and in one scratch folder (`testdata/` linked into
//! it, the built `tfshard` first on `PATH`):
//! - a ```` ```sh test ```` block runs with `bash -euo pipefail` and must exit 0;
//! - a ```` ```console ```` block whose commands are all `tfshard …` (or `cargo run
//!   --release -- …`, or `NAME=VALUE tfshard …`) on local paths runs too (an `-o` folder
//!   emptied the first time the block names it, so that a run shown beside a tested one
//!   runs afresh), and each command prints what the block shows, numbers and checksums
//!   aside.
//!
//! ```` ```python test ```` blocks run in `tests/python/test_docs.py`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{root, scratch};

/// README.md and every Markdown file under docs/.
fn manual() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// A fenced block: its info string, first line number and lines.
struct Block {
    info: String,
    line: usize,
    body: Vec<String>,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (n, line) in text.lines().enumerate() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Block {
                    info: info.trim().to_string(),
                    line: n + 1,
                    body: Vec::new(),
                })
            }
            (Some(_), Some(_)) => out.push(open.take().unwrap()),
            (Some(b), None) => b.body.push(line.to_string()),
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "a code block is not closed");
    out
}

/// The prose of a Markdown text: code blocks and inline code left out.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            // Inline code spans hold no links.
            let mut inline = false;
            for c in line.chars() {
                if c == '`' {
                    inline = !inline;
                } else if !inline {
                    out.push(c);
                }
            }
            out.push('\n');
        }
    }
    out
}

/// The targets of the Markdown links `[text](target)` of a text.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    out
}

/// GitHub's anchor of a heading: lowercase, punctuation but `-` and `_` dropped,
/// spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (a repeated heading gets `-1`, `-2`, …).
fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let a = anchor(line.trim_start_matches('#').replace('`', "").as_str());
        let n = out
            .iter()
            .filter(|o| **o == a || o.starts_with(&format!("{a}-")))
            .count();
        out.push(if n == 0 { a } else { format!("{a}-{n}") });
    }
    out
}

/// Every relative link of the manual resolves: the file exists inside the repository,
/// and a `#fragment` names a heading of the Markdown file it points into.
#[test]
fn manual_links_resolve() {
    let root = root().canonicalize().unwrap();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in manual() {
        let text = std::fs::read_to_string(&file).unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            let Ok(resolved) = target.canonicalize() else {
                broken.push(format!("{}: {link}: no such file", file.display()));
                continue;
            };
            if !resolved.starts_with(&root) {
                broken.push(format!(
                    "{}: {link}: outside the repository",
                    file.display()
                ));
                continue;
            }
            if !fragment.is_empty() && resolved.extension().is_some_and(|e| e == "md") {
                let headings = anchors(&std::fs::read_to_string(&resolved).unwrap());
                if !headings.iter().any(|h| h == fragment) {
                    broken.push(format!("{}: {link}: no such heading", file.display()));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// No file of the repository refers to a document that is not in it (the design notes
/// the project started from live outside, and so do its issues).
#[test]
fn nothing_refers_outside_the_repository() {
    let root = root();
    // (Spelt in pieces, so that this file does not name them.)
    let outside = [
        ["DESIGN", ".md"].concat(),
        ["PEERS", ".md"].concat(),
        ["STYLE", ".md"].concat(),
        ["../", "shared"].concat(),
    ];
    let mut found = Vec::new();
    let mut read = 0;
    let top = [
        "README.md",
        "Cargo.toml",
        "pyproject.toml",
        ".ci",
        "src",
        "tests",
        "scripts",
        "benches",
        "examples",
        "docs",
        "fuzz",
        "testdata",
    ];
    let mut stack: Vec<PathBuf> = top.iter().map(|t| root.join(t)).collect();
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n == "target" || n == "corpus")
            {
                continue;
            }
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue; // not text
        };
        read += 1;
        for name in &outside {
            if text.contains(name.as_str()) {
                found.push(format!("{}: {name}", path.display()));
            }
        }
        // Nor the project's issue tracker: a comment says what it means itself.
        let lower = text.to_ascii_lowercase();
        for (at, _) in lower.match_indices("issue #") {
            if lower[at + 7..].starts_with(|c: char| c.is_ascii_digit()) {
                found.push(format!("{}: {}", path.display(), &lower[at..at + 8]));
            }
        }
    }
    assert!(read > 100, "only {read} files read");
    assert!(
        found.is_empty(),
        "references outside the repository:\n{}",
        found.join("\n")
    );
}

/// The folder of the built binary, for `PATH`.
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_tfshard"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs `script` with bash in `dir`, the binary first on `PATH`; (exit code, stdout and
/// stderr together).
fn bash(dir: &Path, script: &str) -> (i32, String) {
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c"])
        .arg(format!("exec 2>&1\n{script}"))
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("TFSHARD_FAILPOINTS")
        .output()
        .expect("run bash");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Output with what changes from run to run made alike: numbers (and 8-digit hex
/// checksums) as `N`, runs of spaces as one, trailing spaces dropped.
fn normalized(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| {
            let mut out = String::new();
            let chars: Vec<char> = line.chars().collect();
            let mut i = 0;
            while i < chars.len() {
                let c = chars[i];
                let hex = chars[i..]
                    .iter()
                    .take_while(|c| c.is_ascii_hexdigit())
                    .count();
                let word_start = i == 0 || !chars[i - 1].is_ascii_alphanumeric();
                if c.is_ascii_digit() || (hex == 8 && word_start) {
                    let mut j = i;
                    while j < chars.len()
                        && (chars[j].is_ascii_digit()
                            || (hex == 8 && j < i + 8)
                            || (chars[j] == '.'
                                && chars.get(j + 1).is_some_and(|c| c.is_ascii_digit())))
                    {
                        j += 1;
                    }
                    out.push('N');
                    i = j;
                } else if c == ' ' {
                    if !out.ends_with(' ') {
                        out.push(' ');
                    }
                    i += 1;
                } else {
                    out.push(c);
                    i += 1;
                }
            }
            out.trim_end().to_string()
        })
        .collect()
}

/// A console block's commands (with `cargo run --release --` as `tfshard`) and the
/// output shown after each, or `None` when it is not one to run here.
fn console_commands(block: &Block) -> Option<Vec<(String, Vec<String>)>> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in &block.body {
        if let Some(command) = line.strip_prefix("$ ") {
            let command = command.replace("cargo run --release -- ", "tfshard ");
            // (Past leading NAME=VALUE settings.)
            let program = command
                .split_whitespace()
                .find(|w| !w.contains('='))
                .unwrap_or_default();
            if program != "tfshard" || command.contains("://") {
                return None;
            }
            out.push((command, Vec::new()));
        } else if let Some((_, shown)) = out.last_mut() {
            shown.push(line.clone());
        } else {
            return None;
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The `-o` folder of a command, if any.
fn output_of(command: &str) -> Option<&str> {
    let words: Vec<&str> = command.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[0] == "-o" || w[0] == "--output")
        .map(|w| w[1])
}

#[test]
fn manual_examples_run() {
    let mut ran = 0;
    let mut shown = 0;
    let mut failed = Vec::new();
    for file in manual() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_stem().unwrap().to_string_lossy().to_string();
        let dir = scratch(&format!("docs-{name}"));
        std::os::unix::fs::symlink(root().join("testdata"), dir.join("testdata")).unwrap();
        for block in blocks(&text) {
            let place = format!("{}:{}", file.display(), block.line);
            if block.info == "sh test" {
                ran += 1;
                let (code, output) = bash(&dir, &block.body.join("\n"));
                if code != 0 {
                    failed.push(format!("{place}: exit {code}\n{output}"));
                }
            } else if block.info == "console" {
                let Some(commands) = console_commands(&block) else {
                    continue;
                };
                shown += 1;
                let mut emptied = Vec::new();
                for (command, expected) in commands {
                    // A folder a block writes into is emptied the first time it is named:
                    // the run is shown as it goes afresh.
                    if let Some(out) = output_of(&command) {
                        if !emptied.contains(&out.to_string()) {
                            let _ = std::fs::remove_dir_all(dir.join(out));
                            emptied.push(out.to_string());
                        }
                    }
                    let (_, output) = bash(&dir, &command);
                    let (got, want) = (normalized(&output), normalized(&expected.join("\n")));
                    if got != want {
                        failed.push(format!(
                            "{place}: `{command}` printed\n{output}\nwhere the manual shows\n{}",
                            expected.join("\n")
                        ));
                    }
                }
            }
        }
    }
    assert!(ran > 30, "only {ran} `sh test` blocks found");
    assert!(shown > 10, "only {shown} console blocks run");
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

#[test]
fn output_is_normalized_alike() {
    assert_eq!(
        normalized("wrote 2000 records in 1 shard (0.4 MB) in 0.01 s  (43 MB/s)"),
        normalized("wrote 7 records in 5 shard (10.25 MB) in 1.5 s (4 MB/s)")
    );
    assert_eq!(
        normalized("crc 7914924a, lists 411001dc"),
        vec!["crc N, lists N"]
    );
    assert_ne!(normalized("OK"), normalized("FAILED"));
    assert_eq!(anchor("Shuffle and splits"), "shuffle-and-splits");
    assert_eq!(anchor("`--resume` (again)"), "--resume-again");
    assert_eq!(
        links("see [a](docs/a.md#b) and `[c](d)`"),
        vec!["docs/a.md#b"]
    );
}
