//! `cargo xtask docs [--check]`: the documentation book under `docs/` (mdBook).
//!
//! 1. Regenerates the three reference pages of `docs/src/reference/` from the code, so they
//!    cannot drift from it:
//!    - `cli.md`: the built `pyagent` binary's `--help` and each subcommand's (clap's own text);
//!    - `config.md`: the agent library's table of settings, `pyagent::config::KEYS` (its tests
//!      hold it to the config file's and the environment's parsers and to the defaults);
//!    - `metrics.md`: every metric's name, type, help and labels, read from the sources that
//!      register them (`agent/src/export/metrics/`), the BPF program's counters
//!      (`common::COUNTERS`), and the values of the labels that take a fixed set, read from the
//!      enums that name them (`reason` of `pyagent_samples_lost_total` from
//!      `agent/src/unwind/loss.rs`, ...).
//! 2. Checks every relative link of the book and of `README.md`: the file must exist, an
//!    `#anchor` must name a heading of the page it points to, and every page must be in
//!    `SUMMARY.md`. mdBook's own warnings do not cover anchors.
//! 3. Builds the book with mdBook (installed with `cargo install` if missing) into `target/book`.
//!
//! With `--check` (CI) nothing is written: a generated page that differs from the committed one
//! fails, as does a broken link. The config page needs the agent library, whose build script
//! compiles the BPF program with clang: like the in-process benches, this task re-runs itself
//! from an `xtask` built with the `agent-lib` feature, after installing what that build needs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};

use crate::{pythons, test};

/// The mdBook release the book is built with, installed with `cargo install` if missing.
const MDBOOK_VERSION: &str = "0.5.4";
/// The book's sources, relative to the workspace.
const BOOK_DIR: &str = "docs";
/// The first line of every generated page.
const GENERATED: &str =
    "<!-- Generated from the code by `cargo xtask docs`: do not edit by hand. -->";

#[derive(clap::Args)]
pub struct Args {
    /// Write nothing: fail if a generated reference page differs from the one in the tree, or if
    /// a link between pages is broken (CI).
    #[arg(long)]
    check: bool,
}

pub fn run(args: &Args) -> Result<()> {
    let root = workspace_root();
    if !cfg!(feature = "agent-lib") {
        return reexec_with_agent_lib();
    }
    let binary = std::env::current_exe()
        .context("cannot find this executable")?
        .with_file_name("pyagent");
    test::cargo(&["build", "--quiet", "-p", "pyagent", "--bin", "pyagent"])?;

    let pages = [
        ("reference/cli.md", cli_page(&binary)?),
        ("reference/config.md", config_page()?),
        ("reference/metrics.md", metrics_page(&root)?),
    ];
    let src = root.join(BOOK_DIR).join("src");
    let mut stale = Vec::new();
    for (name, text) in &pages {
        let path = src.join(name);
        if fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
            continue;
        }
        if args.check {
            stale.push(format!("docs/src/{name}"));
        } else {
            fs::create_dir_all(path.parent().expect("a page has a directory"))?;
            fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
            println!("docs: wrote docs/src/{name}");
        }
    }

    let broken = check_links(&root)?;
    for problem in &broken {
        eprintln!("docs: {problem}");
    }

    ensure_mdbook()?;
    let out = root.join("target").join("book");
    let status = Command::new("mdbook")
        .arg("build")
        .arg(root.join(BOOK_DIR))
        .arg("--dest-dir")
        .arg(&out)
        .status()
        .context("cannot run mdbook")?;
    if !status.success() {
        bail!("`mdbook build` failed ({status})");
    }
    println!("docs: the book is in {}", out.display());

    if !stale.is_empty() {
        bail!(
            "generated pages out of date (run `cargo xtask docs` and commit them): {}",
            stale.join(", ")
        );
    }
    if !broken.is_empty() {
        bail!("{} broken links in the book or README.md", broken.len());
    }
    Ok(())
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

/// Builds the `xtask` with the agent library (and the `pyagent` binary), after installing what
/// that build needs, and replaces this process with it.
fn reexec_with_agent_lib() -> Result<()> {
    use std::os::unix::process::CommandExt;

    let logs = pythons::Args::prepare().dir().join("logs");
    test::ensure_build_packages(&logs)?;
    test::cargo(&[
        "build",
        "--quiet",
        "-p",
        "xtask",
        "--features",
        "xtask/agent-lib",
        "-p",
        "pyagent",
    ])?;
    let built = std::env::current_exe()
        .context("cannot find this executable")?
        .with_file_name("xtask");
    let err = Command::new(&built)
        .args(std::env::args_os().skip(1))
        .exec();
    Err(err).with_context(|| format!("cannot run {}", built.display()))
}

