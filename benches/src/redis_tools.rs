//! What the Redis bench asks the server: commands it received (`MONITOR`),
//! its cost per call (`INFO commandstats`), and `redis-benchmark` as the
//! ceiling.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Counts the commands the servers on `ports` receive from clients while
/// `run` runs: `MONITOR` on each, every line counted except those a script
/// ran (`[0 lua]`); the end is marked by an `ECHO` sent once `run` returned,
/// so every command `run` waited for is counted.
///
/// That is the number of requests on the wire, whatever a script does inside
/// (`total_commands_processed` would count the `GET`/`SET`/`TIME` a script
/// calls too).
pub fn count_client_commands(ports: &[u16], run: impl FnOnce()) -> Result<u64, String> {
    let marker = format!("ratelab-monitor-end-{}", std::process::id());
    let mut readers = Vec::new();
    for &port in ports {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .map_err(|e| format!("connect to {port}: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(|e| e.to_string())?;
        stream
            .write_all(b"*1\r\n$7\r\nMONITOR\r\n")
            .map_err(|e| format!("MONITOR on {port}: {e}"))?;
        let mut reader = BufReader::new(stream);
        let mut ok = String::new();
        reader.read_line(&mut ok).map_err(|e| e.to_string())?;
        if ok.trim_end() != "+OK" {
            return Err(format!("MONITOR on {port} answered {ok:?}"));
        }
        let marker = marker.clone();
        readers.push(std::thread::spawn(move || count_until(reader, &marker)));
    }
    run();
    for &port in ports {
        ratelab_testkit::redis::command(port, &["ECHO", &marker])?;
    }
    let mut total = 0;
    for reader in readers {
        total += reader.join().map_err(|_| "the MONITOR reader panicked")??;
    }
    Ok(total)
}

/// Counts client commands on a `MONITOR` stream until a line holds `marker`.
fn count_until(mut reader: impl BufRead, marker: &str) -> Result<u64, String> {
    let mut count = 0;
    let mut line = String::new();
    loop {
        line.clear();
        let read = reader
            .read_line(&mut line)
            .map_err(|e| format!("MONITOR: {e}"))?;
        if read == 0 {
            return Err("MONITOR: the server closed the connection".into());
        }
        if line.contains(marker) {
            return Ok(count);
        }
        if is_client_command(&line) {
            count += 1;
        }
    }
}

/// A `MONITOR` line of a command a client sent (not one a script ran):
/// `+1700000000.123456 [0 127.0.0.1:5000] "EVALSHA" ...`.
fn is_client_command(line: &str) -> bool {
    let Some(source) = line
        .split_once('[')
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(inside, _)| inside)
    else {
        return false;
    };
    source.split_whitespace().nth(1).is_some_and(|s| s != "lua")
}

/// One command's line of `INFO commandstats`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CommandStat {
    /// Calls since the last `CONFIG RESETSTAT`.
    pub calls: u64,
    /// Server time per call, µs (inside the server: parsing the request,
    /// running the command; not the network).
    pub usec_per_call: f64,
}

/// `INFO commandstats`, by lower-case command name (`evalsha`, `get`, ...).
pub fn parse_commandstats(info: &str) -> HashMap<String, CommandStat> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
            };
            Some((
                name.to_owned(),
                CommandStat {
                    calls: field("calls")?.parse().ok()?,
                    usec_per_call: field("usec_per_call")?.parse().ok()?,
                },
            ))
        })
        .collect()
}

/// The `redis-benchmark` binary: `$RATELAB_REDIS_BENCHMARK`, else on `PATH`.
pub fn redis_benchmark_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("RATELAB_REDIS_BENCHMARK") {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("redis-benchmark"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`redis-benchmark` was not found on PATH; install Redis's tools (Debian/Ubuntu: \
                 `sudo apt-get install redis-tools`; macOS: `brew install redis`) or point \
                 $RATELAB_REDIS_BENCHMARK at it"
            )
        })
}

/// What one `redis-benchmark` run measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchmarkRun {
    /// Requests per second.
    pub rps: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
}

