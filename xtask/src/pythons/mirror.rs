//! The Debian archive this machine's own apt uses, read from its configuration.
//!
//! debootstrap (the sid chroot, the rootfs tarball) and the private apt configurations (sid's
//! sources for the CPython tarball, the kernels' suites) fetch from the mirror the host already
//! uses instead of a host name written here: a machine behind a local mirror or proxy then works
//! with nothing to set, and one that has no mirror is told so in one line. The mirror is read
//! only when something is about to be fetched, so a machine whose caches are complete needs none.
//! It must carry sid and the kernels' suites as well as the host's own, as a full mirror does.

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// The one-line-format list apt reads first.
const SOURCES_LIST: &str = "/etc/apt/sources.list";
/// The directory of `*.list` (one-line) and `*.sources` (deb822) files apt reads after it.
const SOURCES_PARTS: &str = "/etc/apt/sources.list.d";

/// Debian's release names and their aliases: a source with one of these suites (or its
/// `-updates`, `-backports`, ... suite) is the main archive, whatever its host and path are.
/// Matching the suite rather than the path keeps third-party repositories (whose suites are
/// their own) and the security archive (`-security`, formerly `CODENAME/updates`) out.
const RELEASES: &[&str] = &[
    "squeeze",
    "wheezy",
    "jessie",
    "stretch",
    "buster",
    "bullseye",
    "bookworm",
    "trixie",
    "forky",
    "duke",
    "sid",
    "oldoldstable",
    "oldstable",
    "stable",
    "testing",
    "unstable",
    "experimental",
];
/// The suites of the main archive that extend a release; `-security` is not one of them.
const SUITE_SUFFIXES: &[&str] = &[
    "updates",
    "backports",
    "backports-sloppy",
    "proposed-updates",
];

/// The URI of the main Debian archive in this machine's apt configuration, without a trailing
/// slash, e.g. `http://deb.debian.org/debian`.
pub fn debian_mirror() -> Result<String> {
    let mut sources = Vec::new();
    if let Some(text) = read_if_present(Path::new(SOURCES_LIST))? {
        sources.extend(parse_one_line(&text));
    }
    let mut parts: Vec<_> = match fs::read_dir(SOURCES_PARTS) {
        Ok(dir) => dir
            .map(|entry| entry.map(|entry| entry.path()))
            .collect::<Result<_, _>>()
            .with_context(|| format!("cannot list {SOURCES_PARTS}"))?,
        Err(err) if err.kind() == ErrorKind::NotFound => Vec::new(),
        Err(err) => return Err(err).with_context(|| format!("cannot list {SOURCES_PARTS}")),
    };
    // apt's own order: the files of the directory sorted by name.
    parts.sort();
    for path in parts {
        let parse = match path.extension().and_then(|ext| ext.to_str()) {
            Some("list") => parse_one_line,
            Some("sources") => parse_deb822,
            // apt ignores the other files (`.save`, `.disabled`, editors' backups).
            _ => continue,
        };
        if let Some(text) = read_if_present(&path)? {
            sources.extend(parse(&text));
        }
    }
    match pick(&sources) {
        Some(uri) => Ok(uri.to_owned()),
        None => bail!(
            "no Debian mirror in {SOURCES_LIST} or {SOURCES_PARTS}/*.{{list,sources}}: add one, \
             e.g. the line `deb http://deb.debian.org/debian bookworm main` to {SOURCES_LIST}"
        ),
    }
}

/// The file's text, or `None` if it does not exist (a dangling link included).
fn read_if_present(path: &Path) -> Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// One enabled `deb` or `deb-src` source: a type and a URI with the suites it is used for.
#[derive(Debug, PartialEq)]
struct Source {
    deb_src: bool,
    uri: String,
    suites: Vec<String>,
}