/// Installs mdBook with cargo unless the pinned release is there.
fn ensure_mdbook() -> Result<()> {
    let installed = Command::new("mdbook")
        .arg("--version")
        .output()
        .is_ok_and(|out| {
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains(MDBOOK_VERSION)
        });
    if installed {
        return Ok(());
    }
    // Only what `mdbook build` needs: no `serve` or `watch` (and their async runtime).
    test::cargo(&[
        "install",
        "--locked",
        "--quiet",
        "mdbook",
        "--version",
        MDBOOK_VERSION,
        "--no-default-features",
        "--features",
        "search",
    ])
}

/// The page's start: the marker, its title and what it is made from.
fn page_head(title: &str, from: &str) -> String {
    format!("{GENERATED}\n\n# {title}\n\n{from}\n")
}

// ---------------------------------------------------------------------------------------------
// The command-line reference

/// `pyagent --help`, then each subcommand's, as clap prints them.
fn cli_page(binary: &Path) -> Result<String> {
    let top = help(binary, &[])?;
    let mut page = page_head(
        "Command-line flags",
        "Every command and flag of `pyagent`, as its `--help` prints it (clap). Settings the \
         service also reads from its config file or the environment say so (`[config: KEY]`): \
         see the [configuration reference](config.md).",
    );
    let _ = write!(page, "\n## `pyagent`\n\n```text\n{top}```\n");
    for sub in subcommands(&top) {
        let text = help(binary, &[&sub])?;
        let _ = write!(page, "\n## `pyagent {sub}`\n\n```text\n{text}```\n");
    }
    Ok(page)
}

/// The output of `pyagent ARGS --help`, with no `PYAGENT_*` variable of this environment in it.
fn help(binary: &Path, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(binary);
    cmd.args(args).arg("--help").env("NO_COLOR", "1");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PYAGENT_") {
            cmd.env_remove(key);
        }
    }
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {}", binary.display()))?;
    if !out.status.success() {
        bail!(
            "`pyagent {} --help` failed ({})",
            args.join(" "),
            out.status
        );
    }
    let text = String::from_utf8(out.stdout).context("--help is not UTF-8")?;
    // Trailing spaces (clap's blank lines in long help) would make the page differ from what an
    // editor saves.
    let mut lines: String = text
        .lines()
        .map(|l| format!("{}\n", l.trim_end()))
        .collect();
    if lines.is_empty() {
        lines.push('\n');
    }
    Ok(lines)
}

/// The subcommands the top-level help lists under `Commands:`, but `help`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The configuration reference

#[cfg(feature = "agent-lib")]
fn config_page() -> Result<String> {
    let mut page = page_head(
        "Configuration keys",
        "Every setting of the service (`pyagent --all-python`): its key in the TOML file \
         (`--config FILE`), its environment variable and its default. Flags override the \
         variables, which override the file. Durations take plain seconds or a unit (`500ms`, \
         `10s`, `5m`, `2h`, `7d`, `1h30m`); sizes bytes or a unit (`500MB`, `1GiB`). The \
         settings are checked at start, and an error names the key. An example file: \
         [`deploy/pyagent.toml`](../../../deploy/pyagent.toml). Made from \
         `pyagent::config::KEYS` (`agent/src/config/keys.rs`).",
    );
    page.push_str("\n| key | environment | default | what |\n|:--|:--|:--|:--|\n");
    for key in pyagent::config::KEYS {
        let default = match (key.default, key.default_note) {
            ("", _) => "none".to_owned(),
            (value, "") => format!("`{value}`"),
            (value, note) => format!("`{value}` ({note})"),
        };
        let _ = writeln!(
            page,
            "| `{}` | `{}` | {} | {} |",
            key.key,
            key.env,
            cell(&default),
            cell(key.what)
        );
    }
    Ok(page)
}

#[cfg(not(feature = "agent-lib"))]
fn config_page() -> Result<String> {
    bail!("the configuration reference needs the agent library (the agent-lib feature)")
}

/// `text` fit for a table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

