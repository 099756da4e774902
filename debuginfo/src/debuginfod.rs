//! A debuginfod client: debug files fetched by build ID from the servers
//! `DEBUGINFOD_URLS` names, as perf, gdb and bpftrace read it.
//!
//! The protocol is one HTTP GET of `URL/buildid/HEX/debuginfo` (elfutils'
//! debuginfod(8)). The download is `curl`'s: a distribution's servers are
//! HTTPS, and this crate builds with no C code and no TLS stack of its
//! own (the static binaries are linked without a C toolchain). Files are
//! kept where elfutils' client keeps them, `CACHE/HEX/debuginfo`, with
//! `CACHE` from `DEBUGINFOD_CACHE_PATH`, else
//! `$XDG_CACHE_HOME/debuginfod_client`, else `~/.cache/debuginfod_client`,
//! so gdb, perf and kprobe-perf share one cache.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

pub use crate::error::Attempt;
use crate::error::{Error, Result};
use crate::file::hex;

/// The servers and the cache of a debuginfod client.
#[derive(Debug, Clone)]
pub struct Debuginfod {
    urls: Vec<String>,
    cache: PathBuf,
    timeout: Duration,
}

impl Debuginfod {
    /// The client `DEBUGINFOD_URLS` describes (servers separated by
    /// spaces), or `None` when it is unset or empty.
    /// `DEBUGINFOD_TIMEOUT` (seconds, 90 by default as in elfutils) bounds
    /// each transfer.
    pub fn from_env() -> Option<Self> {
        let urls = std::env::var("DEBUGINFOD_URLS").ok()?;
        let timeout = std::env::var("DEBUGINFOD_TIMEOUT")
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .filter(|&t| t > 0)
            .unwrap_or(90);
        Self::new(
            urls.split_whitespace().map(str::to_string).collect(),
            cache_from_env()?,
            Duration::from_secs(timeout),
        )
    }

    /// A client of `urls`, keeping files under `cache`; `None` without a
    /// URL.
    pub fn new(urls: Vec<String>, cache: PathBuf, timeout: Duration) -> Option<Self> {
        let urls: Vec<String> = urls
            .into_iter()
            .map(|u| u.trim().trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty())
            .collect();
        (!urls.is_empty()).then_some(Self {
            urls,
            cache,
            timeout,
        })
    }

    /// The servers, in the order they are asked.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Where the debug file of `build_id` is cached.
    pub fn cached_path(&self, build_id: &[u8]) -> PathBuf {
        self.cache.join(hex(build_id)).join("debuginfo")
    }

    /// The debug file of `build_id`: from the cache, else from the first
    /// server that has it (saved to the cache). `Err(attempts)` when no
    /// server gave it, with each server's answer. curl draws its progress
    /// bar on stderr when stderr is a terminal (a kernel's debug file is
    /// hundreds of megabytes).
    pub fn fetch(&self, build_id: &[u8]) -> Result<std::result::Result<PathBuf, Vec<Attempt>>> {
        let path = self.cached_path(build_id);
        if path.is_file() {
            return Ok(Ok(path));
        }
        let dir = path.parent().unwrap_or(&self.cache);
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let partial = dir.join(format!(".debuginfo.{}.part", std::process::id()));
        let mut attempts = Vec::new();
        for url in &self.urls {
            let address = format!("{url}/buildid/{}/debuginfo", hex(build_id));
            match self.download(&address, &partial)? {
                None => {
                    std::fs::rename(&partial, &path).map_err(|source| Error::Io {
                        path: path.clone(),
                        source,
                    })?;
                    return Ok(Ok(path));
                }
                Some(reason) => {
                    let _ = std::fs::remove_file(&partial);
                    attempts.push(Attempt {
                        url: url.clone(),
                        reason,
                    });
                }
            }
        }
        // Nothing was saved: leave no empty folder in the cache.
        let _ = std::fs::remove_dir(dir);
        Ok(Err(attempts))
    }