/// The first main-archive URI among `sources`: a binary one if there is one, since that is
/// what debootstrap needs and a `deb-src`-only entry may be a different (source) mirror.
fn pick(sources: &[Source]) -> Option<&str> {
    let archive = || sources.iter().filter(|source| is_main_archive(source));
    archive()
        .find(|source| !source.deb_src)
        .or_else(|| archive().next())
        .map(|source| source.uri.trim_end_matches('/'))
}

fn is_main_archive(source: &Source) -> bool {
    let last_segment = source.uri.trim_end_matches('/').rsplit('/').next();
    last_segment != Some("debian-security")
        && source.suites.iter().any(|suite| is_debian_suite(suite))
}

/// `bookworm`, `bookworm-updates`, `stable-backports`, ...; not `bookworm-security`.
fn is_debian_suite(suite: &str) -> bool {
    let suite = suite.trim_end_matches('/');
    let (release, suffix) = match suite.split_once('-') {
        Some((release, suffix)) => (release, Some(suffix)),
        None => (suite, None),
    };
    RELEASES.contains(&release) && suffix.is_none_or(|suffix| SUITE_SUFFIXES.contains(&suffix))
}

/// The sources of a one-line-format file: `deb [OPTIONS] URI SUITE [COMPONENT...]`, `#`
/// starting a comment anywhere on a line, as apt reads it.
fn parse_one_line(text: &str) -> Vec<Source> {
    let mut sources = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        let Some((kind, rest)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        let deb_src = match kind {
            "deb" => false,
            "deb-src" => true,
            _ => continue,
        };
        let mut rest = rest.trim_start();
        if let Some(options) = rest.strip_prefix('[') {
            // `[arch=amd64 signed-by=...]`, spaces allowed inside; a line without `]` is one
            // apt rejects, so it is skipped here.
            let Some((_, after)) = options.split_once(']') else {
                continue;
            };
            rest = after;
        }
        let mut words = rest.split_whitespace();
        if let (Some(uri), Some(suite)) = (words.next(), words.next()) {
            sources.push(Source {
                deb_src,
                uri: uri.to_owned(),
                suites: vec![suite.to_owned()],
            });
        }
    }
    sources
}