// ---------------------------------------------------------------------------------------------
// The metrics reference

/// The sources that register the agent's metrics, in the order the page lists them.
const METRIC_SOURCES: &[&str] = &[
    "agent/src/export/metrics/catalog.rs",
    "agent/src/export/metrics/sink.rs",
    "agent/src/export/metrics/own_process.rs",
];

/// An enum whose label function names a label's values: its file, its name, and which part of
/// the agent counts them (empty when one part does).
type LabelEnum = (&'static str, &'static str, &'static str);

/// Labels that take a fixed set of values (metric, label), and the enums that name them.
const LABEL_VALUES: &[(&str, &str, &[LabelEnum])] = &[
    (
        "pyagent_samples_lost_total",
        "reason",
        &[
            ("agent/src/unwind/loss.rs", "StackLoss", "userspace walk"),
            ("agent/src/unwind/loss.rs", "RecordLoss", "eBPF record"),
        ],
    ),
    (
        "pyagent_sink_failures_total",
        "reason",
        &[("agent/src/export/metrics/sink.rs", "FailureReason", "")],
    ),
    (
        "pyagent_sink_dropped_total",
        "reason",
        &[("agent/src/export/metrics/sink.rs", "DropReason", "")],
    ),
    (
        "pyagent_directory_evictions_total",
        "reason",
        &[("agent/src/export/metrics/sink.rs", "EvictReason", "")],
    ),
    (
        "pyagent_spool_settled_total",
        "outcome",
        &[("agent/src/export/metrics/sink.rs", "SpoolOutcome", "")],
    ),
];

/// One metric family.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Metric {
    name: String,
    kind: &'static str,
    help: String,
    labels: Vec<String>,
}

/// One value of an enum-valued label: the value, the doc comment of its variant.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LabelValue {
    value: String,
    meaning: String,
}

fn metrics_page(root: &Path) -> Result<String> {
    let mut metrics = Vec::new();
    for source in METRIC_SOURCES {
        let text = read(root, source)?;
        let found = parse_metrics(&text);
        if found.is_empty() {
            bail!("no metric found in {source}: has the way metrics are registered changed?");
        }
        metrics.extend(found);
    }
    // The BPF program's own counters, registered from this table.
    let bpf_at = metrics
        .iter()
        .position(|m| m.name == "pyagent_sink_profiles_total")
        .unwrap_or(metrics.len());
    let bpf = common::COUNTERS.iter().map(|c| Metric {
        name: c.name.to_owned(),
        kind: "counter",
        help: c.help.to_owned(),
        labels: Vec::new(),
    });
    metrics.splice(bpf_at..bpf_at, bpf);
    let mut seen = BTreeSet::new();
    for m in &metrics {
        if !seen.insert(&m.name) {
            bail!("metric {} found twice", m.name);
        }
    }

    let mut values: BTreeMap<(&str, &str), Vec<(LabelValue, &str)>> = BTreeMap::new();
    for (metric, label, enums) in LABEL_VALUES {
        let Some(m) = metrics.iter().find(|m| m.name == *metric) else {
            bail!("{metric} (named in xtask/src/docs.rs LABEL_VALUES) is not registered");
        };
        if !m.labels.iter().any(|l| l == label) {
            bail!("{metric} has no label {label}");
        }
        for (file, name, from) in *enums {
            let found = parse_label_enum(&read(root, file)?, name);
            if found.is_empty() {
                bail!("no label values for enum {name} in {file}");
            }
            let entry = values.entry((metric, label)).or_default();
            entry.extend(found.into_iter().map(|v| (v, *from)));
        }
    }

    let mut page = page_head(
        "Metrics",
        "Every metric the agent serves on `--metrics-addr` (`/metrics`, default \
         `127.0.0.1:9464`), with its type and labels. Made from the code that registers them \
         (`agent/src/export/metrics/`, and the BPF program's counters in \
         `common/src/counters.rs`); the values of the labels that take a fixed set come from the \
         enums that name them. What they are for: [Prometheus metrics and the \
         dashboard](../service/prometheus.md).",
    );
    page.push_str("\n| metric | type | labels |\n|:--|:--|:--|\n");
    for m in &metrics {
        let labels: Vec<String> = m.labels.iter().map(|l| format!("`{l}`")).collect();
        let _ = writeln!(
            page,
            "| [`{}`](#{}) | {} | {} |",
            m.name,
            m.name,
            m.kind,
            labels.join(", ")
        );
    }
    for m in &metrics {
        let _ = write!(page, "\n## `{}`\n\n", m.name);
        let labels = if m.labels.is_empty() {
            "no labels".to_owned()
        } else {
            let names: Vec<String> = m.labels.iter().map(|l| format!("`{l}`")).collect();
            format!("labels {}", names.join(", "))
        };
        let _ = writeln!(page, "{}, {labels}. {}", m.kind, m.help);
        for ((metric, label), rows) in &values {
            if *metric != m.name {
                continue;
            }
            let by = rows.iter().any(|(_, from)| !from.is_empty());
            if by {
                let _ = write!(
                    page,
                    "\n| `{label}` | counted by | meaning |\n|:--|:--|:--|\n"
                );
            } else {
                let _ = write!(page, "\n| `{label}` | meaning |\n|:--|:--|\n");
            }
            for (value, from) in rows {
                if by {
                    let _ = writeln!(
                        page,
                        "| `{}` | {from} | {} |",
                        value.value,
                        cell(&value.meaning)
                    );
                } else {
                    let _ = writeln!(page, "| `{}` | {} |", value.value, cell(&value.meaning));
                }
            }
        }
    }
    Ok(page)
}