    /// Downloads `address` into `to`: `None` when it did, else why not.
    fn download(&self, address: &str, to: &Path) -> Result<Option<String>> {
        use std::io::IsTerminal;
        let progress = std::io::stderr().is_terminal();
        let mut curl = Command::new("curl");
        curl.args(["--fail", "--location", "--show-error", "--max-time"])
            .arg(self.timeout.as_secs().to_string())
            .arg(if progress {
                "--progress-bar"
            } else {
                "--silent"
            })
            .arg("--output")
            .arg(to)
            .arg(address)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(if progress {
                Stdio::inherit()
            } else {
                Stdio::piped()
            });
        let out = curl.output().map_err(|e| Error::Debuginfod {
            reason: if e.kind() == std::io::ErrorKind::NotFound {
                "curl is not installed, and the downloads are curl's; install it (Debian: apt-get install curl) or unset DEBUGINFOD_URLS".to_string()
            } else {
                format!("cannot run curl: {e}")
            },
        })?;
        if out.status.success() {
            return Ok(None);
        }
        let said = String::from_utf8_lossy(&out.stderr);
        let said = said.lines().last().unwrap_or("").trim();
        Ok(Some(match out.status.code() {
            // --fail: the server answered with an HTTP error; 404 is the
            // protocol's "no such build ID here".
            Some(22) if said.contains("404") || said.is_empty() => "not found".to_string(),
            Some(28) => format!(
                "no answer within {} s (DEBUGINFOD_TIMEOUT)",
                self.timeout.as_secs()
            ),
            // "curl: (7) Failed to connect ...": the words, without the code.
            _ if !said.is_empty() => {
                let said = said.trim_start_matches("curl: ");
                match said.strip_prefix('(').and_then(|r| r.split_once(") ")) {
                    Some((_, words)) => words.to_string(),
                    None => said.to_string(),
                }
            }
            code => format!(
                "curl failed ({})",
                code.map_or("killed".to_string(), |c| format!("exit {c}"))
            ),
        }))
    }
}

/// The cache folder, as elfutils' client chooses it.
fn cache_from_env() -> Option<PathBuf> {
    let var = |n: &str| std::env::var_os(n).filter(|v| !v.is_empty());
    if let Some(p) = var("DEBUGINFOD_CACHE_PATH") {
        return Some(PathBuf::from(p));
    }
    if let Some(p) = var("XDG_CACHE_HOME") {
        return Some(PathBuf::from(p).join("debuginfod_client"));
    }
    Some(match var("HOME") {
        Some(h) => PathBuf::from(h).join(".cache/debuginfod_client"),
        None => std::env::temp_dir().join("debuginfod_client"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_cache_layout() {
        let d = Debuginfod::new(
            vec![
                "http://127.0.0.1:1/".into(),
                "  ".into(),
                "https://x.example".into(),
            ],
            PathBuf::from("/c"),
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(d.urls(), ["http://127.0.0.1:1", "https://x.example"]);
        assert_eq!(
            d.cached_path(&[0xab, 0x01, 0xff]),
            PathBuf::from("/c/ab01ff/debuginfo")
        );
        assert!(Debuginfod::new(vec![], PathBuf::from("/c"), Duration::from_secs(1)).is_none());
    }

    #[test]
    fn a_server_that_does_not_answer_is_named_with_curls_reason() {
        if Command::new("curl").arg("--version").output().is_err() {
            println!("SKIP a_server_that_does_not_answer: curl is not installed");
            return;
        }
        let cache = std::env::temp_dir().join(format!("kpp-dinfod-{}", std::process::id()));
        // Port 1 on loopback: nothing listens there.
        let d = Debuginfod::new(
            vec!["http://127.0.0.1:1".into()],
            cache.clone(),
            Duration::from_secs(5),
        )
        .unwrap();
        let attempts = d.fetch(&[1, 2, 3]).unwrap().unwrap_err();
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].url, "http://127.0.0.1:1");
        assert!(
            attempts[0].reason.contains("Failed to connect")
                || attempts[0].reason.contains("refused"),
            "{attempts:?}"
        );
        assert!(!cache.join("010203").exists(), "no empty cache folder left");
        let _ = std::fs::remove_dir_all(&cache);
    }
}