/// The sources of a deb822 file: stanzas separated by blank lines, `Field: value` lines with
/// indented continuation lines (a `Signed-By` key block), `#` lines as comments, field names
/// in any case, and `Enabled: no` turning a stanza off.
fn parse_deb822(text: &str) -> Vec<Source> {
    let mut sources = Vec::new();
    let mut stanza: Vec<(String, String)> = Vec::new();
    // A last empty line closes the last stanza.
    for line in text.lines().chain([""]) {
        if line.starts_with('#') {
            continue;
        }
        if line.trim().is_empty() {
            sources.extend(stanza_sources(&stanza));
            stanza.clear();
        } else if line.starts_with([' ', '\t']) {
            if let Some((_, value)) = stanza.last_mut() {
                value.push('\n');
                value.push_str(line.trim());
            }
        } else if let Some((name, value)) = line.split_once(':') {
            stanza.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    sources
}

fn stanza_sources(stanza: &[(String, String)]) -> Vec<Source> {
    let field = |name: &str| {
        stanza
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.as_str())
    };
    // apt's false words; anything else (or no field) leaves the stanza on.
    let disabled = field("enabled").is_some_and(|value| {
        ["no", "false", "off", "disable", "without"].contains(&value.to_ascii_lowercase().as_str())
    });
    if disabled {
        return Vec::new();
    }
    let words = |name: &str| field(name).unwrap_or_default().split_whitespace();
    let suites: Vec<String> = words("suites").map(str::to_owned).collect();
    let mut sources = Vec::new();
    for kind in words("types") {
        let deb_src = match kind {
            "deb" => false,
            "deb-src" => true,
            _ => continue,
        };
        for uri in words("uris") {
            sources.push(Source {
                deb_src,
                uri: uri.to_owned(),
                suites: suites.clone(),
            });
        }
    }
    sources
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deb822_main_archive_is_picked_past_comments_disabled_stanzas_and_security() {
        let text = "\
# A local mirror, off for now.
Types: deb
URIs: http://mirror.internal:3142/debian/
Suites: bookworm
Components: main
Enabled: no

Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main

Types: deb-src deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
signed-by:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 mQINBGPL0BUBEADmW5NdOOHwPIJlgPu6JDcKw/NZJPR8lsD3K87ZM18gzyQZJD+w
 -----END PGP PUBLIC KEY BLOCK-----
";
        let sources = parse_deb822(text);
        assert_eq!(sources.len(), 3, "{sources:?}");
        assert_eq!(pick(&sources), Some("http://deb.debian.org/debian"));
    }

    #[test]
    fn deb822_field_names_in_any_case_and_several_uris() {
        let text =
            "types: deb\nuris: http://ftp.de.debian.org/debian http://deb.debian.org/debian\n\
                    SUITES: trixie\ncomponents: main\n";
        let sources = parse_deb822(text);
        assert_eq!(sources.len(), 2);
        assert_eq!(pick(&sources), Some("http://ftp.de.debian.org/debian"));
    }

    #[test]
    fn third_party_repositories_are_not_the_archive() {
        let text = "\
Types: deb
URIs: https://deb.nodesource.com/node_20.x
Suites: nodistro
Components: main
";
        let list = "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n";
        let mut sources = parse_deb822(text);
        sources.extend(parse_one_line(list));
        assert_eq!(sources.len(), 2);
        assert_eq!(pick(&sources), None);
    }

    #[test]
    fn one_line_format_with_options_and_comments() {
        let text = "\
# deb http://commented.example/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.internal/debian/ bookworm main contrib
deb [ arch=amd64 ] http://security.debian.org/debian-security bookworm-security main
deb-src http://deb.debian.org/debian sid main # the sources
deb http://broken.example/debian
";
        let sources = parse_one_line(text);
        assert_eq!(
            sources,
            [
                Source {
                    deb_src: false,
                    uri: "http://mirror.internal/debian/".to_owned(),
                    suites: vec!["bookworm".to_owned()],
                },
                Source {
                    deb_src: false,
                    uri: "http://security.debian.org/debian-security".to_owned(),
                    suites: vec!["bookworm-security".to_owned()],
                },
                Source {
                    deb_src: true,
                    uri: "http://deb.debian.org/debian".to_owned(),
                    suites: vec!["sid".to_owned()],
                },
            ]
        );
        assert_eq!(pick(&sources), Some("http://mirror.internal/debian"));
    }

    #[test]
    fn a_binary_source_is_preferred_to_an_earlier_source_only_one() {
        let text = "deb-src http://sources.example/debian sid main\n\
                    deb http://binaries.example/debian bookworm-updates main\n";
        assert_eq!(
            pick(&parse_one_line(text)),
            Some("http://binaries.example/debian")
        );
        let only_sources = "deb-src http://sources.example/debian sid main\n";
        assert_eq!(
            pick(&parse_one_line(only_sources)),
            Some("http://sources.example/debian")
        );
    }

    #[test]
    fn security_only_has_no_mirror() {
        let deb822 = "Types: deb\nURIs: http://deb.debian.org/debian-security/\n\
                      Suites: bookworm-security\nComponents: main\n";
        assert_eq!(pick(&parse_deb822(deb822)), None);
        // The old security suite name, on a host without `debian-security` in its path.
        let old = "deb http://security.example/ buster/updates main\n";
        assert_eq!(pick(&parse_one_line(old)), None);
        assert_eq!(pick(&[]), None);
    }

    #[test]
    fn debian_suites() {
        for suite in [
            "bookworm",
            "sid",
            "stable-backports",
            "trixie-proposed-updates",
        ] {
            assert!(is_debian_suite(suite), "{suite}");
        }
        for suite in [
            "bookworm-security",
            "buster/updates",
            "nodistro",
            "cloud-sdk-bookworm",
        ] {
            assert!(!is_debian_suite(suite), "{suite}");
        }
    }
}