fn read(root: &Path, file: &str) -> Result<String> {
    let text =
        fs::read_to_string(root.join(file)).with_context(|| format!("cannot read {file}"))?;
    // The file's own tests name metrics too.
    Ok(match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => text[..at].to_owned(),
        None => text,
    })
}

/// A token of Rust source, as far as the metric parser cares.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Str(String),
    /// `&["a", "b"]`: an array of string literals, a label list.
    Labels(Vec<String>),
    Other,
}

/// Splits Rust source into identifiers, string literals and string arrays; comments and char
/// literals are skipped.
fn tokens(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '"' {
            let (s, next) = string_literal(&chars, i);
            out.push(Token::Str(s));
            i = next;
        } else if c == '\'' {
            // A char literal ('x', '\n', '"') or a lifetime ('a): skip the literal whole.
            if chars.get(i + 1) == Some(&'\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c == '&' && chars.get(i + 1) == Some(&'[') {
            // A label list only if it holds string literals alone.
            let mut j = i + 2;
            let mut items = Vec::new();
            let mut ok = true;
            loop {
                while j < chars.len() && (chars[j].is_whitespace() || chars[j] == ',') {
                    j += 1;
                }
                match chars.get(j) {
                    Some('"') => {
                        let (s, next) = string_literal(&chars, j);
                        items.push(s);
                        j = next;
                    }
                    Some(']') => {
                        j += 1;
                        break;
                    }
                    _ => {
                        ok = false;
                        break;
                    }
                }
            }
            if ok && !items.is_empty() {
                out.push(Token::Labels(items));
                i = j;
            } else {
                out.push(Token::Other);
                i += 2;
            }
        } else {
            if !c.is_whitespace() {
                out.push(Token::Other);
            }
            i += 1;
        }
    }
    out
}

/// The string literal starting at `chars[start]` (a `"`), unescaped, and the index after it.
fn string_literal(chars: &[char], start: usize) -> (String, usize) {
    let mut s = String::new();
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '"' => return (s, i + 1),
            '\\' => {
                match chars.get(i + 1) {
                    Some('n') => s.push('\n'),
                    Some('\n') => {
                        // A line continuation: the next line's leading spaces go too.
                        i += 2;
                        while i < chars.len() && chars[i].is_whitespace() {
                            i += 1;
                        }
                        continue;
                    }
                    Some(&other) => s.push(other),
                    None => {}
                }
                i += 2;
            }
            c => {
                s.push(c);
                i += 1;
            }
        }
    }
    (s, i)
}

/// A metric's type from the constructor that makes it.
fn metric_kind(ident: &str) -> Option<&'static str> {
    match ident {
        "counter" | "counter_vec" | "Counter" | "CounterVec" | "IntCounter" | "IntCounterVec" => {
            Some("counter")
        }
        "gauge" | "gauge_vec" | "Gauge" | "GaugeVec" | "IntGauge" | "IntGaugeVec" => Some("gauge"),
        "Histogram" | "HistogramVec" | "HistogramOpts" => Some("histogram"),
        _ => None,
    }
}