/// Runs `redis-benchmark` against `port`: `clients` connections, `requests`
/// requests of `command` in all, `__rand_int__` in it replaced by a random
/// number below `keyspace` (12 digits, zero-padded); one request in flight
/// per connection.
pub fn redis_benchmark(
    port: u16,
    clients: usize,
    requests: usize,
    keyspace: usize,
    command: &[String],
) -> Result<BenchmarkRun, String> {
    redis_benchmark_pipelined(port, clients, 1, requests, keyspace, command)
}

/// [`redis_benchmark`] with `pipeline` requests in flight per connection
/// (`-P`): `clients = 1, pipeline = 64` is one connection carrying 64
/// requests at a time, the model of 64 tasks sharing one multiplexed
/// connection.
pub fn redis_benchmark_pipelined(
    port: u16,
    clients: usize,
    pipeline: usize,
    requests: usize,
    keyspace: usize,
    command: &[String],
) -> Result<BenchmarkRun, String> {
    let output = Command::new(redis_benchmark_binary())
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &clients.to_string(), "-n", &requests.to_string()])
        .args(["-P", &pipeline.to_string()])
        .args(["-r", &keyspace.to_string(), "--csv"])
        .args(command)
        .output()
        .map_err(|e| format!("cannot run redis-benchmark: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "redis-benchmark failed: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    parse_benchmark_csv(&stdout)
        .ok_or_else(|| format!("unexpected redis-benchmark output: {stdout}"))
}

/// The first result line of `redis-benchmark --csv`:
/// `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...`.
fn parse_benchmark_csv(csv: &str) -> Option<BenchmarkRun> {
    let mut lines = csv.lines().filter(|l| l.starts_with('"'));
    let header: Vec<&str> = lines
        .next()?
        .split(',')
        .map(|f| f.trim_matches('"'))
        .collect();
    let row = lines.next()?;
    // The test name is quoted and may hold commas: count fields from the end.
    let values: Vec<&str> = row.rsplitn(header.len(), ',').collect();
    let value = |name: &str| {
        let from_end = header.len() - 1 - header.iter().position(|h| *h == name)?;
        values.get(from_end)?.trim_matches('"').parse::<f64>().ok()
    };
    Some(BenchmarkRun {
        rps: value("rps")?,
        p50_ms: value("p50_latency_ms")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitor_lines() {
        assert!(is_client_command(
            r#"+1795982929.192988 [0 127.0.0.1:55322] "EVALSHA" "05" "1" "k" """#
        ));
        assert!(!is_client_command(r#"+1795982929.193025 [0 lua] "TIME""#));
        assert!(!is_client_command("+OK"));
        let stream = "+1 [0 127.0.0.1:1] \"EVALSHA\"\r\n+1 [0 lua] \"GET\" \"k\"\r\n\
                      +1 [0 unix:/tmp/s] \"PING\"\r\n+1 [0 127.0.0.1:2] \"ECHO\" \"end\"\r\n";
        assert_eq!(count_until(stream.as_bytes(), "end"), Ok(2));
    }

    #[test]
    fn commandstats() {
        let info = "# Commandstats\r\n\
            cmdstat_evalsha:calls=20001,usec=131699,usec_per_call=6.58,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_config|get:calls=2,usec=8,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\n";
        let stats = parse_commandstats(info);
        assert_eq!(
            stats["evalsha"],
            CommandStat {
                calls: 20001,
                usec_per_call: 6.58
            }
        );
        assert_eq!(stats["config|get"].calls, 2);
    }

    #[test]
    fn benchmark_csv() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
            \"EVALSHA 0570 1 ratelab:{bench:__rand_int__}:gcra  1 0 1,2\",\"29585.80\",\"1.913\",\"0.496\",\"1.399\",\"5.655\",\"7.215\",\"8.015\"\n";
        assert_eq!(
            parse_benchmark_csv(csv),
            Some(BenchmarkRun {
                rps: 29585.80,
                p50_ms: 1.399
            })
        );
    }
}