fn is_metric_name(s: &str) -> bool {
    (s.starts_with("pyagent_") || s.starts_with("process_"))
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The metrics registered in `text`: a metric name literal, its help literal right after it,
/// the label list that follows before the next metric, and the type of the nearest constructor
/// before the name.
fn parse_metrics(text: &str) -> Vec<Metric> {
    let toks = tokens(text);
    let mut out: Vec<Metric> = Vec::new();
    let mut kind = None;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Token::Ident(id) => {
                if let Some(k) = metric_kind(id) {
                    kind = Some(k);
                }
            }
            Token::Str(name) if is_metric_name(name) => {
                // The help follows the name, past the comma between them.
                let help = toks[i + 1..]
                    .iter()
                    .find(|t| !matches!(t, Token::Other))
                    .and_then(|t| match t {
                        Token::Str(h) => Some(h.clone()),
                        _ => None,
                    });
                if let (Some(help), Some(k)) = (help, kind) {
                    out.push(Metric {
                        name: name.clone(),
                        kind: k,
                        help,
                        labels: Vec::new(),
                    });
                    kind = None;
                }
            }
            Token::Labels(labels) => {
                if let Some(last) = out.last_mut() {
                    if last.labels.is_empty() {
                        last.labels = labels.clone();
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The values of the label `enum_name` names, from its `label` or `as_str` function
/// (`Enum::Variant => "value"`), each with the doc comment of its variant.
fn parse_label_enum(text: &str, enum_name: &str) -> Vec<LabelValue> {
    let mut docs: BTreeMap<String, String> = BTreeMap::new();
    if let Some(start) = text.find(&format!("pub enum {enum_name} {{")) {
        let body = &text[start..];
        let body = &body[..body.find("\n}").unwrap_or(body.len())];
        let mut doc = Vec::new();
        for line in body.lines().skip(1) {
            let line = line.trim();
            if let Some(d) = line.strip_prefix("///") {
                doc.push(d.trim().to_owned());
            } else if line.starts_with("#[") || line.is_empty() {
            } else {
                let variant: String = line
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !variant.is_empty() {
                    docs.insert(variant, doc.join(" "));
                }
                doc.clear();
            }
        }
    }
    let Some(imp) = text.find(&format!("impl {enum_name} {{")) else {
        return Vec::new();
    };
    let imp = &text[imp..];
    let Some(f) = ["fn label(self)", "fn as_str(self)"]
        .iter()
        .filter_map(|f| imp.find(f))
        .min()
    else {
        return Vec::new();
    };
    let body = &imp[f..];
    let body = &body[..body.find("\n    }").unwrap_or(body.len())];
    let mut out = Vec::new();
    for line in body.lines() {
        let line = line.trim();
        let Some(rest) = line
            .strip_prefix(&format!("{enum_name}::"))
            .or_else(|| line.strip_prefix("Self::"))
        else {
            continue;
        };
        let Some((variant, value)) = rest.split_once("=>") else {
            continue;
        };
        let variant = variant
            .trim()
            .trim_end_matches(|c: char| !c.is_alphanumeric());
        let value = value.trim().trim_end_matches(',').trim_matches('"');
        out.push(LabelValue {
            value: value.to_owned(),
            meaning: docs.get(variant).cloned().unwrap_or_default(),
        });
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The link check

/// Every broken relative link of the book's pages and of `README.md`, and every page missing
/// from `SUMMARY.md`, one line each.
fn check_links(root: &Path) -> Result<Vec<String>> {
    let src = root.join(BOOK_DIR).join("src");
    let mut files = vec![root.join("README.md")];
    collect_markdown(&src, &mut files)?;
    let mut texts = BTreeMap::new();
    for f in &files {
        let text = fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?;
        texts.insert(normalize(f), text);
    }
    let mut problems = Vec::new();
    for (file, text) in &texts {
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        for link in links(text) {
            if let Err(why) = check_link(file, &link, &texts) {
                problems.push(format!("{shown}: link ({link}): {why}"));
            }
        }
    }
    // A page the summary leaves out is not in the book, and links to it break there.
    let summary_path = src.join("SUMMARY.md");
    let summary = texts
        .get(&normalize(&summary_path))
        .ok_or_else(|| anyhow!("docs/src/SUMMARY.md is missing"))?;
    let listed: BTreeSet<PathBuf> = links(summary)
        .iter()
        .map(|l| normalize(&src.join(l.split('#').next().unwrap_or(l))))
        .collect();
    for file in texts.keys() {
        if file.starts_with(&src) && *file != normalize(&summary_path) && !listed.contains(file) {
            let shown = file
                .strip_prefix(root)
                .unwrap_or(file)
                .display()
                .to_string();
            problems.push(format!("{shown}: not in docs/src/SUMMARY.md"));
        }
    }
    Ok(problems)
}

fn collect_markdown(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_markdown(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    Ok(())
}

/// `path` with `.` and `..` resolved, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Checks one link of `file`: relative targets must exist, and an anchor into a Markdown page
/// (this one, or another of `texts`) must name one of its headings.
fn check_link(
    file: &Path,
    link: &str,
    texts: &BTreeMap<PathBuf, String>,
) -> std::result::Result<(), String> {
    if link.contains("://") || link.starts_with("mailto:") {
        return Ok(());
    }
    let (path, anchor) = match link.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (link, None),
    };
    let target = if path.is_empty() {
        file.to_owned()
    } else {
        normalize(&file.parent().expect("a file has a directory").join(path))
    };
    let Some(anchor) = anchor else {
        return if target.exists() {
            Ok(())
        } else {
            Err("no such file".to_owned())
        };
    };
    if target.extension().is_none_or(|e| e != "md") {
        return if target.exists() {
            Ok(())
        } else {
            Err("no such file".to_owned())
        };
    }
    let Some(text) = texts.get(&target) else {
        return Err("no such page".to_owned());
    };
    if anchors(text).contains(anchor) {
        Ok(())
    } else {
        Err(format!("no heading #{anchor} there"))
    }
}

/// The targets of the inline links (`[text](target)`, images too) of a Markdown text, outside
/// code blocks and code spans.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        let line = strip_code_spans(&line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            if !target.is_empty() {
                out.push(target.to_owned());
            }
            rest = &after[end + 1..];
        }
    }
    out
}

/// The lines of `text` outside fenced code blocks (links and headings there are not Markdown).
fn prose_lines(text: &str) -> Vec<String> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(f) = fence {
            if trimmed.starts_with(f) {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") {
            fence = Some("```");
        } else if trimmed.starts_with("~~~") {
            fence = Some("~~~");
        } else if !line.starts_with("    ") || line.trim().is_empty() {
            out.push(line.to_owned());
        }
    }
    out
}

/// `line` without its code spans (`` `x` ``).
fn strip_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The anchors of a page's headings, as mdBook (and GitHub) make them: the heading's text,
/// lowercased, spaces to `-`, punctuation but `-` and `_` dropped; a repeated one gets `-1`,
/// `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for line in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let id = heading_id(heading.trim().trim_end_matches('#').trim());
        let n = counts.entry(id.clone()).or_insert(0);
        out.insert(if *n == 0 {
            id.clone()
        } else {
            format!("{id}-{n}")
        });
        *n += 1;
    }
    out
}

/// The anchor of one heading's text.
fn heading_id(heading: &str) -> String {
    // Links keep their text; markup characters go.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_ascii_lowercase())
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_anchors_follow_mdbook() {
        let page = "# The service\n\n## `pyagent_samples_lost_total`\n\n```sh\n# not a heading\n```\n\
                    ## Off-CPU time: where threads wait\n## Notes\n## Notes\n### [Link](x.md) here\n";
        let got = anchors(page);
        for id in [
            "the-service",
            "pyagent_samples_lost_total",
            "off-cpu-time-where-threads-wait",
            "notes",
            "notes-1",
            "link-here",
        ] {
            assert!(got.contains(id), "{id} missing from {got:?}");
        }
        assert!(!got.contains("not-a-heading"));
    }

    #[test]
    fn docs_links_skip_code() {
        let text = "See [a](a.md#x) and `[b](b.md)`.\n\n```\n[c](c.md)\n```\n\
                    ![img](i.png \"title\") [web](https://example.com)\n    [d](d.md)\n";
        assert_eq!(links(text), ["a.md#x", "i.png", "https://example.com"]);
    }

    #[test]
    fn docs_link_check_finds_missing_pages_and_anchors() {
        let dir = std::env::temp_dir().join(format!("xtask-docs-test-{}", std::process::id()));
        let src = dir.join("src");
        fs::create_dir_all(src.join("guide")).unwrap();
        let a = src.join("a.md");
        let b = src.join("guide").join("b.md");
        fs::write(&a, "# A\n").unwrap();
        fs::write(&b, "# B\n## Part two\n").unwrap();
        let mut texts = BTreeMap::new();
        texts.insert(a.clone(), "# A\n".to_owned());
        texts.insert(b.clone(), "# B\n## Part two\n".to_owned());
        assert_eq!(check_link(&a, "guide/b.md", &texts), Ok(()));
        assert_eq!(check_link(&a, "guide/b.md#part-two", &texts), Ok(()));
        assert_eq!(check_link(&b, "../a.md#a", &texts), Ok(()));
        assert_eq!(check_link(&b, "#b", &texts), Ok(()));
        assert_eq!(check_link(&a, "https://example.com/x#y", &texts), Ok(()));
        assert!(check_link(&a, "guide/c.md", &texts).is_err());
        assert!(check_link(&a, "guide/b.md#part-three", &texts)
            .unwrap_err()
            .contains("#part-three"));
        assert!(check_link(&b, "#nowhere", &texts).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn docs_metrics_are_parsed_with_type_help_and_labels() {
        let source = r#"
            samples: counter(&registry, "pyagent_samples_total", "Thread samples."),
            // "pyagent_commented_total" is no metric
            lost: counter_vec(
                &registry,
                "pyagent_samples_lost_total",
                "Lost, by reason (\"why\").",
                &["reason"],
            ),
            off: register(&registry, CounterVec::new(Opts::new("pyagent_off_seconds_total",
                "Off.",), &["service", "wait"]).expect("x")),
            rate: IntGauge::new("pyagent_sample_rate_hz", "Rate.").expect("valid"),
            c: '"',
            lat: HistogramVec::new(HistogramOpts::new("pyagent_sink_duration_seconds", "Time.")
                .buckets(b), &["sink"]),
            x: .with_label_values(&[self.sink.as_str()]),
        "#;
        let got = parse_metrics(source);
        let summary: Vec<(&str, &str, Vec<&str>)> = got
            .iter()
            .map(|m| {
                (
                    m.name.as_str(),
                    m.kind,
                    m.labels.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("pyagent_samples_total", "counter", vec![]),
                ("pyagent_samples_lost_total", "counter", vec!["reason"]),
                (
                    "pyagent_off_seconds_total",
                    "counter",
                    vec!["service", "wait"]
                ),
                ("pyagent_sample_rate_hz", "gauge", vec![]),
                ("pyagent_sink_duration_seconds", "histogram", vec!["sink"]),
            ]
        );
        assert_eq!(got[1].help, "Lost, by reason (\"why\").");
    }

    #[test]
    fn docs_label_enums_are_parsed() {
        let source = r#"
pub enum Loss {
    /// The top moved.
    /// Twice.
    TopMoved,
    /// A chain loops.
    CyclicChain(u8),
}

impl Loss {
    /// The label.
    pub fn label(self) -> &'static str {
        match self {
            Loss::TopMoved => "torn_top_moved",
            Loss::CyclicChain(_) => "cyclic_chain",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Loss::TopMoved => "top frame moved",
        }
    }
}
"#;
        let got = parse_label_enum(source, "Loss");
        assert_eq!(
            got,
            [
                LabelValue {
                    value: "torn_top_moved".into(),
                    meaning: "The top moved. Twice.".into()
                },
                LabelValue {
                    value: "cyclic_chain".into(),
                    meaning: "A chain loops.".into()
                },
            ]
        );
    }

    /// The real sources: the metric a reader asks about most is there, with its reasons.
    #[test]
    fn docs_metrics_page_explains_samples_lost() {
        let page = metrics_page(&workspace_root()).unwrap();
        for needle in [
            "## `pyagent_samples_lost_total`",
            "| `torn_top_moved` | userspace walk |",
            "| `perf_throttled` | eBPF record |",
            "## `pyagent_sink_duration_seconds`",
            "## `process_cpu_seconds_total`",
            "## `pyagent_bpf_cyclic_chains_total`",
        ] {
            assert!(page.contains(needle), "{needle} missing");
        }
    }

    #[test]
    fn docs_subcommands_come_from_the_help() {
        let help = "Usage: pyagent\n\nCommands:\n  dump    Print\n  record  Sample\n  help    \
                    Print this\n\nOptions:\n  -h\n";
        assert_eq!(subcommands(help), ["dump", "record"]);
    }
}
